//! The dispatcher: owns batches, concurrency within a batch (through
//! [`crate::fanout`]), the failure budget, Ctrl-C, the state file, and the
//! fan-out of events to reporters.
//! Host work itself is behind [`HostRunner`] (the real one is
//! [`super::host::run_host`]).

use super::event::{millis, Emitter, Event, EventKind, HostStatus, Reporter};
use super::host::{Build, HostEnd, HostJob, Phase};
use super::runner::HostRunner;
use super::state::{self, Origin, RunState, StateError};
use super::stop::Stop;
use crate::fanout::FanOut;
use crate::inventory::Host;
use crate::playbook::Playbook;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, watch};

/// One run, ready to dispatch.
#[derive(Debug, Clone)]
pub struct Dispatch {
    pub run_id: String,
    pub playbook: Arc<Playbook>,
    pub inventory: String,
    /// Selected hosts, inventory order.
    pub hosts: Vec<Host>,
    pub release: Arc<Build>,
    pub check: bool,
    /// Where `state/<run-id>.json` is kept; `None` keeps no state (check mode).
    pub state_dir: Option<PathBuf>,
    /// State of the run being resumed: its completed hosts are skipped.
    pub resume: Option<RunState>,
    /// What a new run was started with, kept in its state file for a resume.
    pub origin: Origin,
}

/// How a run ended; the binary maps it to the process exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// Every selected host finished every step (or a check only).
    Ok,
    /// At least one host failed; every other host was still run.
    HostsFailed,
    /// The failure budget was exceeded and some hosts were not started.
    Halted,
    /// Stopped by Ctrl-C before every host was done.
    Interrupted,
}

/// Every host's final status, in inventory order, and how the run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    pub run_id: String,
    pub hosts: Vec<(String, HostStatus)>,
    pub end: RunEnd,
}

/// Every reporter of the run, fed the same events in the same order.
struct Reporters<'a> {
    run_id: String,
    reporters: &'a mut [Box<dyn Reporter>],
}

impl Reporters<'_> {
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
    stop: watch::Receiver<Stop>,
) -> Result<RunSummary, StateError> {
    Dispatcher::new(d, runner, reporters, stop).run().await
}

/// One run in progress: the state the batches share.
struct Dispatcher<'a> {
    d: Dispatch,
    runner: Arc<dyn HostRunner>,
    out: Reporters<'a>,
    stop: watch::Receiver<Stop>,
    /// `false` once the stop channel's sender is gone.
    stop_open: bool,
    /// Highest Ctrl-C level announced so far.
    announced: Stop,
    interrupted: bool,
    halted: bool,
    failures: usize,
    state: RunState,
    /// Each host's end, in inventory order; `None` until it has one.
    status: Vec<Option<HostStatus>>,
    events: (mpsc::UnboundedSender<Event>, mpsc::UnboundedReceiver<Event>),
    begin: Instant,
}

impl<'a> Dispatcher<'a> {
    fn new(
        d: Dispatch,
        runner: Arc<dyn HostRunner>,
        reporters: &'a mut [Box<dyn Reporter>],
        stop: watch::Receiver<Stop>,
    ) -> Self {
        let state = d.resume.clone().unwrap_or_else(|| {
            let mut st = RunState::new(&d.run_id, &d.playbook.name, &d.inventory);
            st.origin = d.origin.clone();
            st
        });
        let interrupted = *stop.borrow() != Stop::Run;
        Dispatcher {
            status: vec![None; d.hosts.len()],
            out: Reporters {
                run_id: d.run_id.clone(),
                reporters,
            },
            d,
            runner,
            stop,
            stop_open: true,
            announced: Stop::Run,
            interrupted,
            halted: false,
            failures: 0,
            state,
            events: mpsc::unbounded_channel(),
            begin: Instant::now(),
        }
    }

    async fn run(mut self) -> Result<RunSummary, StateError> {
        // Saved before any host is touched: a run killed outright (SIGKILL,
        // a lost machine) before its first host finished must still be
        // resumable.
        if let Some(dir) = &self.d.state_dir {
            state::save(dir, &mut self.state)?;
        }
        let batches = self.d.playbook.strategy.batches(&self.d.hosts);
        self.out.emit(
            None,
            EventKind::RunStarted {
                playbook: self.d.playbook.name.clone(),
                source: self.d.playbook.source.clone(),
                inventory: self.d.inventory.clone(),
                hosts: self.d.hosts.iter().map(|h| h.name.clone()).collect(),
                batches: batches.len(),
                check: self.d.check,
                resumed: self.d.resume.is_some(),
                release: self.d.release.sha256.clone(),
            },
        );
        let staged = self.staging();
        if let Some(limit) = staged {
            self.stage(limit).await?;
            if self.failures > self.d.playbook.strategy.max_fail {
                self.halted = true;
            }
        }
        let phase = if staged.is_some() {
            Phase::Swap
        } else {
            Phase::All
        };
        for (bi, batch) in batches.iter().enumerate() {
            let now = *self.stop.borrow_and_update();
            self.announce(now);
            self.interrupted |= now != Stop::Run;
            if self.halted || self.interrupted {
                break;
            }
            self.run_batch(bi, batches.len(), batch, phase).await?;
            if self.failures > self.d.playbook.strategy.max_fail {
                self.halted = true;
            }
        }
        self.mark_not_started();
        if let Some(dir) = &self.d.state_dir {
            state::save(dir, &mut self.state)?;
        }
        Ok(self.finish())
    }

    /// Emits an `Interrupt` event the first time each Ctrl-C level is seen.
    fn announce(&mut self, now: Stop) {
        if now > self.announced {
            self.announced = now;
            self.out.emit(
                None,
                EventKind::Interrupt {
                    abort: now == Stop::Abort,
                },
            );
        }
    }

    fn drain_events(&mut self) {
        while let Ok(e) = self.events.1.try_recv() {
            self.out.send(&e);
        }
    }

    /// The staging concurrency when this run stages its hosts up front: the
    /// playbook asks for it, has steps to stage before its first drain and
    /// steps after them, and the run changes hosts (not `--check`).
    fn staging(&self) -> Option<usize> {
        let pb = &self.d.playbook;
        let n = pb.stage_len();
        pb.strategy
            .stage
            .filter(|_| !self.d.check && n > 0 && n < pb.steps.len())
    }

    /// The staging pass: the steps before the first drain on every host
    /// not done earlier, `limit` at a time. A host that fails here is
    /// finished (its old daemon untouched) and left out of the batches.
    async fn stage(&mut self, limit: usize) -> Result<(), StateError> {
        let hosts: Vec<usize> = (0..self.d.hosts.len())
            .filter(|&i| !self.state.completed(&self.d.hosts[i].name))
            .collect();
        self.out.emit(
            None,
            EventKind::StagingStarted {
                hosts: hosts
                    .iter()
                    .map(|&i| self.d.hosts[i].name.clone())
                    .collect(),
                concurrency: limit,
            },
        );
        self.run_hosts(&hosts, limit, Phase::Stage).await
    }

    /// Runs `phase` on `hosts`, `limit` at a time, and waits for all of
    /// them, relaying their events and Ctrl-C as they come.
    async fn run_hosts(
        &mut self,
        hosts: &[usize],
        limit: usize,
        phase: Phase,
    ) -> Result<(), StateError> {
        let mut set: FanOut<HostEnd> = FanOut::new(limit);
        for &i in hosts {
            let host = &self.d.hosts[i];
            let job = HostJob {
                host: host.clone(),
                playbook: self.d.playbook.clone(),
                release: self.d.release.clone(),
                run_id: self.d.run_id.clone(),
                check: self.d.check,
                phase,
                resume_of: self.d.resume.as_ref().map(|st| st.run_id.clone()),
            };
            let emit = Emitter::new(&self.d.run_id, &host.name, self.events.0.clone());
            set.spawn(i, &host.name, self.runner.run(job, emit, self.stop.clone()));
        }
        self.join(set, phase == Phase::Stage).await
    }

    /// Runs every host of one batch not ended earlier.
    async fn run_batch(
        &mut self,
        bi: usize,
        of: usize,
        batch: &[usize],
        phase: Phase,
    ) -> Result<(), StateError> {
        let canary = bi == 0 && self.d.playbook.strategy.canary > 0;
        self.out.emit(
            None,
            EventKind::BatchStarted {
                batch: bi + 1,
                of,
                canary,
                hosts: batch
                    .iter()
                    .map(|&i| self.d.hosts[i].name.clone())
                    .collect(),
            },
        );
        let mut todo = Vec::with_capacity(batch.len());
        for &i in batch {
            let host = &self.d.hosts[i];
            if self.status[i].is_some() {
                // Ended in the staging pass (failed there): nothing to swap.
                continue;
            }
            if self.state.completed(&host.name) {
                self.status[i] = Some(HostStatus::DoneEarlier);
                self.out.emit(
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
            todo.push(i);
        }
        self.run_hosts(&todo, batch.len(), phase).await
    }

    /// Waits for every task of `set`, relaying events and Ctrl-C; records
    /// each host's end (in the staging pass only the failures: a staged
    /// host's end comes from its batch).
    async fn join(&mut self, mut set: FanOut<HostEnd>, staging: bool) -> Result<(), StateError> {
        while !set.is_empty() {
            tokio::select! {
                Some(e) = self.events.1.recv() => self.out.send(&e),
                Some((i, joined)) = set.join_next() => {
                    self.drain_events();
                    let end = match joined {
                        Ok(end) => end,
                        Err(e) => {
                            // The task died before it could report its end.
                            let end = HostEnd { status: HostStatus::Failed, build: None, error: Some(format!("internal error in the host task: {}", e.reason)) };
                            self.out.emit(Some(&self.d.hosts[i].name), EventKind::HostFinished { status: end.status, build: None, error: end.error.clone(), duration_ms: 0 });
                            end
                        }
                    };
                    if !staging || end.status != HostStatus::Ok {
                        self.record(i, end.status)?;
                    }
                }
                changed = self.stop.changed(), if self.stop_open => {
                    match changed {
                        Ok(()) => {
                            let now = *self.stop.borrow_and_update();
                            self.interrupted = true;
                            self.announce(now);
                        }
                        Err(_) => self.stop_open = false,
                    }
                }
            }
        }
        self.drain_events();
        Ok(())
    }

    /// A host's end: counted against the budget and saved for a resume.
    fn record(&mut self, i: usize, status: HostStatus) -> Result<(), StateError> {
        self.status[i] = Some(status);
        if status.is_failure() {
            self.failures += 1;
        }
        if let Some(dir) = &self.d.state_dir {
            self.state
                .hosts
                .insert(self.d.hosts[i].name.clone(), status);
            state::save(dir, &mut self.state)?;
        }
        Ok(())
    }

    /// Hosts never started (halt, Ctrl-C) end as `NotStarted`.
    fn mark_not_started(&mut self) {
        let not_started: Vec<usize> = (0..self.d.hosts.len())
            .filter(|&i| self.status[i].is_none())
            .collect();
        if self.halted && !not_started.is_empty() {
            self.out.emit(
                None,
                EventKind::Halted {
                    failed: self.failures,
                    max_fail: self.d.playbook.strategy.max_fail,
                    not_started: not_started
                        .iter()
                        .map(|&i| self.d.hosts[i].name.clone())
                        .collect(),
                },
            );
        }
        for &i in &not_started {
            self.status[i] = Some(HostStatus::NotStarted);
            self.out.emit(
                Some(&self.d.hosts[i].name),
                EventKind::HostFinished {
                    status: HostStatus::NotStarted,
                    build: None,
                    error: None,
                    duration_ms: 0,
                },
            );
            if self.d.state_dir.is_some() {
                self.state
                    .hosts
                    .insert(self.d.hosts[i].name.clone(), HostStatus::NotStarted);
            }
        }
    }

    /// The final event, the reporters' `finish`, and how the run ended.
    fn finish(mut self) -> RunSummary {
        let hosts: Vec<(String, HostStatus)> = self
            .d
            .hosts
            .iter()
            .zip(&self.status)
            .map(|(h, s)| (h.name.clone(), s.unwrap_or(HostStatus::NotStarted)))
            .collect();
        let count = |f: &dyn Fn(HostStatus) -> bool| hosts.iter().filter(|(_, s)| f(*s)).count();
        let ok = count(&|s| matches!(s, HostStatus::Ok | HostStatus::DoneEarlier));
        let failed = count(&|s| s.is_failure());
        let unfinished = count(&|s| matches!(s, HostStatus::NotStarted | HostStatus::Interrupted));
        self.out.emit(
            None,
            EventKind::RunFinished {
                ok,
                failed,
                not_started: unfinished,
                duration_ms: millis(self.begin.elapsed()),
            },
        );
        for r in self.out.reporters.iter_mut() {
            r.finish();
        }
        let end = if self.interrupted && unfinished > 0 {
            RunEnd::Interrupted
        } else if self.halted && unfinished > 0 {
            RunEnd::Halted
        } else if failed > 0 {
            RunEnd::HostsFailed
        } else if unfinished > 0 {
            RunEnd::Interrupted
        } else {
            RunEnd::Ok
        };
        RunSummary {
            run_id: self.d.run_id,
            hosts,
            end,
        }
    }
}

#[cfg(test)]
mod tests {
    //! The dispatcher's own logic (batches, budget, resume) with a scripted
    //! host runner; the real host task runs end to end in `tests/tests/it/rollout.rs`.
    use super::*;
    use crate::executor::fixtures::{host, strategy, Recorder, Scripted};
    use crate::executor::runner::HostFuture;
    use crate::playbook::{BatchSize, Strategy};
    use std::collections::HashSet;
    use std::sync::Mutex;

    fn run(
        n: usize,
        strategy: Strategy,
        fail: &[&str],
        state_dir: Option<PathBuf>,
        resume: Option<RunState>,
    ) -> (RunSummary, Vec<String>, Vec<Event>) {
        let ran = Arc::new(Mutex::new(Vec::new()));
        let runner = Arc::new(Scripted {
            fail: fail.iter().map(|s| s.to_string()).collect(),
            ran: ran.clone(),
        });
        let (summary, events) = run_with(n, strategy, runner, state_dir, resume);
        let ran = ran.lock().unwrap().clone();
        (summary, ran, events)
    }

    fn run_with(
        n: usize,
        strategy: Strategy,
        runner: Arc<dyn HostRunner>,
        state_dir: Option<PathBuf>,
        resume: Option<RunState>,
    ) -> (RunSummary, Vec<Event>) {
        let playbook = Playbook {
            name: "t".into(),
            description: None,
            source: "test".into(),
            strategy,
            steps: vec![crate::steps::StepSpec::Health(Default::default())],
        };
        let d = Dispatch {
            run_id: "r1".into(),
            playbook: Arc::new(playbook),
            inventory: "inv".into(),
            hosts: (0..n).map(host).collect(),
            release: Arc::new(Build::new("p".into(), None)),
            check: false,
            state_dir,
            resume,
            origin: Default::default(),
        };
        let rec = Recorder::default();
        let mut reporters: Vec<Box<dyn Reporter>> = vec![Box::new(rec.clone())];
        let (_tx, rx) = watch::channel(Stop::Run);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let summary = rt
            .block_on(dispatch(d, runner, &mut reporters, rx))
            .unwrap();
        let events = rec.0.lock().unwrap().clone();
        (summary, events)
    }

    /// Panics in the host task of `panics`; the others end `Ok` later.
    struct Panicking {
        panics: &'static str,
    }

    impl HostRunner for Panicking {
        fn run(&self, job: HostJob, _emit: Emitter, _stop: watch::Receiver<Stop>) -> HostFuture {
            let panics = job.host.name == self.panics;
            Box::pin(async move {
                if panics {
                    panic!("scripted panic");
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                HostEnd {
                    status: HostStatus::Ok,
                    build: None,
                    error: None,
                }
            })
        }
    }

    #[test]
    fn a_panicking_host_task_fails_that_host_and_no_other() {
        let (s, events) = run_with(
            3,
            strategy(0, BatchSize::Count(3), 5),
            Arc::new(Panicking { panics: "h1" }),
            None,
            None,
        );
        assert_eq!(s.end, RunEnd::HostsFailed);
        assert_eq!(status_of(&s, "h0"), HostStatus::Ok);
        assert_eq!(status_of(&s, "h1"), HostStatus::Failed);
        assert_eq!(status_of(&s, "h2"), HostStatus::Ok);
        let error = events
            .iter()
            .find_map(|e| match &e.kind {
                EventKind::HostFinished { error: Some(m), .. } => Some((e.host.clone(), m.clone())),
                _ => None,
            })
            .unwrap();
        assert_eq!(error.0.as_deref(), Some("h1"));
        assert!(error.1.contains("scripted panic"), "{}", error.1);
    }

    fn status_of(s: &RunSummary, h: &str) -> HostStatus {
        s.hosts.iter().find(|(n, _)| n == h).unwrap().1
    }

    #[test]
    fn canary_runs_alone_then_batches_in_order() {
        let (s, ran, events) = run(8, strategy(1, BatchSize::Count(3), 0), &[], None, None);
        assert_eq!(s.end, RunEnd::Ok);
        let batches: Vec<Vec<String>> = events
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::BatchStarted { hosts, .. } => Some(hosts.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            batches,
            vec![
                vec!["h0"],
                vec!["h1", "h2", "h3"],
                vec!["h4", "h5", "h6"],
                vec!["h7"]
            ]
        );
        assert_eq!(ran.len(), 8);
        // Every host of batch k finished before any host of batch k+1 started.
        let pos = |pred: &dyn Fn(&Event) -> bool| events.iter().position(pred).unwrap();
        let h0_done = pos(&|e| {
            e.host.as_deref() == Some("h0") && matches!(e.kind, EventKind::HostFinished { .. })
        });
        let h1_start =
            pos(&|e| e.host.as_deref() == Some("h1") && matches!(e.kind, EventKind::HostStarted));
        assert!(h0_done < h1_start);
    }

    #[test]
    fn failure_in_a_batch_never_stops_its_neighbours_but_halts_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let (s, ran, events) = run(
            8,
            strategy(1, BatchSize::Count(3), 0),
            &["h2"],
            Some(dir.path().to_owned()),
            None,
        );
        assert_eq!(s.end, RunEnd::Halted);
        assert_eq!(ran, vec!["h0", "h1", "h2", "h3"]);
        assert_eq!(status_of(&s, "h1"), HostStatus::Ok);
        assert_eq!(status_of(&s, "h2"), HostStatus::Failed);
        assert_eq!(status_of(&s, "h3"), HostStatus::Ok);
        for h in ["h4", "h5", "h6", "h7"] {
            assert_eq!(status_of(&s, h), HostStatus::NotStarted, "{h}");
        }
        assert!(events.iter().any(
            |e| matches!(&e.kind, EventKind::Halted { not_started, .. } if not_started.len() == 4)
        ));
        let st = state::load(dir.path(), "r1").unwrap();
        assert_eq!(st.hosts["h4"], HostStatus::NotStarted);
        assert_eq!(st.hosts["h3"], HostStatus::Ok);
    }

    #[test]
    fn budget_tolerates_max_fail_failures() {
        let (s, ran, _) = run(6, strategy(0, BatchSize::Count(2), 1), &["h0"], None, None);
        assert_eq!(ran.len(), 6, "one failure is within max_fail 1");
        assert_eq!(s.end, RunEnd::HostsFailed);
        let (s, ran, _) = run(
            6,
            strategy(0, BatchSize::Count(2), 1),
            &["h0", "h3"],
            None,
            None,
        );
        assert_eq!(ran.len(), 4, "the second failure halts after its batch");
        assert_eq!(s.end, RunEnd::Halted);
    }

    #[test]
    fn resume_skips_completed_hosts_and_retries_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let (s, _, _) = run(
            5,
            strategy(0, BatchSize::Count(2), 0),
            &["h1"],
            Some(dir.path().to_owned()),
            None,
        );
        assert_eq!(s.end, RunEnd::Halted);
        let st = state::load(dir.path(), "r1").unwrap();
        let (s, ran, _) = run(
            5,
            strategy(0, BatchSize::Count(2), 0),
            &[],
            Some(dir.path().to_owned()),
            Some(st),
        );
        assert_eq!(s.end, RunEnd::Ok);
        assert_eq!(ran, vec!["h1", "h2", "h3", "h4"], "h0 completed before");
        assert_eq!(status_of(&s, "h0"), HostStatus::DoneEarlier);
        assert!(state::load(dir.path(), "r1").unwrap().completed("h4"));
    }

    /// Presses "Ctrl-C" (sends `Finish`) while running its host.
    struct CtrlC {
        tx: watch::Sender<Stop>,
        ran: Arc<Mutex<Vec<String>>>,
    }

    impl HostRunner for CtrlC {
        fn run(&self, job: HostJob, emit: Emitter, _stop: watch::Receiver<Stop>) -> HostFuture {
            self.ran.lock().unwrap().push(job.host.name.clone());
            let _ = self.tx.send(Stop::Finish);
            Box::pin(async move {
                emit.emit(EventKind::HostStarted);
                HostEnd {
                    status: HostStatus::Ok,
                    build: None,
                    error: None,
                }
            })
        }
    }

    #[test]
    fn ctrl_c_lets_the_running_batch_finish_then_starts_no_more() {
        let playbook = Playbook {
            name: "t".into(),
            description: None,
            source: "test".into(),
            strategy: strategy(1, BatchSize::Count(2), 0),
            steps: vec![],
        };
        let dir = tempfile::tempdir().unwrap();
        let d = Dispatch {
            run_id: "r".into(),
            playbook: Arc::new(playbook),
            inventory: "i".into(),
            hosts: (0..5).map(host).collect(),
            release: Arc::new(Build::new("p".into(), None)),
            check: false,
            state_dir: Some(dir.path().to_owned()),
            resume: None,
            origin: Default::default(),
        };
        let (tx, rx) = watch::channel(Stop::Run);
        let ran = Arc::new(Mutex::new(Vec::new()));
        let runner = Arc::new(CtrlC {
            tx,
            ran: ran.clone(),
        });
        let rec = Recorder::default();
        let mut reporters: Vec<Box<dyn Reporter>> = vec![Box::new(rec.clone())];
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let s = rt
            .block_on(dispatch(d, runner, &mut reporters, rx))
            .unwrap();
        assert_eq!(*ran.lock().unwrap(), vec!["h0"]);
        assert_eq!(s.end, RunEnd::Interrupted);
        assert_eq!(status_of(&s, "h0"), HostStatus::Ok);
        assert_eq!(status_of(&s, "h1"), HostStatus::NotStarted);
        let events = rec.0.lock().unwrap();
        assert!(events
            .iter()
            .any(|e| e.kind == EventKind::Interrupt { abort: false }));
        // The state file lets --resume pick up h1..h4.
        let st = state::load(dir.path(), "r").unwrap();
        assert!(st.completed("h0") && !st.completed("h1"));
    }

    #[test]
    fn a_stop_before_the_run_starts_nothing() {
        let playbook = Playbook {
            name: "t".into(),
            description: None,
            source: "test".into(),
            strategy: Strategy::default(),
            steps: vec![],
        };
        let d = Dispatch {
            run_id: "r".into(),
            playbook: Arc::new(playbook),
            inventory: "i".into(),
            hosts: (0..3).map(host).collect(),
            release: Arc::new(Build::new("p".into(), None)),
            check: false,
            state_dir: None,
            resume: None,
            origin: Default::default(),
        };
        let ran = Arc::new(Mutex::new(Vec::new()));
        let runner = Arc::new(Scripted {
            fail: HashSet::new(),
            ran: ran.clone(),
        });
        let (tx, rx) = watch::channel(Stop::Run);
        tx.send(Stop::Finish).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let s = rt.block_on(dispatch(d, runner, &mut [], rx)).unwrap();
        assert_eq!(s.end, RunEnd::Interrupted);
        assert!(ran.lock().unwrap().is_empty());
    }

    /// Records (host, phase) as tasks start; fails the staging of `fail`.
    struct Phases {
        fail: &'static str,
        seen: Arc<Mutex<Vec<(String, Phase)>>>,
    }

    impl HostRunner for Phases {
        fn run(&self, job: HostJob, _emit: Emitter, _stop: watch::Receiver<Stop>) -> HostFuture {
            self.seen
                .lock()
                .unwrap()
                .push((job.host.name.clone(), job.phase));
            let status = if job.host.name == self.fail && job.phase == Phase::Stage {
                HostStatus::Failed
            } else {
                HostStatus::Ok
            };
            Box::pin(async move {
                HostEnd {
                    status,
                    build: None,
                    error: None,
                }
            })
        }
    }

    #[test]
    fn staging_prepares_every_host_before_the_first_batch_and_drops_its_failures() {
        use crate::steps::StepSpec;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let runner = Arc::new(Phases {
            fail: "h2",
            seen: seen.clone(),
        });
        let playbook = Playbook {
            name: "t".into(),
            description: None,
            source: "test".into(),
            strategy: Strategy {
                stage: Some(2),
                ..strategy(0, BatchSize::Count(2), 1)
            },
            steps: vec![
                StepSpec::Upload(Default::default()),
                StepSpec::Prepare(Default::default()),
                StepSpec::Drain(Default::default()),
                StepSpec::Health(Default::default()),
            ],
        };
        assert_eq!(playbook.stage_len(), 2);
        let d = Dispatch {
            run_id: "r1".into(),
            playbook: Arc::new(playbook),
            inventory: "inv".into(),
            hosts: (0..5).map(host).collect(),
            release: Arc::new(Build::new("p".into(), Some("ab".repeat(32)))),
            check: false,
            state_dir: None,
            resume: None,
            origin: Default::default(),
        };
        let rec = Recorder::default();
        let mut reporters: Vec<Box<dyn Reporter>> = vec![Box::new(rec.clone())];
        let (_tx, rx) = watch::channel(Stop::Run);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let s = rt
            .block_on(dispatch(d, runner, &mut reporters, rx))
            .unwrap();
        let seen = seen.lock().unwrap().clone();
        // Every host staged before any swap starts.
        let first_swap = seen.iter().position(|(_, p)| *p == Phase::Swap).unwrap();
        assert_eq!(first_swap, 5, "{seen:?}");
        assert!(seen[..5].iter().all(|(_, p)| *p == Phase::Stage));
        // The host whose staging failed is never drained.
        let swapped: Vec<&str> = seen[5..].iter().map(|(h, _)| h.as_str()).collect();
        assert_eq!(swapped, ["h0", "h1", "h3", "h4"]);
        assert_eq!(status_of(&s, "h2"), HostStatus::Failed);
        assert_eq!(status_of(&s, "h4"), HostStatus::Ok);
        assert_eq!(s.end, RunEnd::HostsFailed);
        let events = rec.0.lock().unwrap().clone();
        assert!(events.iter().any(|e| matches!(
            &e.kind,
            EventKind::StagingStarted { concurrency: 2, hosts } if hosts.len() == 5
        )));
    }
}
