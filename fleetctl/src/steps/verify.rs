//! `verify`: the started daemon is ready (its probe says so and the new part
//! of its log has the `ready` line), logs no panic or error, is still alive
//! after a settle period, and runs the build that was uploaded.

use super::ctx::StepCtx;
use super::daemon_log::{check_alive, check_log, is_ready_line, last_lines, log_and_alive};
use super::outcome::{kept, Cause, Failed, StepOutcome};
use super::params::{self as bounds, Check};
use super::params::{duration, show};
use super::remote::{self, DaemonState};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Always fatal in the new part of the log.
const BUILTIN_PATTERNS: [&str; 2] = ["panicked", " ERROR "];
/// Identical probe failures in a row that end the wait at once.
const SAME_FAILURES_FATAL: u32 = 3;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VerifyParams {
    /// Deadline for readiness.
    #[serde(with = "duration")]
    pub timeout: Duration,
    /// How long the daemon must stay up and clean after it is ready.
    #[serde(with = "duration")]
    pub settle: Duration,
    #[serde(with = "duration")]
    pub poll: Duration,
    /// Extra substrings that fail the step when they appear in the new log.
    pub fail_patterns: Vec<String>,
}

impl Default for VerifyParams {
    fn default() -> Self {
        VerifyParams {
            timeout: Duration::from_secs(60),
            settle: Duration::from_secs(3),
            poll: Duration::from_millis(500),
            fail_patterns: Vec::new(),
        }
    }
}

impl Check for VerifyParams {
    fn check(&self) -> Result<(), String> {
        bounds::duration_in("timeout", self.timeout, &bounds::TIMEOUTS)?;
        bounds::duration_in("settle", self.settle, &bounds::WAITS)?;
        bounds::duration_in("poll", self.poll, &bounds::POLLS)?;
        // Every pattern is searched for in every poll of the daemon's log.
        bounds::in_range(
            "fail_patterns (count)",
            self.fail_patterns.len(),
            &(0..=100),
        )
    }
}

pub fn describe(p: &VerifyParams, _ctx: &StepCtx<'_>) -> String {
    format!(
        "wait up to {} for `prover health` ready and the `ready` log line, fail on {:?} in the new log, check the process after {} and the build hash",
        humantime::format_duration(p.timeout),
        BUILTIN_PATTERNS.iter().map(|s| s.to_string()).chain(p.fail_patterns.iter().cloned()).collect::<Vec<_>>(),
        humantime::format_duration(p.settle)
    )
}

const KEPT: &str = "the new daemon is left as it is (running or not) for inspection; the previous release is kept for rollback";

pub(super) async fn run(p: &VerifyParams, ctx: &mut StepCtx<'_>) -> Result<StepOutcome, Failed> {
    let layout = ctx.layout();
    // Without a `start` in this run, check whatever runs now, and only log
    // lines written from here on.
    let (pid, release, log_offset, need_line) = match &ctx.state.started {
        Some(s) => (s.pid, Some(s.release.clone()), s.log_offset, true),
        None => {
            let pid = kept(running_daemon(ctx, p).await, KEPT)?;
            (
                pid,
                kept(remote::current_release(ctx).await, KEPT)?,
                kept(remote::file_size(ctx, &layout.log()).await, KEPT)?,
                false,
            )
        }
    };
    let patterns: Vec<String> = BUILTIN_PATTERNS
        .iter()
        .map(|s| s.to_string())
        .chain(p.fail_patterns.iter().cloned())
        .collect();
    let start = Instant::now();
    let mut last_probe;
    // A probe that fails the same way poll after poll is broken, not slow:
    // waiting out the deadline would only hide its message for a minute.
    let mut same_failure = (String::new(), 0u32);
    let (daemon_build, release_build) = loop {
        let (log, alive) = kept(log_and_alive(ctx, pid, log_offset).await, KEPT)?;
        kept(check_log(&log, &patterns), KEPT)?;
        if !alive {
            kept(check_alive(ctx, pid, log_offset).await, KEPT)?;
        }
        let line_seen = !need_line || log.lines().any(is_ready_line);
        match remote::probe(ctx, Duration::from_secs(30)).await {
            Ok(probe) => match probe.daemon {
                Some(d) if d.ready == Some(true) && line_seen => {
                    if ctx.state.started.is_some() {
                        ctx.state.serving_again.get_or_insert_with(Instant::now);
                    }
                    break (d.build, probe.prober_build);
                }
                Some(d) => {
                    last_probe = format!(
                        "probe: ready={:?} ({}), `ready` log line {}",
                        d.ready,
                        d.ready_reason.as_deref().unwrap_or("no reason given"),
                        if line_seen { "seen" } else { "not seen" }
                    )
                }
                None => last_probe = "probe has no daemon section".to_owned(),
            },
            Err(e) => {
                last_probe = format!("probe failed: {e}");
                if same_failure.0 == last_probe {
                    same_failure.1 += 1;
                } else {
                    same_failure = (last_probe.clone(), 1);
                }
                if same_failure.1 >= SAME_FAILURES_FATAL {
                    return Err((
                        Cause::Check(format!(
                            "pid {pid}: the probe failed the same way {SAME_FAILURES_FATAL} times in a row, not waiting out the deadline: {last_probe}"
                        )),
                        KEPT.to_owned(),
                    ));
                }
            }
        }
        if start.elapsed() >= p.timeout {
            // It may have died during the last probe: then that is the news.
            kept(check_alive(ctx, pid, log_offset).await, KEPT)?;
            return Err((
                Cause::Check(format!(
                    "pid {pid} not ready within {}: {last_probe}; last log lines:\n{}",
                    show(p.timeout),
                    last_lines(ctx, log_offset).await
                )),
                KEPT.to_owned(),
            ));
        }
        tokio::time::sleep(p.poll).await;
    };
    let ready_after = start.elapsed();

    tokio::time::sleep(p.settle).await;
    let (log, alive) = kept(log_and_alive(ctx, pid, log_offset).await, KEPT)?;
    kept(check_log(&log, &patterns), KEPT)?;
    if !alive {
        kept(check_alive(ctx, pid, log_offset).await, KEPT)?;
    }

    let Some(release) = release else {
        return Err((
            Cause::Check("`current` does not point at a release".to_owned()),
            KEPT.to_owned(),
        ));
    };
    // The running process must be the uploaded file, and report the same
    // build as that file's own probe (`current/prover health` ran above).
    let exe_want = format!(
        "{}/prover",
        kept(
            remote::canonical(ctx, &layout.release(&release)).await,
            KEPT
        )?
    );
    let exe = kept(remote::proc_info(ctx, pid).await, KEPT)?
        .map(|i| i.exe)
        .unwrap_or_default();
    let current = kept(remote::current_release(ctx).await, KEPT)?;
    let short = &release[..12.min(release.len())];
    if exe != exe_want || current.as_deref() != Some(release.as_str()) {
        return Err((
            Cause::Check(format!(
                "pid {pid} runs {exe:?} with `current` at {current:?}; expected {exe_want} (release {short})"
            )),
            KEPT.to_owned(),
        ));
    }
    match daemon_build.as_deref() {
        Some(b) if !b.is_empty() && b == release_build => {
            kept(remote::record_verified(ctx, &release).await, KEPT)?;
            Ok(StepOutcome::done(format!(
                "pid {pid} ready after {}, clean for {}, build {b}",
                show(ready_after),
                show(p.settle)
            )))
        }
        other => Err((
            Cause::Check(format!(
                "daemon pid {pid} reports build {other:?}, but release {short} is build {release_build:?}"
            )),
            KEPT.to_owned(),
        )),
    }
}

/// Without a `start` in this run: the daemon the pid file names. A daemon
/// launched a moment ago (by another fleetctl, or by hand) may not have
/// written its pid file yet, so a missing or stale one is polled until the
/// readiness deadline rather than failing at once.
async fn running_daemon(ctx: &StepCtx<'_>, p: &VerifyParams) -> Result<u32, Cause> {
    let start = Instant::now();
    loop {
        match remote::daemon_state(ctx).await? {
            DaemonState::Running { pid, .. } => return Ok(pid),
            DaemonState::NotRunning(reason) if start.elapsed() >= p.timeout => {
                return Err(Cause::Check(format!(
                    "no daemon to verify after {}: {reason}",
                    show(p.timeout)
                )))
            }
            DaemonState::NotRunning(_) => tokio::time::sleep(p.poll).await,
        }
    }
}
