//! `start`: switch `current` to the release atomically and start the daemon
//! fully detached (own session, stdin from /dev/null, output to the log), so
//! the SSH command returns at once and the daemon outlives the connection.

use super::ctx::StepCtx;
use super::outcome::{kept, Cause, Failed, StepOutcome};
use super::params::{self as bounds, Check};
use super::params::{duration, show};
use super::progress::{Handover, Started};
use super::remote::{self, q, DaemonState, QUICK};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StartParams {
    /// Deadline for the switch-and-launch command itself (it returns at once).
    #[serde(with = "duration")]
    pub timeout: Duration,
}

impl Default for StartParams {
    fn default() -> Self {
        StartParams {
            timeout: Duration::from_secs(15),
        }
    }
}

impl Check for StartParams {
    fn check(&self) -> Result<(), String> {
        bounds::duration_in("timeout", self.timeout, &bounds::TIMEOUTS)
    }
}

pub fn describe(_p: &StartParams, ctx: &StepCtx<'_>) -> String {
    let layout = ctx.layout();
    format!(
        "point {} at releases/{} (previous recorded in {}) and start `prover daemon` detached, logging to {}",
        layout.current(),
        &ctx.release.id[..12.min(ctx.release.id.len())],
        layout.previous_file(),
        layout.log()
    )
}

pub(super) async fn run(p: &StartParams, ctx: &mut StepCtx<'_>) -> Result<StepOutcome, Failed> {
    let sha = ctx.release.id.clone();
    let begin = Instant::now();
    if let Some(Handover::Done { successor, from }) = ctx.state.handover {
        return Ok(StepOutcome::skipped(format!(
            "release {} was started before the drain and took over from pid {from} as pid {successor}",
            &sha[..12.min(sha.len())]
        )));
    }
    let previous = start_release(ctx, &sha, p.timeout, None).await?;
    let Some(started) = &ctx.state.started else {
        return Err((
            Cause::Check("start recorded no process".to_owned()),
            String::new(),
        ));
    };
    Ok(StepOutcome::done(format!(
        "release {} started as pid {} in {} (previous: {})",
        &sha[..12.min(sha.len())],
        started.pid,
        show(begin.elapsed()),
        previous
            .as_deref()
            .map_or("none", |s| &s[..12.min(s.len())])
    )))
}

/// Switches `current` to `sha` and starts it; returns the release `current`
/// pointed at before. Shared with `rollback` and `handover`, which passes
/// the daemon's `--handover` wait: only then may a daemon be running.
pub(super) async fn start_release(
    ctx: &mut StepCtx<'_>,
    sha: &str,
    timeout: Duration,
    handover: Option<Duration>,
) -> Result<Option<String>, Failed> {
    const KEPT_BEFORE: &str =
        "`current`, `state/previous` and the releases (nothing was switched or started)";
    let running = kept(remote::daemon_state(ctx).await, KEPT_BEFORE)?;
    if let (DaemonState::Running { pid, info }, None) = (running, handover) {
        return Err((
            Cause::Check(format!(
                "a daemon is still running (pid {pid}, {}): drain it first",
                info.exe
            )),
            KEPT_BEFORE.to_owned(),
        ));
    }
    let layout = ctx.layout();
    let dir = layout.release(sha);
    let ready = format!(
        "[ -x {} ] && [ -f {} ]",
        kept(q(&format!("{dir}/prover")), KEPT_BEFORE)?,
        kept(q(&format!("{dir}/prover.toml")), KEPT_BEFORE)?
    );
    let out = kept(ctx.transport.run_script(&ready, QUICK).await, KEPT_BEFORE)?;
    if !out.success() {
        return Err((
            Cause::Check(format!(
                "release {dir} is not on the host (run upload first)"
            )),
            KEPT_BEFORE.to_owned(),
        ));
    }

    let previous = kept(remote::current_release(ctx).await, KEPT_BEFORE)?;
    let tag: u64 = rand::random();
    let script = kept(
        switch_script(&layout.install, sha, previous.as_deref(), tag),
        KEPT_BEFORE,
    )?;
    kept(
        ctx.transport.run_script_ok(&script, QUICK).await,
        KEPT_BEFORE,
    )?;
    if previous.as_deref() != Some(sha) {
        ctx.state.previous_release = previous.clone();
    }

    const KEPT_SWITCHED: &str =
        "the releases; `current` now points at the new release and `state/previous` at the old one";
    let log_offset = kept(remote::file_size(ctx, &layout.log()).await, KEPT_SWITCHED)?;
    let launch = kept(launch_script(&layout.install, handover), KEPT_SWITCHED)?;
    let out = kept(
        ctx.transport.run_script_ok(&launch, timeout).await,
        KEPT_SWITCHED,
    )?;
    let pid: u32 = out
        .stdout_text()
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| {
            (
                Cause::Check(format!("launch printed no pid: {:?}", out.stdout_text())),
                KEPT_SWITCHED.to_owned(),
            )
        })?;
    ctx.state.started = Some(Started {
        pid,
        release: sha.to_owned(),
        log_offset,
    });
    Ok(previous)
}

/// Points `current` back at `sha` (a handover that failed before the
/// drain), with the same atomic swap.
pub(super) async fn restore_current(ctx: &StepCtx<'_>, sha: &str) -> Result<(), Cause> {
    let tag: u64 = rand::random();
    let script = switch_script(&ctx.layout().install, sha, None, tag)?;
    ctx.transport.run_script_ok(&script, QUICK).await?;
    Ok(())
}

/// Records the old release in `state/previous` (temp file + rename) and
/// swaps `current` with `ln -sfn` to a temporary link + `mv -T`, so readers
/// see either the old or the new target, never a missing link.
fn switch_script(
    install: &str,
    sha: &str,
    previous: Option<&str>,
    tag: u64,
) -> Result<String, Cause> {
    let mut s = format!("cd {} && mkdir -p state", q(install)?);
    if let Some(prev) = previous.filter(|p| *p != sha) {
        s.push_str(&format!(
            " && printf '%s\\n' {prev} > state/.previous.{tag:016x} && mv -f state/.previous.{tag:016x} state/previous",
            prev = q(prev)?
        ));
    }
    s.push_str(&format!(
        " && ln -sfn {target} .current.{tag:016x} && mv -T .current.{tag:016x} current",
        target = q(&format!("releases/{sha}"))?
    ));
    Ok(s)
}

/// `setsid` puts the daemon in its own session (no SIGHUP when the SSH
/// channel closes); with every standard stream redirected nothing holds the
/// channel open, so the command returns as soon as the shell has forked.
///
/// Only the daemon's simple command is backgrounded, inside braces: with
/// `cd … && setsid … &` the whole list goes to the background, and bash
/// (`/bin/sh` on many distributions) runs it in a subshell that keeps the
/// channel's stdout and waits for the daemon: the command never returns,
/// and `$!` is that subshell, not the daemon.
fn launch_script(install: &str, handover: Option<Duration>) -> Result<String, Cause> {
    let i = install.trim_end_matches('/');
    // Whole seconds: what the daemon's duration parser reads back exactly.
    let handover = handover.map_or(String::new(), |w| {
        format!(" --handover {}s", w.as_secs().max(1))
    });
    Ok(format!(
        "cd {qi} && mkdir -p logs run state && echo running > state/{intent} && {{ setsid {bin} daemon --config {cfg}{handover} >> {log} 2>&1 < /dev/null & echo $!; }}",
        qi = q(i)?,
        bin = q(&format!("{i}/current/prover"))?,
        cfg = q(&format!("{i}/current/prover.toml"))?,
        log = q(&format!("{i}/logs/prover.log"))?,
        intent = crate::health::INTENT_FILE,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `script` with the host's shell; its stderr when it fails.
    fn sh(script: &str) {
        let out = fleet_testkit::output_within(
            std::process::Command::new("sh").args(["-c", script]),
            std::time::Duration::from_secs(30),
        );
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn switch_records_previous_then_renames_the_link() {
        // Run for real in an install dir with a space in its path (quoting):
        // `current` points at the new release, `previous` names the old one,
        // and no temporary file or link is left behind.
        let dir = tempfile::tempdir().unwrap();
        let install = dir.path().join("my prover");
        std::fs::create_dir_all(install.join("releases/aa")).unwrap();
        std::fs::create_dir_all(install.join("releases/bb")).unwrap();
        let install_s = install.to_str().unwrap();
        sh(&switch_script(install_s, "aa", None, 1).unwrap());
        assert_eq!(
            std::fs::read_link(install.join("current")).unwrap(),
            std::path::Path::new("releases/aa")
        );
        assert!(!install.join("state/previous").exists());
        sh(&switch_script(install_s, "bb", Some("aa"), 2).unwrap());
        assert_eq!(
            std::fs::read_link(install.join("current")).unwrap(),
            std::path::Path::new("releases/bb")
        );
        assert_eq!(
            std::fs::read_to_string(install.join("state/previous")).unwrap(),
            "aa\n"
        );
        // Restarting the same release leaves `previous` alone.
        sh(&switch_script(install_s, "bb", Some("bb"), 3).unwrap());
        assert_eq!(
            std::fs::read_to_string(install.join("state/previous")).unwrap(),
            "aa\n"
        );
        let mut names: Vec<String> = std::fs::read_dir(&install)
            .unwrap()
            .chain(std::fs::read_dir(install.join("state")).unwrap())
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["current", "previous", "releases", "state"]);
    }

    #[test]
    fn a_handover_launch_passes_the_wait_in_whole_seconds() {
        let s = launch_script("/opt/p", Some(Duration::from_millis(90_500))).unwrap();
        assert!(
            s.contains("daemon --config /opt/p/current/prover.toml --handover 90s >>"),
            "{s}"
        );
    }

    #[test]
    fn launch_detaches_every_stream() {
        let s = launch_script("/opt/my prover/", None).unwrap();
        assert!(s.contains("setsid '/opt/my prover/current/prover' daemon --config '/opt/my prover/current/prover.toml'"), "{s}");
        assert!(
            s.contains(">> '/opt/my prover/logs/prover.log' 2>&1 < /dev/null & echo $!; }"),
            "{s}"
        );
    }

    /// The launch line under dash and under bash (`/bin/sh` on many hosts):
    /// the command returns at once although the daemon keeps running, and
    /// the pid it prints is the daemon's, leading its own session.
    #[test]
    fn launch_returns_at_once_with_the_daemons_pid_under_dash_and_bash() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let release = dir.path().join("releases/r1");
        std::fs::create_dir_all(&release).unwrap();
        let daemon = release.join("prover");
        std::fs::write(&daemon, "#!/bin/sh\nexec sleep 30\n").unwrap();
        std::fs::set_permissions(&daemon, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink("releases/r1", dir.path().join("current")).unwrap();
        let script = launch_script(dir.path().to_str().unwrap(), None).unwrap();
        let shells: Vec<&str> = ["sh", "dash", "bash"]
            .into_iter()
            .filter(|sh| {
                std::process::Command::new(sh)
                    .args(["-c", "true"])
                    .status()
                    .is_ok_and(|s| s.success())
            })
            .collect();
        assert!(shells.contains(&"sh"), "no sh on this machine");
        for sh in shells {
            let begin = std::time::Instant::now();
            // Piped stdout, as over ssh: the read ends only once every
            // holder of the pipe has closed it.
            let out = std::process::Command::new(sh)
                .args(["-c", &script])
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            let took = begin.elapsed();
            let pid: i32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
            // The shell prints `$!` once it has forked, maybe before the
            // child has run setsid: wait (bounded) for the new session.
            let asked = std::time::Instant::now();
            // SAFETY: getsid has no preconditions; it only reads.
            let mut sid = unsafe { libc::getsid(pid) };
            while sid != pid && asked.elapsed() < std::time::Duration::from_secs(2) {
                std::thread::sleep(std::time::Duration::from_millis(5));
                // SAFETY: as above.
                sid = unsafe { libc::getsid(pid) };
            }
            // SAFETY: kill with a pid we started; ESRCH is harmless.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            assert!(
                took < std::time::Duration::from_secs(5),
                "{sh}: the launch held its output for {took:?}"
            );
            assert_eq!(
                sid, pid,
                "{sh}: pid {pid} is not the daemon leading its session"
            );
        }
    }
}
