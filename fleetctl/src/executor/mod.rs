//! Dispatcher and one task per host; canary, batches, failure budget.
//!
//! [`prepare`] loads the playbook and inventory and hashes the build;
//! [`dispatch::dispatch`] runs batches of [`host::run_host`] tasks; every
//! task and the dispatcher emit [`event::Event`]s that the live
//! [`progress::Progress`], the [`crate::audit::AuditLog`] and the final
//! [`crate::summary::Summary`] read. [`state`] lets `--resume` continue.

pub mod dispatch;
pub mod event;
#[cfg(test)]
mod fixtures;
pub mod host;
pub mod progress;
mod runner;
pub mod state;
mod stop;

pub use dispatch::{dispatch, Dispatch, RunEnd, RunSummary};
pub use event::{Event, EventKind, HostStatus, Reporter};
pub use host::{Build, HostEnd, HostJob};
pub use runner::{HostFuture, HostRunner, RealRunner};
pub use stop::Stop;

use crate::audit::AuditLog;
use crate::input::{self, InputError};
use crate::inventory::{self, Host, InventoryError, Target};
use crate::playbook::{self, Playbook, PlaybookError};
use crate::steps;
use crate::summary::Summary;
use crate::transport::quote::quote_shown;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::watch;

/// Everything that can stop a run before any host is touched.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error(transparent)]
    Inventory(Box<InventoryError>),
    #[error(transparent)]
    Playbook(#[from] PlaybookError),
    #[error("{0} (build it with `cargo build --release -p prover`, or pass --binary PATH)")]
    NotABuild(#[source] InputError),
    #[error("binary {}: {cause} (build it with `cargo build --release -p prover`, or pass --binary PATH)", path.display())]
    Binary {
        path: PathBuf,
        cause: Box<steps::Cause>,
    },
    #[error("host {host}: config_file: {source} (the inventory's `config_file`, shipped with every release; nothing was contacted)")]
    ConfigFile {
        host: String,
        #[source]
        source: InputError,
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
        input::check_elf("binary", binary).map_err(ExecError::NotABuild)?;
        Some(
            steps::sha256_file(binary).map_err(|cause| ExecError::Binary {
                path: binary.to_owned(),
                cause: Box::new(cause),
            })?,
        )
    } else {
        None
    };
    if playbook.uploads() {
        check_config_files(&hosts)?;
    }
    Ok(Prepared {
        playbook: Arc::new(playbook),
        inventory: inv.file,
        hosts,
        release: Arc::new(Build::new(binary.to_owned(), sha256)),
    })
}

/// Every `config_file` a run ships is a regular file that opens, checked
/// once per file before any host is contacted: found missing by each host's
/// upload, it failed the fleet one host at a time, after connect and lock.
fn check_config_files(hosts: &[Host]) -> Result<(), ExecError> {
    let mut seen = std::collections::BTreeSet::new();
    for host in hosts {
        let Some(path) = &host.config_file else {
            continue;
        };
        if seen.insert(path.clone()) {
            input::open_regular("config file", path).map_err(|source| ExecError::ConfigFile {
                host: host.name.clone(),
                source,
            })?;
        }
    }
    Ok(())
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

/// Where state and audit logs are kept unless `--state-dir` says otherwise.
pub const DEFAULT_STATE_DIR: &str = ".fleetctl";

/// ` --state-dir DIR` for a printed command that must find this state
/// again, empty for the default. A directory from `FLEETCTL_STATE_DIR` is
/// written out too: a copied line does not carry the environment.
pub fn state_dir_flag(dir: &Path) -> String {
    if dir == Path::new(DEFAULT_STATE_DIR) {
        return String::new();
    }
    format!(" --state-dir {}", quote_shown(&dir.display().to_string()))
}

/// What a finished run leaves for the caller.
#[derive(Debug, Clone)]
pub struct Finished {
    pub summary: RunSummary,
    pub table: Summary,
    pub audit: PathBuf,
    /// The retry file naming the hosts that failed (`--limit @FILE` runs
    /// only those), when the run was no check and some host failed.
    pub retry: Option<PathBuf>,
}

/// Writes the run's retry file when a host failed; a file that cannot be
/// written costs a warning, not the run's outcome.
fn write_retry(state_dir: &Path, summary: &RunSummary) -> Option<PathBuf> {
    let failed: Vec<&str> = summary
        .hosts
        .iter()
        .filter(|(_, s)| s.is_failure())
        .map(|(h, _)| h.as_str())
        .collect();
    if failed.is_empty() {
        return None;
    }
    let path = crate::inventory::retry::path(state_dir, &summary.run_id);
    match crate::inventory::retry::write(&path, &failed) {
        Ok(()) => Some(path),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "could not write the retry file");
            None
        }
    }
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
    let retry = (!opts.check)
        .then(|| write_retry(&opts.state_dir, &summary))
        .flatten();
    Ok(Finished {
        summary,
        table,
        audit: audit_path,
        retry,
    })
}

#[cfg(test)]
mod tests {
    //! `execute` around the dispatcher: the audit log, the state file and
    //! the summary table, with a scripted host runner.
    use super::fixtures::{host, strategy, Scripted};
    use super::*;
    use crate::playbook::{BatchSize, Strategy};
    use std::sync::Mutex;

    fn prepared(n: usize, strategy: Strategy) -> Prepared {
        Prepared {
            playbook: Arc::new(Playbook {
                name: "t".into(),
                description: None,
                source: "test".into(),
                strategy,
                steps: vec![crate::steps::StepSpec::Health(Default::default())],
            }),
            inventory: "i".into(),
            hosts: (0..n).map(host).collect(),
            release: Arc::new(Build::new("p".into(), None)),
        }
    }

    fn run_scripted(p: Prepared, opts: &RunOptions, fail: &[&str]) -> Finished {
        let runner = Arc::new(Scripted {
            fail: fail.iter().map(|s| s.to_string()).collect(),
            ran: Arc::new(Mutex::new(Vec::new())),
        });
        let (_tx, rx) = watch::channel(Stop::Run);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(execute(p, opts, runner, Vec::new(), rx))
            .unwrap()
    }

    fn files_under(dir: &std::path::Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out: Vec<_> = glob::glob(&format!("{}/**/*", dir.display()))
            .unwrap()
            .flatten()
            .filter(|p| p.is_file())
            .map(|p| {
                let bytes = std::fs::read(&p).unwrap();
                (p, bytes)
            })
            .collect();
        out.sort();
        out
    }

    /// Regression (issue 51, item 12): a run with failures leaves a retry
    /// file of the failed hosts, as Ansible writes one; a clean run none.
    #[test]
    fn a_run_with_failures_writes_a_retry_file_of_the_failed_hosts() {
        let dir = tempfile::tempdir().unwrap();
        let opts = RunOptions {
            check: false,
            resume: None,
            state_dir: dir.path().to_owned(),
            origin: Default::default(),
            resume_with: None,
        };
        let done = run_scripted(
            prepared(4, strategy(1, BatchSize::Count(4), 3)),
            &opts,
            &["h1", "h3"],
        );
        let retry = done.retry.expect("a retry file");
        assert_eq!(
            retry,
            crate::inventory::retry::path(dir.path(), &done.summary.run_id)
        );
        assert_eq!(std::fs::read_to_string(&retry).unwrap(), "h1\nh3\n");
        let clean = run_scripted(prepared(2, strategy(1, BatchSize::Count(2), 0)), &opts, &[]);
        assert!(clean.retry.is_none());
    }

    #[test]
    fn a_check_of_a_resume_writes_nothing_to_the_real_runs_audit_or_state() {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = RunOptions {
            check: false,
            resume: None,
            state_dir: dir.path().to_owned(),
            origin: Default::default(),
            resume_with: None,
        };
        // A real run that halts: h0 fails, h1..h2 are left to a resume.
        let first = run_scripted(
            prepared(3, strategy(1, BatchSize::Count(1), 0)),
            &opts,
            &["h0"],
        );
        assert_eq!(first.summary.end, RunEnd::Halted);
        let id = first.summary.run_id.clone();
        let before = files_under(dir.path());
        assert!(before
            .iter()
            .any(|(p, _)| p.ends_with(format!("{id}.jsonl"))));

        opts.check = true;
        opts.resume = Some(id.clone());
        let check = run_scripted(prepared(3, strategy(1, BatchSize::Count(1), 0)), &opts, &[]);
        assert_ne!(check.summary.run_id, id, "a check runs under its own id");
        let after = files_under(dir.path());
        for (path, bytes) in &before {
            let now = after.iter().find(|(p, _)| p == path).map(|(_, b)| b);
            assert_eq!(now, Some(bytes), "{} changed by a check", path.display());
        }
        let st = state::load(dir.path(), &id).unwrap();
        assert!(!st.completed("h1"), "the check completed nothing");
    }

    #[test]
    fn the_halted_line_prints_the_exact_resume_command() {
        let dir = tempfile::tempdir().unwrap();
        let opts = RunOptions {
            check: false,
            resume: None,
            state_dir: dir.path().to_owned(),
            origin: Default::default(),
            resume_with: Some("fleetctl run -p health --state-dir /x".into()),
        };
        let done = run_scripted(
            prepared(3, strategy(1, BatchSize::Count(1), 0)),
            &opts,
            &["h0"],
        );
        let table = done.table.render();
        let want = format!(
            "Fix the cause, then: fleetctl run -p health --state-dir /x --resume {}",
            done.summary.run_id
        );
        assert!(table.contains(&want), "{table}");
    }
}
