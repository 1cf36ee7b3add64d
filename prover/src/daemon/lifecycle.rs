//! The daemon's life in one function, [`run`]: start-up steps in order (each
//! failure names its step), serve until told to stop, drain, release, exit.
//!
//! Operator log lines, at info, in this order: `starting`, `configuration
//! loaded`, `pinned pool allocated <bytes> in <ms>`, `ready`, then on the
//! first stop request `draining`, `drained`, and finally `exiting`. A second
//! stop request or the drain timeout aborts: `drain aborted: <why>` at error
//! level, and [`run`] returns [`DaemonError::Aborted`].
//!
//! Signals are not handled here: the caller turns each SIGTERM/SIGINT into one
//! message on the `shutdown` channel (first = drain, second = abort), so tests
//! drive the same code with a channel.

use crate::backend::cpu::CpuBackend;
use crate::backend::cuda::{self, CudaBackend};
use crate::backend::{Backend, BackendError};
use crate::budget::{BudgetError, MemoryBudget};
use crate::circuit::{self, CircuitShape};
use crate::daemon::api::{self, AppState};
use crate::daemon::config::{AllocatorChoice, BudgetSize, Config, Devices};
use crate::daemon::engine::{pool_bytes, Device, Engine, EngineParts};
use crate::daemon::metrics::Metrics;
use crate::daemon::pidfile::{PidFile, PidFileError};
use crate::params::{ParamStore, TestParams};
use crate::pool::{
    HeapAllocator, HostAllocator, MlockAllocator, PinnedPool, PoolError, PoolLimits,
};
use crate::timing::TimingLog;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Notify};

/// How long pool buffers may be waited for: partitions queue for memory
/// rather than fail, so this only catches a pool that never frees.
const CHECKOUT_TIMEOUT: Duration = Duration::from_secs(3600);
/// How often idle pool regions are checked for release.
const SHRINK_EVERY: Duration = Duration::from_secs(30);
/// How long open HTTP requests get to finish once the daemon stops serving.
const HTTP_GRACE: Duration = Duration::from_secs(5);

/// Why the daemon could not start or did not stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    PidFile(#[from] PidFileError),
    #[error("memory budget: {0}")]
    Budget(#[from] BudgetError),
    #[error("pinned pool ({allocator}): {source}")]
    Pool {
        allocator: &'static str,
        #[source]
        source: PoolError,
    },
    #[error("device: {0}")]
    Device(String),
    #[error("parameters for {circuit}/{size}: {reason}")]
    Params {
        circuit: String,
        size: u64,
        reason: String,
    },
    #[error("{step}: {reason}")]
    Step { step: &'static str, reason: String },
    #[error("drain aborted: {0}")]
    Aborted(String),
}

fn step(step: &'static str) -> impl Fn(String) -> DaemonError {
    move |reason| DaemonError::Step { step, reason }
}

/// Runs the daemon on `listener` until the `shutdown` channel says stop (or
/// closes). Relative paths in `config` resolve against the working directory.
pub async fn run(
    config: Config,
    listener: TcpListener,
    mut shutdown: mpsc::UnboundedReceiver<()>,
) -> Result<(), DaemonError> {
    let listen = listener
        .local_addr()
        .map_err(|e| step("reading the listen address")(e.to_string()))?;
    tracing::info!(
        version = crate::VERSION,
        build = crate::BUILD_HASH,
        pid = std::process::id(),
        "starting"
    );
    tracing::info!(effective = %config.effective(), "configuration loaded");
    let pid_file = PidFile::acquire(&config.paths.pid_file)?;

    let metrics = Arc::new(Metrics::new(crate::VERSION, crate::BUILD_HASH));
    let state = Arc::new(
        AppState::new(metrics.clone(), config.api_token.clone(), listen)
            .with_http_limits(config.http.clone()),
    );
    let stop_http = Arc::new(Notify::new());
    let server = {
        let stop = stop_http.clone();
        let app = api::router(state.clone());
        let limits = config.http.clone();
        tokio::spawn(async move {
            crate::daemon::http::serve(listener, app, &limits, async move { stop.notified().await })
                .await
        })
    };
    tracing::info!(%listen, "listening");

    let started = tokio::select! {
        r = start(&config, &state, metrics) => Some(r),
        _ = shutdown.recv() => None,
    };
    let outcome = match started {
        None => {
            // Stopped during start-up: nothing was accepted, so nothing to drain.
            tracing::info!("draining");
            tracing::info!("drained");
            Ok(None)
        }
        Some(Err(e)) => Err(e),
        Some(Ok(running)) => {
            state.readiness.ready();
            tracing::info!(%listen, backend = running.engine.backend_name(), "ready");
            let result = serve_until_drained(&config, &state, &running, &mut shutdown).await;
            Ok(Some((running, result)))
        }
    };

    stop_http.notify_waiters();
    stop_http.notify_one();
    match tokio::time::timeout(HTTP_GRACE, server).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!("http server task: {e}"),
        Err(_) => tracing::warn!("http server did not stop within {HTTP_GRACE:?}"),
    }

    let result = match outcome {
        Err(e) => Err(e),
        Ok(None) => Ok(()),
        Ok(Some((running, result))) => {
            running.finish(result.is_ok()).await;
            result
        }
    };
    if let Err(e) = pid_file.remove() {
        tracing::warn!("{e}");
    }
    match &result {
        Ok(()) => tracing::info!("exiting"),
        Err(e) => tracing::error!(error = %e, "exiting"),
    }
    result
}

/// What start-up built.
struct Running {
    engine: Arc<Engine>,
    pool: PinnedPool,
    timing: Arc<TimingLog>,
    shrinker: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Joins the workers (when they are idle), flushes the timing log and
    /// releases the pool.
    async fn finish(self, clean: bool) {
        self.shrinker.abort();
        if clean {
            let engine = self.engine.clone();
            if let Err(e) = tokio::task::spawn_blocking(move || engine.shutdown()).await {
                tracing::warn!("joining engine workers: {e}");
            }
        }
        if let Err(e) = self.timing.sync() {
            tracing::warn!("flushing the timing log: {e}");
        }
        let released = self.pool.shrink_to(0);
        let left = self.pool.stats().bytes_pinned;
        tracing::info!(
            bytes = released.bytes,
            regions = released.regions,
            still_in_use = left,
            "pinned pool released"
        );
    }
}

async fn serve_until_drained(
    config: &Config,
    state: &AppState,
    running: &Running,
    shutdown: &mut mpsc::UnboundedReceiver<()>,
) -> Result<(), DaemonError> {
    // A closed channel (the sender dropped) counts as a stop request too.
    let _ = shutdown.recv().await;
    tracing::info!("draining");
    state.readiness.draining();
    let cancelled = running.engine.begin_drain();
    if cancelled > 0 {
        tracing::info!(jobs = cancelled, "queued jobs cancelled by the drain");
    }
    let timeout = config.drain_timeout.0;
    tokio::select! {
        _ = running.engine.idle() => {
            tracing::info!("drained");
            Ok(())
        }
        _ = tokio::time::sleep(timeout) => {
            let why = format!("drain_timeout of {} passed with work in flight", humantime::format_duration(timeout));
            tracing::error!("drain aborted: {why}");
            Err(DaemonError::Aborted(why))
        }
        Some(()) = shutdown.recv() => {
            let why = "a second stop signal arrived while draining".to_string();
            tracing::error!("drain aborted: {why}");
            Err(DaemonError::Aborted(why))
        }
    }
}

/// Start-up: budget, devices, pool, parameters, engine. Readiness says which
/// step runs; blocking steps run off the async threads.
async fn start(
    config: &Config,
    state: &Arc<AppState>,
    metrics: Arc<Metrics>,
) -> Result<Running, DaemonError> {
    let timing = Arc::new(
        TimingLog::open(
            &config.paths.timing_log,
            config.paths.timing_rotate_bytes.0,
            config.paths.timing_keep as usize,
        )
        .map_err(|e| step("opening the timing log")(e.to_string()))?,
    );

    state.readiness.starting("sizing the memory budget");
    let budget = match config.memory.budget {
        BudgetSize::Auto => MemoryBudget::auto(config.memory.safety_margin.0)?,
        BudgetSize::Bytes(b) => MemoryBudget::new(b),
    };
    let _ = state.budget.set(budget.clone());

    state.readiness.starting("initialising devices");
    let workers = config.gpu.workers_per_device;
    let devices_cfg = config.gpu.devices.clone();
    let devices = blocking(move || open_devices(&devices_cfg, workers)).await??;
    let cuda_ordinal = devices.iter().find_map(|d| d.backend.device());

    state.readiness.starting("allocating the pinned pool");
    let shapes = preload_shapes(config)?;
    let pool = {
        let config = config.clone();
        let budget = budget.clone();
        let per_partition: Vec<usize> = shapes
            .iter()
            .max_by_key(|s| pool_bytes(s))
            .map(buffer_sizes)
            .unwrap_or_default();
        let device_workers: u32 = devices.iter().map(|d| d.workers).sum();
        blocking(move || {
            make_pool(
                &config,
                budget,
                cuda_ordinal,
                &per_partition,
                device_workers,
            )
        })
        .await??
    };
    let _ = state.pool.set(pool.clone());

    let test_params = match config.test_params {
        true => TestParams::Generate {
            seed: crate::params::DEFAULT_SEED,
        },
        false => TestParams::Refuse,
    };
    let params = Arc::new(
        ParamStore::open(&config.paths.params_dir)
            .map_err(|e| step("opening the parameter directory")(e.to_string()))?
            .with_test_params(test_params)
            .with_budget(budget.clone()),
    );
    for p in &config.preload {
        state
            .readiness
            .starting(format!("loading parameters {}/{}", p.circuit, p.size));
        let t = Instant::now();
        let (store, kind, size) = (params.clone(), p.circuit, p.size);
        blocking(move || store.get_or_generate(kind, size as usize))
            .await?
            .map_err(|e| DaemonError::Params {
                circuit: kind.to_string(),
                size,
                reason: e.to_string(),
            })?;
        tracing::info!(circuit = %kind, size, ms = t.elapsed().as_secs_f64() * 1e3, "parameters loaded");
    }

    let engine = Engine::start(EngineParts {
        pool: pool.clone(),
        budget,
        params,
        devices,
        timing: timing.clone(),
        metrics,
        concurrency: config.synthesis.concurrency,
        lookahead: config.synthesis.lookahead,
        max_jobs: config.queue.max_jobs,
        host: crate::timing::host_name(),
        build: crate::BUILD_HASH.to_string(),
    })
    .map_err(|e| step("starting engine threads")(e.to_string()))?;
    let engine = Arc::new(engine);
    let _ = state.engine.set(engine.clone());

    let shrinker = {
        let pool = pool.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SHRINK_EVERY);
            loop {
                tick.tick().await;
                let report = pool.shrink_idle(Instant::now());
                if report.regions > 0 {
                    tracing::info!(
                        bytes = report.bytes,
                        regions = report.regions,
                        "idle pool regions released"
                    );
                }
            }
        })
    };
    Ok(Running {
        engine,
        pool,
        timing,
        shrinker,
    })
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, DaemonError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| step("start-up task")(e.to_string()))
}

fn preload_shapes(config: &Config) -> Result<Vec<CircuitShape>, DaemonError> {
    config
        .preload
        .iter()
        .map(|p| {
            circuit::shape(p.circuit, p.size as usize).map_err(|e| DaemonError::Params {
                circuit: p.circuit.to_string(),
                size: p.size,
                reason: e.to_string(),
            })
        })
        .collect()
}

/// The five pool buffers of one partition, as synthesis checks them out.
fn buffer_sizes(shape: &CircuitShape) -> Vec<usize> {
    let m = shape.domain_size();
    [m, m, m, shape.num_inputs.max(1), shape.num_aux.max(1)]
        .iter()
        .map(|e| e * 32)
        .collect()
}

/// The devices `gpu.devices` names, each opened and initialised.
fn open_devices(devices: &Devices, workers: u32) -> Result<Vec<Device>, DaemonError> {
    let open = |ordinal: u32| -> Result<Device, DaemonError> {
        let b = CudaBackend::new(ordinal)
            .map_err(|e: BackendError| DaemonError::Device(e.to_string()))?;
        let name = b.name().to_string();
        Ok(Device::new(
            Arc::new(b) as Arc<dyn Backend>,
            workers,
            Some(name),
        ))
    };
    let cpu = || {
        tracing::info!(workers, "using the CPU backend");
        vec![Device::new(
            Arc::new(CpuBackend::new()),
            workers,
            Some("cpu".into()),
        )]
    };
    match devices {
        Devices::List(l) if l.is_empty() => Ok(cpu()),
        Devices::List(l) => l.iter().map(|o| open(*o)).collect(),
        Devices::All if cuda::cuda_available() => (0..cuda::device_count()).map(open).collect(),
        Devices::All => Ok(cpu()),
    }
}

/// Builds the pool with the configured allocator (falling back to pageable
/// memory only when `pool.pageable` allows it) and preallocates it.
fn make_pool(
    config: &Config,
    budget: Arc<MemoryBudget>,
    cuda_ordinal: Option<u32>,
    per_partition: &[usize],
    device_workers: u32,
) -> Result<PinnedPool, DaemonError> {
    let max_bytes = pool_max_bytes(config, budget.total())?;
    let limits = PoolLimits {
        max_bytes,
        idle_shrink_after: config.pool.idle_shrink_after.0,
        checkout_timeout: CHECKOUT_TIMEOUT,
    };
    let choice = match (config.pool.allocator, cuda_ordinal) {
        (AllocatorChoice::Auto, Some(_)) => AllocatorChoice::Cuda,
        (AllocatorChoice::Auto, None) => AllocatorChoice::Mlock,
        (c, _) => c,
    };
    let allocator: Arc<dyn HostAllocator> = match choice {
        AllocatorChoice::Cuda => {
            let ordinal = cuda_ordinal.ok_or_else(|| {
                DaemonError::Device(
                    "pool.allocator = \"cuda\" needs a CUDA device, and none is in use".into(),
                )
            })?;
            Arc::new(
                cuda::host_alloc::CudaHostAllocator::new(ordinal)
                    .map_err(|e| DaemonError::Device(e.to_string()))?,
            )
        }
        AllocatorChoice::Mlock | AllocatorChoice::Auto => Arc::new(MlockAllocator),
        AllocatorChoice::Heap => Arc::new(HeapAllocator),
    };
    // Prove the allocator works here (RLIMIT_MEMLOCK, driver) before relying on it.
    let allocator = match allocator.alloc(crate::pool::page_size()) {
        Ok(region) => {
            // SAFETY: the region was just allocated by this allocator and is unused.
            unsafe { allocator.free(region) };
            allocator
        }
        Err(e) if config.pool.pageable => {
            tracing::warn!(error = %e, "page-locking failed; pool.pageable allows pageable memory, using the heap allocator");
            Arc::new(HeapAllocator)
        }
        Err(source) => {
            return Err(DaemonError::Pool {
                allocator: allocator.name(),
                source,
            })
        }
    };
    let name = allocator.name();
    let pool = PinnedPool::new(allocator, budget, limits);
    let sizes = prealloc_sizes(config, per_partition, device_workers, max_bytes);
    if sizes.is_empty() {
        tracing::info!(allocator = name, "pinned pool allocated 0 bytes in 0 ms");
    } else {
        pool.preallocate(&sizes)
            .map_err(|source| DaemonError::Pool {
                allocator: name,
                source,
            })?;
    }
    Ok(pool)
}

/// The pool's cap: `pool.max_bytes`, or half the budget; it must leave part
/// of the budget for proving's working memory.
fn pool_max_bytes(config: &Config, budget: u64) -> Result<u64, DaemonError> {
    match config.pool.max_bytes {
        None => Ok(budget / 2),
        Some(b) if b.0 < budget => Ok(b.0),
        Some(b) => Err(step("pool.max_bytes")(format!(
            "{} bytes leave nothing of the {budget}-byte memory budget for proving's working memory; \
             set it below the budget (default: half)",
            b.0
        ))),
    }
}

/// Regions to allocate at start: `auto` = one partition's buffers for every
/// partition the pipeline holds at once (synthesis workers, the lookahead
/// queue, device workers); a byte count = as many whole partitions as fit
/// (one region of that size when nothing is preloaded). `auto` stays within
/// `max_bytes`, the pool's cap.
fn prealloc_sizes(
    config: &Config,
    per_partition: &[usize],
    device_workers: u32,
    max_bytes: u64,
) -> Vec<usize> {
    let one: usize = per_partition.iter().sum();
    match config.pool.preallocate {
        BudgetSize::Auto if one == 0 => Vec::new(),
        BudgetSize::Auto => {
            let page = crate::pool::page_size();
            let rounded: u64 = per_partition
                .iter()
                .map(|b| b.div_ceil(page) * page)
                .sum::<usize>() as u64;
            let want = u64::from(config.synthesis.lookahead.max(1) + device_workers);
            let n = want.min(max_bytes / rounded.max(1));
            (0..n).flat_map(|_| per_partition.iter().copied()).collect()
        }
        BudgetSize::Bytes(0) => Vec::new(),
        BudgetSize::Bytes(b) if one == 0 => vec![b as usize],
        BudgetSize::Bytes(b) => {
            let n = (b as usize / one).max(1);
            (0..n).flat_map(|_| per_partition.iter().copied()).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_preallocation_covers_every_pipeline_slot() {
        let mut c = Config::default();
        c.synthesis.concurrency = 2;
        c.synthesis.lookahead = 1;
        let per = [100, 100, 100, 8, 40];
        // lookahead 1 + one device worker, room for plenty.
        assert_eq!(prealloc_sizes(&c, &per, 1, u64::MAX).len(), 2 * 5);
        // Five pages per partition: a cap of 7 pages leaves room for one.
        let page = crate::pool::page_size() as u64;
        assert_eq!(prealloc_sizes(&c, &per, 1, 7 * page).len(), 5);
        c.pool.preallocate = BudgetSize::Bytes(700);
        assert_eq!(prealloc_sizes(&c, &per, 1, u64::MAX).len(), 2 * 5);
        c.pool.preallocate = BudgetSize::Bytes(0);
        assert!(prealloc_sizes(&c, &per, 1, u64::MAX).is_empty());
        c.pool.preallocate = BudgetSize::Bytes(4096);
        assert_eq!(prealloc_sizes(&c, &[], 1, u64::MAX), vec![4096]);
    }
}
