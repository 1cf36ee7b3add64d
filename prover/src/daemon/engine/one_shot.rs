//! One job through the engine in this process, for the command line:
//! `prover prove` and the Filecoin commands (`c2`, …) prove through the same
//! per-partition stages as the daemon (memory admission, synthesis from
//! recorded constraints, the device, verification against the key, timing
//! records), so there is one path from a request to its proof.

use crate::backend::Backend;
use crate::budget::{BudgetError, MemoryBudget};
use crate::daemon::engine::compiled::CompiledSet;
use crate::daemon::engine::filecoin::FilecoinKeys;
use crate::daemon::engine::{Device, Engine, EngineParts, SubmitError};
use crate::daemon::metrics::Metrics;
use crate::filecoin::cache::Provenance;
use crate::memory_plan::{MemoryPlan, PlanError};
use crate::params::{ParamStore, ParamsError, TestParams};
use crate::pool::{HeapAllocator, PinnedPool, PoolLimits};
use crate::timing::TimingLog;
use fleet_wire::api::{FilecoinSubmitRequest, JobStatus, SubmitRequest};
use fleet_wire::timing::PartitionRecord;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// How long a one-shot job may take: a 64 GiB PoRep on the CPU backend
/// takes hours, never days.
const JOB_LIMIT: Duration = Duration::from_secs(7 * 24 * 3600);

/// What a one-shot engine is built from.
pub struct OneShot {
    pub backend: Arc<dyn Backend>,
    /// Filecoin's parameter cache (read only).
    pub filecoin_cache: PathBuf,
    pub allow_test_params: bool,
    /// Later partitions synthesise from the first one's recording.
    pub compiled: bool,
    /// Timing records appended here too (the daemon's format).
    pub timing_log: Option<PathBuf>,
    /// Memory the job may hold, bytes; `None`: what the host has, less a
    /// margin, as the daemon's `budget = "auto"`.
    pub budget: Option<u64>,
}

/// A job to prove.
pub enum Job {
    /// A bundled circuit, its parameters in `params_dir` (TEST-ONLY ones
    /// made there where `test_params` allows).
    Bundled {
        req: SubmitRequest,
        params_dir: PathBuf,
        test_params: TestParams,
    },
    Filecoin(FilecoinSubmitRequest),
}

/// The finished job: its status (proofs when done) and each partition's
/// timing record, in partition order.
pub struct Finished {
    pub status: JobStatus,
    pub partitions: Vec<PartitionRecord>,
    /// The Filecoin parameter file that proved it: name and provenance.
    pub filecoin_params: Option<(String, Provenance)>,
}

#[derive(Debug, thiserror::Error)]
pub enum OneShotError {
    #[error("sizing the memory budget: {0}")]
    Budget(#[from] BudgetError),
    #[error("{0}")]
    Plan(#[from] PlanError),
    #[error("opening the parameter directory: {0}")]
    Params(#[from] ParamsError),
    #[error("opening the timing log: {0}")]
    Timing(#[from] crate::timing::TimingError),
    #[error("starting the engine's threads: {0}")]
    Threads(#[from] std::io::Error),
    #[error("starting the job's runtime: {0}")]
    Runtime(std::io::Error),
    /// The request was refused before any proving.
    #[error(transparent)]
    Refused(#[from] SubmitError),
    #[error("the job was lost by the engine")]
    Lost,
}

/// The margin `budget = "auto"` leaves the rest of the host.
const AUTO_MARGIN: u64 = 2 << 30;

/// Proves `job` and waits for it; the engine's threads are joined before
/// this returns.
pub fn run(opts: OneShot, job: Job) -> Result<Finished, OneShotError> {
    let budget = match opts.budget {
        Some(b) => MemoryBudget::new(b),
        None => MemoryBudget::auto(AUTO_MARGIN)?,
    };
    let memory = MemoryPlan::new(budget.total(), None)?;
    let limits = PoolLimits {
        max_bytes: memory.pool,
        ..PoolLimits::default()
    };
    let pool = PinnedPool::new(Arc::new(HeapAllocator), budget.clone(), limits);
    let store = match &job {
        // Only a store that may write (TEST-ONLY parameters) makes its directory.
        Job::Bundled {
            params_dir,
            test_params: TestParams::Refuse,
            ..
        } => ParamStore::open_existing(params_dir)?,
        Job::Bundled {
            params_dir,
            test_params,
            ..
        } => ParamStore::open(params_dir)?.with_test_params(*test_params),
        Job::Filecoin(_) => ParamStore::empty(),
    };
    let params = Arc::new(store.with_budget(budget.clone()));
    let timing = match &opts.timing_log {
        Some(path) => TimingLog::open(
            path,
            crate::timing::DEFAULT_MAX_BYTES,
            crate::timing::DEFAULT_KEEP,
        )?,
        None => TimingLog::discarding(),
    };
    let timing = Arc::new(timing.keeping_partitions());
    // The daemon's defaults: one synthesis worker a partition ahead of the
    // device (a partition's witness pass already uses every core).
    let synthesis = crate::daemon::config::Synthesis::default();
    let engine = Engine::start(EngineParts {
        pool,
        budget,
        memory,
        params,
        devices: vec![Device::new(opts.backend, 1, None)],
        unavailable: Vec::new(),
        timing: timing.clone(),
        metrics: Arc::new(Metrics::new(crate::VERSION, crate::BUILD_HASH)),
        filecoin: FilecoinKeys::new(opts.filecoin_cache, opts.allow_test_params),
        compiled: CompiledSet::new(opts.compiled, synthesis.check_first),
        concurrency: synthesis.concurrency,
        lookahead: synthesis.lookahead,
        max_jobs: 1,
        host: crate::sys::hostname(),
        build: crate::BUILD_HASH.to_string(),
    })?;
    let finished = prove_on(&engine, job);
    let filecoin_params = engine.filecoin_files().into_iter().next();
    engine.shutdown();
    let status = finished?;
    let mut partitions = timing.take_partitions();
    partitions.sort_by_key(|r| r.partition);
    if let Err(e) = timing.sync() {
        tracing::warn!("timing log: {e}");
    }
    Ok(Finished {
        status,
        partitions,
        filecoin_params,
    })
}

fn prove_on(engine: &Engine, job: Job) -> Result<JobStatus, OneShotError> {
    let id = match job {
        Job::Bundled { req, .. } => engine.submit(req)?,
        Job::Filecoin(req) => engine.submit_filecoin(&req)?,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(OneShotError::Runtime)?;
    runtime
        .block_on(engine.wait(&id, JOB_LIMIT))
        .ok_or(OneShotError::Lost)
}
