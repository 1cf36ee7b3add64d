//! The experiment's audit log, `<state>/audit/<experiment-id>.jsonl`: one
//! JSON line for every stage of the experiment, and every event of the
//! rollouts and restores it runs (those also keep their own run logs),
//! so one file tells the whole story.

use crate::audit::AuditError;
use crate::executor::event::now_rfc3339;
use crate::executor::{Event, Reporter};
use crate::persist::{self, JsonLines};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A stage of an experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Hosts picked, baseline releases read.
    Prepare,
    /// The candidate rolled to the canaries.
    Deploy,
    /// The workload on canaries and baselines.
    Measure,
    /// Records fetched into the timing store.
    Collect,
    /// Records judged.
    Analyse,
    /// The candidate rolled to the rest of the selection.
    Promote,
    /// The canaries put back on their baseline release.
    Restore,
    /// The canaries left on the candidate.
    Keep,
    Finish,
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub ts: String,
    pub experiment: String,
    pub stage: Stage,
    #[serde(flatten)]
    pub what: What,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "snake_case")]
pub enum What {
    Started {
        detail: String,
    },
    Host {
        host: String,
        detail: String,
    },
    Finished {
        detail: String,
    },
    Failed {
        error: String,
    },
    /// An event of a rollout or restore run of this stage.
    Run {
        event: Event,
    },
}

/// Appends entries; shared by the experiment and the reporters it hands
/// to the runs it starts.
#[derive(Debug, Clone)]
pub struct ExperimentLog {
    lines: Arc<Mutex<JsonLines>>,
    id: String,
    path: PathBuf,
}

impl ExperimentLog {
    pub fn open(state_dir: &Path, id: &str) -> Result<ExperimentLog, AuditError> {
        let lines = crate::audit::open_append(state_dir, id)?;
        Ok(ExperimentLog {
            path: lines.path().to_owned(),
            lines: Arc::new(Mutex::new(lines)),
            id: id.to_owned(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn write(&self, stage: Stage, what: What) {
        let entry = Entry {
            ts: now_rfc3339(),
            experiment: self.id.clone(),
            stage,
            what,
        };
        // A poisoned lock only means another writer panicked mid-line.
        let mut lines = match self.lines.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        lines.append(&entry);
    }

    pub fn started(&self, stage: Stage, detail: impl Into<String>) {
        self.write(
            stage,
            What::Started {
                detail: detail.into(),
            },
        );
    }

    pub fn finished(&self, stage: Stage, detail: impl Into<String>) {
        self.write(
            stage,
            What::Finished {
                detail: detail.into(),
            },
        );
    }

    pub fn host(&self, stage: Stage, host: &str, detail: impl Into<String>) {
        self.write(
            stage,
            What::Host {
                host: host.to_owned(),
                detail: detail.into(),
            },
        );
    }

    pub fn failed(&self, stage: Stage, error: impl Into<String>) {
        self.write(
            stage,
            What::Failed {
                error: error.into(),
            },
        );
    }

    /// A reporter that copies a run's events into this log under `stage`.
    pub fn reporter(&self, stage: Stage) -> Box<dyn Reporter> {
        Box::new(StageReporter {
            log: self.clone(),
            stage,
        })
    }
}

struct StageReporter {
    log: ExperimentLog,
    stage: Stage,
}

impl Reporter for StageReporter {
    fn on_event(&mut self, event: &Event) {
        self.log.write(
            self.stage,
            What::Run {
                event: event.clone(),
            },
        );
    }
}

/// Reads a log back (tests, tools).
pub fn read(path: &Path) -> std::io::Result<Vec<Entry>> {
    persist::read_lines(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::EventKind;

    #[test]
    fn stages_and_run_events_land_in_one_file() {
        let dir = tempfile::tempdir().unwrap();
        let log = ExperimentLog::open(dir.path(), "exp-1").unwrap();
        log.started(Stage::Deploy, "2 canaries");
        let mut r = log.reporter(Stage::Deploy);
        r.on_event(&Event::new("run-1", Some("h01"), EventKind::HostStarted));
        log.host(Stage::Measure, "h01", "20 jobs");
        let entries = read(log.path()).unwrap();
        assert_eq!(entries.len(), 3);
        assert!(entries.iter().all(|e| e.experiment == "exp-1"));
        let What::Run { event } = &entries[1].what else {
            panic!("{:?}", entries[1])
        };
        assert_eq!(event.host.as_deref(), Some("h01"));
        assert_eq!(entries[2].stage, Stage::Measure);
    }
}
