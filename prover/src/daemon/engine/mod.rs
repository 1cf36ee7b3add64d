//! The pipelined engine: partitions of every job flow through synthesis
//! worker threads into device worker threads, so the next partition is
//! synthesised while the current one is on a device, and verified on a
//! host thread after it left the device.
//!
//! ```text
//! submit ─▶ tasks (FIFO, unbounded; the job count is bounded by queue.max_jobs)
//!        ─▶ synthesis workers ×concurrency: budget reservation, pool checkout, synthesize
//!        ─▶ device queue (at most `lookahead` partitions ahead; the scheduler
//!           picks the device that will finish each first)
//!        ─▶ device workers ×(devices × workers_per_device): prove
//!        ─▶ verifiers: verify ─▶ the job's result; timing record, TIMELINE events, metrics
//! ```
//!
//! With `lookahead = 0` there is no synthesis stage: each device worker
//! synthesises a partition and then proves it (pipelining off).
//!
//! Memory admission: every partition takes a budget reservation for its
//! working set (MSM scalars, backend scratch) before synthesis, then checks
//! its buffers out of the pool, which reserves against the same budget but
//! may hold at most the memory plan's pool share (half the budget by
//! default), so pool growth and working sets never wait on each other. Both
//! waits block (FIFO) while memory is short: jobs wait instead of the host
//! running out. A partition never waits for memory while holding pool
//! buffers, so waits cannot form a cycle. A panic in synthesis or proving
//! fails that job with the panic's message; the workers live on. A device
//! whose driver fails leaves the rotation; the others keep proving.
//!
//! Modules, in the order data flows: [`admission`] (may a job come in),
//! [`jobs`] (the registry), [`partition`] (one partition's stages),
//! [`scheduler`] (which device), [`devices`], [`pipeline`] (the threads).

pub mod admission;
pub mod compiled;
pub mod devices;
pub mod filecoin;
pub mod jobs;
pub mod one_shot;
pub mod partition;
mod pipeline;
pub mod scheduler;

pub use admission::{working_bytes, SubmitError, MAX_PARTITIONS};
pub use devices::Device;
pub use partition::{proof_bytes, Priority};

use crate::budget::MemoryBudget;
use crate::circuit::CircuitKind;
use crate::daemon::engine::admission::{ParamsNeed, Room};
use crate::daemon::engine::compiled::CompiledSet;
use crate::daemon::engine::filecoin::FilecoinKeys;
use crate::daemon::engine::jobs::{JobSpec, Jobs};
use crate::daemon::engine::partition::{Circuit, FilecoinWork, Stages, Task};
use crate::daemon::engine::pipeline::{
    device_worker, synthesis_worker, urgent_worker, verifier, Shared, TaskQueue,
};
use crate::daemon::engine::scheduler::DeviceQueue;
use crate::daemon::metrics::Metrics;
use crate::memory_plan::MemoryPlan;
use crate::params::ParamStore;
use crate::pool::PinnedPool;
use crate::statement::bundled::BundledStatement;
use crate::synthesis::pool_bytes;
use crate::timing::TimingLog;
use crossbeam_channel::{bounded, unbounded};
use fleet_wire::api::{DeviceState, FilecoinSubmitRequest, JobStatus, QueueStats, SubmitRequest};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a submission waits for another one's constraint count before
/// it is told to retry (503).
const COUNTING_WAIT: Duration = Duration::from_secs(5);

/// What the engine is built from.
pub struct EngineParts {
    pub pool: PinnedPool,
    pub budget: Arc<MemoryBudget>,
    /// The budget's split, decided once at start-up.
    pub memory: MemoryPlan,
    pub params: Arc<ParamStore>,
    pub devices: Vec<Device>,
    /// Devices the config names that could not be opened (listed in
    /// `/status`, never proving).
    pub unavailable: Vec<DeviceState>,
    pub timing: Arc<TimingLog>,
    pub metrics: Arc<Metrics>,
    /// Filecoin's parameter cache, for Filecoin jobs.
    pub filecoin: FilecoinKeys,
    /// Compiled constraints of the bundled circuits.
    pub compiled: CompiledSet,
    pub concurrency: u32,
    pub lookahead: u32,
    pub max_jobs: u32,
    pub host: String,
    pub build: String,
}

/// Threads of one stage, joined in the order data flows.
#[derive(Default)]
struct Threads {
    synthesis: Vec<JoinHandle<()>>,
    devices: Vec<JoinHandle<()>>,
    verifiers: Vec<JoinHandle<()>>,
}

/// The running engine. Dropping it without [`Engine::shutdown`] leaves the
/// worker threads to finish on their own.
pub struct Engine {
    shared: Arc<Shared>,
    memory: MemoryPlan,
    filecoin: FilecoinKeys,
    threads: Mutex<Threads>,
}

fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name(name).spawn(f)
}

impl Engine {
    /// Starts the worker threads.
    pub fn start(parts: EngineParts) -> std::io::Result<Self> {
        let backend = parts
            .devices
            .first()
            .map(|d| d.backend.kind())
            .unwrap_or(crate::backend::BackendKind::Cpu);
        let (tasks_tx, tasks_rx) = unbounded::<Task>();
        let (urgent_tx, urgent_rx) = unbounded::<Task>();
        let (high_tx, high_rx) = unbounded::<Task>();
        let (verify_tx, verify_rx) = unbounded();
        let (changed, _) = tokio::sync::watch::channel(0u64);
        let workers: Vec<u32> = parts.devices.iter().map(|d| d.workers).collect();
        let pipelined = parts.lookahead > 0;
        // `lookahead` slots: a synthesis worker takes one before it starts a
        // partition, a device worker gives it back when it picks the
        // partition up, so at most `lookahead` partitions are synthesised
        // (or being synthesised) and not yet on a device.
        let slots = pipelined.then(|| {
            let slots = bounded::<()>(parts.lookahead as usize);
            for _ in 0..parts.lookahead {
                let _ = slots.0.send(());
            }
            slots
        });
        let shared = Arc::new(Shared {
            jobs: Mutex::new(Jobs::default()),
            changed,
            tasks_tx: Mutex::new(Some(tasks_tx)),
            urgent_tx: Mutex::new(Some(urgent_tx)),
            high_tx: Mutex::new(Some(high_tx)),
            verify_tx: Mutex::new(Some(verify_tx)),
            accepting: AtomicBool::new(true),
            pipelined,
            stages: Stages::new(
                parts.pool,
                parts.budget,
                parts.params,
                parts.timing,
                parts.host,
                parts.build,
                backend,
            )
            .with_compiled(parts.compiled),
            devices: parts.devices,
            unavailable: parts.unavailable,
            queue: DeviceQueue::new(&workers),
            slot_tx: slots.as_ref().map(|s| s.0.clone()),
            metrics: parts.metrics,
            max_jobs: parts.max_jobs,
            partitions_in_flight: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            last_proof_ms: AtomicU64::new(0),
        });
        for (d, dev) in shared.devices.iter().enumerate() {
            shared
                .metrics
                .device_in_rotation(dev.ordinal(d), dev.workers > 0);
        }
        for d in shared.unavailable.iter().filter_map(|d| d.ordinal) {
            shared.metrics.device_in_rotation(d, false);
        }
        let mut threads = Threads::default();
        if let Some(slots) = &slots {
            let queue = TaskQueue {
                urgent: urgent_rx.clone(),
                high: high_rx.clone(),
                normal: tasks_rx.clone(),
            };
            for i in 0..parts.concurrency {
                let (s, rx, slots) = (shared.clone(), queue.clone(), slots.clone());
                threads.synthesis.push(spawn(format!("synth-{i}"), move || {
                    synthesis_worker(&s, rx, slots)
                })?);
            }
            // A WinningPoSt must not wait for a synthesis worker busy with a
            // PoRep partition (minutes at 32 GiB), nor for a lookahead slot:
            // one worker takes only urgent tasks.
            let (s, rx) = (shared.clone(), urgent_rx.clone());
            threads
                .synthesis
                .push(spawn("synth-urgent".into(), move || urgent_worker(&s, rx))?);
        }
        let prefix = if pipelined { "device" } else { "prove" };
        for (d, dev) in shared.devices.iter().enumerate() {
            for w in 0..dev.workers {
                let s = shared.clone();
                threads
                    .devices
                    .push(spawn(format!("{prefix}-{d}.{w}"), move || {
                        device_worker(&s, d)
                    })?);
            }
        }
        // A pairing check takes milliseconds: one verifier per device keeps
        // up with any proving rate these devices reach.
        for i in 0..shared.devices.len().max(1) {
            let (s, rx) = (shared.clone(), verify_rx.clone());
            threads
                .verifiers
                .push(spawn(format!("verify-{i}"), move || verifier(&s, rx))?);
        }
        Ok(Self {
            shared,
            memory: parts.memory,
            filecoin: parts.filecoin,
            threads: Mutex::new(threads),
        })
    }

    /// Bytes one partition of `kind`/`size` reserves in total.
    pub fn partition_bytes(&self, kind: CircuitKind, size: u64) -> Result<u64, SubmitError> {
        let shape = self.shape(kind, size)?;
        Ok(pool_bytes(&shape) + working_bytes(&shape))
    }

    /// The shape, counted once; a submission waits at most [`COUNTING_WAIT`]
    /// for another one's count.
    fn shape(
        &self,
        kind: CircuitKind,
        size: u64,
    ) -> Result<crate::circuit::CircuitShape, SubmitError> {
        self.shared
            .stages
            .shapes()
            .get_within(kind, size as usize, COUNTING_WAIT)
            .map_err(|e| SubmitError::SizeOutOfRange(e.to_string()))?
            .ok_or_else(|| {
                SubmitError::Busy(format!(
                    "another submission is counting the constraints of a new circuit size; retry {kind} size {size} later"
                ))
            })
    }

    /// Validates and queues a job.
    pub fn submit(&self, req: SubmitRequest) -> Result<String, SubmitError> {
        let shared = &self.shared;
        if !shared.accepting.load(Ordering::SeqCst) {
            return Err(SubmitError::Draining);
        }
        if !shared.any_device() {
            return Err(SubmitError::NoDevice);
        }
        let kind = admission::check_request(&req)?;
        let params = &shared.stages.params;
        let room = Room {
            plan: self.memory,
            params_loaded: params.loaded_bytes() + self.filecoin.loaded_bytes(),
        };
        room.check_bound(kind, req.size)?;
        let size = req.size as usize;
        if !params.can_provide(kind, size) {
            return Err(SubmitError::ParamsMissing(
                crate::params::ParamsError::Missing {
                    dir: params.root().to_path_buf(),
                    kind,
                    size,
                },
            ));
        }
        let shape = self.shape(kind, req.size)?;
        let need = match (
            params.is_loaded(kind, size),
            params.memory_bytes_of(kind, size),
        ) {
            (true, _) => ParamsNeed::Loaded,
            (false, Some(b)) => ParamsNeed::Bytes(b),
            (false, None) => ParamsNeed::Unknown,
        };
        room.check_shape(kind, req.size, &shape, need)?;
        let blinding = crate::prove::Blinding::from_seed(req.rs_seed);
        let spec = JobSpec {
            circuit: kind.to_string(),
            size: req.size,
            partitions: req.partitions,
            sector_size: None,
            priority: Priority::Normal,
            params_load_ms: None,
        };
        let circuit = Circuit::Bundled(BundledStatement {
            kind,
            size: req.size,
            witness_seed: req.seed,
            partitions: req.partitions as usize,
        });
        self.enqueue(spec, circuit, blinding)
    }

    /// Checks a Filecoin job's inputs, loads its parameters (once per
    /// circuit) and queues its partitions; a WinningPoSt ahead of all
    /// others. Blocks for the checks (seconds for a large sector's C1): call
    /// it off the async runtime.
    pub fn submit_filecoin(&self, req: &FilecoinSubmitRequest) -> Result<String, SubmitError> {
        self.submit_filecoin_as(req, None)
    }

    /// [`Engine::submit_filecoin`] at `priority` (`None`: the kind's own,
    /// [`crate::statement::Statement::priority`]).
    pub fn submit_filecoin_as(
        &self,
        req: &FilecoinSubmitRequest,
        priority: Option<Priority>,
    ) -> Result<String, SubmitError> {
        let shared = &self.shared;
        if !shared.accepting.load(Ordering::SeqCst) {
            return Err(SubmitError::Draining);
        }
        if !shared.any_device() {
            return Err(SubmitError::NoDevice);
        }
        let statement = filecoin::statement_of(req)?;
        if statement.test_data() {
            if !self.filecoin.allow_test_params() {
                return Err(SubmitError::Filecoin(
                    crate::filecoin::FilecoinError::ForgedTestData,
                ));
            }
            tracing::warn!(
                kind = %statement.kind(),
                "proving TEST DATA: a forged sector's C1 (allowed by allow_test_params)"
            );
        }
        let entry = statement
            .cache_entry(self.filecoin.dir())
            .map_err(SubmitError::Filecoin)?;
        let loaded_before = self.filecoin.loaded_entry(&entry).is_some();
        let t = Instant::now();
        let key = self
            .filecoin
            .get(&entry, &shared.stages.budget, &shared.stages.params)?;
        let params_load_ms = (!loaded_before).then(|| t.elapsed().as_secs_f64() * 1e3);
        let shape = key.shape;
        let label = crate::filecoin::job_label(statement.kind(), statement.sector_size());
        let (pool_need, working) = (pool_bytes(&shape), working_bytes(&shape));
        let working_max = self
            .memory
            .working_left(shared.stages.params.loaded_bytes() + self.filecoin.loaded_bytes());
        if pool_need > self.memory.pool || working > working_max {
            return Err(SubmitError::TooLarge {
                circuit: label,
                size: shape.num_constraints as u64,
                pool_need,
                pool_max: self.memory.pool,
                working,
                working_max,
            });
        }
        let partitions = u32::try_from(statement.partitions())
            .ok()
            .filter(|n| (1..=admission::MAX_PARTITIONS).contains(n))
            .ok_or(SubmitError::BadPartitions {
                got: u32::try_from(statement.partitions()).unwrap_or(u32::MAX),
                max: admission::MAX_PARTITIONS,
            })?;
        let priority = priority.unwrap_or_else(|| statement.priority());
        let spec = JobSpec {
            circuit: label,
            size: shape.num_constraints as u64,
            partitions,
            sector_size: Some(statement.sector_size()),
            priority,
            params_load_ms,
        };
        let circuit = Circuit::Filecoin(Arc::new(FilecoinWork { statement, key }));
        let blinding = crate::prove::Blinding::from_seed(req.rs_seed());
        self.enqueue(spec, circuit, blinding)
    }

    /// Registers a job and queues one task per partition.
    fn enqueue(
        &self,
        spec: JobSpec,
        circuit: Circuit,
        blinding: crate::prove::Blinding,
    ) -> Result<String, SubmitError> {
        let priority = spec.priority;
        let shared = &self.shared;
        let mut jobs = shared.jobs.lock();
        let depth = jobs.unfinished();
        if depth >= u64::from(shared.max_jobs) {
            drop(jobs);
            shared.metrics.rejected_queue_full();
            return Err(SubmitError::QueueFull {
                depth,
                max: u64::from(shared.max_jobs),
            });
        }
        let cancelled = Arc::new(AtomicBool::new(false));
        let submitted = Instant::now();
        let partitions = spec.partitions;
        let (label, size) = (spec.circuit.clone(), spec.size);
        let id = jobs.insert(
            spec,
            cancelled.clone(),
            submitted,
            crate::sys::clock::unix_millis(),
        );
        for partition in 0..partitions {
            let task = Task {
                job_id: id.clone(),
                partition,
                partitions,
                circuit: circuit.clone(),
                priority,
                blinding,
                submitted,
                cancelled: cancelled.clone(),
                attempt: 0,
            };
            if shared.dispatch(task).is_err() {
                // Only a drain closes the stages, and it stops intake first.
                jobs.cancel(&id, "cancelled: the daemon is draining; resubmit");
                drop(jobs);
                shared.bump();
                return Err(SubmitError::Draining);
            }
        }
        drop(jobs);
        tracing::info!(job = %id, circuit = %label, size, partitions, priority = priority.name(), "job accepted");
        shared.bump();
        Ok(id)
    }

    pub fn job(&self, id: &str) -> Option<JobStatus> {
        self.shared
            .jobs
            .lock()
            .status(id, self.shared.stages.backend.as_str())
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
        let cancelled = self.shared.jobs.lock().cancel(id, "cancelled by request")?;
        if cancelled {
            tracing::info!(job = %id, "job cancelled");
            self.shared.bump();
        }
        self.job(id)
    }

    /// Unfinished jobs by circuit or Filecoin proof label: (queued, running).
    pub fn queues_by_circuit(&self) -> std::collections::BTreeMap<String, (u32, u32)> {
        self.shared.jobs.lock().by_circuit()
    }

    /// Loads the Filecoin parameter file of `entry` (as a job of it would);
    /// true when it was loaded already.
    pub fn preload_filecoin(
        &self,
        entry: &crate::filecoin::cache::CacheEntry,
        circuit: crate::filecoin::FilCircuit,
    ) -> Result<bool, SubmitError> {
        let already = self.filecoin.loaded_entry(entry).is_some();
        let key = self.filecoin.get(
            entry,
            &self.shared.stages.budget,
            &self.shared.stages.params,
        )?;
        // A preloaded set is one whose first proof must not wait: its
        // constraints are recorded now, not by its first partition, and its
        // bases put on each device now, not by its first MSM.
        self.shared
            .stages
            .record_filecoin(&key.sha256, circuit)
            .map_err(SubmitError::Filecoin)?;
        for (i, d) in self.shared.devices.iter().enumerate() {
            let bases = crate::backend::ParamBases::of(&key.sha256, &key.params);
            if let Err(e) = d.backend.make_resident(&bases) {
                // Still usable: its MSMs upload what is not resident.
                tracing::warn!(device = d.ordinal(i), error = %e, circuit = %circuit, "bases not made resident");
            }
        }
        Ok(already)
    }

    /// Drops the loaded Filecoin parameter file of `entry`: its memory
    /// returns to the budget once jobs using it finish. The bytes it held,
    /// or `None` when it was not loaded.
    pub fn evict_filecoin(&self, entry: &crate::filecoin::cache::CacheEntry) -> Option<u64> {
        self.filecoin.evict(entry)
    }

    /// The loaded Filecoin parameter file of `entry`: (bytes, jobs using it).
    pub fn filecoin_loaded(
        &self,
        entry: &crate::filecoin::cache::CacheEntry,
    ) -> Option<(u64, u32)> {
        self.filecoin.loaded_entry(entry)
    }

    /// The Filecoin parameter files loaded: name and provenance.
    pub fn filecoin_files(&self) -> Vec<(String, crate::filecoin::cache::Provenance)> {
        self.filecoin.files()
    }

    /// Filecoin's parameter cache folder.
    pub fn filecoin_dir(&self) -> &std::path::Path {
        self.filecoin.dir()
    }

    pub fn queue_stats(&self) -> QueueStats {
        let (depth, in_flight) = self.shared.jobs.lock().depth();
        QueueStats {
            depth,
            max_jobs: u64::from(self.shared.max_jobs),
            jobs_in_flight: in_flight,
            partitions_in_flight: self.shared.partitions_in_flight.load(Ordering::SeqCst),
        }
    }

    pub fn devices(&self) -> Vec<DeviceState> {
        self.shared.device_states()
    }

    /// What the daemon does with each XID the NVML watch reports (the
    /// watch's callback, driven by tests with made-up events): count it,
    /// and take the GPU of a critical one out of rotation.
    pub fn on_xid(&self, ev: &crate::daemon::xid_watch::XidEvent) {
        self.shared.metrics.device_xid(ev.ordinal, ev.xid);
        let xid = ev.xid.map_or_else(|| "unknown".into(), |x| x.to_string());
        if !ev.critical {
            tracing::warn!(device = ev.ordinal, xid = %xid, "NVML reported an XID (not one that takes the GPU out)");
            return;
        }
        let why = format!("critical XID {xid} reported by NVML");
        if self.take_out(ev.ordinal, &why) {
            tracing::error!(device = ev.ordinal, xid = %xid, "critical XID: device taken out of rotation");
        }
    }

    /// Takes the device with CUDA ordinal `ordinal` out of rotation from
    /// outside the workers (a critical XID): it finishes the partition it
    /// holds, if any, and takes no other. False when no device in rotation
    /// has that ordinal.
    pub fn take_out(&self, ordinal: u32, why: &str) -> bool {
        let found = self
            .shared
            .devices
            .iter()
            .position(|dev| dev.backend.device() == Some(ordinal) && dev.failure().is_none());
        if let Some(d) = found {
            self.shared.take_out(d, why);
        }
        found.is_some()
    }

    pub fn backend_name(&self) -> &'static str {
        self.shared.stages.backend.as_str()
    }

    /// (completed, failed, last proof end in Unix ms).
    pub fn counters(&self) -> (u64, u64, Option<u64>) {
        let s = &self.shared;
        let last = s.last_proof_ms.load(Ordering::SeqCst);
        (
            s.completed.load(Ordering::SeqCst),
            s.failed.load(Ordering::SeqCst),
            (last > 0).then_some(last),
        )
    }

    /// Stops intake. Jobs of which no partition started are cancelled (the
    /// client resubmits elsewhere); started jobs run to the end. Returns how
    /// many jobs were cancelled.
    pub fn begin_drain(&self) -> usize {
        self.shared.accepting.store(false, Ordering::SeqCst);
        let n = self
            .shared
            .jobs
            .lock()
            .cancel_unstarted("cancelled: the daemon is draining; resubmit");
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

    /// Closes each stage in the order data flows and joins its workers
    /// (call after [`Engine::idle`]).
    pub fn shutdown(&self) {
        let threads = std::mem::take(&mut *self.threads.lock());
        let join = |ts: Vec<JoinHandle<()>>| {
            for t in ts {
                if t.join().is_err() {
                    tracing::error!("an engine worker thread panicked outside a job");
                }
            }
        };
        self.shared.tasks_tx.lock().take();
        self.shared.urgent_tx.lock().take();
        self.shared.high_tx.lock().take();
        join(threads.synthesis);
        self.shared.queue.close();
        join(threads.devices);
        self.shared.verify_tx.lock().take();
        join(threads.verifiers);
    }
}

#[cfg(test)]
mod tests;
