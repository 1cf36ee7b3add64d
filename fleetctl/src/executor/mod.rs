//! Dispatcher and one task per host; canary, batches, failure budget.
//!
//! [`prepare`] loads the playbook and inventory and hashes the build;
//! [`dispatch::dispatch`] runs batches of [`host::run_host`] tasks; every
//! task and the dispatcher emit [`event::Event`]s that the live
//! [`progress::Progress`], the [`crate::audit::AuditLog`] and the final
//! [`crate::summary::Summary`] read. [`state`] lets `--resume` continue.

pub mod dispatch;
pub mod event;
pub mod host;
pub mod progress;
pub mod state;

pub use dispatch::{dispatch, Dispatch, HostRunner, RealRunner, RunEnd, RunSummary};
pub use event::{Event, EventKind, HostStatus, Reporter};
pub use host::{Build, HostEnd, HostJob};

use crate::audit::AuditLog;
use crate::inventory::{self, Host, InventoryError, Target};
use crate::playbook::{self, Playbook, PlaybookError};
use crate::steps;
use crate::summary::Summary;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::watch;

/// Ctrl-C level: the first asks hosts to stop after their current step,
/// the second aborts the running steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stop {
    Run,
    Finish,
    Abort,
}

/// Everything that can stop a run before any host is touched.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error(transparent)]
    Inventory(Box<InventoryError>),
    #[error(transparent)]
    Playbook(#[from] PlaybookError),
    #[error("binary {}: {cause} (build it with `cargo build --release -p prover`, or pass --binary PATH)", path.display())]
    Binary {
        path: PathBuf,
        cause: Box<steps::Cause>,
    },
    #[error(transparent)]
    State(#[from] state::StateError),
    #[error(transparent)]
    Audit(#[from] crate::audit::AuditError),
}

impl From<InventoryError> for ExecError {
    fn from(e: InventoryError) -> Self {
        ExecError::Inventory(Box::new(e))
    }
}

/// A run ready to go: the playbook, the selected hosts, the build.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub playbook: Arc<Playbook>,
    pub inventory: String,
    pub hosts: Vec<Host>,
    pub release: Arc<Build>,
}

/// Loads playbook and inventory, applies `--limit`, and hashes the binary
/// when the playbook ships it.
pub fn prepare(playbook: &str, target: &Target, binary: &Path) -> Result<Prepared, ExecError> {
    let playbook = playbook::load(playbook)?;
    let (inv, hosts) = inventory::load_selected(target)?;
    let sha256 = if playbook.uploads() {
        Some(
            steps::sha256_file(binary).map_err(|cause| ExecError::Binary {
                path: binary.to_owned(),
                cause: Box::new(cause),
            })?,
        )
    } else {
        None
    };
    Ok(Prepared {
        playbook: Arc::new(playbook),
        inventory: inv.file,
        hosts,
        release: Arc::new(Build::new(binary.to_owned(), sha256)),
    })
}

/// A new run id: UTC time plus a random suffix, sortable and unique.
pub fn new_run_id() -> String {
    let now = time::OffsetDateTime::now_utc();
    let fmt = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    format!(
        "{}-{:04x}",
        now.format(&fmt).unwrap_or_else(|_| "run".into()),
        rand::random::<u16>()
    )
}

/// Options of one run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub check: bool,
    /// Run id to resume (its completed hosts are skipped).
    pub resume: Option<String>,
    /// Root of `state/` and `audit/` (`.fleetctl` by default).
    pub state_dir: PathBuf,
    /// What a new run is started with, recorded for its resume.
    pub origin: state::Origin,
    /// The command that resumes this run, without `--resume RUN_ID`, for
    /// the HALTED line (e.g. `fleetctl run -p health`).
    pub resume_with: Option<String>,
}

/// The binary shipped when neither `--binary` nor a resumed run names one.
pub const DEFAULT_BINARY: &str = "target/release/prover";

/// What a finished run leaves for the caller.
#[derive(Debug, Clone)]
pub struct Finished {
    pub summary: RunSummary,
    pub table: Summary,
    pub audit: PathBuf,
}

/// Runs a prepared playbook with the given reporters (plus the audit log and
/// the summary, always). `stop` carries Ctrl-C.
pub async fn execute(
    prepared: Prepared,
    opts: &RunOptions,
    runner: Arc<dyn HostRunner>,
    mut reporters: Vec<Box<dyn Reporter>>,
    stop: watch::Receiver<Stop>,
) -> Result<Finished, ExecError> {
    let resume = match &opts.resume {
        Some(id) => {
            let st = state::load(&opts.state_dir, id)?;
            if st.playbook != prepared.playbook.name {
                return Err(state::StateError::OtherPlaybook {
                    run_id: id.clone(),
                    was: st.playbook,
                    now: prepared.playbook.name.clone(),
                }
                .into());
            }
            Some(st)
        }
        None => None,
    };
    // A check of a resume is a run of its own: it must not add events for a
    // build it never deployed to the real run's audit log (nor touch its
    // state, which `state_dir: None` below sees to).
    let run_id = match &opts.resume {
        Some(id) if !opts.check => id.clone(),
        _ => new_run_id(),
    };
    let audit = AuditLog::open(&opts.state_dir, &run_id)?;
    let audit_path = audit.path().to_owned();
    let table = Summary::new();
    if let Some(cmd) = &opts.resume_with {
        table.set_resume_command(cmd);
    }
    reporters.push(Box::new(audit));
    reporters.push(Box::new(table.clone()));
    let d = Dispatch {
        run_id,
        playbook: prepared.playbook,
        inventory: prepared.inventory,
        hosts: prepared.hosts,
        release: prepared.release,
        check: opts.check,
        state_dir: (!opts.check).then(|| opts.state_dir.clone()),
        resume,
        origin: opts.origin.clone(),
    };
    let summary = dispatch(d, runner, &mut reporters, stop).await?;
    Ok(Finished {
        summary,
        table,
        audit: audit_path,
    })
}
