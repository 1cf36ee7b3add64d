//! `drain`: SIGTERM the running daemon (found by its pid file, confirmed by
//! `/proc/<pid>/exe`), wait for it to exit, SIGKILL it at the deadline.

use super::ctx::StepCtx;
use super::outcome::{kept, Cause, Failed, StepOutcome};
use super::params::{duration, show};
use super::progress::Drained;
use super::remote::{self, DaemonState, QUICK};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DrainParams {
    /// How long the daemon gets to finish in-flight proofs after SIGTERM.
    #[serde(with = "duration")]
    pub timeout: Duration,
    /// How long to wait for the process to vanish after SIGKILL.
    #[serde(with = "duration")]
    pub kill_wait: Duration,
    /// Interval between checks of /proc.
    #[serde(with = "duration")]
    pub poll: Duration,
    /// The daemon is stopped on purpose (the `stop` playbook): once it is
    /// gone, `state/daemon` says `stopped` and `fleetctl health` no longer
    /// expects a daemon on the host. Without it a drain is the first half of
    /// a restart, and a host left without its daemon fails health.
    pub stop: bool,
}

impl Default for DrainParams {
    fn default() -> Self {
        DrainParams {
            timeout: Duration::from_secs(30),
            kill_wait: Duration::from_secs(10),
            poll: Duration::from_millis(200),
            stop: false,
        }
    }
}

pub fn describe(p: &DrainParams, ctx: &StepCtx<'_>) -> String {
    format!(
        "SIGTERM the daemon in {} and wait up to {} for it to exit (then SIGKILL)",
        ctx.layout().pid_file(),
        humantime::format_duration(p.timeout)
    )
}

const KEPT: &str = "releases and `current`; the daemon may still be running";

pub(super) async fn run(p: &DrainParams, ctx: &mut StepCtx<'_>) -> Result<StepOutcome, Failed> {
    let outcome = drain(p, ctx).await?;
    if p.stop {
        kept(remote::record_intent(ctx, "stopped").await, KEPT)?;
    }
    Ok(outcome)
}

async fn drain(p: &DrainParams, ctx: &mut StepCtx<'_>) -> Result<StepOutcome, Failed> {
    let (pid, info) = match kept(remote::daemon_state(ctx).await, KEPT)? {
        DaemonState::NotRunning(reason) => {
            // Nothing serves from here on either: the gap starts now.
            ctx.state.serving_stopped.get_or_insert_with(Instant::now);
            return Ok(StepOutcome::skipped(reason));
        }
        DaemonState::Running { pid, info } => (pid, info),
    };
    let before = kept(remote::meminfo(ctx).await, KEPT)?;
    let mut drained = Drained {
        pid,
        before,
        vm_lck: info.vm_lck,
        rss_shmem: info.rss_shmem,
        rss_anon: info.rss_anon,
        killed: false,
    };
    // Recorded before signalling: even a failed drain leaves wait_release
    // and rollback a baseline to compare against.
    ctx.state.drained = Some(drained.clone());
    // The daemon refuses new work from the SIGTERM on: the serving gap
    // starts here, not when it has finished its proofs.
    ctx.state.serving_stopped.get_or_insert_with(Instant::now);
    kept(signal(ctx, pid, "TERM").await, KEPT)?;
    let start = Instant::now();
    if kept(wait_exit(ctx, pid, p.timeout, p.poll).await, KEPT)? {
        return Ok(StepOutcome::done(format!(
            "pid {pid} exited {} after SIGTERM",
            show(start.elapsed())
        )));
    }
    kept(signal(ctx, pid, "KILL").await, KEPT)?;
    drained.killed = true;
    ctx.state.drained = Some(drained);
    let killed_at = Instant::now();
    if kept(wait_exit(ctx, pid, p.kill_wait, p.poll).await, KEPT)? {
        return Ok(StepOutcome::forced(
            "SIGKILL",
            format!(
                "pid {pid} ignored SIGTERM for {}: SIGKILL sent, exited {} later",
                show(p.timeout),
                show(killed_at.elapsed())
            ),
        ));
    }
    Err((
        Cause::Check(format!(
            "pid {pid} still alive {} after SIGKILL (stuck in the kernel, e.g. uninterruptible GPU driver call)",
            show(p.kill_wait)
        )),
        "releases and `current`; the old daemon is still there, so nothing new was started".to_owned(),
    ))
}

/// Sends a signal; a process that is already gone is not an error.
pub(super) async fn signal(ctx: &StepCtx<'_>, pid: u32, sig: &str) -> Result<(), Cause> {
    let out = ctx
        .transport
        .run(&["kill", &format!("-{sig}"), &pid.to_string()], QUICK)
        .await?;
    if out.success()
        || remote::proc_info(ctx, pid)
            .await?
            .is_none_or(|i| i.zombie())
    {
        return Ok(());
    }
    Err(Cause::Check(format!(
        "cannot send SIG{sig} to pid {pid}: {}",
        out.stderr_text()
    )))
}

/// Polls /proc until the process has exited (gone or a zombie) or the
/// deadline passes; true when it exited.
pub(super) async fn wait_exit(
    ctx: &StepCtx<'_>,
    pid: u32,
    deadline: Duration,
    poll: Duration,
) -> Result<bool, Cause> {
    let start = Instant::now();
    loop {
        if remote::proc_info(ctx, pid)
            .await?
            .is_none_or(|i| i.zombie())
        {
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
