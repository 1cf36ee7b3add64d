//! The one event stream of a run: host tasks and the dispatcher emit
//! [`Event`]s; the live progress, the audit log and the final report all read
//! the same events (see [`Reporter`]).

use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;

/// How a host ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostStatus {
    /// Every step done or skipped.
    Ok,
    /// A step failed (the host was rolled back when it had been changed).
    Failed,
    /// The transport could not connect.
    Unreachable,
    /// Another rollout holds the host's lock; nothing was changed.
    Locked,
    /// Stopped by Ctrl-C between or during steps.
    Interrupted,
    /// The run halted (failure budget, Ctrl-C) before this host's batch.
    NotStarted,
    /// Completed by the run being resumed; not touched again.
    DoneEarlier,
    /// A step failed and putting the host back failed too: the host runs
    /// neither the new build nor a verified old one. The worst outcome.
    RollbackFailed,
}

impl HostStatus {
    /// Counts against the failure budget and the exit code.
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            HostStatus::Failed
                | HostStatus::Unreachable
                | HostStatus::Locked
                | HostStatus::RollbackFailed
        )
    }

    pub fn label(self) -> &'static str {
        match self {
            HostStatus::Ok => "ok",
            HostStatus::Failed => "FAILED",
            HostStatus::Unreachable => "UNREACHABLE",
            HostStatus::Locked => "LOCKED",
            HostStatus::Interrupted => "interrupted",
            HostStatus::NotStarted => "not started",
            HostStatus::DoneEarlier => "done earlier",
            HostStatus::RollbackFailed => "ROLLBACK FAILED",
        }
    }
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    RunStarted {
        playbook: String,
        source: String,
        inventory: String,
        hosts: Vec<String>,
        batches: usize,
        check: bool,
        resumed: bool,
        /// sha256 of the binary shipped, when the playbook uploads.
        release: Option<String>,
    },
    BatchStarted {
        batch: usize,
        of: usize,
        canary: bool,
        hosts: Vec<String>,
    },
    HostStarted,
    StepStarted {
        step: String,
    },
    StepFinished {
        step: String,
        duration_ms: u64,
        skipped: bool,
        detail: String,
        /// Set when the step got there only by force (`SIGKILL`); the
        /// final table shows it in the step's cell.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        flag: Option<String>,
    },
    StepFailed {
        step: String,
        duration_ms: u64,
        error: String,
        /// What the failure left intact.
        kept: String,
    },
    /// The host's serving gap: from the old daemon refusing new work
    /// (drain) to the new one ready (verify); `budget_ms` is the
    /// playbook's `max_serving_gap`.
    ServingGap {
        gap_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget_ms: Option<u64>,
    },
    /// What `upload` put on the link for the host: `sent_bytes` for
    /// `file_bytes` of files, `encoding` `gzip` or `plain`, and why a
    /// compressed upload went plain.
    Uploaded {
        file_bytes: u64,
        sent_bytes: u64,
        encoding: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        plain_because: Option<String>,
    },
    /// The staging pass (upload, prepare) finished on the host without a
    /// failure; its batch later runs the rest.
    HostStaged {
        duration_ms: u64,
    },
    /// The run stages every host before the first batch.
    StagingStarted {
        hosts: Vec<String>,
        concurrency: usize,
    },
    HostFinished {
        status: HostStatus,
        /// Release the host serves at the end (short sha), when known.
        build: Option<String>,
        error: Option<String>,
        duration_ms: u64,
    },
    Halted {
        failed: usize,
        max_fail: usize,
        not_started: Vec<String>,
    },
    Interrupt {
        abort: bool,
    },
    RunFinished {
        ok: usize,
        failed: usize,
        not_started: usize,
        duration_ms: u64,
    },
}

/// One event of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// RFC 3339, UTC.
    pub ts: String,
    pub run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(flatten)]
    pub kind: EventKind,
}

impl Event {
    pub fn new(run_id: &str, host: Option<&str>, kind: EventKind) -> Event {
        Event {
            ts: now_rfc3339(),
            run_id: run_id.to_string(),
            host: host.map(str::to_string),
            kind,
        }
    }
}

pub fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Anything that reads the event stream.
pub trait Reporter: Send {
    fn on_event(&mut self, event: &Event);
    /// Called once after the last event (flush, clear spinners).
    fn finish(&mut self) {}
}

/// A host task's handle on the stream.
#[derive(Debug, Clone)]
pub struct Emitter {
    run_id: String,
    host: String,
    tx: UnboundedSender<Event>,
}

impl Emitter {
    pub fn new(run_id: &str, host: &str, tx: UnboundedSender<Event>) -> Emitter {
        Emitter {
            run_id: run_id.to_string(),
            host: host.to_string(),
            tx,
        }
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn emit(&self, kind: EventKind) {
        // The dispatcher outlives every host task; a closed channel only
        // happens while the process is already tearing down.
        let _ = self
            .tx
            .send(Event::new(&self.run_id, Some(&self.host), kind));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_rollback_is_a_failure_shown_loudly() {
        let s = HostStatus::RollbackFailed;
        assert!(s.is_failure());
        assert_eq!(s.label(), "ROLLBACK FAILED");
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"rollback_failed\"");
    }
}
