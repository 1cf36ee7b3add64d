//! The scripted host runner and fixtures that the dispatcher's tests and
//! `execute`'s share; the real host task runs end to end in
//! `tests/tests/it/rollout.rs`.

use super::event::{Emitter, Event, EventKind, HostStatus, Reporter};
use super::host::{HostEnd, HostJob};
use super::runner::{HostFuture, HostRunner};
use super::stop::Stop;
use crate::inventory::Host;
use crate::playbook::{BatchSize, Strategy};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// Fails the hosts named in `fail`; records every host it ran.
pub struct Scripted {
    pub fail: HashSet<String>,
    pub ran: Arc<Mutex<Vec<String>>>,
}

impl HostRunner for Scripted {
    fn run(&self, job: HostJob, emit: Emitter, _stop: watch::Receiver<Stop>) -> HostFuture {
        let fails = self.fail.contains(&job.host.name);
        self.ran.lock().unwrap().push(job.host.name.clone());
        Box::pin(async move {
            emit.emit(EventKind::HostStarted);
            emit.emit(EventKind::StepStarted {
                step: "health".into(),
            });
            let status = if fails {
                HostStatus::Failed
            } else {
                HostStatus::Ok
            };
            if fails {
                emit.emit(EventKind::StepFailed {
                    step: "health".into(),
                    duration_ms: 1,
                    error: "scripted".into(),
                    kept: "all".into(),
                });
            } else {
                emit.emit(EventKind::StepFinished {
                    step: "health".into(),
                    duration_ms: 1,
                    skipped: false,
                    detail: String::new(),
                    flag: None,
                });
            }
            emit.emit(EventKind::HostFinished {
                status,
                build: None,
                error: None,
                duration_ms: 1,
            });
            HostEnd {
                status,
                build: None,
                error: fails.then(|| "scripted".to_string()),
            }
        })
    }
}

/// Keeps every event.
#[derive(Clone, Default)]
pub struct Recorder(pub Arc<Mutex<Vec<Event>>>);

impl Reporter for Recorder {
    fn on_event(&mut self, e: &Event) {
        self.0.lock().unwrap().push(e.clone());
    }
}

/// Host `h{i}`, run on this machine.
pub fn host(i: usize) -> Host {
    Host::local(format!("h{i}"), "/tmp/x")
}

/// A strategy with rollback on, staging and the rest at their defaults.
pub fn strategy(canary: usize, batch: BatchSize, max_fail: usize) -> Strategy {
    Strategy {
        canary,
        batch,
        max_fail,
        rollback_on_failure: true,
        ..Strategy::default()
    }
}
