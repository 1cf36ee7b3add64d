//! The dispatcher: owns batches, concurrency within a batch, the failure
//! budget, Ctrl-C, the state file, and the fan-out of events to reporters.
//! Host work itself is behind [`HostRunner`] (the real one is
//! [`super::host::run_host`]).

use super::event::{millis, Emitter, Event, EventKind, HostStatus, Reporter};
use super::host::{HostEnd, HostJob, ReleaseSpec};
use super::state::{self, RunState, StateError};
use super::{RunEnd, Stop};
use crate::inventory::Host;
use crate::playbook::Playbook;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

pub type HostFuture = Pin<Box<dyn Future<Output = HostEnd> + Send>>;

/// Runs one host's steps; emits through the given [`Emitter`].
pub trait HostRunner: Send + Sync + 'static {
    fn run(&self, job: HostJob, emit: Emitter, stop: watch::Receiver<Stop>) -> HostFuture;
}

/// The real host task: transport, lock, steps, rollback.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealRunner;

impl HostRunner for RealRunner {
    fn run(&self, job: HostJob, emit: Emitter, stop: watch::Receiver<Stop>) -> HostFuture {
        Box::pin(super::host::run_host(job, emit, stop))
    }
}

/// One run, ready to dispatch.
#[derive(Debug, Clone)]
pub struct Dispatch {
    pub run_id: String,
    pub playbook: Arc<Playbook>,
    pub inventory: String,
    /// Selected hosts, inventory order.
    pub hosts: Vec<Host>,
    pub release: Arc<ReleaseSpec>,
    pub check: bool,
    /// Where `state/<run-id>.json` is kept; `None` keeps no state (check mode).
    pub state_dir: Option<PathBuf>,
    /// State of the run being resumed: its completed hosts are skipped.
    pub resume: Option<RunState>,
}

/// Every host's final status, in inventory order, and how the run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    pub run_id: String,
    pub hosts: Vec<(String, HostStatus)>,
    pub end: RunEnd,
}

struct Fanout<'a> {
    run_id: String,
    reporters: &'a mut [Box<dyn Reporter>],
}

impl Fanout<'_> {
    fn send(&mut self, e: &Event) {
        for r in self.reporters.iter_mut() {
            r.on_event(e);
        }
    }

    fn emit(&mut self, host: Option<&str>, kind: EventKind) {
        let e = Event::new(&self.run_id, host, kind);
        self.send(&e);
    }
}

/// Runs every batch; returns when every host has ended or the run halted.
pub async fn dispatch(
    d: Dispatch,
    runner: Arc<dyn HostRunner>,
    reporters: &mut [Box<dyn Reporter>],
    mut stop: watch::Receiver<Stop>,
) -> Result<RunSummary, StateError> {
    let begin = Instant::now();
    let batches = d.playbook.strategy.batches(&d.hosts);
    let mut state = d
        .resume
        .clone()
        .unwrap_or_else(|| RunState::new(&d.run_id, &d.playbook.name, &d.inventory));
    let mut status: Vec<Option<HostStatus>> = vec![None; d.hosts.len()];
    let mut out = Fanout {
        run_id: d.run_id.clone(),
        reporters,
    };
    out.emit(
        None,
        EventKind::RunStarted {
            playbook: d.playbook.name.clone(),
            source: d.playbook.source.clone(),
            inventory: d.inventory.clone(),
            hosts: d.hosts.iter().map(|h| h.name.clone()).collect(),
            batches: batches.len(),
            check: d.check,
            resumed: d.resume.is_some(),
            release: d.release.sha256.clone(),
        },
    );
    let (tx, mut rx) = mpsc::unbounded_channel::<Event>();
    let mut failures = 0usize;
    let mut halted = false;
    let mut stop_open = true;
    let mut interrupted = *stop.borrow() != Stop::Run;

    for (bi, batch) in batches.iter().enumerate() {
        if halted || interrupted {
            break;
        }
        let canary = bi == 0 && d.playbook.strategy.canary > 0;
        out.emit(
            None,
            EventKind::BatchStarted {
                batch: bi + 1,
                of: batches.len(),
                canary,
                hosts: batch.iter().map(|&i| d.hosts[i].name.clone()).collect(),
            },
        );
        let mut set: JoinSet<(usize, HostEnd)> = JoinSet::new();
        let mut running: Vec<usize> = Vec::new();
        for &i in batch {
            let host = &d.hosts[i];
            if state.completed(&host.name) {
                status[i] = Some(HostStatus::DoneEarlier);
                out.emit(
                    Some(&host.name),
                    EventKind::HostFinished {
                        status: HostStatus::DoneEarlier,
                        build: None,
                        error: None,
                        duration_ms: 0,
                    },
                );
                continue;
            }
            let job = HostJob {
                host: host.clone(),
                playbook: d.playbook.clone(),
                release: d.release.clone(),
                run_id: d.run_id.clone(),
                check: d.check,
            };
            let fut = runner.run(job, Emitter::new(&d.run_id, &host.name, tx.clone()), stop.clone());
            set.spawn(async move { (i, fut.await) });
            running.push(i);
        }
        while !set.is_empty() {
            tokio::select! {
                Some(e) = rx.recv() => out.send(&e),
                Some(joined) = set.join_next() => {
                    while let Ok(e) = rx.try_recv() {
                        out.send(&e);
                    }
                    let (i, end) = match joined {
                        Ok(r) => r,
                        Err(e) => {
                            // A host task that panicked: find which one is missing.
                            let Some(&i) = running.iter().find(|&&i| status[i].is_none()) else { continue };
                            let end = HostEnd { status: HostStatus::Failed, build: None, error: Some(format!("internal error in the host task: {e}")) };
                            out.emit(Some(&d.hosts[i].name), EventKind::HostFinished { status: end.status, build: None, error: end.error.clone(), duration_ms: 0 });
                            (i, end)
                        }
                    };
                    status[i] = Some(end.status);
                    if end.status.is_failure() {
                        failures += 1;
                    }
                    if let Some(dir) = &d.state_dir {
                        state.hosts.insert(d.hosts[i].name.clone(), end.status);
                        state::save(dir, &mut state)?;
                    }
                }
                changed = stop.changed(), if stop_open => {
                    match changed {
                        Ok(()) => {
                            let now = *stop.borrow();
                            interrupted = true;
                            out.emit(None, EventKind::Interrupt { abort: now == Stop::Abort });
                        }
                        Err(_) => stop_open = false,
                    }
                }
            }
        }
        while let Ok(e) = rx.try_recv() {
            out.send(&e);
        }
        if failures > d.playbook.strategy.max_fail {
            halted = true;
        }
    }

    let not_started: Vec<usize> = (0..d.hosts.len()).filter(|&i| status[i].is_none()).collect();
    if halted && !not_started.is_empty() {
        out.emit(
            None,
            EventKind::Halted {
                failed: failures,
                max_fail: d.playbook.strategy.max_fail,
                not_started: not_started.iter().map(|&i| d.hosts[i].name.clone()).collect(),
            },
        );
    }
    for &i in &not_started {
        status[i] = Some(HostStatus::NotStarted);
        out.emit(
            Some(&d.hosts[i].name),
            EventKind::HostFinished {
                status: HostStatus::NotStarted,
                build: None,
                error: None,
                duration_ms: 0,
            },
        );
        if d.state_dir.is_some() {
            state
                .hosts
                .insert(d.hosts[i].name.clone(), HostStatus::NotStarted);
        }
    }
    if let Some(dir) = &d.state_dir {
        state::save(dir, &mut state)?;
    }
    let hosts: Vec<(String, HostStatus)> = d
        .hosts
        .iter()
        .zip(&status)
        .map(|(h, s)| (h.name.clone(), s.unwrap_or(HostStatus::NotStarted)))
        .collect();
    let count = |f: &dyn Fn(HostStatus) -> bool| hosts.iter().filter(|(_, s)| f(*s)).count();
    let ok = count(&|s| matches!(s, HostStatus::Ok | HostStatus::DoneEarlier));
    let failed = count(&|s| s.is_failure());
    let unfinished = count(&|s| matches!(s, HostStatus::NotStarted | HostStatus::Interrupted));
    out.emit(
        None,
        EventKind::RunFinished {
            ok,
            failed,
            not_started: unfinished,
            duration_ms: millis(begin.elapsed()),
        },
    );
    for r in out.reporters.iter_mut() {
        r.finish();
    }
    let end = if interrupted && unfinished > 0 {
        RunEnd::Interrupted
    } else if halted && unfinished > 0 {
        RunEnd::Halted
    } else if failed > 0 {
        RunEnd::HostsFailed
    } else if unfinished > 0 {
        RunEnd::Interrupted
    } else {
        RunEnd::Ok
    };
    Ok(RunSummary {
        run_id: d.run_id,
        hosts,
        end,
    })
}
