//! Audit log of every step on every host: the run's events as JSON lines in
//! `.fleetctl/audit/<run-id>.jsonl`, appended (a resumed run adds to the
//! same file) and written line by line so a crash loses at most one event.

use crate::executor::event::{Event, Reporter};
use crate::persist::{self, JsonLines};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
#[error("cannot open audit log {}: {source}", path.display())]
pub struct AuditError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Path of a run's audit log under the state directory.
pub fn path(dir: &Path, run_id: &str) -> PathBuf {
    dir.join("audit").join(format!("{run_id}.jsonl"))
}

/// Opens (creating the folder and the file) `<dir>/audit/<id>.jsonl` for
/// appending: the one way a run's or an experiment's audit log is opened.
pub fn open_append(dir: &Path, id: &str) -> Result<JsonLines, AuditError> {
    let path = path(dir, id);
    JsonLines::open(path.clone()).map_err(|source| AuditError { path, source })
}

/// Appends every event to the run's audit file.
#[derive(Debug)]
pub struct AuditLog(JsonLines);

impl AuditLog {
    /// Opens (creating) `<dir>/audit/<run_id>.jsonl` for appending.
    pub fn open(dir: &Path, run_id: &str) -> Result<AuditLog, AuditError> {
        open_append(dir, run_id).map(AuditLog)
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Reporter for AuditLog {
    fn on_event(&mut self, event: &Event) {
        self.0.append(event);
    }

    fn finish(&mut self) {
        self.0.sync();
    }
}

/// Reads an audit file back (for tests and tools).
pub fn read(path: &Path) -> Result<Vec<Event>, AuditError> {
    persist::read_lines(path).map_err(|source| AuditError {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::event::EventKind;

    #[test]
    fn events_append_as_json_lines_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let events = [
            Event::new(
                "r1",
                Some("h1"),
                EventKind::StepStarted {
                    step: "drain".into(),
                },
            ),
            Event::new(
                "r1",
                Some("h1"),
                EventKind::StepFinished {
                    step: "drain".into(),
                    duration_ms: 12,
                    skipped: false,
                    detail: "pid 7 exited".into(),
                    flag: None,
                },
            ),
        ];
        let mut log = AuditLog::open(dir.path(), "r1").unwrap();
        log.on_event(&events[0]);
        log.finish();
        let mut again = AuditLog::open(dir.path(), "r1").unwrap();
        again.on_event(&events[1]);
        again.finish();
        let text = std::fs::read_to_string(again.path()).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert!(text
            .lines()
            .next()
            .unwrap()
            .contains("\"event\":\"step_started\""));
        assert_eq!(read(again.path()).unwrap(), events);
    }
}
