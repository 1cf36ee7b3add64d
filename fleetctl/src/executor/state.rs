//! The state file of a run (`.fleetctl/state/<run-id>.json`): which hosts
//! finished, so `--resume RUN_ID` continues a halted or interrupted run
//! without touching them again.

use super::event::HostStatus;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const STATE_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    pub version: u32,
    pub run_id: String,
    pub playbook: String,
    pub inventory: String,
    /// Host -> latest status in this run.
    pub hosts: BTreeMap<String, HostStatus>,
    pub updated: String,
    /// What the run was started with; a resume takes all of it from here.
    /// Absent in state files of older fleetctl versions.
    #[serde(default)]
    pub origin: Origin,
}

/// The arguments a run was started with, as given on its command line, and
/// the checksum of the build it shipped: a resume must continue the same
/// run, not a new one on another inventory or another build.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// `-p` as given (a built-in name or a file path).
    pub playbook: Option<String>,
    /// `-i` as given; `None`: the built-in local inventory.
    pub inventory: Option<String>,
    pub limit: Option<String>,
    #[serde(default)]
    pub extra_vars: Vec<String>,
    /// `--binary` as given (or its default) when the playbook ships one.
    pub binary: Option<String>,
    /// sha256 of that binary when the run started.
    pub sha256: Option<String>,
}

impl RunState {
    pub fn new(run_id: &str, playbook: &str, inventory: &str) -> RunState {
        RunState {
            version: STATE_VERSION,
            run_id: run_id.to_string(),
            playbook: playbook.to_string(),
            inventory: inventory.to_string(),
            hosts: BTreeMap::new(),
            updated: super::event::now_rfc3339(),
            origin: Origin::default(),
        }
    }

    /// Hosts a resumed run skips.
    pub fn completed(&self, host: &str) -> bool {
        matches!(
            self.hosts.get(host),
            Some(HostStatus::Ok | HostStatus::DoneEarlier)
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("--resume {problem}")]
    BadId { problem: String },
    #[error("run {run_id}: no state file {} (runs are resumed from the directory they were started in): {source}", path.display())]
    Missing {
        run_id: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("state file {}: {source}", path.display())]
    Corrupt {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("state file {}: version {found}, this fleetctl reads version {STATE_VERSION}", path.display())]
    Version { path: PathBuf, found: u32 },
    #[error("cannot write state file {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--resume {run_id}: the run was started with {what} `{was}`, this command gives `{now}`; a resume takes the playbook, inventory, --limit and -e from the run's state file, so resume it with `{resume}`, or start a new run")]
    Conflict {
        run_id: String,
        what: &'static str,
        was: String,
        now: String,
        /// The command that resumes the run as it was started.
        resume: String,
    },
    #[error("--resume {run_id}: the binary {binary} has sha256 {now}, but the run shipped {was}; resuming would leave a mixed fleet: put that build back at {binary}, pass it with --binary, or start a new run")]
    OtherBuild {
        run_id: String,
        binary: String,
        was: String,
        now: String,
    },
    #[error("--resume {run_id}: that run ran playbook `{was}`, not `{now}`")]
    OtherPlaybook {
        run_id: String,
        was: String,
        now: String,
    },
}

pub fn path(dir: &Path, run_id: &str) -> PathBuf {
    dir.join("state").join(format!("{run_id}.json"))
}

pub fn load(dir: &Path, run_id: &str) -> Result<RunState, StateError> {
    crate::persist::check_id(run_id).map_err(|problem| StateError::BadId { problem })?;
    let p = path(dir, run_id);
    let text = std::fs::read_to_string(&p).map_err(|source| StateError::Missing {
        run_id: run_id.to_string(),
        path: p.clone(),
        source,
    })?;
    let state: RunState = serde_json::from_str(&text).map_err(|source| StateError::Corrupt {
        path: p.clone(),
        source,
    })?;
    if state.version != STATE_VERSION {
        return Err(StateError::Version {
            path: p,
            found: state.version,
        });
    }
    Ok(state)
}

/// Replaces the file whole: a crash never leaves half of one.
pub fn save(dir: &Path, state: &mut RunState) -> Result<(), StateError> {
    state.updated = super::event::now_rfc3339();
    let path = path(dir, &state.run_id);
    crate::persist::write_json(&path, state).map_err(|source| StateError::Write { path, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_and_reports_missing_runs() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = RunState::new("r1", "rollout", "inv.yaml");
        s.hosts.insert("a".into(), HostStatus::Ok);
        s.hosts.insert("b".into(), HostStatus::NotStarted);
        save(dir.path(), &mut s).unwrap();
        let back = load(dir.path(), "r1").unwrap();
        assert_eq!(back, s);
        assert!(back.completed("a"));
        assert!(!back.completed("b"));
        assert!(!back.completed("c"));
        let e = load(dir.path(), "r2").unwrap_err().to_string();
        assert!(e.contains("run r2: no state file"), "{e}");
    }
}
