//! What the steps read on a host, with nothing but sh and coreutils there:
//! the pid file, `/proc/<pid>`, `/proc/meminfo` (parsed in [`super::proc`]),
//! and the deployed binary's own probe; and what they record there.

use super::ctx::StepCtx;
use super::outcome::Cause;
use super::proc::{parse_meminfo, parse_proc_status, MemInfo, ProcInfo};
use crate::transport::quote::quote;
use fleet_wire::health::Probe;
use std::time::{Duration, Instant};

/// Short commands (cat, readlink, stat) get this long.
pub const QUICK: Duration = Duration::from_secs(15);

/// Quotes for a script; a quoting failure is a step failure, never a panic.
pub fn q(s: &str) -> Result<String, Cause> {
    Ok(quote(s)?)
}

/// A release id is a lowercase sha256: anything else in `current` or
/// `state/previous` is not ours and must not be turned into a path.
pub fn is_release_id(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What the pid file says (read by [`daemon_state`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PidFile {
    Missing,
    Garbage(String),
    Pid(u32),
}

/// `None` when the pid is gone from /proc.
pub async fn proc_info(ctx: &StepCtx<'_>, pid: u32) -> Result<Option<ProcInfo>, Cause> {
    let script = format!(
        "if [ -r /proc/{pid}/status ]; then cat /proc/{pid}/status 2>/dev/null; printf 'Exe:\\t%s\\n' \"$(readlink /proc/{pid}/exe 2>/dev/null)\"; fi"
    );
    let out = ctx.transport.run_script_ok(&script, QUICK).await?;
    Ok(parse_proc_status(&out.stdout_text()))
}

pub async fn meminfo(ctx: &StepCtx<'_>) -> Result<MemInfo, Cause> {
    let out = ctx
        .transport
        .run_script_ok("cat /proc/meminfo", QUICK)
        .await?;
    parse_meminfo(&out.stdout_text())
        .ok_or_else(|| Cause::Check("/proc/meminfo has no MemTotal/MemAvailable".to_owned()))
}

/// The daemon the pid file names, if it is a live process of one of our
/// releases. A stale pid now owned by some other program is not ours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DaemonState {
    Running {
        pid: u32,
        info: ProcInfo,
    },
    /// Nothing to act on, and why.
    NotRunning(String),
}

/// Marks the sections of [`daemon_state`]'s one command.
const STATUS_MARK: &str = "@@fleetctl-status";
const PID_MARK: &str = "@@fleetctl-pid:";

/// The pid file, the process it names and where the releases are, read in
/// one command on the host (every step that touches the daemon asks this
/// first: one round trip, not three).
pub async fn daemon_state(ctx: &StepCtx<'_>) -> Result<DaemonState, Cause> {
    let layout = ctx.layout();
    let f = q(&layout.pid_file())?;
    let script = format!(
        "printf 'releases:%s\\n' \"$(readlink -f {r})\"; if [ -f {f} ]; then p=$(head -c 64 {f}); case \"$p\" in ''|*[!0-9[:space:]]*) ;; *) p=$(echo $p); if [ -r /proc/$p/status ]; then echo {STATUS_MARK}; cat /proc/$p/status 2>/dev/null; printf 'Exe:\\t%s\\n' \"$(readlink /proc/$p/exe 2>/dev/null)\"; fi;; esac; printf '{PID_MARK}'; head -c 64 {f}; fi",
        r = q(&layout.releases())?,
    );
    let out = ctx.transport.run_script_ok(&script, QUICK).await?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, pid_body) = match text.split_once(PID_MARK) {
        Some((head, body)) => (head, Some(body)),
        None => (text.as_str(), None),
    };
    let releases = head
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("releases:"))
        .filter(|r| !r.trim().is_empty())
        .map_or_else(|| layout.releases(), |r| r.trim().to_owned());
    let status = head.split_once(STATUS_MARK).map(|(_, s)| s);
    let pid = match pid_body {
        None => PidFile::Missing,
        Some(body) => match body.trim().parse::<u32>() {
            Ok(pid) if pid > 1 => PidFile::Pid(pid),
            _ => PidFile::Garbage(body.trim().to_owned()),
        },
    };
    let info = status.and_then(parse_proc_status);
    judge_daemon(&layout, pid, info, &releases)
}

/// What [`daemon_state`] read, judged: a live process of one of our
/// releases, or why not.
fn judge_daemon(
    layout: &super::layout::Layout,
    pid: PidFile,
    info: Option<ProcInfo>,
    releases: &str,
) -> Result<DaemonState, Cause> {
    let pid = match pid {
        PidFile::Missing => {
            return Ok(DaemonState::NotRunning(format!(
                "no pid file at {}",
                layout.pid_file()
            )))
        }
        PidFile::Garbage(g) => {
            return Ok(DaemonState::NotRunning(format!(
                "pid file {} holds {g:?}, not a pid",
                layout.pid_file()
            )))
        }
        PidFile::Pid(pid) => pid,
    };
    let Some(info) = info else {
        return Ok(DaemonState::NotRunning(format!(
            "stale pid file: pid {pid} is not running"
        )));
    };
    if info.zombie() {
        return Ok(DaemonState::NotRunning(format!(
            "pid {pid} has exited (zombie, not yet reaped)"
        )));
    }
    let releases = format!("{releases}/");
    if !info.exe.starts_with(&releases) {
        return Ok(DaemonState::NotRunning(format!(
            "stale pid file: pid {pid} is {:?}, not a prover under {releases}",
            info.exe
        )));
    }
    Ok(DaemonState::Running { pid, info })
}

/// `readlink -f`, so a symlinked install dir still matches `/proc/<pid>/exe`.
pub async fn canonical(ctx: &StepCtx<'_>, path: &str) -> Result<String, Cause> {
    let out = ctx
        .transport
        .run_script_ok(&format!("readlink -f {}", q(path)?), QUICK)
        .await?;
    let text = out.stdout_text();
    Ok(if text.is_empty() {
        path.to_owned()
    } else {
        text
    })
}

/// Size of a remote file; 0 when it does not exist yet.
pub async fn file_size(ctx: &StepCtx<'_>, path: &str) -> Result<u64, Cause> {
    let p = q(path)?;
    let out = ctx
        .transport
        .run_script_ok(
            &format!("if [ -f {p} ]; then wc -c < {p}; else echo 0; fi"),
            QUICK,
        )
        .await?;
    out.stdout_text().parse().map_err(|_| {
        Cause::Check(format!(
            "cannot read the size of {path}: {:?}",
            out.stdout_text()
        ))
    })
}

/// The release `current` points at, if it is one of ours.
pub async fn current_release(ctx: &StepCtx<'_>) -> Result<Option<String>, Cause> {
    let out = ctx
        .transport
        .run_script_ok(
            &format!("readlink {} || true", q(&ctx.layout().current())?),
            QUICK,
        )
        .await?;
    let target = out.stdout_text();
    let id = target
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or("");
    Ok(is_release_id(id).then(|| id.to_owned()))
}

/// Runs the deployed binary's probe, from the install dir so the config's
/// relative paths (pid file, logs) resolve as the daemon's do.
pub async fn probe(ctx: &StepCtx<'_>, timeout: Duration) -> Result<Probe, Cause> {
    let layout = ctx.layout();
    let script = format!(
        "cd {} && exec {} health --config {}",
        q(&layout.install)?,
        q(&layout.current_binary())?,
        q(&layout.config)?
    );
    let out = ctx.transport.run_script_ok(&script, timeout).await?;
    Probe::parse(&String::from_utf8_lossy(&out.stdout))
        .map_err(|e| Cause::Check(format!("`prover health` output: {e}")))
}

/// Records that the daemon should (`running`) or should not (`stopped`) be up.
pub async fn record_intent(ctx: &StepCtx<'_>, intent: &str) -> Result<(), Cause> {
    let layout = ctx.layout();
    // A host with nothing installed is left so: a stop creates no tree.
    let script = format!(
        "[ -d {} ] || exit 0; mkdir -p {} && echo {intent} > {}",
        q(&layout.install)?,
        q(&layout.state())?,
        q(&layout.intent_file())?
    );
    ctx.transport.run_script_ok(&script, QUICK).await?;
    Ok(())
}

/// How many verified releases a host remembers.
const VERIFIED_KEPT: usize = 20;

/// Appends `sha` to the host's verified list (moved to the end when it was
/// there already), through a temporary file and a rename.
pub async fn record_verified(ctx: &StepCtx<'_>, sha: &str) -> Result<(), Cause> {
    let layout = ctx.layout();
    let file = q(&layout.verified_file())?;
    let tmp = q(&format!(
        "{}.{}.tmp",
        layout.verified_file(),
        std::process::id()
    ))?;
    let script = format!(
        "mkdir -p {state} && {{ grep -vxF {sha} {file} 2>/dev/null; echo {sha}; }} | tail -n {VERIFIED_KEPT} > {tmp} && mv -f {tmp} {file}",
        state = q(&layout.state())?,
        sha = q(sha)?,
    );
    ctx.transport.run_script_ok(&script, QUICK).await?;
    Ok(())
}

/// Sends a signal; a process that is already gone is not an error.
pub async fn signal(ctx: &StepCtx<'_>, pid: u32, sig: &str) -> Result<(), Cause> {
    let out = ctx
        .transport
        .run(&["kill", &format!("-{sig}"), &pid.to_string()], QUICK)
        .await?;
    if out.success() || proc_info(ctx, pid).await?.is_none_or(|i| i.zombie()) {
        return Ok(());
    }
    Err(Cause::Check(format!(
        "cannot send SIG{sig} to pid {pid}: {}",
        out.stderr_text()
    )))
}

/// Sends `sig` to `pid` only while `guard` is a live process (not gone,
/// not a zombie), checked and sent in one command on the host, so that
/// `guard` cannot die between the check and the signal; false when it was
/// gone and nothing was sent. A handover's drain: the old daemon is told
/// to stop only while its successor waits to take over.
pub async fn signal_while_alive(
    ctx: &StepCtx<'_>,
    pid: u32,
    sig: &str,
    guard: u32,
) -> Result<bool, Cause> {
    let script = format!(
        "s=$(sed -n 's/^State:[[:space:]]*//p' /proc/{guard}/status 2>/dev/null); case \"$s\" in ''|Z*|X*) echo gone;; *) kill -{sig} {pid} 2>/dev/null; echo sent;; esac"
    );
    let out = ctx.transport.run_script_ok(&script, QUICK).await?;
    Ok(out.stdout_text() == "sent")
}

/// Polls /proc until the process has exited (gone or a zombie) or the
/// deadline passes; true when it exited.
pub async fn wait_exit(
    ctx: &StepCtx<'_>,
    pid: u32,
    deadline: Duration,
    poll: Duration,
) -> Result<bool, Cause> {
    let start = Instant::now();
    loop {
        if proc_info(ctx, pid).await?.is_none_or(|i| i.zombie()) {
            return Ok(true);
        }
        if start.elapsed() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(
            poll.min(deadline.saturating_sub(start.elapsed()))
                .max(Duration::from_millis(10)),
        )
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_ids_are_sha256_hex_only() {
        assert!(is_release_id(&"a".repeat(64)));
        assert!(!is_release_id(&"A".repeat(64)));
        assert!(!is_release_id("../../etc"));
    }
}
