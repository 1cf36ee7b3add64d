//! Per-host rollout lock: `mkdir <install>/state/lock` is atomic on every
//! POSIX filesystem, so two rollouts can never both hold a host. The owner
//! file inside says who holds it, for the error the second one gets.
//!
//! A resume runs under the run id of the run it continues. When that run
//! was killed outright (SIGKILL, a lost terminal), its locks stay behind;
//! the resume takes them over only when their holder is provably gone: the
//! same run id, taken from this same controller machine, by a pid that no
//! longer exists here. Anything less (another run, another machine, a live
//! pid) is still refused, as a lock must be.

use super::layout::Layout;
use super::outcome::{Cause, StepError};
use super::remote::{q, QUICK};
use crate::inventory::Host;
use crate::transport::Transport;
use std::time::{Duration, SystemTime};

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
    /// The owner line of a dead holder of this same run whose lock was
    /// taken over (a resume of a killed run), for the operator to see.
    pub took_over: Option<String>,
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
    // A time a person reads, not an epoch; UTC so every controller agrees.
    let now = humantime::format_rfc3339_seconds(SystemTime::now());
    let owner = format!(
        "{token}\nrun={run} user={} host={} pid={} since={now}\n",
        user_name(),
        local_hostname(),
        std::process::id()
    );
    let build = || -> Result<String, Cause> {
        Ok(format!(
            // Only an existing lock is "held": any other reason mkdir fails
            // (a read-only or full filesystem, no permission) is that
            // failure, with mkdir's own words on stderr.
            "mkdir -p {state} || exit 1; if e=$(mkdir {lock} 2>&1); then printf '%s' {owner} > {lock}/owner && echo acquired; \
             elif [ -d {lock} ]; then echo held; sed -n 2p {lock}/owner 2>/dev/null; echo; echo \"age=$(( $(date +%s) - $(stat -c %Y {lock} 2>/dev/null || date +%s) ))\"; \
             else printf '%s\\n' \"$e\" >&2; exit 1; fi",
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
            took_over: None,
        }),
        Some("held") => {
            let holder = lines.next().unwrap_or("").trim().to_owned();
            let age = lines
                .filter_map(|l| l.strip_prefix("age="))
                .find_map(|a| a.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            if holder_is_gone(&holder, run, &local_hostname(), pid_exists) {
                return take_over(host, transport, path, token, &owner, holder).await;
            }
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

/// One `name=value` field of an owner line.
fn owner_field<'a>(holder: &'a str, name: &str) -> Option<&'a str> {
    holder
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
}

/// Whether the process named by `holder` (an owner line) is provably gone:
/// taken on this machine by a pid that no longer exists here. A holder on
/// another machine, or without a pid, cannot be known dead from here.
fn holder_is_dead(holder: &str, this_host: &str, pid_exists: impl Fn(u32) -> bool) -> bool {
    let pid = owner_field(holder, "pid").and_then(|p| p.parse::<u32>().ok());
    owner_field(holder, "host") == Some(this_host)
        && this_host != "?"
        && pid.is_some_and(|pid| pid != std::process::id() && !pid_exists(pid))
}

/// Whether `holder` (an owner line) is this run, taken on this machine by
/// a process that no longer exists.
fn holder_is_gone(
    holder: &str,
    run: &str,
    this_host: &str,
    pid_exists: impl Fn(u32) -> bool,
) -> bool {
    owner_field(holder, "run") == Some(run) && holder_is_dead(holder, this_host, pid_exists)
}

/// What a check run says about a host's lock, read without taking it: free,
/// or who holds it, for how long, whether that holder is dead, and what a
/// run (a resume of `resume_of`, when given) would do about it.
pub async fn peek_lock(
    host: &Host,
    transport: &Transport,
    resume_of: Option<&str>,
) -> Result<String, StepError> {
    let layout = Layout::new(host);
    let path = layout.lock_dir();
    let script = (|| -> Result<String, Cause> {
        let lock = q(&path)?;
        Ok(format!(
            "if [ -d {lock} ]; then echo held; sed -n 2p {lock}/owner 2>/dev/null; echo;              echo \"age=$(( $(date +%s) - $(stat -c %Y {lock} 2>/dev/null || date +%s) ))\";              else echo free; fi"
        ))
    })()
    .map_err(|c| error(host, c, "nothing was changed"))?;
    let out = transport
        .run_script_ok(&script, QUICK)
        .await
        .map_err(|e| error(host, e.into(), "nothing was changed"))?;
    let text = out.stdout_text();
    let mut lines = text.lines();
    if lines.next() != Some("held") {
        return Ok(format!("check mode: {path} is free; a run takes it"));
    }
    let holder = lines.next().unwrap_or("").trim().to_owned();
    let age = lines
        .filter_map(|l| l.strip_prefix("age="))
        .find_map(|a| a.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    Ok(peek_words(
        &path,
        &holder,
        age,
        resume_of,
        &local_hostname(),
        pid_exists,
    ))
}

/// [`peek_lock`]'s sentence for a held lock.
fn peek_words(
    path: &str,
    holder: &str,
    age: Option<Duration>,
    resume_of: Option<&str>,
    this_host: &str,
    pid_exists: impl Fn(u32) -> bool + Copy,
) -> String {
    if !holder_is_dead(holder, this_host, pid_exists) {
        return format!(
            "check mode: {}; a run is refused",
            held_message(path, holder, age)
        );
    }
    let age_text = age.map_or("an unknown time".to_owned(), |a| {
        humantime::format_duration(a).to_string()
    });
    let pid = owner_field(holder, "pid").unwrap_or("?");
    let then = match resume_of {
        Some(run) if holder_is_gone(holder, run, this_host, pid_exists) => {
            "this resume takes it over".to_owned()
        }
        _ => format!("only a resume of its own run takes it over; else remove {path} by hand"),
    };
    format!(
        "check mode: host is locked by {holder} for {age_text}, a DEAD holder (pid {pid} no longer runs on this machine): {then}"
    )
}

fn pid_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Rewrites the owner file of a lock whose holder is gone, only if it still
/// names that holder (another resume may have been quicker).
async fn take_over(
    host: &Host,
    transport: &Transport,
    path: String,
    token: String,
    owner: &str,
    holder: String,
) -> Result<LockGuard, StepError> {
    let script = (|| -> Result<String, Cause> {
        let lock = q(&path)?;
        Ok(format!(
            "if [ \"$(sed -n 2p {lock}/owner 2>/dev/null)\" = {holder} ]; then \
             printf '%s' {owner} > {lock}/owner.new && mv -f {lock}/owner.new {lock}/owner && echo taken; \
             else echo changed; fi",
            holder = q(&holder)?,
            owner = q(owner)?,
        ))
    })()
    .map_err(|c| error(host, c, "the dead holder's lock"))?;
    let out = transport
        .run_script_ok(&script, QUICK)
        .await
        .map_err(|e| error(host, e.into(), "the dead holder's lock"))?;
    if out.stdout_text() == "taken" {
        Ok(LockGuard {
            host: host.name.clone(),
            path,
            token,
            took_over: Some(holder),
        })
    } else {
        Err(error(
            host,
            Cause::Check(format!(
                "{path} changed owner while this resume was taking it over from its dead holder ({holder}); left as it is"
            )),
            "the lock as found",
        ))
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

/// The name of the user we run as: the name of our uid (through the
/// system's user database, so LDAP and sssd users too), else `$USER`, else
/// the uid itself (never a bare `?`). The uid first: `$USER` is whatever
/// the environment says (`su` without `-` keeps the caller's).
fn user_name() -> String {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    passwd_name(uid)
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| format!("uid{uid}"))
}

/// `getpwuid_r`: the libc crate, already a dependency, has it; a crate of
/// its own (nix, uzers) for one call is not worth the weight.
fn passwd_name(uid: libc::uid_t) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: `passwd` is plain data; all-zero is a valid (empty) value.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is to a live local of the size passed; the
    // strings it fills in point into `buf`, which outlives their use here.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() || pwd.pw_name.is_null() {
        return None;
    }
    // SAFETY: non-null, NUL-terminated, inside `buf` (see above).
    let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
    name.to_str()
        .ok()
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
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
    fn only_this_runs_dead_holder_on_this_machine_is_gone() {
        let line = "run=r1 user=ops host=ctl pid=4000000 since=2026-01-01T00:00:00Z";
        let dead = |_| false;
        assert!(holder_is_gone(line, "r1", "ctl", dead));
        assert!(!holder_is_gone(line, "r1", "ctl", |_| true), "pid alive");
        assert!(!holder_is_gone(line, "r2", "ctl", dead), "another run");
        assert!(
            !holder_is_gone(line, "r1", "other", dead),
            "another controller"
        );
        assert!(
            !holder_is_gone("run=r1 host=ctl", "r1", "ctl", dead),
            "no pid"
        );
        assert!(!holder_is_gone("", "r1", "ctl", dead), "no owner file");
        let mine = format!("run=r1 host=ctl pid={}", std::process::id());
        assert!(!holder_is_gone(&mine, "r1", "ctl", dead), "ourselves");
    }

    /// Regression (issue 51, item 13e): a check shows a dead run's lock.
    #[test]
    fn a_check_names_a_dead_holder_and_what_a_resume_would_do() {
        let line = "run=r1 user=ops host=ctl pid=4000000 since=2026-01-01T00:00:00Z";
        let age = Some(Duration::from_secs(90));
        let dead = |_| false;
        let w = peek_words("/d/state/lock", line, age, Some("r1"), "ctl", dead);
        assert!(
            w.contains("locked by run=r1 user=ops")
                && w.contains("DEAD holder (pid 4000000")
                && w.ends_with("this resume takes it over"),
            "{w}"
        );
        let w = peek_words("/d/state/lock", line, age, None, "ctl", dead);
        assert!(
            w.contains("DEAD") && w.contains("remove /d/state/lock by hand"),
            "{w}"
        );
        let w = peek_words("/d/state/lock", line, age, Some("r1"), "ctl", |_| true);
        assert!(
            !w.contains("DEAD") && w.ends_with("a run is refused"),
            "{w}"
        );
        let w = peek_words("/d/state/lock", line, age, Some("r1"), "other", dead);
        assert!(!w.contains("DEAD"), "another machine's holder: {w}");
    }

    #[test]
    fn the_owner_names_a_user_not_a_question_mark() {
        let name = user_name();
        assert!(!name.is_empty() && name != "?", "{name}");
        // uid 0 is named in every user database; our own name is our uid's.
        assert_eq!(passwd_name(0).as_deref(), Some("root"));
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        if let Some(own) = passwd_name(uid) {
            assert_eq!(name, own);
        }
    }

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
