//! The pipelined engine: partitions of every job flow through synthesis
//! worker threads into device worker threads over bounded channels, so the
//! next partition is synthesised while the current one is on the device.
//!
//! ```text
//! submit ─▶ tasks (FIFO, unbounded; the job count is bounded by queue.max_jobs)
//!        ─▶ synthesis workers ×concurrency: budget reservation, pool checkout, synthesize
//!        ─▶ ready queue (at most `lookahead` partitions ahead) ─▶ device workers ×(devices × workers_per_device):
//!           prove, verify ─▶ the job's result; timing record, TIMELINE events, metrics
//! ```
//!
//! With `lookahead = 0` there is no synthesis stage: each device worker
//! synthesises a partition and then proves it (pipelining off).
//!
//! Memory admission: every partition takes a budget reservation for its
//! working set (MSM scalars, backend scratch) before synthesis, then checks
//! its buffers out of the pool, which reserves against the same budget but
//! may hold at most `pool.max_bytes` of it (half the budget by default), so
//! pool growth and working sets never wait on each other. Both waits block
//! (FIFO) while memory is short: jobs wait instead of the host running out.
//! A partition never waits for memory while holding pool buffers, so waits
//! cannot form a cycle. A panic in synthesis or
//! proving fails that job with the panic's message; the workers live on.

use crate::backend::{Backend, BackendTimes};
use crate::budget::{MemoryBudget, Reservation};
use crate::circuit::{self, CircuitKind, CircuitShape, MAX_SIZE, MIN_SIZE};
use crate::daemon::metrics::Metrics;
use crate::params::{ParamStore, Params};
use crate::pool::PinnedPool;
use crate::prove::{partition_randomness, prove_synthesized, IdentifiedKey, ProvingKey};
use crate::synthesis::{pool_bytes, synthesize, Synthesized};
use crate::timing::TimingLog;
use bellperson::groth16::{prepare_verifying_key, verify_proof, PreparedVerifyingKey, Proof};
use blstrs::{Bls12, Scalar};
use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use ff::PrimeField;
use fleet_wire::api::{
    DeviceState, JobResult, JobState, JobStatus, PartitionProof, QueueStats, SubmitRequest,
    TimingSummary,
};
use fleet_wire::timing::{
    JobTag, PartitionRecord, Phase, ProofRecord, TimelineEvent, TimelineKind, TIMING_SCHEMA_VERSION,
};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Finished jobs kept for `GET /v1/jobs/{id}` before the oldest are forgotten.
const KEEP_FINISHED: usize = 1024;

/// Why a submission was refused; each maps to one HTTP status in the API.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error("{0}")]
    UnknownCircuit(String),
    #[error("{0}")]
    SizeOutOfRange(String),
    #[error("partitions must be between 1 and {max}, got {got}")]
    BadPartitions { got: u32, max: u32 },
    #[error(
        "a partition of {circuit} at size {size} needs {pool_need} bytes of pool buffers and \
         {working} bytes of working memory (its parameters included when not loaded yet), but \
         the pool may hold {pool_max} bytes and the rest of the memory budget (less the \
         parameters loaded) is {working_max} bytes"
    )]
    TooLarge {
        circuit: String,
        size: u64,
        pool_need: u64,
        pool_max: u64,
        working: u64,
        working_max: u64,
    },
    #[error("queue is full: {depth} jobs accepted and not finished (queue.max_jobs = {max}); retry later")]
    QueueFull { depth: u64, max: u64 },
    #[error("the daemon is draining and accepts no new jobs")]
    Draining,
    #[error("{0}")]
    Busy(String),
    #[error("{0}; the daemon's config does not allow TEST-ONLY parameters (test_params)")]
    ParamsMissing(String),
    #[error("cannot load parameters for {circuit}/{size}: {reason}")]
    Params {
        circuit: String,
        size: u64,
        reason: String,
    },
}

/// Most partitions one job may ask for.
pub const MAX_PARTITIONS: u32 = 1024;

/// One compute device (or the CPU) and the workers that share it.
pub struct Device {
    pub backend: Arc<dyn Backend>,
    /// Worker threads on this device.
    pub workers: u32,
    pub name: Option<String>,
    busy: AtomicU32,
    done: AtomicU64,
}

impl Device {
    pub fn new(backend: Arc<dyn Backend>, workers: u32, name: Option<String>) -> Self {
        Self {
            backend,
            workers,
            name,
            busy: AtomicU32::new(0),
            done: AtomicU64::new(0),
        }
    }
}

/// What the engine is built from.
pub struct EngineParts {
    pub pool: PinnedPool,
    pub budget: Arc<MemoryBudget>,
    pub params: Arc<ParamStore>,
    pub devices: Vec<Device>,
    pub timing: Arc<TimingLog>,
    pub metrics: Arc<Metrics>,
    pub concurrency: u32,
    pub lookahead: u32,
    pub max_jobs: u32,
    pub host: String,
    pub build: String,
}

struct JobEntry {
    req: SubmitRequest,
    state: JobState,
    submitted: Instant,
    submitted_ms: u64,
    started: bool,
    partitions_done: u32,
    proofs: Vec<Option<PartitionProof>>,
    phases_ms: BTreeMap<Phase, f64>,
    error: Option<String>,
    cancelled: Arc<AtomicBool>,
    total_ms: f64,
}

impl JobEntry {
    fn status(&self, id: &str, backend: &str) -> JobStatus {
        let result = (self.state == JobState::Done).then(|| JobResult {
            proofs: self.proofs.iter().flatten().cloned().collect(),
            verified: self
                .proofs
                .iter()
                .all(|p| p.as_ref().is_some_and(|p| p.verified)),
            backend: backend.to_string(),
            timing: TimingSummary {
                total_ms: self.total_ms,
                phases_ms: self.phases_ms.clone(),
            },
        });
        JobStatus {
            job_id: id.to_string(),
            state: self.state,
            circuit: self.req.circuit.clone(),
            size: self.req.size,
            partitions: self.req.partitions,
            partitions_done: self.partitions_done,
            submitted_ms: self.submitted_ms,
            error: self.error.clone(),
            result,
        }
    }
}

#[derive(Default)]
struct Jobs {
    map: HashMap<String, JobEntry>,
    finished: VecDeque<String>,
    next_id: u64,
}

impl Jobs {
    fn unfinished(&self) -> u64 {
        self.map.values().filter(|j| !j.state.is_finished()).count() as u64
    }
}

/// One partition on its way through the pipeline.
struct Task {
    job_id: String,
    partition: u32,
    partitions: u32,
    kind: CircuitKind,
    size: u64,
    witness_seed: u64,
    rs_seed: u64,
    submitted: Instant,
    cancelled: Arc<AtomicBool>,
}

/// A synthesised partition waiting for a device.
struct Ready {
    task: Task,
    syn: Synthesized,
    params: Arc<Params>,
    /// The parameter file's checksum: the key under which a device keeps
    /// the bases resident (None: uploaded per MSM).
    params_sha256: Option<String>,
    inputs: Vec<Scalar>,
    reservation: Reservation,
    phases_ms: BTreeMap<Phase, f64>,
    queued: Instant,
    pinned: bool,
}

/// Prepared verifying keys, one per circuit and size.
type PvkCache = Mutex<HashMap<(CircuitKind, u64), Arc<PreparedVerifyingKey<Bls12>>>>;

/// A partition that failed before reaching a device.
struct Failed {
    task: Task,
    error: String,
    phases_ms: BTreeMap<Phase, f64>,
}

struct Shared {
    jobs: Mutex<Jobs>,
    /// Bumped on every job state change; waiters re-check their job.
    changed: tokio::sync::watch::Sender<u64>,
    tasks_tx: Mutex<Option<Sender<Task>>>,
    accepting: AtomicBool,
    pool: PinnedPool,
    budget: Arc<MemoryBudget>,
    params: Arc<ParamStore>,
    devices: Vec<Device>,
    timing: Arc<TimingLog>,
    metrics: Arc<Metrics>,
    max_jobs: u32,
    host: String,
    build: String,
    backend_name: &'static str,
    shapes: Mutex<HashMap<(CircuitKind, u64), CircuitShape>>,
    pvks: PvkCache,
    partitions_in_flight: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
    last_proof_ms: AtomicU64,
}

/// The running engine. Dropping it without [`Engine::shutdown`] leaves the
/// worker threads to finish on their own.
pub struct Engine {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Held while a submission counts the constraints of a (circuit, size)
    /// not seen before: one core at most, whatever clients send.
    counting: Mutex<()>,
}

/// How long a submission waits for another one's constraint count before
/// it is told to retry (503).
const COUNTING_WAIT: Duration = Duration::from_secs(5);

/// A lower bound of a partition's domain at `size`, known without counting:
/// a chain fills exactly `size` padded constraints; a sha256 circuit takes
/// whole blocks (fewer than 2^15 constraints each) up to `size`, at least one.
fn domain_lower_bound(kind: CircuitKind, size: u64) -> u64 {
    let padded = match kind {
        CircuitKind::Chain => size,
        CircuitKind::Sha256 => size.saturating_sub(1 << 15).max(1 << 14),
    };
    padded.max(1).next_power_of_two()
}

fn unix_ms() -> u64 {
    crate::sys::clock::unix_millis()
}

fn unix_us() -> u64 {
    crate::sys::clock::unix_micros()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Heap bytes proving one partition of `shape` allocates besides its pool
/// buffers: the gathered scalars of the A and B MSMs and the backends'
/// per-call scratch (bucket sums, FFT twiddles), bounded by two vectors the
/// size of the larger query.
pub fn working_bytes(shape: &CircuitShape) -> u64 {
    let vars = (shape.num_inputs + shape.num_aux) as u64;
    2 * vars.max(shape.domain_size() as u64) * 32
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        format!("panicked: {s}")
    } else if let Some(s) = p.downcast_ref::<String>() {
        format!("panicked: {s}")
    } else {
        "panicked".to_string()
    }
}

impl Engine {
    /// Starts the worker threads.
    pub fn start(parts: EngineParts) -> std::io::Result<Self> {
        let backend_name = parts
            .devices
            .first()
            .map(|d| d.backend.kind().as_str())
            .unwrap_or("cpu");
        let (tasks_tx, tasks_rx) = unbounded::<Task>();
        let (changed, _) = tokio::sync::watch::channel(0u64);
        let shared = Arc::new(Shared {
            jobs: Mutex::new(Jobs::default()),
            changed,
            tasks_tx: Mutex::new(Some(tasks_tx)),
            accepting: AtomicBool::new(true),
            pool: parts.pool,
            budget: parts.budget,
            params: parts.params,
            devices: parts.devices,
            timing: parts.timing,
            metrics: parts.metrics,
            max_jobs: parts.max_jobs,
            host: parts.host,
            build: parts.build,
            backend_name,
            shapes: Mutex::new(HashMap::new()),
            pvks: Mutex::new(HashMap::new()),
            partitions_in_flight: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            last_proof_ms: AtomicU64::new(0),
        });
        let mut threads = Vec::new();
        let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new().name(name).spawn(f)
        };
        if parts.lookahead == 0 {
            for (d, dev) in shared.devices.iter().enumerate() {
                for w in 0..dev.workers {
                    let (s, rx) = (shared.clone(), tasks_rx.clone());
                    threads.push(spawn(
                        format!("prove-{d}.{w}"),
                        Box::new(move || unpipelined_worker(&s, d, rx)),
                    )?);
                }
            }
        } else {
            // `lookahead` slots: a synthesis worker takes one before it starts a
            // partition, a device worker gives it back when it picks the
            // partition up, so at most `lookahead` partitions are synthesised
            // (or being synthesised) and not yet on a device.
            let slots = bounded::<()>(parts.lookahead as usize);
            for _ in 0..parts.lookahead {
                let _ = slots.0.send(());
            }
            let (ready_tx, ready_rx) = unbounded::<Ready>();
            for i in 0..parts.concurrency {
                let (s, rx, tx) = (shared.clone(), tasks_rx.clone(), ready_tx.clone());
                let slots = slots.clone();
                threads.push(spawn(
                    format!("synth-{i}"),
                    Box::new(move || synthesis_worker(&s, rx, tx, slots)),
                )?);
            }
            for (d, dev) in shared.devices.iter().enumerate() {
                for w in 0..dev.workers {
                    let (s, rx, slot_tx) = (shared.clone(), ready_rx.clone(), slots.0.clone());
                    threads.push(spawn(
                        format!("device-{d}.{w}"),
                        Box::new(move || device_worker(&s, d, rx, slot_tx)),
                    )?);
                }
            }
        }
        Ok(Self {
            shared,
            threads: Mutex::new(threads),
            counting: Mutex::new(()),
        })
    }

    /// The shape of `kind` at `size`, counted once and cached; one count
    /// runs at a time.
    fn shape(&self, kind: CircuitKind, size: u64) -> Result<CircuitShape, SubmitError> {
        if let Some(s) = self.shared.shapes.lock().get(&(kind, size)) {
            return Ok(*s);
        }
        let Some(_counting) = self.counting.try_lock_for(COUNTING_WAIT) else {
            return Err(SubmitError::Busy(format!(
                "another submission is counting the constraints of a new circuit size; retry {kind} size {size} later"
            )));
        };
        // Counted by whoever held the lock before us?
        if let Some(s) = self.shared.shapes.lock().get(&(kind, size)) {
            return Ok(*s);
        }
        let shape = circuit::shape(kind, size as usize)
            .map_err(|e| SubmitError::SizeOutOfRange(e.to_string()))?;
        self.shared.shapes.lock().insert((kind, size), shape);
        Ok(shape)
    }

    /// Bytes one partition of `kind`/`size` reserves in total.
    pub fn partition_bytes(&self, kind: CircuitKind, size: u64) -> Result<u64, SubmitError> {
        let shape = self.shape(kind, size)?;
        Ok(pool_bytes(&shape) + working_bytes(&shape))
    }

    /// Validates and queues a job.
    pub fn submit(&self, req: SubmitRequest) -> Result<String, SubmitError> {
        if !self.shared.accepting.load(Ordering::SeqCst) {
            return Err(SubmitError::Draining);
        }
        let kind: CircuitKind = req
            .circuit
            .parse()
            .map_err(|e: circuit::CircuitError| SubmitError::UnknownCircuit(e.to_string()))?;
        if !(MIN_SIZE as u64..=MAX_SIZE as u64).contains(&req.size) {
            return Err(SubmitError::SizeOutOfRange(format!(
                "size {} is out of range: it must be between {MIN_SIZE} (2^4) and {MAX_SIZE} (2^27) constraints",
                req.size
            )));
        }
        if req.partitions == 0 || req.partitions > MAX_PARTITIONS {
            return Err(SubmitError::BadPartitions {
                got: req.partitions,
                max: MAX_PARTITIONS,
            });
        }
        // The pool may hold `pool_max`; working sets and loaded parameters
        // live in the rest of the budget.
        let budget = self.shared.budget.total();
        let pool_max = self.shared.pool.limits().max_bytes.min(budget);
        let working_max = (budget - pool_max).saturating_sub(self.shared.params.loaded_bytes());
        // Refuse what cannot fit before spending a core on counting constraints.
        let m = domain_lower_bound(kind, req.size);
        let g1 = std::mem::size_of::<blstrs::G1Affine>() as u64;
        let (pool_low, working_low) = (3 * 32 * m, 2 * 32 * m + m * g1);
        if pool_low > pool_max || working_low > working_max {
            return Err(SubmitError::TooLarge {
                circuit: kind.to_string(),
                size: req.size,
                pool_need: pool_low,
                pool_max,
                working: working_low,
                working_max,
            });
        }
        if !self.shared.params.can_provide(kind, req.size as usize) {
            return Err(SubmitError::ParamsMissing(
                crate::params::ParamsError::Missing {
                    dir: self.shared.params.root().to_path_buf(),
                    kind,
                    size: req.size as usize,
                }
                .to_string(),
            ));
        }
        let shape = self.shape(kind, req.size)?;
        let pool_need = pool_bytes(&shape);
        let loaded = self.shared.params.is_loaded(kind, req.size as usize);
        let params_need = match loaded {
            true => 0,
            false => self
                .shared
                .params
                .memory_bytes_of(kind, req.size as usize)
                .unwrap_or(shape.domain_size() as u64 * g1),
        };
        let working = working_bytes(&shape) + params_need;
        if pool_need > pool_max || working > working_max {
            return Err(SubmitError::TooLarge {
                circuit: kind.to_string(),
                size: req.size,
                pool_need,
                pool_max,
                working,
                working_max,
            });
        }
        let rs_seed = req.rs_seed.unwrap_or_else(rand::random);
        let mut jobs = self.shared.jobs.lock();
        let depth = jobs.unfinished();
        if depth >= u64::from(self.shared.max_jobs) {
            drop(jobs);
            self.shared.metrics.rejected_queue_full();
            return Err(SubmitError::QueueFull {
                depth,
                max: u64::from(self.shared.max_jobs),
            });
        }
        let tx = self
            .shared
            .tasks_tx
            .lock()
            .clone()
            .ok_or(SubmitError::Draining)?;
        jobs.next_id += 1;
        let id = format!("j{:x}-{}", unix_ms(), jobs.next_id);
        let cancelled = Arc::new(AtomicBool::new(false));
        let submitted = Instant::now();
        let partitions = req.partitions;
        jobs.map.insert(
            id.clone(),
            JobEntry {
                state: JobState::Queued,
                submitted,
                submitted_ms: unix_ms(),
                started: false,
                partitions_done: 0,
                proofs: vec![None; partitions as usize],
                phases_ms: BTreeMap::new(),
                error: None,
                cancelled: cancelled.clone(),
                total_ms: 0.0,
                req: req.clone(),
            },
        );
        for partition in 0..partitions {
            // Receivers live as long as the workers, which outlive the sender.
            let _ = tx.send(Task {
                job_id: id.clone(),
                partition,
                partitions,
                kind,
                size: req.size,
                witness_seed: req.seed,
                rs_seed,
                submitted,
                cancelled: cancelled.clone(),
            });
        }
        drop(jobs);
        tracing::info!(job = %id, circuit = %kind, size = req.size, partitions, "job accepted");
        self.shared.bump();
        Ok(id)
    }

    pub fn job(&self, id: &str) -> Option<JobStatus> {
        self.shared
            .jobs
            .lock()
            .map
            .get(id)
            .map(|j| j.status(id, self.shared.backend_name))
    }

    /// The job's status once it finished or `timeout` passed, whichever is first.
    pub async fn wait(&self, id: &str, timeout: Duration) -> Option<JobStatus> {
        let mut rx = self.shared.changed.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let status = self.job(id)?;
            if status.state.is_finished() {
                return Some(status);
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => return self.job(id),
            }
        }
    }

    /// Cancels a job: partitions not yet started are skipped; those already
    /// synthesising or on a device run to the end but are discarded.
    pub fn cancel(&self, id: &str) -> Option<JobStatus> {
        {
            let mut jobs = self.shared.jobs.lock();
            let job = jobs.map.get_mut(id)?;
            if job.state.is_finished() {
                return Some(job.status(id, self.shared.backend_name));
            }
            job.cancelled.store(true, Ordering::SeqCst);
            job.state = JobState::Cancelled;
            job.error = Some("cancelled by request".into());
            job.total_ms = ms(job.submitted.elapsed());
            jobs.finished.push_back(id.to_string());
        }
        tracing::info!(job = %id, "job cancelled");
        self.shared.bump();
        self.job(id)
    }

    pub fn queue_stats(&self) -> QueueStats {
        let jobs = self.shared.jobs.lock();
        let unfinished = jobs.map.values().filter(|j| !j.state.is_finished());
        let (mut depth, mut in_flight) = (0, 0);
        for j in unfinished {
            depth += 1;
            if j.started {
                in_flight += 1;
            }
        }
        QueueStats {
            depth,
            max_jobs: u64::from(self.shared.max_jobs),
            jobs_in_flight: in_flight,
            partitions_in_flight: self.shared.partitions_in_flight.load(Ordering::SeqCst),
        }
    }

    pub fn devices(&self) -> Vec<DeviceState> {
        self.shared
            .devices
            .iter()
            .map(|d| DeviceState {
                backend: d.backend.kind().as_str().to_string(),
                ordinal: d.backend.device(),
                name: d.name.clone(),
                workers: d.workers,
                busy: d.busy.load(Ordering::SeqCst),
                partitions_done: d.done.load(Ordering::SeqCst),
            })
            .collect()
    }

    pub fn backend_name(&self) -> &'static str {
        self.shared.backend_name
    }

    /// (completed, failed, last proof end in Unix ms).
    pub fn counters(&self) -> (u64, u64, Option<u64>) {
        let last = self.shared.last_proof_ms.load(Ordering::SeqCst);
        (
            self.shared.completed.load(Ordering::SeqCst),
            self.shared.failed.load(Ordering::SeqCst),
            (last > 0).then_some(last),
        )
    }

    /// Stops intake. Jobs of which no partition started are cancelled (the
    /// client resubmits elsewhere); started jobs run to the end. Returns how
    /// many jobs were cancelled.
    pub fn begin_drain(&self) -> usize {
        self.shared.accepting.store(false, Ordering::SeqCst);
        let mut n = 0;
        {
            let mut jobs = self.shared.jobs.lock();
            let Jobs { map, finished, .. } = &mut *jobs;
            for (id, job) in map.iter_mut() {
                if job.state == JobState::Queued && !job.started {
                    job.cancelled.store(true, Ordering::SeqCst);
                    job.state = JobState::Cancelled;
                    job.error = Some("cancelled: the daemon is draining; resubmit".into());
                    job.total_ms = ms(job.submitted.elapsed());
                    finished.push_back(id.clone());
                    n += 1;
                }
            }
        }
        self.shared.bump();
        n
    }

    /// Waits until no job is unfinished and no partition is in flight.
    pub async fn idle(&self) {
        let mut rx = self.shared.changed.subscribe();
        loop {
            let busy = self.shared.jobs.lock().unfinished() > 0
                || self.shared.partitions_in_flight.load(Ordering::SeqCst) > 0;
            if !busy {
                return;
            }
            // Partitions of cancelled jobs finish without a job change: poll too.
            let _ = tokio::time::timeout(Duration::from_millis(200), rx.changed()).await;
        }
    }

    /// Closes the task queue and joins every worker (call after [`Engine::idle`]).
    pub fn shutdown(&self) {
        self.shared.tasks_tx.lock().take();
        let threads = std::mem::take(&mut *self.threads.lock());
        for t in threads {
            if t.join().is_err() {
                tracing::error!("an engine worker thread panicked outside a job");
            }
        }
    }
}

impl Shared {
    fn bump(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    fn event(&self, task: &Task, event: TimelineKind, device: Option<u32>) {
        let ev = TimelineEvent {
            v: TIMING_SCHEMA_VERSION,
            ts_us: unix_us(),
            host: self.host.clone(),
            build: self.build.clone(),
            job_id: task.job_id.clone(),
            partition: task.partition,
            event,
            device,
        };
        if let Err(e) = self.timing.event(&ev) {
            tracing::warn!("timing log: {e}");
        }
    }

    fn tag(&self, task: &Task) -> JobTag {
        JobTag {
            host: self.host.clone(),
            build: self.build.clone(),
            job_id: task.job_id.clone(),
            circuit: task.kind.to_string(),
            size: task.size,
        }
    }

    /// Marks the job running; false when it was cancelled meanwhile.
    fn start_partition(&self, task: &Task) -> bool {
        if task.cancelled.load(Ordering::SeqCst) {
            return false;
        }
        let mut jobs = self.jobs.lock();
        match jobs.map.get_mut(&task.job_id) {
            Some(job) if !job.state.is_finished() => {
                job.started = true;
                job.state = JobState::Running;
                self.partitions_in_flight.fetch_add(1, Ordering::SeqCst);
                drop(jobs);
                self.bump();
                true
            }
            _ => false,
        }
    }

    fn shape(&self, kind: CircuitKind, size: u64) -> Result<CircuitShape, String> {
        if let Some(s) = self.shapes.lock().get(&(kind, size)) {
            return Ok(*s);
        }
        let shape = circuit::shape(kind, size as usize).map_err(|e| e.to_string())?;
        self.shapes.lock().insert((kind, size), shape);
        Ok(shape)
    }

    /// Synthesis of one partition: parameters, budget, pool, circuit.
    fn synthesize(&self, task: Task, device: Option<u32>) -> Result<Ready, Box<Failed>> {
        let mut phases = BTreeMap::new();
        phases.insert(Phase::QueueWait, ms(task.submitted.elapsed()));
        let who = format!("{}/{}", task.job_id, task.partition);
        let prepared = (|| {
            let params = self
                .params
                .get_or_generate(task.kind, task.size as usize)
                .map_err(|e| format!("parameters: {e}"))?;
            let shape = self.shape(task.kind, task.size)?;
            let t = Instant::now();
            let reservation = self
                .budget
                .reserve(&who, working_bytes(&shape))
                .map_err(|e| format!("memory budget: {e}"))?;
            phases.insert(Phase::BudgetWait, ms(t.elapsed()));
            let (circuit, inputs) =
                circuit::bundled(task.kind, task.size as usize, task.witness_seed)
                    .map_err(|e| e.to_string())?;
            self.event(&task, TimelineKind::SynthesisStart, device);
            let t = Instant::now();
            let syn = catch_unwind(AssertUnwindSafe(|| synthesize(circuit, &shape, &self.pool)))
                .map_err(panic_message)?
                .map_err(|e| e.to_string())?;
            let total = ms(t.elapsed());
            self.event(&task, TimelineKind::SynthesisEnd, device);
            phases.insert(Phase::Synthesis, syn.synthesis_ms);
            phases.insert(Phase::PoolCheckout, (total - syn.synthesis_ms).max(0.0));
            Ok::<_, String>((params, inputs, reservation, syn))
        })();
        match prepared {
            Ok((params, inputs, reservation, syn)) => Ok(Ready {
                pinned: syn.pinned(),
                params_sha256: self
                    .params
                    .meta(task.kind, task.size as usize)
                    .ok()
                    .map(|m| m.sha256),
                task,
                syn,
                params,
                inputs,
                reservation,
                phases_ms: phases,
                queued: Instant::now(),
            }),
            Err(error) => Err(Box::new(Failed {
                task,
                error,
                phases_ms: phases,
            })),
        }
    }

    /// Proves, verifies and records one synthesised partition on device `d`.
    fn prove(&self, d: usize, ready: Ready) {
        let dev = &self.devices[d];
        let device = dev.backend.device().or(Some(d as u32));
        let Ready {
            task,
            syn,
            params,
            params_sha256,
            inputs,
            reservation,
            mut phases_ms,
            queued,
            pinned,
        } = ready;
        let domain = syn.domain() as u64;
        self.event(&task, TimelineKind::GpuPickup, device);
        phases_ms.insert(Phase::GpuLockWait, ms(queued.elapsed()));
        dev.busy.fetch_add(1, Ordering::SeqCst);
        self.event(&task, TimelineKind::GpuStart, device);
        let (r, s) = partition_randomness(task.rs_seed, task.partition);
        let mut times = BackendTimes::default();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let key: &dyn ProvingKey = params.as_ref();
            match &params_sha256 {
                Some(sha256) => {
                    let key = IdentifiedKey { key, sha256 };
                    prove_synthesized(dev.backend.as_ref(), &key, syn, r, s, &mut times)
                }
                None => prove_synthesized(dev.backend.as_ref(), key, syn, r, s, &mut times),
            }
        }));
        self.event(&task, TimelineKind::GpuEnd, device);
        dev.busy.fetch_sub(1, Ordering::SeqCst);
        dev.done.fetch_add(1, Ordering::SeqCst);
        drop(reservation);
        for (phase, v) in &times.phases_ms {
            *phases_ms.entry(*phase).or_insert(0.0) += v;
        }
        let result = match outcome {
            Err(p) => Err(panic_message(p)),
            Ok(Err(e)) => Err(e.to_string()),
            Ok(Ok(proof)) => self
                .check(&task, &params, &proof, &inputs)
                .map(|verified| (proof, verified)),
        };
        phases_ms.insert(Phase::Total, ms(task.submitted.elapsed()));
        let record = PartitionRecord {
            v: TIMING_SCHEMA_VERSION,
            ts_ms: unix_ms(),
            tag: self.tag(&task),
            partition: task.partition,
            partitions: task.partitions,
            domain,
            backend: dev.backend.kind().as_str().to_string(),
            device: dev.backend.device(),
            pinned,
            h2d_bytes: times.h2d_bytes,
            h2d_gbps: times.h2d_gbps,
            phases_ms: phases_ms.clone(),
            device_busy_ms: crate::timing::device_busy_ms(dev.backend.kind(), times.device_ms),
            error: result.as_ref().err().cloned(),
        };
        if let Err(e) = self.timing.partition(&record) {
            tracing::warn!("timing log: {e}");
        }
        self.metrics.partition_done(&phases_ms);
        self.metrics.device_busy(device, record.device_busy_ms);
        let proof = result.map(|(proof, verified)| PartitionProof {
            partition: task.partition,
            proof: hex::encode(proof_bytes(&proof)),
            public_inputs: inputs.iter().map(|x| hex::encode(x.to_repr())).collect(),
            verified,
            device: dev.backend.device(),
        });
        self.finish_partition(&task, phases_ms, proof);
    }

    /// Verifies a proof with the parameters' prepared key (cached per circuit and size).
    fn check(
        &self,
        task: &Task,
        params: &Params,
        proof: &Proof<Bls12>,
        inputs: &[Scalar],
    ) -> Result<bool, String> {
        let key = (task.kind, task.size);
        let pvk = {
            let cached = self.pvks.lock().get(&key).cloned();
            match cached {
                Some(p) => p,
                None => {
                    let p = Arc::new(prepare_verifying_key(&params.vk));
                    self.pvks.lock().insert(key, p.clone());
                    p
                }
            }
        };
        match verify_proof(&pvk, proof, inputs) {
            Ok(true) => Ok(true),
            Ok(false) => Err(format!(
                "partition {} proof failed verification",
                task.partition
            )),
            Err(e) => Err(format!(
                "partition {} verification error: {e}",
                task.partition
            )),
        }
    }

    fn finish_partition(
        &self,
        task: &Task,
        phases_ms: BTreeMap<Phase, f64>,
        proof: Result<PartitionProof, String>,
    ) {
        self.partitions_in_flight.fetch_sub(1, Ordering::SeqCst);
        let mut finished_job = None;
        {
            let mut jobs = self.jobs.lock();
            let Jobs { map, finished, .. } = &mut *jobs;
            let Some(job) = map.get_mut(&task.job_id) else {
                return;
            };
            if job.state.is_finished() {
                // Cancelled or already failed: the partition's work is dropped.
                drop(jobs);
                self.bump();
                return;
            }
            for (phase, v) in &phases_ms {
                *job.phases_ms.entry(*phase).or_insert(0.0) += v;
            }
            match proof {
                Ok(p) => {
                    job.partitions_done += 1;
                    if let Some(slot) = job.proofs.get_mut(task.partition as usize) {
                        *slot = Some(p);
                    }
                    if job.partitions_done == job.req.partitions {
                        job.state = JobState::Done;
                    }
                }
                Err(e) => {
                    job.state = JobState::Failed;
                    job.error = Some(format!("partition {}: {e}", task.partition));
                    // The job's other partitions are skipped.
                    job.cancelled.store(true, Ordering::SeqCst);
                }
            }
            if job.state.is_finished() {
                job.total_ms = ms(job.submitted.elapsed());
                finished_job = Some((
                    job.state,
                    job.total_ms,
                    job.error.clone(),
                    job.req.partitions,
                ));
                finished.push_back(task.job_id.clone());
                while finished.len() > KEEP_FINISHED {
                    if let Some(old) = finished.pop_front() {
                        map.remove(&old);
                    }
                }
            }
        }
        if let Some((state, total_ms, error, partitions)) = finished_job {
            let ok = state == JobState::Done;
            if ok {
                self.completed.fetch_add(1, Ordering::SeqCst);
            } else {
                self.failed.fetch_add(1, Ordering::SeqCst);
            }
            self.last_proof_ms.store(unix_ms(), Ordering::SeqCst);
            self.metrics.job_done(ok, total_ms);
            let rec = ProofRecord {
                v: TIMING_SCHEMA_VERSION,
                ts_ms: unix_ms(),
                tag: self.tag(task),
                partitions,
                backend: self.backend_name.to_string(),
                verified: Some(ok),
                total_ms,
                error,
            };
            if let Err(e) = self.timing.proof(&rec) {
                tracing::warn!("timing log: {e}");
            }
        }
        self.bump();
    }

    /// A partition that failed before reaching a device.
    fn fail_early(&self, task: Task, error: String, mut phases_ms: BTreeMap<Phase, f64>) {
        phases_ms.insert(Phase::Total, ms(task.submitted.elapsed()));
        let rec = PartitionRecord {
            v: TIMING_SCHEMA_VERSION,
            ts_ms: unix_ms(),
            tag: self.tag(&task),
            partition: task.partition,
            partitions: task.partitions,
            domain: 0,
            backend: self.backend_name.to_string(),
            device: None,
            pinned: self.pool.page_locked(),
            h2d_bytes: 0,
            h2d_gbps: None,
            phases_ms: phases_ms.clone(),
            device_busy_ms: None,
            error: Some(error.clone()),
        };
        if let Err(e) = self.timing.partition(&rec) {
            tracing::warn!("timing log: {e}");
        }
        self.finish_partition(&task, phases_ms, Err(error));
    }
}

/// Bellperson's proof serialisation: A (G1), B (G2), C (G1), compressed.
pub fn proof_bytes(proof: &Proof<Bls12>) -> Vec<u8> {
    let mut out = Vec::with_capacity(192);
    // Writing into a Vec cannot fail.
    let _ = proof.write(&mut out);
    out
}

fn synthesis_worker(
    shared: &Shared,
    tasks: Receiver<Task>,
    ready: Sender<Ready>,
    (slot_tx, slot_rx): (Sender<()>, Receiver<()>),
) {
    // Slots are only ever returned, never dropped, so a worker waiting for
    // one at shutdown gets it and sees the closed task queue.
    while slot_rx.recv().is_ok() {
        let Ok(task) = tasks.recv() else {
            let _ = slot_tx.send(());
            return;
        };
        if !shared.start_partition(&task) {
            let _ = slot_tx.send(());
            continue;
        }
        match shared.synthesize(task, None) {
            Ok(r) => {
                shared.event(&r.task, TimelineKind::GpuQueue, None);
                if let Err(e) = ready.send(r) {
                    // Device workers are gone (shutdown): fail the partition.
                    let r = e.into_inner();
                    shared.fail_early(r.task, "the daemon is shutting down".into(), r.phases_ms);
                    let _ = slot_tx.send(());
                }
            }
            Err(f) => {
                shared.fail_early(f.task, f.error, f.phases_ms);
                let _ = slot_tx.send(());
            }
        }
    }
}

fn device_worker(shared: &Shared, d: usize, ready: Receiver<Ready>, slot_tx: Sender<()>) {
    while let Ok(r) = ready.recv() {
        let _ = slot_tx.send(());
        shared.prove(d, r);
    }
}

fn unpipelined_worker(shared: &Shared, d: usize, tasks: Receiver<Task>) {
    let device = shared.devices[d].backend.device().or(Some(d as u32));
    while let Ok(task) = tasks.recv() {
        if !shared.start_partition(&task) {
            continue;
        }
        match shared.synthesize(task, device) {
            Ok(r) => {
                shared.event(&r.task, TimelineKind::GpuQueue, device);
                shared.prove(d, r);
            }
            Err(f) => shared.fail_early(f.task, f.error, f.phases_ms),
        }
    }
}
