//! What `fleetctl experiment` is asked to do, and how an experiment can end.

use std::path::PathBuf;

/// What `fleetctl experiment` was asked to do, as plain values.
#[derive(Debug, Clone)]
pub struct Options {
    pub definition: Option<PathBuf>,
    pub inventory: Option<PathBuf>,
    pub limit: Option<String>,
    pub extra_vars: Vec<String>,
    /// The candidate; `None`: the default build (or a resumed one's).
    pub binary: Option<PathBuf>,
    pub state_dir: PathBuf,
    /// The timing store the records are collected into.
    pub store: PathBuf,
    pub resume: Option<String>,
    /// Draw progress spinners.
    pub tty: bool,
}

/// How an experiment ended, for the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The verdict was a pass and its action succeeded.
    Pass,
    /// The verdict was not a pass (fail, marginal, NODATA, or the candidate
    /// never deployed); its action succeeded.
    NotPass,
    /// The action's rollout or restore failed on a host.
    HostsFailed,
    Interrupted,
}
