//! The daemon's life in one function, [`run`]: start-up steps in order (each
//! failure names its step), serve until told to stop, drain, release, exit.
//!
//! Operator log lines, at info, in this order: `starting`, `configuration
//! loaded`, `pinned pool allocated <bytes> in <ms>` (the first partitions'
//! share), `ready`, then on the first stop request `draining`, `drained`,
//! and finally `exiting`. The rest of the preallocation is pinned in the
//! background after `ready`: `pinned pool preallocation done` says when,
//! with the bytes and how long the whole preallocation took. A second
//! stop request or the drain timeout aborts: `drain aborted: <why>` at error
//! level, and [`run`] returns [`DaemonError::Aborted`].
//!
//! A daemon started with [`Listen::Handover`] logs `started, waiting to take
//! over` after its start-up, and `took over` once it holds the pid file and
//! the port its predecessor gave up, then `ready`. Every daemon gives up its
//! port and pid file when drained, before it releases its pinned pool.
//!
//! Signals are not handled here: the caller turns each SIGTERM/SIGINT into one
//! message on the `shutdown` channel (first = drain, second = abort), so tests
//! drive the same code with a channel.

use crate::backend::cpu::CpuBackend;
use crate::backend::cuda::fixed_base::CudaFixedBase;
use crate::backend::cuda::{self, CudaBackend};
use crate::backend::{Backend, BackendError, ParamBases};
use crate::budget::{BudgetError, MemoryBudget};
use crate::circuit::CircuitShape;
use crate::daemon::api::{self, AppState};
use crate::daemon::config::{AllocatorChoice, BudgetSize, Config, Devices};
use crate::daemon::engine::{Device, Engine, EngineParts};
use crate::daemon::metrics::Metrics;
use crate::daemon::pidfile::{PidFile, PidFileError};
use crate::daemon::xid_watch::{XidEvent, XidWatch};
use crate::memory_plan::{MemoryPlan, PlanError};
use crate::params::ParamsError;
use crate::params::{ParamStore, TestParams};
use crate::pool::{
    HeapAllocator, HostAllocator, MlockAllocator, PinnedPool, PoolError, PoolLimits,
};
use crate::synthesis::pool_bytes;
use crate::sys::pci::PciAddress;
use crate::timing::TimingLog;
use fleet_wire::api::DeviceState;
use std::sync::atomic::{AtomicBool, Ordering};
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
    #[error("device {ordinal}: {source}")]
    Device {
        ordinal: u32,
        #[source]
        source: BackendError,
    },
    #[error("pool.allocator = \"cuda\" needs a CUDA device, and none is in use")]
    NoCudaDevice,
    #[error("pool.max_bytes: {0}")]
    Plan(#[from] PlanError),
    #[error("parameters for {circuit}/{size}: {source}")]
    Params {
        circuit: String,
        size: u64,
        #[source]
        source: ParamsError,
    },
    #[error("{step}: {source}")]
    Step {
        step: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("drain aborted: {0}")]
    Aborted(String),
    #[error("handover: {0}")]
    Handover(String),
}

fn step<E: Into<Box<dyn std::error::Error + Send + Sync>>>(
    step: &'static str,
) -> impl Fn(E) -> DaemonError {
    move |e| DaemonError::Step {
        step,
        source: e.into(),
    }
}

/// How the daemon comes by its port and pid file.
pub enum Listen {
    /// Taken by the caller before start-up: a plain start.
    Bound {
        pid_file: PidFile,
        listener: TcpListener,
    },
    /// A handover: start-up first (devices, pool, parameters, resident
    /// bases) while the running daemon still serves, then take its pid
    /// file and port as soon as it lets them go (once drained), waiting
    /// at most `wait`. The clients' gap is then the old daemon's drain,
    /// not its drain plus a whole start-up.
    Handover { wait: Duration },
}

/// How often a daemon waiting to take over tries the pid file and port.
const TAKEOVER_POLL: Duration = Duration::from_millis(20);

/// Runs the daemon until the `shutdown` channel says stop (or closes).
/// Relative paths in `config` resolve against the working directory.
pub async fn run(
    config: Config,
    listen: Listen,
    mut shutdown: mpsc::UnboundedReceiver<()>,
) -> Result<(), DaemonError> {
    let (bound, handover) = match listen {
        Listen::Bound { pid_file, listener } => (Some((pid_file, listener)), None),
        Listen::Handover { wait } => (None, Some(wait)),
    };
    let addr = match &bound {
        Some((_, listener)) => listener
            .local_addr()
            .map_err(|e| step("reading the listen address")(e))?,
        // A successor binds once it has taken over (on port 0, a new
        // port, which clients read from beside the pid file as always).
        None => config.listen,
    };
    tracing::info!(
        version = crate::VERSION,
        build = crate::BUILD_HASH,
        pid = std::process::id(),
        "starting"
    );
    tracing::info!(effective = %config.effective(), "configuration loaded");
    if config.grpc.exposed() {
        tracing::warn!(
            listen = ?config.grpc.listen,
            "the gRPC service listens beyond loopback (allow_unauthenticated = true); it takes no token: \
             anyone who reaches this address can submit and cancel proofs"
        );
    }
    if config.exposed_without_token() {
        tracing::warn!(
            listen = %config.listen,
            "the API listens beyond loopback without api_token \
             (allow_unauthenticated = true): anyone who reaches this address can submit and cancel jobs"
        );
    }

    let metrics = Arc::new(Metrics::new(crate::VERSION, crate::BUILD_HASH));
    let state = Arc::new(
        AppState::new(metrics.clone(), config.api_token.clone(), addr)
            .with_http_limits(config.http.clone())
            .with_filecoin_limits(config.filecoin.clone()),
    );
    let stop_http = Arc::new(Notify::new());
    let mut held = None;
    let mut grpc_tasks = Vec::new();
    if let Some((pid_file, listener)) = bound {
        held = Some(serve_on(&config, &state, &stop_http, pid_file, listener)?);
        grpc_tasks = serve_grpc(&config, &state, &stop_http, None).await?;
    }

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
            let taken = match handover {
                None => Ok(true),
                Some(wait) => match take_over(&config, wait, &mut shutdown).await {
                    Ok(Some((pid_file, listener))) => {
                        match serve_on(&config, &state, &stop_http, pid_file, listener) {
                            Ok(h) => {
                                held = Some(h);
                                // The predecessor lets its gRPC port go with
                                // its HTTP one: moments, well inside the wait.
                                serve_grpc(&config, &state, &stop_http, Some(wait))
                                    .await
                                    .map(|t| {
                                        grpc_tasks = t;
                                        true
                                    })
                            }
                            Err(e) => Err(e),
                        }
                    }
                    Ok(None) => Ok(false),
                    Err(e) => Err(e),
                },
            };
            match taken {
                Ok(true) => {
                    state.readiness.ready();
                    tracing::info!(%addr, backend = running.engine.backend_name(), "ready");
                    let result =
                        serve_until_drained(&config, &state, &running, &mut shutdown).await;
                    Ok(Some((running, result)))
                }
                Ok(false) => Ok(Some((running, Ok(())))),
                Err(e) => {
                    running.finish(true).await;
                    Err(e)
                }
            }
        }
    };

    stop_http.notify_waiters();
    stop_http.notify_one();
    let server = held.map(|(pid_file, server)| {
        // The port and the pid file go before the pool is released: a
        // successor waiting to take over serves while this process still
        // unpins its memory (seconds for tens of GiB).
        if let Err(e) = pid_file.remove() {
            tracing::warn!("{e}");
        }
        server
    });
    if let Some(server) = server {
        match tokio::time::timeout(HTTP_GRACE, server).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("http server task: {e}"),
            Err(_) => tracing::warn!("http server did not stop within {HTTP_GRACE:?}"),
        }
    }
    for task in grpc_tasks {
        match tokio::time::timeout(HTTP_GRACE, task).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("gRPC server task: {e}"),
            Err(_) => tracing::warn!("gRPC server did not stop within {HTTP_GRACE:?}"),
        }
    }

    let result = match outcome {
        Err(e) => Err(e),
        Ok(None) => Ok(()),
        Ok(Some((running, result))) => {
            running.finish(result.is_ok()).await;
            result
        }
    };
    match &result {
        Ok(()) => tracing::info!("exiting"),
        Err(e) => tracing::error!(error = %e, "exiting"),
    }
    result
}

/// Records the bound address beside the pid file and serves the API on
/// `listener` until `stop` is notified.
fn serve_on(
    config: &Config,
    state: &Arc<AppState>,
    stop: &Arc<Notify>,
    pid_file: PidFile,
    listener: TcpListener,
) -> Result<(PidFile, tokio::task::JoinHandle<()>), DaemonError> {
    let addr = listener
        .local_addr()
        .map_err(|e| step("reading the listen address")(e))?;
    // A client of a daemon told to listen on port 0 reads the port from here.
    pid_file.record_listen(addr)?;
    let _ = state.bound.set(addr);
    let stop = stop.clone();
    let app = api::router(state.clone());
    let limits = config.http.clone();
    let server = tokio::spawn(async move {
        crate::daemon::http::serve(listener, app, &limits, async move { stop.notified().await })
            .await
    });
    tracing::info!(listen = %addr, "listening");
    Ok((pid_file, server))
}

/// Binds the gRPC socket and port the config names (none: nothing to
/// serve) and serves `cuzk.v1.ProvingEngine` on them until `stop`.
/// `takeover`: a handover's wait, within which a port the predecessor still
/// holds is tried again.
async fn serve_grpc(
    config: &Config,
    state: &Arc<AppState>,
    stop: &Arc<Notify>,
    takeover: Option<Duration>,
) -> Result<Vec<tokio::task::JoinHandle<()>>, DaemonError> {
    if config.grpc.listen.is_none() && config.grpc.socket.is_none() {
        return Ok(Vec::new());
    }
    let listeners = crate::daemon::grpc::listen::bind(&config.grpc, takeover)
        .await
        .map_err(step("binding the gRPC service"))?;
    tracing::info!(listen = %listeners.describe(), "gRPC listening");
    Ok(crate::daemon::grpc::spawn(
        &config.grpc,
        state.clone(),
        listeners,
        stop.clone(),
    ))
}

/// Waits, at most `wait`, for the running daemon to give up the pid file
/// and the port; `None` when told to stop first.
async fn take_over(
    config: &Config,
    wait: Duration,
    shutdown: &mut mpsc::UnboundedReceiver<()>,
) -> Result<Option<(PidFile, TcpListener)>, DaemonError> {
    let begin = Instant::now();
    let from = crate::daemon::pidfile::read_pid(&config.paths.pid_file).ok();
    tracing::info!(
        listen = %config.listen,
        from = ?from,
        wait = %humantime::format_duration(wait),
        "started, waiting to take over"
    );
    loop {
        let last = match PidFile::acquire(&config.paths.pid_file) {
            // The old daemon removes its pid file a moment before its
            // listener is gone: a refused bind is tried again.
            Ok(pid_file) => match TcpListener::bind(config.listen).await {
                Ok(listener) => {
                    tracing::info!(
                        from = ?from,
                        waited_ms = begin.elapsed().as_secs_f64() * 1e3,
                        "took over"
                    );
                    return Ok(Some((pid_file, listener)));
                }
                Err(e) => format!("binding {}: {e}", config.listen),
            },
            Err(e) => e.to_string(),
        };
        if begin.elapsed() >= wait {
            return Err(DaemonError::Handover(format!(
                "the running daemon did not let go within {}: {last}",
                humantime::format_duration(wait)
            )));
        }
        tokio::select! {
            _ = tokio::time::sleep(TAKEOVER_POLL) => {}
            _ = shutdown.recv() => {
                tracing::info!("stop requested while waiting to take over");
                return Ok(None);
            }
        }
    }
}

/// What start-up built.
struct Running {
    engine: Arc<Engine>,
    pool: PinnedPool,
    timing: Arc<TimingLog>,
    shrinker: tokio::task::JoinHandle<()>,
    growing: Option<Background>,
    xid_watch: Option<XidWatch>,
}

/// The preallocation still being pinned after `ready`. Dropped (a start-up
/// step after the pool failed), it stops starting new slabs.
struct Background {
    cancel: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Background {
    /// Stops it starting new slabs and waits for the ones being pinned
    /// (each takes a fraction of a second), so the release sees them all.
    async fn stop(mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        let Some(thread) = self.thread.take() else {
            return;
        };
        match tokio::task::spawn_blocking(move || thread.join()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => tracing::warn!("the background preallocation panicked"),
            Err(e) => tracing::warn!("joining the background preallocation: {e}"),
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
    }
}

impl Running {
    /// Joins the workers (when they are idle), flushes the timing log and
    /// releases the pool.
    async fn finish(self, clean: bool) {
        self.shrinker.abort();
        if let Some(growing) = self.growing {
            growing.stop().await;
        }
        if let Some(w) = self.xid_watch {
            // Returns within one NVML wait (a fraction of a second).
            let _ = tokio::task::spawn_blocking(move || w.stop()).await;
        }
        if clean {
            let engine = self.engine.clone();
            if let Err(e) = tokio::task::spawn_blocking(move || engine.shutdown()).await {
                tracing::warn!("joining engine workers: {e}");
            }
        }
        if let Err(e) = self.timing.sync() {
            tracing::warn!("flushing the timing log: {e}");
        }
        let pool = self.pool.clone();
        let t = Instant::now();
        // Slabs are unpinned on several threads: off the async ones.
        let released = match tokio::task::spawn_blocking(move || pool.shrink_to(0)).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("releasing the pool: {e}");
                Default::default()
            }
        };
        let left = self.pool.stats().bytes_pinned;
        tracing::info!(
            bytes = released.bytes,
            regions = released.regions,
            still_in_use = left,
            ms = t.elapsed().as_secs_f64() * 1e3,
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
        .map_err(step("opening the timing log"))?,
    );

    state.readiness.starting("sizing the memory budget");
    let budget = match config.memory.budget {
        BudgetSize::Auto => MemoryBudget::auto(config.memory.safety_margin.0)?,
        BudgetSize::Bytes(b) => MemoryBudget::new(b),
    };
    let _ = state.budget.set(budget.clone());
    let memory = MemoryPlan::new(budget.total(), config.pool.max_bytes.map(|b| b.0))?;

    state.readiness.starting("initialising devices");
    let workers = config.gpu.workers_per_device;
    let devices_cfg = config.gpu.devices.clone();
    let Opened {
        devices,
        unavailable,
        pci,
    } = blocking(move || open_devices(&devices_cfg, workers)).await??;
    let cuda_ordinal = devices.iter().find_map(|d| d.backend.device());

    let test_params = match config.test_params {
        true => TestParams::Generate {
            seed: crate::params::DEFAULT_SEED,
        },
        false => TestParams::Refuse,
    };
    let mut store = ParamStore::open(&config.paths.params_dir)
        .map_err(step("opening the parameter directory"))?
        .with_test_params(test_params)
        .with_budget(budget.clone());
    if let (true, Some(ordinal)) = (config.test_params, cuda_ordinal) {
        // Generated parameters are the CPU's byte for byte either way; a
        // device that cannot take the work leaves it to the CPU.
        match blocking(move || CudaFixedBase::open(ordinal)).await? {
            Ok(engine) => store = store.with_fixed_base(Arc::new(engine)),
            Err(e) => {
                tracing::warn!(device = ordinal, error = %e, "test parameters will be generated on the CPU")
            }
        }
    }
    let params = Arc::new(store);

    state.readiness.starting("allocating the pinned pool");
    let shapes = preload_shapes(config, &params)?;
    let (pool, growing) = {
        let config = config.clone();
        let budget = budget.clone();
        let per_partition = shapes.iter().map(pool_bytes).max().unwrap_or(0);
        let device_workers: u32 = devices.iter().map(|d| d.workers).sum();
        blocking(move || {
            make_pool(
                &config,
                budget,
                memory,
                cuda_ordinal,
                per_partition,
                device_workers,
            )
        })
        .await??
    };
    let _ = state.pool.set(pool.clone());
    for p in &config.preload {
        state
            .readiness
            .starting(format!("loading parameters {}/{}", p.circuit, p.size));
        let t = Instant::now();
        let (store, kind, size) = (params.clone(), p.circuit, p.size);
        let loaded = blocking(move || store.get_or_generate(kind, size as usize))
            .await?
            .map_err(|source| DaemonError::Params {
                circuit: kind.to_string(),
                size,
                source,
            })?;
        tracing::info!(circuit = %kind, size, ms = t.elapsed().as_secs_f64() * 1e3, "parameters loaded");
        // Device backends keep the bases (and their tables of multiples)
        // resident under the file's checksum: done here, the first job
        // does not wait for it.
        let Ok(meta) = params.meta(kind, size as usize) else {
            continue;
        };
        for (i, d) in devices.iter().enumerate() {
            state
                .readiness
                .starting(format!("uploading the bases of {kind}/{size}"));
            let (backend, loaded, sha256) =
                (d.backend.clone(), loaded.clone(), meta.sha256.clone());
            blocking(move || backend.make_resident(&ParamBases::of(&sha256, &loaded)))
                .await?
                .map_err(|source| DaemonError::Device {
                    ordinal: d.ordinal(i),
                    source,
                })?;
        }
    }

    let engine = Engine::start(EngineParts {
        pool: pool.clone(),
        budget,
        memory,
        params,
        devices,
        unavailable,
        timing: timing.clone(),
        metrics: metrics.clone(),
        filecoin: crate::daemon::engine::filecoin::FilecoinKeys::new(
            config.filecoin.param_cache.clone(),
            config.filecoin.allow_test_params,
        ),
        compiled: crate::daemon::engine::compiled::CompiledSet::new(
            config.synthesis.compiled,
            config.synthesis.check_first,
        ),
        concurrency: config.synthesis.concurrency,
        lookahead: config.synthesis.lookahead,
        max_jobs: config.queue.max_jobs,
        host: crate::sys::hostname(),
        build: crate::BUILD_HASH.to_string(),
    })
    .map_err(step("starting engine threads"))?;
    let engine = Arc::new(engine);
    for &circuit in &config.filecoin.preload {
        state
            .readiness
            .starting(format!("loading Filecoin parameters {circuit}"));
        let t = Instant::now();
        let engine = engine.clone();
        blocking(move || {
            let entry =
                crate::filecoin::kind::param_set(circuit).cache_entry(engine.filecoin_dir())?;
            engine
                .preload_filecoin(&entry, circuit)
                .map_err(|e| match e {
                    crate::daemon::engine::SubmitError::Filecoin(e) => e,
                    other => crate::filecoin::FilecoinError::ProofCrates {
                        context: "loading the parameters",
                        reason: other.to_string(),
                    },
                })
        })
        .await?
        .map_err(step("filecoin.preload"))?;
        tracing::info!(%circuit, ms = t.elapsed().as_secs_f64() * 1e3, "Filecoin parameters preloaded");
    }
    write_devices_record(&timing, &engine);
    let _ = state.engine.set(engine.clone());
    let xid_watch = match pci.is_empty() {
        true => None,
        false => watch_xids(pci, engine.clone()).await,
    };

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
        growing,
        xid_watch,
    })
}

/// Starts the XID watch over the opened GPUs: a critical XID takes its GPU
/// out of rotation. Without NVML (or permission to register) the daemon
/// proves on unwatched, and says so.
async fn watch_xids(pci: Vec<(u32, PciAddress)>, engine: Arc<Engine>) -> Option<XidWatch> {
    let critical = fleet_wire::health::CRITICAL_XIDS.to_vec();
    let report = move |ev: XidEvent| engine.on_xid(&ev);
    match blocking(move || XidWatch::start(pci, critical, report)).await {
        Ok(Ok(w)) => {
            tracing::info!(devices = ?w.watching, "watching NVML for critical XIDs");
            Some(w)
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "XID watch off: {e}");
            None
        }
        Err(e) => {
            tracing::warn!(error = %e, "XID watch off: {e}");
            None
        }
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, DaemonError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(step("start-up task"))
}

fn preload_shapes(config: &Config, params: &ParamStore) -> Result<Vec<CircuitShape>, DaemonError> {
    config
        .preload
        .iter()
        .map(|p| {
            params
                .shape(p.circuit, p.size as usize)
                .map_err(|source| DaemonError::Params {
                    circuit: p.circuit.to_string(),
                    size: p.size,
                    source,
                })
        })
        .collect()
}

/// Tells the timing log which devices this daemon proves on, so a report
/// shows one that never gets work instead of leaving it out.
fn write_devices_record(timing: &TimingLog, engine: &Engine) {
    let rec = fleet_wire::timing::DevicesRecord {
        v: fleet_wire::timing::TIMING_SCHEMA_VERSION,
        ts_ms: crate::sys::clock::unix_millis(),
        host: crate::sys::hostname(),
        build: crate::BUILD_HASH.to_string(),
        backend: engine.backend_name().to_string(),
        devices: engine
            .devices()
            .iter()
            .filter(|d| d.in_rotation)
            .filter_map(|d| d.ordinal)
            .collect(),
    };
    if let Err(e) = timing.devices(&rec) {
        tracing::warn!("{e}");
    }
}

/// The devices `gpu.devices` names, each opened and initialised. One that
/// fails to initialise is left out of rotation (logged, listed in `/status`
/// with its error) while the others prove; start-up fails only when none
/// opens.
fn open_devices(devices: &Devices, workers: u32) -> Result<Opened, DaemonError> {
    let cpu = || {
        tracing::info!(workers, "using the CPU backend");
        let d = Device::new(Arc::new(CpuBackend::new()), workers, Some("cpu".into()));
        Opened {
            devices: vec![d],
            ..Default::default()
        }
    };
    let ordinals: Vec<u32> = match devices {
        Devices::List(l) if l.is_empty() => return Ok(cpu()),
        Devices::List(l) => l.clone(),
        Devices::All if cuda::cuda_available() => (0..cuda::device_count()).collect(),
        Devices::All => return Ok(cpu()),
    };
    let (mut opened, mut first_error) = (Opened::default(), None);
    for ordinal in ordinals {
        match CudaBackend::new(ordinal) {
            Ok(b) => {
                let name = b.name().to_string();
                match b.pci_address() {
                    Ok(a) => {
                        tracing::info!(device = ordinal, name = %name, pci = %a, workers, "device opened");
                        opened.pci.push((ordinal, a));
                    }
                    Err(e) => {
                        tracing::warn!(device = ordinal, name = %name, workers, error = %e, "device opened; its PCI address is unknown, so its XIDs go unwatched");
                    }
                }
                opened.devices.push(Device::new(
                    Arc::new(b) as Arc<dyn Backend>,
                    workers,
                    Some(name),
                ));
            }
            Err(source) => {
                tracing::error!(device = ordinal, error = %source, "device taken out of rotation: it failed to initialise");
                opened.unavailable.push(DeviceState {
                    backend: "cuda".into(),
                    ordinal: Some(ordinal),
                    name: None,
                    workers: 0,
                    busy: 0,
                    partitions_done: 0,
                    in_rotation: false,
                    error: Some(source.to_string()),
                    proving: Vec::new(),
                });
                first_error.get_or_insert(DaemonError::Device { ordinal, source });
            }
        }
    }
    match (opened.devices.is_empty(), first_error) {
        (true, Some(e)) => Err(e),
        _ => Ok(opened),
    }
}

/// What [`open_devices`] opened.
#[derive(Default)]
struct Opened {
    devices: Vec<Device>,
    /// Named in the config, failed to initialise.
    unavailable: Vec<DeviceState>,
    /// CUDA ordinal and PCI address of each opened GPU, for the XID watch.
    pci: Vec<(u32, PciAddress)>,
}

/// Builds the pool with the configured allocator (falling back to pageable
/// memory only when `pool.pageable` allows it) and pins the first
/// partitions' share of the preallocation; the rest is left to a background
/// thread, returned with the pool.
fn make_pool(
    config: &Config,
    budget: Arc<MemoryBudget>,
    memory: MemoryPlan,
    cuda_ordinal: Option<u32>,
    per_partition: u64,
    device_workers: u32,
) -> Result<(PinnedPool, Option<Background>), DaemonError> {
    let max_bytes = memory.pool;
    let limits = PoolLimits {
        max_bytes,
        slab_bytes: config.pool.slab_size.0,
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
            let ordinal = cuda_ordinal.ok_or(DaemonError::NoCudaDevice)?;
            Arc::new(
                cuda::host_alloc::CudaHostAllocator::new(ordinal)
                    .map_err(|source| DaemonError::Device { ordinal, source })?,
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
    let plan = prealloc_plan(
        config,
        per_partition,
        device_workers,
        max_bytes,
        pool.limits().slab_bytes,
    );
    if plan.total == 0 {
        tracing::info!(allocator = name, "pinned pool allocated 0 bytes in 0 ms");
        return Ok((pool, None));
    }
    let started = Instant::now();
    pool.preallocate(plan.first)
        .map_err(|source| DaemonError::Pool {
            allocator: name,
            source,
        })?;
    let rest = plan.total - plan.first;
    if rest == 0 {
        log_preallocation_done(plan.total, started);
        return Ok((pool, None));
    }
    let cancel = Arc::new(AtomicBool::new(false));
    let thread = {
        let (pool, cancel) = (pool.clone(), cancel.clone());
        std::thread::Builder::new()
            .name("pool-prealloc".into())
            .spawn(move || match pool.preallocate_cancellable(rest, &cancel) {
                Ok(_) if cancel.load(Ordering::Relaxed) => tracing::info!(
                    bytes = pool.stats().bytes_pinned,
                    "pinned pool preallocation stopped by the drain"
                ),
                Ok(_) => log_preallocation_done(plan.total, started),
                // Not fatal: the pool grows on demand, through the budget.
                Err(e) => tracing::warn!(
                    error = %e,
                    bytes = pool.stats().bytes_pinned,
                    "pinned pool preallocation stopped early; the pool grows on demand"
                ),
            })
            .map_err(step("starting the background preallocation"))?
    };
    Ok((
        pool,
        Some(Background {
            cancel,
            thread: Some(thread),
        }),
    ))
}

fn log_preallocation_done(total: u64, started: Instant) {
    let ms = started.elapsed().as_secs_f64() * 1e3;
    tracing::info!(
        bytes = total,
        ms,
        "pinned pool preallocation done: {total} bytes in {ms:.0} ms"
    );
}

/// How much to pin at start, and how much of it before `ready`.
#[derive(Debug, PartialEq, Eq)]
struct PreallocPlan {
    total: u64,
    /// Pinned before `ready`: whole slabs holding the buffers of one
    /// partition per device worker, the first ones to be proved.
    first: u64,
}

/// `auto` = one partition's buffers for every partition the pipeline holds
/// at once (the lookahead queue and the device workers); a byte count = that
/// many bytes. Either stays within `max_bytes`, the pool's cap (the config
/// check refuses an explicit size above an explicit cap).
fn prealloc_plan(
    config: &Config,
    per_partition: u64,
    device_workers: u32,
    max_bytes: u64,
    slab: u64,
) -> PreallocPlan {
    let total = match config.pool.preallocate {
        BudgetSize::Auto if per_partition == 0 => 0,
        BudgetSize::Auto => {
            let want = u64::from(config.synthesis.lookahead.max(1)) + u64::from(device_workers);
            want.min(max_bytes / per_partition) * per_partition
        }
        BudgetSize::Bytes(b) => b.min(max_bytes),
    };
    let first_partitions = per_partition.saturating_mul(u64::from(device_workers.max(1)));
    let first = first_partitions
        .max(1)
        .div_ceil(slab)
        .saturating_mul(slab)
        .min(total);
    PreallocPlan { total, first }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_preallocation_covers_every_pipeline_slot() {
        let mut c = Config::default();
        c.synthesis.concurrency = 2;
        c.synthesis.lookahead = 1;
        let gib = 1u64 << 30;
        // lookahead 1 + one device worker, room for plenty; the device
        // worker's partition is pinned before ready, in whole slabs.
        assert_eq!(
            prealloc_plan(&c, 100, 1, u64::MAX, gib),
            PreallocPlan {
                total: 200,
                first: 200
            }
        );
        let p = prealloc_plan(&c, 3 * gib, 2, u64::MAX, gib);
        assert_eq!((p.total, p.first), (9 * gib, 6 * gib));
        // A cap of 7 GiB leaves room for two 3 GiB partitions.
        assert_eq!(prealloc_plan(&c, 3 * gib, 1, 7 * gib, gib).total, 6 * gib);
    }

    #[test]
    fn a_fixed_preallocation_is_rounded_within_the_cap() {
        let mut c = Config::default();
        let gib = 1u64 << 30;
        // The case: 32 GiB preallocated, 32 GiB cap, partitions of
        // 2^10 constraints that do not divide it: exactly the cap.
        c.pool.preallocate = BudgetSize::Bytes(32 * gib);
        let p = prealloc_plan(&c, 5 * 32 * 1024, 1, 32 * gib, gib);
        assert_eq!((p.total, p.first), (32 * gib, gib));
        assert_eq!(prealloc_plan(&c, 0, 1, 16 * gib, gib).total, 16 * gib);
        c.pool.preallocate = BudgetSize::Bytes(0);
        assert_eq!(prealloc_plan(&c, 100, 1, u64::MAX, gib).total, 0);
        c.pool.preallocate = BudgetSize::Bytes(4096);
        assert_eq!(
            prealloc_plan(&c, 0, 1, u64::MAX, gib),
            PreallocPlan {
                total: 4096,
                first: 4096
            }
        );
    }
}
