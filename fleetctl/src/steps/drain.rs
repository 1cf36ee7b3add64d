//! `drain`: SIGTERM the running daemon (found by its pid file, confirmed by
//! `/proc/<pid>/exe`), wait for it to exit, SIGKILL it at the deadline.
//! After a handover, the old daemon is signalled only while its successor
//! lives, and the drain ends when the successor has taken over and still
//! lives. Just before the signal it starts the probe of the serving gap
//! (`gap_probe`), which the executor stops when the host is done.

use super::ctx::StepCtx;
use super::daemon_log::{check_alive, is_ready_line, last_lines, log_and_alive, TOOK_OVER_LINE};
use super::gap_probe;
use super::handover::undo;
use super::outcome::{kept, Cause, Failed, StepOutcome};
use super::params::{self as bounds, Check};
use super::params::{duration, show};
use super::progress::{Drained, Handover};
use super::remote::{self, DaemonState};
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

impl Check for DrainParams {
    fn check(&self) -> Result<(), String> {
        bounds::duration_in("timeout", self.timeout, &bounds::TIMEOUTS)?;
        bounds::duration_in("kill_wait", self.kill_wait, &bounds::WAITS)?;
        bounds::duration_in("poll", self.poll, &bounds::POLLS)
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
            watch_the_gap(ctx).await;
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
    // Taken: a later drain (rollback's) is a plain one.
    let waiting = match ctx.state.handover.take() {
        Some(Handover::Waiting { successor }) => ctx
            .state
            .started
            .as_ref()
            .filter(|s| s.pid == successor)
            .map(|s| (successor, s.log_offset)),
        _ => None,
    };
    watch_the_gap(ctx).await;
    // The daemon refuses new work from the SIGTERM on: the serving gap
    // starts here, not when it has finished its proofs.
    let stopped_at = Instant::now();
    if let Some((successor, offset)) = waiting {
        // The old daemon is told to stop only while its successor is alive
        // and waiting, asked in the same command as the signal: a successor
        // that died must not cost the old daemon.
        match remote::signal_while_alive(ctx, pid, "TERM", successor).await {
            Ok(true) => {}
            Ok(false) => return Err(successor_gone(ctx, pid, successor, offset).await),
            Err(cause) => {
                // The signal may have gone out: drained, for the rollback.
                ctx.state.drained = Some(drained);
                ctx.state.serving_stopped.get_or_insert(stopped_at);
                return Err((cause, KEPT.to_owned()));
            }
        }
        ctx.state.drained = Some(drained);
        ctx.state.serving_stopped.get_or_insert(stopped_at);
        return hand_over(p, ctx, pid, successor, offset).await;
    }
    // Recorded before signalling: even a failed drain leaves wait_release
    // and rollback a baseline to compare against.
    ctx.state.drained = Some(drained.clone());
    ctx.state.serving_stopped.get_or_insert(stopped_at);
    kept(remote::signal(ctx, pid, "TERM").await, KEPT)?;
    let start = Instant::now();
    if kept(remote::wait_exit(ctx, pid, p.timeout, p.poll).await, KEPT)? {
        return Ok(StepOutcome::done(format!(
            "pid {pid} exited {} after SIGTERM",
            show(start.elapsed())
        )));
    }
    kept(remote::signal(ctx, pid, "KILL").await, KEPT)?;
    drained.killed = true;
    ctx.state.drained = Some(drained);
    let killed_at = Instant::now();
    if kept(remote::wait_exit(ctx, pid, p.kill_wait, p.poll).await, KEPT)? {
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

/// Starts the probe of the daemon's address that measures the serving gap
/// as clients see it, once per host run. A host where it cannot start
/// (no `sh` loop, a full `run/`) is measured by the steps' clock instead.
async fn watch_the_gap(ctx: &mut StepCtx<'_>) {
    if !ctx.measure_gap || ctx.state.gap_probe.is_some() {
        return;
    }
    match gap_probe::start(ctx).await {
        Ok(probe) => ctx.state.gap_probe = Some(probe),
        Err(e) => tracing::warn!(
            host = %ctx.host.name,
            "the serving gap is measured by the steps' clock: its probe did not start: {e}"
        ),
    }
}

/// The successor of a handover died before the old daemon was signalled:
/// nothing was drained, and the host goes back to where it was before the
/// handover (`current` at the old release, the successor's leftovers
/// stopped), so no rollback touches the old daemon, which still serves.
async fn successor_gone(ctx: &mut StepCtx<'_>, old: u32, successor: u32, offset: u64) -> Failed {
    let why = match check_alive(ctx, successor, offset).await {
        Err(cause) => cause.to_string(),
        Ok(()) => format!("pid {successor} was gone or a zombie"),
    };
    let previous = ctx.state.previous_release.clone();
    let undone = undo(ctx, successor, previous.as_deref()).await;
    (
        Cause::Check(format!(
            "the new daemon exited while it waited to take over, so the old one (pid {old}) was not signalled: {why}{undone}"
        )),
        "the old daemon, serving (never signalled); `current` points at the old release again"
            .to_owned(),
    )
}

/// After the SIGTERM of a handover: until the waiting successor has taken
/// over and says `ready` (the end of the serving gap), the old daemon
/// SIGKILLed at the drain deadline as in a plain drain. The old process may
/// still be unpinning its memory: `wait_release` waits for it to be gone.
async fn hand_over(
    p: &DrainParams,
    ctx: &mut StepCtx<'_>,
    old: u32,
    successor: u32,
    offset: u64,
) -> Result<StepOutcome, Failed> {
    const KEPT_HANDOVER: &str =
        "the releases; `current` points at the new release, whose daemon did not take over";
    let start = Instant::now();
    let mut killed_at: Option<Instant> = None;
    loop {
        // Alive after the log was read: a successor that said `ready` and
        // died at once has not taken over.
        let (log, alive) = kept(log_and_alive(ctx, successor, offset).await, KEPT_HANDOVER)?;
        if !alive {
            kept(check_alive(ctx, successor, offset).await, KEPT_HANDOVER).map_err(
                |(cause, kept)| {
                    (
                        Cause::Check(format!(
                            "the new daemon exited before it took over: {cause}"
                        )),
                        kept,
                    )
                },
            )?;
        }
        if took_over_and_ready(&log) {
            ctx.state.serving_again.get_or_insert_with(Instant::now);
            ctx.state.handover = Some(Handover::Done {
                successor,
                from: old,
            });
            let text = format!(
                "pid {old} drained and handed over to pid {successor} {} after SIGTERM",
                show(start.elapsed())
            );
            return Ok(match killed_at {
                Some(_) => StepOutcome::forced(
                    "SIGKILL",
                    format!("{text} (SIGKILL after {})", show(p.timeout)),
                ),
                None => StepOutcome::done(text),
            });
        }
        match killed_at {
            None if start.elapsed() >= p.timeout => {
                kept(remote::signal(ctx, old, "KILL").await, KEPT_HANDOVER)?;
                if let Some(d) = ctx.state.drained.as_mut() {
                    d.killed = true;
                }
                killed_at = Some(Instant::now());
            }
            Some(at) if at.elapsed() >= p.kill_wait => {
                return Err((
                    Cause::Check(format!(
                        "pid {successor} did not take over within {} of SIGKILL to pid {old}; last log lines:\n{}",
                        show(p.kill_wait),
                        last_lines(ctx, offset).await
                    )),
                    KEPT_HANDOVER.to_owned(),
                ))
            }
            _ => {}
        }
        tokio::time::sleep(p.poll.min(HANDOVER_POLL)).await;
    }
}

/// How often a handover is looked at: the serving gap is measured by it.
const HANDOVER_POLL: Duration = Duration::from_millis(25);

/// The successor's `took over` line, then a `ready` line after it.
fn took_over_and_ready(log: &str) -> bool {
    log.find(TOOK_OVER_LINE)
        .is_some_and(|at| log[at..].lines().skip(1).any(is_ready_line))
}
