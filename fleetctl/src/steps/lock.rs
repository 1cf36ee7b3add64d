//! Per-host rollout lock: `mkdir <install>/state/lock` is atomic on every
//! POSIX filesystem, so two rollouts can never both hold a host. The owner
//! file inside says who holds it, for the error the second one gets.

use super::remote::{q, Layout, QUICK};
use super::{Cause, StepError};
use crate::inventory::Host;
use crate::transport::Transport;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A lock older than this is reported as probably stale.
pub const STALE_AFTER: Duration = Duration::from_secs(6 * 3600);

/// Proof of holding a host's lock; give it back with [`release_lock`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockGuard {
    pub host: String,
    pub path: String,
    /// Random token on the owner file's first line: release only removes a
    /// lock that is still ours.
    pub token: String,
}

fn error(host: &Host, cause: Cause, kept: &str) -> StepError {
    StepError {
        host: host.name.clone(),
        step: "lock",
        cause,
        kept: kept.to_owned(),
    }
}

/// Takes the host's lock or says who holds it. `run` names this run in the
/// owner file (e.g. the run id).
pub async fn acquire_lock(
    host: &Host,
    transport: &Transport,
    run: &str,
) -> Result<LockGuard, StepError> {
    let layout = Layout::new(host);
    let path = layout.lock_dir();
    let token = format!("{:032x}", rand::random::<u128>());
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let owner = format!(
        "{token}\nrun={run} user={} host={} pid={} since={now}\n",
        std::env::var("USER").unwrap_or_else(|_| "?".to_owned()),
        local_hostname(),
        std::process::id()
    );
    let build = || -> Result<String, Cause> {
        Ok(format!(
            "mkdir -p {state} && if mkdir {lock} 2>/dev/null; then printf '%s' {owner} > {lock}/owner && echo acquired; \
             else echo held; sed -n 2p {lock}/owner 2>/dev/null; echo; echo \"age=$(( $(date +%s) - $(stat -c %Y {lock}) ))\"; fi",
            state = q(&layout.state())?,
            lock = q(&path)?,
            owner = q(&owner)?,
        ))
    };
    let script = build().map_err(|c| error(host, c, "nothing was changed"))?;
    let out = transport
        .run_script_ok(&script, QUICK)
        .await
        .map_err(|e| error(host, e.into(), "nothing was changed"))?;
    let text = out.stdout_text();
    let mut lines = text.lines();
    match lines.next() {
        Some("acquired") => Ok(LockGuard {
            host: host.name.clone(),
            path,
            token,
        }),
        Some("held") => {
            let holder = lines.next().unwrap_or("").trim().to_owned();
            let age = lines
                .filter_map(|l| l.strip_prefix("age="))
                .find_map(|a| a.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            Err(error(
                host,
                Cause::Check(held_message(&path, &holder, age)),
                "the other holder's lock",
            ))
        }
        _ => Err(error(
            host,
            Cause::Check(format!("unexpected answer taking the lock: {text:?}")),
            "nothing was changed",
        )),
    }
}

fn held_message(path: &str, holder: &str, age: Option<Duration>) -> String {
    let holder = if holder.is_empty() {
        "an unknown owner (no owner file)"
    } else {
        holder
    };
    let age_text = age.map_or("an unknown time".to_owned(), |a| {
        humantime::format_duration(a).to_string()
    });
    let stale = match age {
        Some(a) if a > STALE_AFTER => format!(
            " -- older than {}, probably STALE: if that rollout is gone, remove {path} by hand",
            humantime::format_duration(STALE_AFTER)
        ),
        _ => format!("; if that rollout is gone, remove {path} by hand"),
    };
    format!("host is locked by {holder} for {age_text}{stale}")
}

/// Gives the lock back; a lock that now has another owner is left alone.
pub async fn release_lock(
    host: &Host,
    transport: &Transport,
    guard: &LockGuard,
) -> Result<(), StepError> {
    let script = (|| -> Result<String, Cause> {
        let lock = q(&guard.path)?;
        Ok(format!(
            "if [ \"$(head -n 1 {lock}/owner 2>/dev/null)\" = {token} ]; then rm -rf -- {lock} && echo released; else echo foreign; fi",
            token = q(&guard.token)?
        ))
    })()
    .map_err(|c| error(host, c, "the lock"))?;
    let out = transport
        .run_script_ok(&script, QUICK)
        .await
        .map_err(|e| error(host, e.into(), "the lock"))?;
    if out.stdout_text() == "released" {
        Ok(())
    } else {
        Err(error(
            host,
            Cause::Check(format!(
                "{} is no longer ours (removed or taken over); left as it is",
                guard.path
            )),
            "the lock as found",
        ))
    }
}

fn local_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "?".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_lock_message_names_owner_and_flags_stale_ones() {
        let m = held_message(
            "/opt/p/state/lock",
            "run=r1 user=ops host=ctl pid=9 since=1",
            Some(Duration::from_secs(60)),
        );
        assert!(
            m.contains("run=r1 user=ops") && m.contains("1m") && !m.contains("STALE"),
            "{m}"
        );
        let m = held_message("/opt/p/state/lock", "", Some(Duration::from_secs(7 * 3600)));
        assert!(
            m.contains("unknown owner") && m.contains("STALE") && m.contains("/opt/p/state/lock"),
            "{m}"
        );
    }
}
