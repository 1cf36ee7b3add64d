//! One task per host: connect, take the host's lock, run the steps in order
//! over one transport, roll the host back when a step fails after it was
//! changed, give the lock back, close. Emits an event for everything.

use super::event::{millis, Emitter, EventKind, HostStatus};
use super::stop::Stop;
use crate::inventory::Host;
use crate::playbook::Playbook;
use crate::steps::{self, remote, Release, StartParams, StepCtx, StepSpec};
use crate::transport::Transport;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::watch;

/// Host variable that makes `upload` corrupt the binary in flight (a test
/// hook for the lab: proves the on-host checksum check and the rollback).
pub const FAULT_CORRUPT_UPLOAD: &str = "fault_corrupt_upload";

/// The build a run ships, shared by every host task (each host turns it into
/// the [`Release`](crate::steps::Release) it acts on).
#[derive(Debug, Clone)]
pub struct Build {
    pub binary: PathBuf,
    /// sha256 of `binary`; `None` when the playbook uploads nothing (then
    /// each host's `current` release is the one the steps act on).
    pub sha256: Option<String>,
    /// `binary` compressed once for every host's upload.
    pub compressed: steps::compress::CompressedOnce,
}

impl Build {
    pub fn new(binary: PathBuf, sha256: Option<String>) -> Build {
        Build {
            binary,
            sha256,
            compressed: Default::default(),
        }
    }
}

/// Which of the playbook's steps a host task runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Phase {
    /// Every step.
    #[default]
    All,
    /// Only the steps before anything touches the daemon
    /// ([`Playbook::stage_len`]): the staging pass.
    Stage,
    /// The steps after those, on a host staged earlier in the run.
    Swap,
}

impl Phase {
    fn steps(self, playbook: &Playbook) -> &[StepSpec] {
        let n = playbook.stage_len();
        match self {
            Phase::All => &playbook.steps,
            Phase::Stage => &playbook.steps[..n],
            Phase::Swap => &playbook.steps[n..],
        }
    }
}

/// Everything one host task needs.
#[derive(Debug, Clone)]
pub struct HostJob {
    pub host: Host,
    pub playbook: Arc<Playbook>,
    pub release: Arc<Build>,
    pub run_id: String,
    pub check: bool,
    pub phase: Phase,
    /// The run a check of a resume looks at (`--resume ID --check`), so
    /// that it can say which of that run's dead locks the resume takes over.
    pub resume_of: Option<String>,
}

/// How a host task ended.
#[derive(Debug, Clone, PartialEq)]
pub struct HostEnd {
    pub status: HostStatus,
    pub build: Option<String>,
    pub error: Option<String>,
}

/// Resolves once the run is aborted (second Ctrl-C); never if the
/// dispatcher is gone.
async fn aborted(stop: &mut watch::Receiver<Stop>) {
    if stop.wait_for(|s| *s == Stop::Abort).await.is_err() {
        std::future::pending::<()>().await;
    }
}

fn short(sha: &str) -> String {
    sha.chars().take(12).collect()
}

/// Runs `job` to the end and reports it; never panics on host errors.
pub async fn run_host(job: HostJob, emit: Emitter, mut stop: watch::Receiver<Stop>) -> HostEnd {
    let begin = Instant::now();
    emit.emit(EventKind::HostStarted);
    let end = run_inner(&job, &emit, &mut stop).await;
    if job.phase == Phase::Stage && end.status == HostStatus::Ok {
        emit.emit(EventKind::HostStaged {
            duration_ms: millis(begin.elapsed()),
        });
        return end;
    }
    emit.emit(EventKind::HostFinished {
        status: end.status,
        build: end.build.clone(),
        error: end.error.clone(),
        duration_ms: millis(begin.elapsed()),
    });
    end
}

/// Times one pseudo-step (`connect`, `lock`) or step and emits its events.
struct Timer<'a> {
    emit: &'a Emitter,
    step: String,
    begin: Instant,
}

impl<'a> Timer<'a> {
    fn start(emit: &'a Emitter, step: &str) -> Timer<'a> {
        emit.emit(EventKind::StepStarted {
            step: step.to_string(),
        });
        Timer {
            emit,
            step: step.to_string(),
            begin: Instant::now(),
        }
    }

    fn done(self, skipped: bool, detail: String) {
        self.finished(skipped, detail, None);
    }

    /// Reports how a step ended when it did not fail.
    fn outcome(self, o: steps::StepOutcome) {
        match o {
            steps::StepOutcome::Done { detail } => self.finished(false, detail, None),
            steps::StepOutcome::Forced { detail, flag } => self.finished(false, detail, Some(flag)),
            steps::StepOutcome::Skipped { reason } => self.finished(true, reason, None),
        }
    }

    fn finished(self, skipped: bool, detail: String, flag: Option<String>) {
        self.emit.emit(EventKind::StepFinished {
            step: self.step,
            duration_ms: millis(self.begin.elapsed()),
            skipped,
            detail,
            flag,
        });
    }

    fn failed(self, error: String, kept: String) {
        self.emit.emit(EventKind::StepFailed {
            step: self.step,
            duration_ms: millis(self.begin.elapsed()),
            error,
            kept,
        });
    }
}

async fn run_inner(job: &HostJob, emit: &Emitter, stop: &mut watch::Receiver<Stop>) -> HostEnd {
    let host = &job.host;
    let fail = |status, error: String| HostEnd {
        status,
        build: None,
        error: Some(error),
    };

    let t = Timer::start(emit, "connect");
    let connected = tokio::select! {
        r = Transport::connect(host) => r,
        () = aborted(stop) => {
            t.failed("aborted".into(), "everything".into());
            return fail(HostStatus::Interrupted, "aborted while connecting".into());
        }
    };
    let transport = match connected {
        Ok(tr) => {
            t.done(false, format!("{:?}", host.transport).to_lowercase());
            tr
        }
        Err(e) => {
            let msg = e.to_string();
            t.failed(msg.clone(), "everything (nothing was reached)".into());
            return fail(HostStatus::Unreachable, msg);
        }
    };

    let end = with_transport(job, emit, stop, &transport).await;
    if let Err(e) = transport.close().await {
        tracing::warn!(host = %host.name, "closing the connection: {e}");
    }
    end
}

async fn with_transport(
    job: &HostJob,
    emit: &Emitter,
    stop: &mut watch::Receiver<Stop>,
    transport: &Transport,
) -> HostEnd {
    let host = &job.host;
    let mut release = match (&job.release.sha256, job.playbook.uploads()) {
        // Shipped: the release id covers the binary and this host's config.
        (Some(sha), true) => match Release::shipped(
            &job.release.binary,
            sha.clone(),
            host.config_file.as_deref(),
            job.release.compressed.clone(),
        ) {
            Ok(r) => r,
            Err(cause) => {
                return HostEnd {
                    status: HostStatus::Failed,
                    build: None,
                    error: Some(format!("release: {cause}")),
                }
            }
        },
        // A release already on the hosts (an experiment's restore).
        (Some(id), false) => Release::on_host(id.clone(), host.config_file.clone()),
        (None, _) => Release::on_host(String::new(), host.config_file.clone()),
    };
    if release.id.is_empty() {
        // Nothing shipped: the steps act on the release the host runs.
        let probe_ctx = StepCtx::new(host, transport, &release);
        if let Ok(Some(current)) = remote::current_release(&probe_ctx).await {
            release.id = current;
        }
    }

    let lock = if job.check {
        // Changes nothing, but shows who holds the lock: a dead run's lock
        // is what a resume will meet.
        let t = Timer::start(emit, "lock");
        match steps::peek_lock(host, transport, job.resume_of.as_deref()).await {
            Ok(view) => t.done(true, view),
            Err(e) => t.done(
                true,
                format!("check mode: the lock could not be read: {}", e.cause),
            ),
        }
        None
    } else {
        let t = Timer::start(emit, "lock");
        match steps::acquire_lock(host, transport, &job.run_id).await {
            Ok(g) => {
                match &g.took_over {
                    Some(holder) => {
                        tracing::warn!(
                            host = %host.name,
                            "took over {} from this run's earlier holder, whose process is gone ({holder})",
                            g.path
                        );
                        t.done(
                            false,
                            format!("{} (taken over from dead holder: {holder})", g.path),
                        );
                    }
                    None => t.done(false, g.path.clone()),
                }
                Some(g)
            }
            Err(e) => {
                let msg = e.cause.to_string();
                t.failed(msg.clone(), e.kept.clone());
                // Only a lost connection is UNREACHABLE: a read-only or full
                // filesystem is a host that answered and failed.
                let status = match &e.cause {
                    steps::Cause::Check(_) => HostStatus::Locked,
                    steps::Cause::Transport(t)
                        if t.failure() == crate::transport::Failure::Unreachable =>
                    {
                        HostStatus::Unreachable
                    }
                    _ => HostStatus::Failed,
                };
                return HostEnd {
                    status,
                    build: None,
                    error: Some(format!("lock: {msg}")),
                };
            }
        }
    };

    let mut ctx = StepCtx::new(host, transport, &release);
    ctx.check = job.check;
    // Stopped in `run_steps`, whatever way the host ends.
    ctx.measure_gap = !job.check;
    ctx.faults.corrupt_upload = host
        .vars
        .get(FAULT_CORRUPT_UPLOAD)
        .is_some_and(|v| v.as_bool() == Some(true) || v.as_str() == Some("true"));

    let mut end = run_steps(job, emit, stop, &mut ctx).await;

    // What the host runs now: after a check, the release it ran before (a
    // check changed nothing), never the one the run would ship.
    {
        end.build = remote::current_release(&ctx)
            .await
            .ok()
            .flatten()
            .map(|s| short(&s));
    }
    if let Some(guard) = lock {
        if let Err(e) = steps::release_lock(host, transport, &guard).await {
            tracing::warn!(host = %host.name, "giving the lock back: {e}");
            if end.status == HostStatus::Ok {
                end.error = Some(format!("lock not released: {}", e.cause));
            }
        }
    }
    end
}

/// The host's steps, then its serving gap, read once the host is done
/// (after its rollback, if any): what clients saw of the whole switch.
async fn run_steps(
    job: &HostJob,
    emit: &Emitter,
    stop: &mut watch::Receiver<Stop>,
    ctx: &mut StepCtx<'_>,
) -> HostEnd {
    let mut changed = false;
    let end = steps_in_order(job, emit, stop, ctx, &mut changed).await;
    let Some(gap) = serving_gap(ctx).await else {
        return end;
    };
    let budget = job.playbook.strategy.max_serving_gap;
    emit.emit(EventKind::ServingGap {
        gap_ms: millis(gap),
        budget_ms: budget.map(millis),
    });
    match budget.filter(|b| gap > *b) {
        Some(budget) if end.status == HostStatus::Ok => {
            let t = Timer::start(emit, "serving_gap");
            let msg = format!(
                "the host was out of service {}, more than max_serving_gap {}",
                steps::params::show(gap),
                steps::params::show(budget)
            );
            t.failed(
                msg.clone(),
                "the new daemon, until the rollback replaces it".into(),
            );
            let end = failed(job, emit, ctx, changed, format!("serving_gap: {msg}")).await;
            // The rollback's drain watched its own switch: stopped, not
            // reported again (the host failed on the gap above).
            let _ = serving_gap(ctx).await;
            end
        }
        _ => end,
    }
}

/// The serving gap of a host that was drained: what the probe of its
/// daemon's address saw, stopped here; by the steps' clock where the probe
/// did not run or left no record.
async fn serving_gap(ctx: &mut StepCtx<'_>) -> Option<std::time::Duration> {
    let Some(probe) = ctx.state.gap_probe.take() else {
        return ctx.state.serving_gap();
    };
    match steps::gap_probe::finish(ctx, &probe).await {
        Ok(gap) => {
            tracing::debug!(
                host = %ctx.host.name,
                "serving gap {} in {} outage(s), watched for {}",
                steps::params::show(gap.down),
                gap.outages,
                steps::params::show(gap.watched)
            );
            Some(gap.down)
        }
        Err(e) => {
            tracing::warn!(
                host = %ctx.host.name,
                "the serving gap is measured by the steps' clock: {e}"
            );
            ctx.state.serving_gap()
        }
    }
}

async fn steps_in_order(
    job: &HostJob,
    emit: &Emitter,
    stop: &mut watch::Receiver<Stop>,
    ctx: &mut StepCtx<'_>,
    changed: &mut bool,
) -> HostEnd {
    for spec in job.phase.steps(&job.playbook) {
        if *stop.borrow() != Stop::Run {
            return HostEnd {
                status: HostStatus::Interrupted,
                build: None,
                error: Some(format!(
                    "stopped by Ctrl-C before `{}`{}",
                    spec.name(),
                    if ctx.state.drained.is_some() && ctx.state.started.is_none() {
                        " (the daemon is drained and not restarted: --resume continues)"
                    } else {
                        ""
                    }
                )),
            };
        }
        *changed |= Playbook::changes_daemon(spec);
        let t = Timer::start(emit, spec.name());
        let result = tokio::select! {
            r = steps::run(spec, ctx) => r,
            () = aborted(stop) => {
                t.failed("aborted by a second Ctrl-C".into(), "unknown: the step was cut short".into());
                return HostEnd {
                    status: HostStatus::Interrupted,
                    build: None,
                    error: Some(format!("aborted during `{}`", spec.name())),
                };
            }
        };
        if let Some(sent) = ctx.state.uploaded.take() {
            emit.emit(EventKind::Uploaded {
                file_bytes: sent.file_bytes,
                sent_bytes: sent.sent_bytes,
                encoding: sent.encoding.to_owned(),
                plain_because: sent.plain_because,
            });
        }
        match result {
            Ok(outcome) => t.outcome(outcome),
            Err(e) => {
                let error = format!("{}: {}", e.step, e.cause);
                t.failed(e.cause.to_string(), e.kept.clone());
                return failed(job, emit, ctx, *changed, error).await;
            }
        }
    }
    HostEnd {
        status: HostStatus::Ok,
        build: (!ctx.release.id.is_empty()).then(|| short(&ctx.release.id)),
        error: None,
    }
}

/// A host whose step failed (or whose serving gap was over budget): rolled
/// back when it had been changed and the playbook says so.
async fn failed(
    job: &HostJob,
    emit: &Emitter,
    ctx: &mut StepCtx<'_>,
    changed: bool,
    mut error: String,
) -> HostEnd {
    let mut status = HostStatus::Failed;
    if changed && job.playbook.strategy.rollback_on_failure && !ctx.check {
        let (note, recovered) = recover(emit, ctx).await;
        error.push_str(&note);
        if !recovered {
            status = HostStatus::RollbackFailed;
            tracing::error!(
                host = %ctx.host.name,
                "ROLLBACK FAILED: the host runs no verified build ({error})"
            );
        }
    }
    HostEnd {
        status,
        build: None,
        error: Some(error),
    }
}

/// Puts a host that failed after it was changed back on the build it ran
/// before: `rollback` when `start` switched releases, a fresh start of the
/// unchanged current release when it was drained but not switched, nothing
/// on a first install. Returns a suffix for the host's error, and whether
/// the host is back on a build that verified (or was left alone on purpose).
///
/// A rolled-back daemon is verified as a new start is (pid, readiness, a
/// clean log, the build): "started" is not "working", and a host reported
/// as rolled back must be one that serves.
async fn recover(emit: &Emitter, ctx: &mut StepCtx<'_>) -> (String, bool) {
    if ctx.state.started.is_some() && ctx.state.previous_release.is_none() {
        // `start` switched nothing: a first install, or the same release
        // again. There is no other build to go back to.
        return (
            "; no earlier release to roll back to: the new daemon is left as it is for inspection"
                .to_string(),
            true,
        );
    }
    if ctx.state.previous_release.is_some() {
        let spec = StepSpec::Rollback(Default::default());
        let t = Timer::start(emit, "rollback");
        return match steps::run(&spec, ctx).await {
            Ok(o) => {
                t.outcome(o);
                verify_restored(emit, ctx).await
            }
            Err(e) => {
                let msg = e.cause.to_string();
                t.failed(msg.clone(), e.kept);
                (format!("; ROLLBACK FAILED: {msg}"), false)
            }
        };
    }
    if ctx.state.drained.is_none() {
        return (String::new(), true);
    }
    // Drained but nothing switched: start what `current` points at again.
    let t = Timer::start(emit, "rollback");
    let current = match remote::current_release(ctx).await {
        Ok(Some(c)) => c,
        Ok(None) => {
            t.failed(
                "no release in `current` to restart".into(),
                "the host as it is (daemon stopped)".into(),
            );
            return (
                "; the daemon stays stopped: no previous release to restart".into(),
                false,
            );
        }
        Err(e) => {
            let msg = e.to_string();
            t.failed(msg.clone(), "the host as it is (daemon stopped)".into());
            return (format!("; ROLLBACK FAILED: {msg}"), false);
        }
    };
    let release = Release {
        id: current.clone(),
        ..ctx.release.clone()
    };
    let mut restart = StepCtx::new(ctx.host, ctx.transport, &release);
    restart.state = ctx.state.clone();
    match steps::run(&StepSpec::Start(StartParams::default()), &mut restart).await {
        Ok(o) => {
            t.done(
                false,
                format!("restarted {}: {}", short(&current), o.text()),
            );
            let (note, ok) = verify_restored(emit, &mut restart).await;
            (
                format!("; restarted the previous release {}{note}", short(&current)),
                ok,
            )
        }
        Err(e) => {
            let msg = e.cause.to_string();
            t.failed(msg.clone(), e.kept);
            (format!("; ROLLBACK FAILED: {msg}"), false)
        }
    }
}

/// Verifies the daemon a rollback started, with the defaults of `verify`.
async fn verify_restored(emit: &Emitter, ctx: &mut StepCtx<'_>) -> (String, bool) {
    let t = Timer::start(emit, "verify rollback");
    match steps::run(&StepSpec::Verify(Default::default()), ctx).await {
        Ok(o) => {
            t.outcome(o);
            (
                "; rolled back to the previous release, which verified".to_string(),
                true,
            )
        }
        Err(e) => {
            let msg = e.cause.to_string();
            t.failed(msg.clone(), e.kept);
            (
                format!("; ROLLBACK FAILED: the restored daemon did not verify: {msg}"),
                false,
            )
        }
    }
}
