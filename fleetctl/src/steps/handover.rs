//! `handover`: start the new build beside the running daemon before the
//! drain, where the host has the memory for both, so the drain is the only
//! time the host does not serve. The new daemon does its whole start-up
//! (devices, pinned pool, parameters, resident bases) while the old one
//! serves, then waits (`prover daemon --handover`) for it to give up its
//! pid file and port, which it does as soon as it has drained and before it
//! unpins its memory. `drain` then watches the takeover, `wait_release`
//! waits only for the old process to be gone and `start` has nothing to do.
//!
//! Where the memory is not there (the old daemon's resident memory plus
//! `margin` beyond what is available now, and on every GPU the device
//! memory it holds plus `gpu_margin`), the step is skipped and the rollout
//! runs as without it: drain, wait for the memory, start.

use super::ctx::StepCtx;
use super::daemon_log::{check_alive, check_log, last_lines, log_and_alive, WAITING_LINE};
use super::outcome::{kept, Cause, Failed, StepOutcome};
use super::params::{self as bounds, Check};
use super::params::{duration, show, ByteSize};
use super::progress::Handover;
use super::remote::{self, DaemonState, QUICK};
use super::start::{restore_current, start_release};
use fleet_wire::health::Gpu;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// How long the new daemon gets to exit when a failed handover stops it.
const UNDO_GRACE: Duration = Duration::from_secs(10);
/// Always fatal in the new daemon's log while it starts.
const FAILURE_PATTERNS: [&str; 2] = ["panicked", " ERROR "];

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HandoverParams {
    /// How long the new daemon's start-up may take.
    #[serde(with = "duration")]
    pub timeout: Duration,
    /// How long the started daemon waits for the old one to let go (it
    /// exits after that): longer than the drain may take.
    #[serde(with = "duration")]
    pub wait: Duration,
    /// Memory that must stay available on top of the old daemon's resident
    /// memory (what the new one pins at start, with the same config).
    pub margin: ByteSize,
    /// Device memory that must stay free on every GPU on top of what the
    /// old daemon holds there.
    pub gpu_margin: ByteSize,
    #[serde(with = "duration")]
    pub poll: Duration,
}

impl Default for HandoverParams {
    fn default() -> Self {
        HandoverParams {
            timeout: Duration::from_secs(300),
            wait: Duration::from_secs(600),
            margin: ByteSize::gib(4),
            gpu_margin: ByteSize::gib(2),
            poll: Duration::from_millis(100),
        }
    }
}

impl Check for HandoverParams {
    fn check(&self) -> Result<(), String> {
        bounds::duration_in("timeout", self.timeout, &bounds::TIMEOUTS)?;
        bounds::duration_in("wait", self.wait, &bounds::WAITS)?;
        bounds::in_range("margin", self.margin, &bounds::MEMORY)?;
        bounds::in_range("gpu_margin", self.gpu_margin, &bounds::MEMORY)?;
        bounds::duration_in("poll", self.poll, &bounds::POLLS)
    }
}

pub fn describe(p: &HandoverParams, ctx: &StepCtx<'_>) -> String {
    format!(
        "where MemAvailable holds the running daemon's resident memory plus {} (and every GPU its device memory plus {}): point {} at the new release and start it beside the old daemon, up to {} for its start-up; it takes over once the old one has drained",
        p.margin,
        p.gpu_margin,
        ctx.layout().current(),
        humantime::format_duration(p.timeout)
    )
}

const KEPT: &str = "the old daemon, serving; `current` points at the old release again";

pub(super) async fn run(p: &HandoverParams, ctx: &mut StepCtx<'_>) -> Result<StepOutcome, Failed> {
    const KEPT_BEFORE: &str = "everything: nothing was switched or started";
    let (old, info) = match kept(remote::daemon_state(ctx).await, KEPT_BEFORE)? {
        DaemonState::NotRunning(reason) => {
            return Ok(StepOutcome::skipped(format!(
                "no daemon to hand over from ({reason})"
            )))
        }
        DaemonState::Running { pid, info } => (pid, info),
    };
    let mem = kept(remote::meminfo(ctx).await, KEPT_BEFORE)?;
    let need = (info.rss_anon.max(info.vm_lck) + info.rss_shmem).saturating_add(p.margin.0);
    if mem.available < need {
        return Ok(StepOutcome::skipped(format!(
            "MemAvailable {} < {} (pid {old}'s resident memory plus margin {}): the new daemon starts after the old one's memory is back",
            ByteSize(mem.available),
            ByteSize(need),
            p.margin
        )));
    }
    if ctx.host.gpus > 0 {
        if let Some(why) = gpu_lacks_room(p, ctx, old).await {
            return Ok(StepOutcome::skipped(format!(
                "{why}: the new daemon starts after the old one is gone"
            )));
        }
    }
    let sha = ctx.release.id.clone();
    let begin = Instant::now();
    let previous = start_release(ctx, &sha, QUICK, Some(p.wait)).await?;
    let Some(started) = ctx.state.started.clone() else {
        return Err((
            Cause::Check("the launch recorded no process".to_owned()),
            KEPT_BEFORE.to_owned(),
        ));
    };
    match wait_started_up(p, ctx, started.pid, started.log_offset).await {
        Ok(()) => {
            ctx.state.handover = Some(Handover::Waiting {
                successor: started.pid,
            });
            Ok(StepOutcome::done(format!(
                "release {} started beside pid {old} as pid {} and up after {}; MemAvailable was {}",
                &sha[..12.min(sha.len())],
                started.pid,
                show(begin.elapsed()),
                ByteSize(mem.available)
            )))
        }
        Err(cause) => {
            let undone = undo(ctx, started.pid, previous.as_deref()).await;
            Err((Cause::Check(format!("{cause}{undone}")), KEPT.to_owned()))
        }
    }
}

/// Why a GPU lacks room for a second daemon's device memory (its resident
/// bases and tables: what the old daemon holds there, with the same
/// config), or `None` when every GPU has it. An unreadable GPU counts as
/// one without room: starting blind could cost the new daemon its start.
async fn gpu_lacks_room(p: &HandoverParams, ctx: &StepCtx<'_>, old: u32) -> Option<String> {
    let probe = match remote::probe(ctx, QUICK).await {
        Ok(probe) => probe,
        Err(e) => return Some(format!("GPU memory unknown ({e})")),
    };
    gpu_shortfall(&probe.gpus.devices, old, p.gpu_margin)
}

/// The first GPU whose free memory is less than what `old` holds there plus
/// `margin`, said with the numbers.
fn gpu_shortfall(gpus: &[Gpu], old: u32, margin: ByteSize) -> Option<String> {
    if gpus.is_empty() {
        return Some("the probe lists no GPU".to_owned());
    }
    for gpu in gpus {
        let (Some(used), Some(total)) = (gpu.memory_used_bytes, gpu.memory_total_bytes) else {
            return Some(format!("GPU {}: memory not reported", gpu.index));
        };
        // A process listed without its figure may hold anything in use.
        let held = gpu
            .processes
            .as_ref()
            .and_then(|ps| ps.iter().find(|proc| proc.pid == old))
            .map_or(0, |proc| proc.used_memory_bytes.unwrap_or(used));
        let free = total.saturating_sub(used);
        let need = held.saturating_add(margin.0);
        if free < need {
            return Some(format!(
                "GPU {}: {} free < {} (pid {old} holds {} there, plus margin {margin})",
                gpu.index,
                ByteSize(free),
                ByteSize(need),
                ByteSize(held),
            ));
        }
    }
    None
}

/// Until the new daemon logs [`WAITING_LINE`]: fails when it dies, logs a
/// failure, or takes longer than `p.timeout`.
async fn wait_started_up(
    p: &HandoverParams,
    ctx: &StepCtx<'_>,
    pid: u32,
    offset: u64,
) -> Result<(), Cause> {
    let patterns: Vec<String> = FAILURE_PATTERNS.iter().map(|s| s.to_string()).collect();
    let begin = Instant::now();
    loop {
        let (log, alive) = log_and_alive(ctx, pid, offset).await?;
        check_log(&log, &patterns)?;
        if !alive {
            check_alive(ctx, pid, offset).await?;
        }
        if log.contains(WAITING_LINE) {
            return Ok(());
        }
        if begin.elapsed() >= p.timeout {
            return Err(Cause::Check(format!(
                "the new daemon (pid {pid}) did not finish its start-up within {}; last log lines:\n{}",
                show(p.timeout),
                last_lines(ctx, offset).await
            )));
        }
        tokio::time::sleep(p.poll).await;
    }
}

/// Stops the new daemon and points `current` back; a note for the cause.
pub(super) async fn undo(ctx: &mut StepCtx<'_>, pid: u32, previous: Option<&str>) -> String {
    ctx.state.started = None;
    let mut notes = String::new();
    // SIGTERM first: it unpins what it allocated before it goes.
    let stopped = match remote::signal(ctx, pid, "TERM").await {
        Ok(()) => remote::wait_exit(ctx, pid, UNDO_GRACE, Duration::from_millis(100))
            .await
            .unwrap_or(false),
        Err(_) => false,
    };
    if !stopped
        && (remote::signal(ctx, pid, "KILL").await.is_err()
            || !remote::wait_exit(ctx, pid, UNDO_GRACE, Duration::from_millis(100))
                .await
                .unwrap_or(false))
    {
        notes.push_str(&format!(
            "; the new daemon (pid {pid}) could not be stopped"
        ));
    }
    match previous {
        Some(prev) => {
            if let Err(e) = restore_current(ctx, prev).await {
                notes.push_str(&format!("; `current` not pointed back: {e}"));
            }
        }
        None => notes.push_str("; `current` had no release before"),
    }
    ctx.state.previous_release = None;
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_wire::health::GpuProcess;

    fn gpu(index: u32, used_gib: u64, old_holds: Option<Option<u64>>) -> Gpu {
        Gpu {
            index,
            memory_used_bytes: Some(used_gib << 30),
            memory_total_bytes: Some(141 << 30),
            processes: old_holds.map(|held| {
                vec![GpuProcess {
                    pid: 42,
                    used_memory_bytes: held.map(|g| g << 30),
                }]
            }),
            ..Gpu::default()
        }
    }

    #[test]
    fn a_second_daemon_needs_on_every_gpu_what_the_old_one_holds_there() {
        let m = ByteSize::gib(2);
        // 40 GiB of bases resident, 101 free: room for a second copy.
        assert_eq!(gpu_shortfall(&[gpu(0, 40, Some(Some(40)))], 42, m), None);
        // 80 GiB held, 61 free: no room, said with the numbers.
        let why = gpu_shortfall(
            &[gpu(0, 10, Some(Some(5))), gpu(1, 80, Some(Some(80)))],
            42,
            m,
        )
        .expect("no room on GPU 1");
        assert!(
            why.starts_with(
                "GPU 1: 61GiB free < 82GiB (pid 42 holds 80GiB there, plus margin 2GiB)"
            ),
            "{why}"
        );
        // Listed without a figure: everything in use counts as its.
        assert!(gpu_shortfall(&[gpu(0, 70, Some(None))], 42, m).is_some());
        // Not on this GPU at all: only the margin is needed.
        assert_eq!(gpu_shortfall(&[gpu(0, 100, None)], 42, m), None);
        // Nothing known is no room.
        assert!(gpu_shortfall(&[], 42, m).is_some());
        let blind = Gpu {
            memory_total_bytes: None,
            ..gpu(0, 1, None)
        };
        assert_eq!(
            gpu_shortfall(&[blind], 42, m).as_deref(),
            Some("GPU 0: memory not reported")
        );
    }
}
