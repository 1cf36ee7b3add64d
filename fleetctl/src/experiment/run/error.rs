//! Everything that stops an experiment.

use crate::audit::AuditError;
use crate::executor::ExecError;
use crate::experiment::definition::DefinitionError;
use crate::experiment::groups::GroupError;
use crate::experiment::records::RecordsError;
use crate::experiment::state::StateError;
use crate::experiment::workload::WorkloadError;
use crate::fanout::TaskFailed;
use crate::inventory::{select, InventoryError};
use crate::playbook::PlaybookError;
use crate::steps;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    #[error(transparent)]
    Definition(#[from] DefinitionError),
    #[error(transparent)]
    Inventory(Box<InventoryError>),
    #[error(transparent)]
    Groups(#[from] GroupError),
    #[error(transparent)]
    Playbook(#[from] PlaybookError),
    #[error("{0} (build it with `cargo build --release -p prover`, or pass --binary PATH)")]
    NotABuild(#[source] crate::input::InputError),
    #[error("candidate {}: {cause} (build it with `cargo build --release -p prover`, or pass --binary PATH)", path.display())]
    Binary {
        path: PathBuf,
        cause: Box<steps::Cause>,
    },
    #[error("{host}: {problem}")]
    Preflight { host: String, problem: String },
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Audit(#[from] AuditError),
    #[error(transparent)]
    Exec(Box<ExecError>),
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    #[error(transparent)]
    Records(#[from] RecordsError),
    #[error(transparent)]
    Task(#[from] TaskFailed),
    #[error("--resume {0}: the experiment has no definition recorded, and none was given")]
    NoDefinition(String),
}

impl From<InventoryError> for ExperimentError {
    fn from(e: InventoryError) -> Self {
        ExperimentError::Inventory(Box::new(e))
    }
}

impl From<ExecError> for ExperimentError {
    fn from(e: ExecError) -> Self {
        ExperimentError::Exec(Box::new(e))
    }
}

impl From<select::SelectError> for ExperimentError {
    fn from(e: select::SelectError) -> Self {
        ExperimentError::Inventory(Box::new(InventoryError::Select(e)))
    }
}
