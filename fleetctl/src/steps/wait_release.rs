//! `wait_release`: wait until the drained daemon's pinned memory is really
//! back before anything new is started. Pinned host memory is returned by the
//! driver seconds after the process exits (32 GiB of `cudaHostAlloc` took
//! 2.8 s, 64 GiB 6.6 s), and a new daemon allocating its pool in that window
//! fails or pushes the host into swap.
//!
//! How each allocator's memory shows: `mlock` as `Mlocked` (and `VmLck`),
//! `cuMemHostAlloc` as `Shmem`, registered CUDA slabs only as the process's
//! anonymous RSS. So the checks are: the pid gone from /proc, `Shmem` and
//! `Mlocked` back to their baselines, and `MemAvailable` back up by what
//! the daemon had resident (anonymous and shared), which covers all three.

use super::ctx::StepCtx;
use super::outcome::{kept, Cause, Failed, StepOutcome};
use super::params::{self as bounds, Check};
use super::params::{duration, show, ByteSize};
use super::proc::MemInfo;
use super::progress::{Drained, Handover};
use super::remote;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WaitReleaseParams {
    #[serde(with = "duration")]
    pub timeout: Duration,
    #[serde(with = "duration")]
    pub poll: Duration,
    /// Slack allowed above the baselines (other processes move memory too).
    pub tolerance: ByteSize,
    /// Required `MemAvailable`; by default what was available before the
    /// drain plus what the daemon held, less the tolerance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_available: Option<ByteSize>,
}

impl Default for WaitReleaseParams {
    fn default() -> Self {
        WaitReleaseParams {
            timeout: Duration::from_secs(60),
            poll: Duration::from_millis(500),
            tolerance: ByteSize::mib(256),
            min_available: None,
        }
    }
}

impl Check for WaitReleaseParams {
    fn check(&self) -> Result<(), String> {
        bounds::duration_in("timeout", self.timeout, &bounds::TIMEOUTS)?;
        bounds::duration_in("poll", self.poll, &bounds::POLLS)?;
        bounds::in_range("tolerance", self.tolerance, &bounds::MEMORY)?;
        match self.min_available {
            Some(m) => bounds::in_range("min_available", m, &bounds::MEMORY),
            None => Ok(()),
        }
    }
}

pub fn describe(p: &WaitReleaseParams, _ctx: &StepCtx<'_>) -> String {
    format!(
        "wait up to {} for the old daemon to be reaped and its pinned memory (MemAvailable, Shmem, Mlocked, GPU process list) to be returned",
        humantime::format_duration(p.timeout)
    )
}

const KEPT: &str = "`current` and the releases; the new build was NOT started";

pub(super) async fn run(
    p: &WaitReleaseParams,
    ctx: &mut StepCtx<'_>,
) -> Result<StepOutcome, Failed> {
    let Some(drained) = ctx.state.drained.clone() else {
        return Ok(StepOutcome::skipped("no daemon was drained in this run"));
    };
    let start = Instant::now();
    if let Some(Handover::Done { successor, from }) = ctx.state.handover {
        return reaped(p, ctx, from, successor, start).await;
    }
    loop {
        let (waiting, mem) = kept(still_held(p, ctx, &drained).await, KEPT)?;
        if waiting.is_empty() {
            return Ok(StepOutcome::done(format!(
                "pid {} gone and memory back after {}: MemAvailable {}, Shmem {}, Mlocked {}",
                drained.pid,
                show(start.elapsed()),
                ByteSize(mem.available),
                ByteSize(mem.shmem),
                ByteSize(mem.mlocked)
            )));
        }
        if start.elapsed() >= p.timeout {
            return Err((
                Cause::Check(format!(
                    "memory of pid {} not released within {}: {}",
                    drained.pid,
                    show(p.timeout),
                    waiting.join("; ")
                )),
                KEPT.to_owned(),
            ));
        }
        tokio::time::sleep(
            p.poll
                .min(p.timeout.saturating_sub(start.elapsed()))
                .max(Duration::from_millis(10)),
        )
        .await;
    }
}

/// After a handover the new daemon holds its own memory, so the baselines
/// mean nothing: only the old process must be gone (reaped), within the
/// timeout. One that is not is reported, not failed: the new daemon
/// serves, and a rollback would only stop it.
async fn reaped(
    p: &WaitReleaseParams,
    ctx: &StepCtx<'_>,
    from: u32,
    successor: u32,
    start: Instant,
) -> Result<StepOutcome, Failed> {
    const KEPT_SERVING: &str = "the new daemon, serving";
    loop {
        let Some(info) = kept(remote::proc_info(ctx, from).await, KEPT_SERVING)? else {
            return Ok(StepOutcome::done(format!(
                "pid {from} gone {} after it handed over to pid {successor} (its memory is not waited for: the host had room for both)",
                show(start.elapsed())
            )));
        };
        if start.elapsed() >= p.timeout {
            return Ok(StepOutcome::forced(
                "not reaped",
                format!(
                    "pid {from} handed over to pid {successor} but is still in /proc (state {}) after {}",
                    info.state,
                    show(p.timeout)
                ),
            ));
        }
        tokio::time::sleep(p.poll.min(Duration::from_millis(100))).await;
    }
}

/// Everything still in the way, with the numbers seen, and the meminfo read.
async fn still_held(
    p: &WaitReleaseParams,
    ctx: &StepCtx<'_>,
    d: &Drained,
) -> Result<(Vec<String>, MemInfo), Cause> {
    let mut waiting = Vec::new();
    if let Some(info) = remote::proc_info(ctx, d.pid).await? {
        // A zombie still holds its pinned pages until it is reaped.
        waiting.push(format!(
            "pid {} still in /proc (state {})",
            d.pid, info.state
        ));
    }
    let mem = remote::meminfo(ctx).await?;
    waiting.extend(memory_findings(p, d, &mem));
    if ctx.host.gpus > 0 {
        match remote::probe(ctx, Duration::from_secs(30)).await {
            Ok(probe) => {
                for gpu in &probe.gpus.devices {
                    if gpu
                        .processes
                        .as_ref()
                        .is_some_and(|ps| ps.iter().any(|proc| proc.pid == d.pid))
                    {
                        waiting.push(format!("GPU {} still lists pid {}", gpu.index, d.pid));
                    }
                }
            }
            Err(e) => waiting.push(format!("GPU process list unavailable ({e})")),
        }
    }
    Ok((waiting, mem))
}

fn memory_findings(p: &WaitReleaseParams, d: &Drained, mem: &MemInfo) -> Vec<String> {
    let tol = p.tolerance.0;
    let mut out = Vec::new();
    let shmem_max = d.shmem_baseline() + tol;
    if mem.shmem > shmem_max {
        out.push(format!(
            "Shmem {} > baseline {} + {}",
            ByteSize(mem.shmem),
            ByteSize(d.shmem_baseline()),
            p.tolerance
        ));
    }
    let mlocked_max = d.mlocked_baseline() + tol;
    if mem.mlocked > mlocked_max {
        out.push(format!(
            "Mlocked {} > baseline {} + {}",
            ByteSize(mem.mlocked),
            ByteSize(d.mlocked_baseline()),
            p.tolerance
        ));
    }
    let need = p.min_available.map_or_else(
        || {
            (d.before.available + d.returned())
                .min(d.before.total)
                .saturating_sub(tol)
        },
        |b| b.0,
    );
    if mem.available < need {
        out.push(format!(
            "MemAvailable {} < {}",
            ByteSize(mem.available),
            ByteSize(need)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drained() -> Drained {
        Drained {
            pid: 42,
            before: MemInfo {
                total: 256 << 30,
                available: 100 << 30,
                shmem: 34 << 30,
                mlocked: 1 << 30,
            },
            vm_lck: 0,
            rss_shmem: 32 << 30,
            rss_anon: 0,
            killed: false,
        }
    }

    #[test]
    fn registered_memory_is_waited_for_through_mem_available() {
        // A registered CUDA pool: 32 GiB of anonymous RSS, no Shmem, no Mlocked.
        let d = Drained {
            before: MemInfo {
                total: 256 << 30,
                available: 100 << 30,
                shmem: 2 << 30,
                mlocked: 1 << 30,
            },
            rss_shmem: 0,
            rss_anon: 33 << 30,
            ..drained()
        };
        let p = WaitReleaseParams::default();
        let still = MemInfo {
            total: 256 << 30,
            available: 101 << 30,
            shmem: 2 << 30,
            mlocked: 1 << 30,
        };
        let f = memory_findings(&p, &d, &still);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].starts_with("MemAvailable 101GiB < 132.8GiB"), "{f:?}");
        let back = MemInfo {
            available: 133 << 30,
            ..still
        };
        assert!(memory_findings(&p, &d, &back).is_empty());
    }

    #[test]
    fn pinned_memory_still_held_is_reported_with_numbers() {
        let p = WaitReleaseParams::default();
        let now = MemInfo {
            total: 256 << 30,
            available: 101 << 30,
            shmem: 34 << 30,
            mlocked: 1 << 30,
        };
        let f = memory_findings(&p, &drained(), &now);
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f[0].starts_with("Shmem 34GiB > baseline 2GiB"), "{f:?}");
        assert!(f[1].starts_with("MemAvailable 101GiB < 131.8GiB"), "{f:?}");
    }

    #[test]
    fn released_memory_passes() {
        let p = WaitReleaseParams::default();
        let now = MemInfo {
            total: 256 << 30,
            available: 132 << 30,
            shmem: 2 << 30,
            mlocked: 1 << 30,
        };
        assert!(memory_findings(&p, &drained(), &now).is_empty());
    }
}
