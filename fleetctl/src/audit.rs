//! Audit log of every step on every host: the run's events as JSON lines in
//! `.fleetctl/audit/<run-id>.jsonl`, appended (a resumed run adds to the
//! same file) and written line by line so a crash loses at most one event.

use crate::executor::event::{Event, Reporter};
use std::fs::{File, OpenOptions};
use std::io::Write;
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

/// Appends every event to the run's audit file.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    file: File,
    /// Set after the first failed write, so a full disk warns once.
    broken: bool,
}

/// Opens (creating the folder and the file) `<dir>/audit/<id>.jsonl` for
/// appending: the one way a run's or an experiment's audit log is opened.
pub fn open_append(dir: &Path, id: &str) -> Result<(PathBuf, File), AuditError> {
    let path = path(dir, id);
    let open = || -> std::io::Result<File> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        OpenOptions::new().create(true).append(true).open(&path)
    };
    match open() {
        Ok(file) => Ok((path, file)),
        Err(source) => Err(AuditError { path, source }),
    }
}

impl AuditLog {
    /// Opens (creating) `<dir>/audit/<run_id>.jsonl` for appending.
    pub fn open(dir: &Path, run_id: &str) -> Result<AuditLog, AuditError> {
        let (path, file) = open_append(dir, run_id)?;
        Ok(AuditLog {
            path,
            file,
            broken: false,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Reporter for AuditLog {
    fn on_event(&mut self, event: &Event) {
        let line = match serde_json::to_string(event) {
            Ok(mut l) => {
                l.push('\n');
                l
            }
            Err(e) => {
                tracing::warn!("audit: cannot encode an event: {e}");
                return;
            }
        };
        if let Err(e) = self.file.write_all(line.as_bytes()) {
            if !self.broken {
                tracing::warn!(
                    "audit log {}: {e}; later events are lost",
                    self.path.display()
                );
                self.broken = true;
            }
        }
    }

    fn finish(&mut self) {
        if let Err(e) = self.file.sync_all() {
            tracing::warn!("audit log {}: {e}", self.path.display());
        }
    }
}

/// Reads an audit file back (for tests and tools).
pub fn read(path: &Path) -> Result<Vec<Event>, AuditError> {
    let text = std::fs::read_to_string(path).map_err(|source| AuditError {
        path: path.to_owned(),
        source,
    })?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l).map_err(|e| AuditError {
                path: path.to_owned(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
            })
        })
        .collect()
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
