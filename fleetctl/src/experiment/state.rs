//! The experiment's state file, `<state>/experiments/<id>.json`: what it
//! was started with and how far it got, saved after every stage, so
//! `--resume ID` continues from there (and resumes the rollout it was in).

use super::judge::Verdict;
use super::raw::Action;
use super::workload::HostLoad;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How far an experiment got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Progress {
    /// Hosts picked and baseline releases read; nothing changed yet (also
    /// where an interrupted experiment returns once its canaries are back).
    Prepared,
    /// The candidate's rollout to the canaries is under way (`deploy_run`).
    Deploying,
    /// Every canary runs the candidate.
    Deployed,
    /// The workload ran; its windows are in `loads`.
    Measured,
    /// The verdict is in; the action is next.
    Judged,
    /// The action's run is under way (`action_runs`).
    Acting,
    Done,
}

/// What the experiment was started with: a resume must continue the same one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    pub definition: String,
    pub inventory: Option<String>,
    pub limit: Option<String>,
    pub extra_vars: Vec<String>,
    pub binary: String,
    pub sha256: String,
    pub store: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExperimentState {
    pub id: String,
    pub origin: Origin,
    /// Local Unix milliseconds when it started (records fetched before
    /// then cannot be of its window).
    pub started_ms: u64,
    pub canary: Vec<String>,
    pub baseline: Vec<String>,
    /// Each canary's release before the experiment: what `restore` brings back.
    pub baseline_release: BTreeMap<String, String>,
    pub progress: Progress,
    pub deploy_run: Option<String>,
    pub deploy_error: Option<String>,
    pub loads: Vec<HostLoad>,
    pub verdict: Option<Verdict>,
    pub reason: Option<String>,
    pub action: Option<Action>,
    pub action_runs: Vec<String>,
    pub action_result: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("--resume {problem}")]
    BadId { problem: String },
    #[error("experiment state {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("experiment state {}: {source}", path.display())]
    Corrupt {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("experiment {id} was started with {what} {was:?}; this command gives {now:?} (leave it out to resume with the original)")]
    Conflict {
        id: String,
        what: &'static str,
        was: String,
        now: String,
    },
}

pub fn path(state_dir: &Path, id: &str) -> PathBuf {
    state_dir.join("experiments").join(format!("{id}.json"))
}

pub fn load(state_dir: &Path, id: &str) -> Result<ExperimentState, StateError> {
    crate::persist::check_id(id).map_err(|problem| StateError::BadId { problem })?;
    let path = path(state_dir, id);
    let bytes = std::fs::read(&path).map_err(|source| StateError::Io {
        path: path.clone(),
        source,
    })?;
    serde_json::from_slice(&bytes).map_err(|source| StateError::Corrupt { path, source })
}

/// Replaces the file whole: a crash leaves the old state or the new one,
/// never half of one.
pub fn save(state_dir: &Path, st: &ExperimentState) -> Result<(), StateError> {
    let path = path(state_dir, &st.id);
    crate::persist::write_json(&path, st).map_err(|source| StateError::Io { path, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_through_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let st = ExperimentState {
            id: "e1".into(),
            origin: Origin {
                definition: "x.yaml".into(),
                inventory: None,
                limit: Some("gpu".into()),
                extra_vars: vec![],
                binary: "prover".into(),
                sha256: "aa".into(),
                store: ".fleetctl/timing".into(),
            },
            started_ms: 1,
            canary: vec!["h01".into()],
            baseline: vec!["h02".into()],
            baseline_release: [("h01".to_string(), "bb".to_string())].into(),
            progress: Progress::Judged,
            deploy_run: Some("r1".into()),
            deploy_error: None,
            loads: vec![],
            verdict: Some(Verdict::Fail),
            reason: Some("total".into()),
            action: Some(Action::Restore),
            action_runs: vec![],
            action_result: None,
        };
        save(dir.path(), &st).unwrap();
        assert_eq!(load(dir.path(), "e1").unwrap(), st);
        let e = load(dir.path(), "e2").unwrap_err().to_string();
        assert!(e.contains("e2.json"), "{e}");
    }
}
