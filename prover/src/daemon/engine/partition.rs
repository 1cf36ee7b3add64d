//! One partition's stages: synthesis into the pool, proving on a device,
//! verification on a host thread. Each stage times itself through the
//! partition's [`PartitionTimer`] and writes its TIMELINE events; the last
//! one closes the timing record. Nothing here knows about jobs or threads.

use crate::backend::BackendKind;
use crate::budget::{BudgetError, MemoryBudget, Reservation};
use crate::circuit::shapes::ShapeCache;
use crate::circuit::CircuitError;
use crate::daemon::engine::admission::working_bytes;
use crate::daemon::engine::compiled::{CompiledSet, FilecoinRecording};
use crate::daemon::engine::devices::{is_device_fault, Device};
use crate::daemon::engine::filecoin::FilKey;
use crate::filecoin::statement::FilStatement;
use crate::filecoin::FilecoinError;
use crate::params::{ParamStore, Params, ParamsError};
use crate::pool::PinnedPool;
use crate::prove::{prove_synthesized, Blinding, IdentifiedKey, ProveError, ProvingKey};
// The engine queues by it; the kinds name theirs, so it lives outside both.
pub use crate::priority::Priority;
use crate::statement::bundled::BundledStatement;
use crate::statement::{Mode, Partition, Statement, StatementError};
use crate::synthesis::{SynthesisError, Synthesized};
use crate::timing::{PartitionTimer, TimingLog};
use bellperson::groth16::{prepare_verifying_key, verify_proof, PreparedVerifyingKey, Proof};
use blstrs::{Bls12, Scalar};
use ff::PrimeField;
use fleet_wire::api::PartitionProof;
use fleet_wire::timing::{JobTag, PartitionRecord, Phase, TimelineKind};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Why a partition failed; the job's error is its message.
#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    #[error("parameters: {0}")]
    Params(#[source] ParamsError),
    #[error("{0}")]
    Circuit(#[from] CircuitError),
    #[error("{0}")]
    Filecoin(#[from] FilecoinError),
    #[error("memory budget: {0}")]
    Budget(#[from] BudgetError),
    #[error("{0}")]
    Synthesis(#[from] SynthesisError),
    #[error("{0}")]
    Statement(#[from] StatementError),
    #[error("{0}")]
    Prove(#[from] ProveError),
    #[error("panicked: {0}")]
    Panicked(String),
    #[error("partition {0} proof failed verification")]
    Rejected(u32),
    #[error("partition {partition} verification error: {source}")]
    Verify {
        partition: u32,
        #[source]
        source: bellperson::SynthesisError,
    },
    #[error("the daemon is shutting down")]
    ShuttingDown,
    #[error("cancelled")]
    Cancelled,
    #[error("no device is left in rotation (every device failed; see the daemon's log)")]
    NoDevice,
}

impl PartitionError {
    /// The device error that should take the device out of rotation.
    pub fn device_fault(&self) -> Option<String> {
        match self {
            PartitionError::Prove(ProveError::Backend { source, .. })
                if is_device_fault(source) =>
            {
                Some(source.to_string())
            }
            _ => None,
        }
    }

    /// A device error the device recovers from once it frees what it holds
    /// (out of device memory): worth another try, the device stays.
    pub fn recoverable_on_device(&self) -> bool {
        matches!(self, PartitionError::Prove(ProveError::Backend { source, .. }) if crate::backend::is_recoverable(source))
    }
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> PartitionError {
    let text = if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_string()
    };
    PartitionError::Panicked(text)
}

/// What a job's devices are keyed on when the scheduler estimates times:
/// the circuit's name (a Filecoin parameter file's) and its size.
pub type WorkKey = (String, u64);

/// A Filecoin statement and the parameters that prove it, shared by the
/// job's partitions.
pub struct FilecoinWork {
    pub statement: Box<dyn FilStatement>,
    pub key: Arc<FilKey>,
}

impl std::fmt::Debug for FilecoinWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FilecoinWork")
            .field("kind", &self.statement.kind())
            .field("sector_size", &self.statement.sector_size())
            .field("key", &self.key)
            .finish()
    }
}

/// What a partition proves: a [`Statement`] and where its parameters come
/// from, the one difference between the kinds.
#[derive(Debug, Clone)]
pub enum Circuit {
    /// A bundled circuit: the prover's own parameters, generated TEST-ONLY
    /// on demand by kind and size.
    Bundled(BundledStatement),
    /// A partition of a Filecoin proof: parameters from Filecoin's cache,
    /// loaded when the job was submitted.
    Filecoin(Arc<FilecoinWork>),
}

impl Circuit {
    pub fn statement(&self) -> &dyn Statement {
        match self {
            Circuit::Bundled(b) => b,
            Circuit::Filecoin(f) => &*f.statement,
        }
    }
}

/// One partition on its way through the pipeline.
#[derive(Debug, Clone)]
pub struct Task {
    pub job_id: String,
    pub partition: u32,
    pub partitions: u32,
    pub circuit: Circuit,
    /// Its place in the queues: see [`Priority`].
    pub priority: Priority,
    /// Where r, s come from: the job's `rs_seed`, or the OS per partition.
    pub blinding: Blinding,
    pub submitted: Instant,
    pub cancelled: Arc<AtomicBool>,
    /// Earlier tries that ended with their device failing.
    pub attempt: u32,
}

impl Task {
    /// Ahead of every queued partition, synthesised by the urgent worker.
    pub fn urgent(&self) -> bool {
        self.priority == Priority::Critical
    }

    pub fn key(&self) -> WorkKey {
        match &self.circuit {
            Circuit::Bundled(b) => (b.kind.to_string(), b.size),
            Circuit::Filecoin(f) => (f.key.name.clone(), f.key.shape.num_constraints as u64),
        }
    }

    /// The circuit's name in records (`chain`; a Filecoin proof's kind and
    /// sector size, `porep-c2:2KiB`, as `prover setup --filecoin` names
    /// them) and its size in constraints.
    pub fn tag_fields(&self) -> (String, u64) {
        match &self.circuit {
            Circuit::Bundled(b) => (b.kind.to_string(), b.size),
            Circuit::Filecoin(f) => (
                crate::filecoin::job_label(f.statement.kind(), f.statement.sector_size()),
                f.key.shape.num_constraints as u64,
            ),
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }
}

/// What synthesis hands on: parameters, their checksum, public inputs, the
/// working-set reservation, the synthesised partition.
type Prepared = (
    Arc<Params>,
    Option<String>,
    Vec<Scalar>,
    Reservation,
    Synthesized,
);

/// A synthesised partition waiting for a device.
pub struct Ready {
    pub task: Task,
    timer: PartitionTimer,
    syn: Synthesized,
    params: Arc<Params>,
    /// The parameter file's checksum: the key under which a device keeps
    /// the bases resident (None: uploaded per MSM).
    params_sha256: Option<String>,
    inputs: Vec<Scalar>,
    reservation: Reservation,
    queued: Instant,
    pinned: bool,
}

/// A partition that failed before reaching a device.
pub struct Failed {
    pub task: Task,
    timer: PartitionTimer,
    pub error: PartitionError,
}

/// A partition back from its device, to be verified and recorded.
pub struct Proved {
    pub task: Task,
    timer: PartitionTimer,
    params: Arc<Params>,
    inputs: Vec<Scalar>,
    domain: u64,
    pinned: bool,
    backend: BackendKind,
    device: Option<u32>,
    pub outcome: Result<Proof<Bls12>, PartitionError>,
}

/// A partition's end: its record and, when it succeeded, its proof.
pub struct Outcome {
    pub task: Task,
    pub record: PartitionRecord,
    pub proof: Result<PartitionProof, String>,
}

/// Prepared verifying keys, one per circuit and size.
type PvkCache = Mutex<HashMap<WorkKey, Arc<PreparedVerifyingKey<Bls12>>>>;

/// What the stages share: memory, parameters, shapes and the timing log.
pub struct Stages {
    pub pool: PinnedPool,
    pub budget: Arc<MemoryBudget>,
    pub params: Arc<ParamStore>,
    pub timing: Arc<TimingLog>,
    pub host: String,
    pub build: String,
    /// The engine's backend, for records of partitions that never reached a device.
    pub backend: BackendKind,
    pvks: PvkCache,
    compiled: CompiledSet,
}

impl Stages {
    pub fn new(
        pool: PinnedPool,
        budget: Arc<MemoryBudget>,
        params: Arc<ParamStore>,
        timing: Arc<TimingLog>,
        host: String,
        build: String,
        backend: BackendKind,
    ) -> Self {
        Stages {
            pool,
            budget,
            params,
            timing,
            host,
            build,
            backend,
            pvks: Mutex::new(HashMap::new()),
            compiled: CompiledSet::new(false, 0),
        }
    }

    /// Synthesises bundled circuits from the recordings of `compiled`.
    pub fn with_compiled(mut self, compiled: CompiledSet) -> Self {
        self.compiled = compiled;
        self
    }

    /// Records the constraints of `circuit`'s blank circuit for the
    /// parameters of digest `sha256`, unless a recording is kept already:
    /// later partitions of the set, urgent ones included, synthesise from it.
    pub fn record_filecoin(
        &self,
        sha256: &str,
        circuit: crate::filecoin::FilCircuit,
    ) -> Result<(), FilecoinError> {
        if self.compiled.has_filecoin(sha256) {
            return Ok(());
        }
        let t = Instant::now();
        let r1cs = crate::filecoin::kind::param_set(circuit).record()?;
        tracing::info!(%circuit, constraints = r1cs.num_constraints, ms = t.elapsed().as_secs_f64() * 1e3, "constraints recorded from the blank circuit");
        self.compiled
            .keep_filecoin(sha256, Arc::new(r1cs), &self.budget);
        Ok(())
    }

    /// Bytes the compiled constraints hold (each under its own reservation).
    pub fn compiled_bytes(&self) -> u64 {
        self.compiled.bytes()
    }

    pub fn shapes(&self) -> &ShapeCache {
        self.params.shapes()
    }

    fn event(&self, timer: &PartitionTimer, kind: TimelineKind, device: Option<u32>) {
        if let Err(e) = self.timing.event(&timer.event(kind, device)) {
            tracing::warn!("timing log: {e}");
        }
    }

    fn timer(&self, task: &Task) -> PartitionTimer {
        let (circuit, size) = task.tag_fields();
        let tag = JobTag {
            host: self.host.clone(),
            build: self.build.clone(),
            job_id: task.job_id.clone(),
            circuit,
            size,
        };
        let priority = (task.priority != Priority::Normal).then(|| task.priority.name());
        PartitionTimer::new(tag, task.partition, task.partitions, task.submitted)
            .with_priority(priority)
    }

    /// A partition that ends before synthesis (shutdown, no device).
    pub fn refuse(&self, task: Task, error: PartitionError) -> Failed {
        let mut timer = self.timer(&task);
        timer.picked_up();
        Failed { task, timer, error }
    }

    /// Parameters, budget, pool buffers and the circuit's synthesis.
    /// `device` is the device whose worker synthesises (unpipelined), for
    /// the TIMELINE.
    pub fn synthesize(&self, task: Task, device: Option<u32>) -> Result<Ready, Box<Failed>> {
        let mut timer = self.timer(&task);
        timer.picked_up();
        let prepared = self.prepare(&task, &mut timer, device);
        match prepared {
            Ok((params, params_sha256, inputs, reservation, syn)) => Ok(Ready {
                pinned: syn.pinned(),
                params_sha256,
                task,
                timer,
                syn,
                params,
                inputs,
                reservation,
                queued: Instant::now(),
            }),
            Err(error) => Err(Box::new(Failed { task, timer, error })),
        }
    }

    /// A partition's synthesis, the same for every kind once its
    /// parameters, shape and recorded constraints are found.
    fn prepare(
        &self,
        task: &Task,
        timer: &mut PartitionTimer,
        device: Option<u32>,
    ) -> Result<Prepared, PartitionError> {
        let who = format!("{}/{}", task.job_id, task.partition);
        let (params, params_sha256, shape) = match &task.circuit {
            Circuit::Bundled(b) => {
                let size = bundled_size(b)?;
                let params = self
                    .params
                    .get_or_generate(b.kind, size)
                    .map_err(PartitionError::Params)?;
                // Loading or generating parameters can take a minute: a job
                // cancelled meanwhile is not synthesised and proved after all.
                if task.is_cancelled() {
                    return Err(PartitionError::Cancelled);
                }
                let sha256 = self.params.meta(b.kind, size).ok().map(|m| m.sha256);
                (params, sha256, self.shapes().get(b.kind, size)?)
            }
            Circuit::Filecoin(w) => (
                w.key.params.clone(),
                Some(w.key.sha256.clone()),
                w.key.shape,
            ),
        };
        let t = Instant::now();
        let reservation =
            self.params
                .reserve_evicting(&self.budget, &who, working_bytes(&shape))?;
        timer.since(Phase::BudgetWait, t);
        if task.is_cancelled() {
            return Err(PartitionError::Cancelled);
        }
        // The first partition of a bundled circuit and size may record its
        // constraints here (one synthesis, once); that is not this
        // partition's synthesis, so it stays outside the phases. A Filecoin
        // set's recording is made by its first partition (Mode::Record), the
        // others wait for it (a job cancelled meanwhile ends here).
        // Where a, b, c are computed on the device, synthesis stops after
        // the witness and takes one domain buffer from the pool, not three.
        let defer_abc = self.backend.abc_off_host(shape.domain_size());
        let (compiled, claim) = match &task.circuit {
            Circuit::Bundled(b) => (
                self.compiled
                    .get(b.kind, bundled_size(b)?, &self.params, &self.budget),
                None,
            ),
            Circuit::Filecoin(w) => {
                let cancelled = || task.is_cancelled();
                match self
                    .compiled
                    .filecoin_for(&w.key.sha256, task.urgent(), &cancelled)
                    .map_err(|_| PartitionError::Cancelled)?
                {
                    FilecoinRecording::Use(c) => (Some(c), None),
                    FilecoinRecording::Record(claim) => (None, Some(claim)),
                    FilecoinRecording::Plain => (None, None),
                }
            }
        };
        let mode = match (&compiled, &claim) {
            (Some(c), _) => Mode::Compiled {
                r1cs: &c.r1cs,
                check: c.check,
                defer_abc,
            },
            (None, Some(_)) => Mode::Record { defer_abc },
            (None, None) => Mode::Plain,
        };
        self.event(timer, TimelineKind::SynthesisStart, device);
        let t = Instant::now();
        let k = task.partition as usize;
        let statement = task.circuit.statement();
        let Partition {
            syn,
            inputs,
            recorded,
            circuit_ms,
        } = catch_unwind(AssertUnwindSafe(|| {
            statement.synthesize(k, &shape, &self.pool, mode)
        }))
        .map_err(panic_message)??;
        if let (Some(r1cs), Circuit::Filecoin(w)) = (recorded, &task.circuit) {
            self.compiled
                .keep_filecoin(&w.key.sha256, r1cs, &self.budget);
        }
        // Kept or not, the partitions waiting for it go on.
        drop(claim);
        let total = t.elapsed().as_secs_f64() * 1e3;
        self.event(timer, TimelineKind::SynthesisEnd, device);
        // Building the circuit (from a seed, from vanilla proofs) is part of
        // what this partition's synthesis costs; the rest is taking pool
        // buffers.
        let synthesis = circuit_ms + syn.synthesis_ms;
        timer.add(Phase::Synthesis, synthesis);
        if let Some(parts) = syn.parts {
            timer.add(Phase::Witness, parts.witness_ms);
            if syn.abc_from.is_none() {
                timer.add(Phase::Abc, parts.abc_ms);
            }
        }
        timer.add(Phase::PoolCheckout, (total - synthesis).max(0.0));
        Ok((params, params_sha256, inputs, reservation, syn))
    }

    /// The TIMELINE's "waiting for a device" mark, once synthesis handed it on.
    pub fn queued(&self, ready: &Ready, device: Option<u32>) {
        self.event(&ready.timer, TimelineKind::GpuQueue, device);
    }

    /// Proves on `dev` (named `ordinal` in records). The device is held
    /// only for this: verification runs later, elsewhere.
    pub fn prove(&self, dev: &Device, ordinal: u32, ready: Ready) -> Proved {
        let Ready {
            task,
            mut timer,
            syn,
            params,
            params_sha256,
            inputs,
            reservation,
            queued,
            pinned,
        } = ready;
        let device = Some(ordinal);
        let domain = syn.domain() as u64;
        self.event(&timer, TimelineKind::GpuPickup, device);
        timer.since(Phase::GpuLockWait, queued);
        dev.begin(fleet_wire::api::Proving {
            job_id: task.job_id.clone(),
            circuit: task.tag_fields().0,
            partition: task.partition,
            priority: task.priority.name().to_string(),
        });
        self.event(&timer, TimelineKind::GpuStart, device);
        let (r, s) = task.blinding.for_partition(task.partition);
        let mut times = crate::backend::BackendTimes::default();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            // Cancelled while it waited for the device: the device is free
            // for the next one at once.
            if task.is_cancelled() {
                return Err(PartitionError::Cancelled);
            }
            let key: &dyn ProvingKey = params.as_ref();
            match &params_sha256 {
                Some(sha256) => {
                    let key = IdentifiedKey { key, sha256 };
                    prove_synthesized(dev.backend.as_ref(), &key, syn, r, s, &mut times)
                }
                None => prove_synthesized(dev.backend.as_ref(), key, syn, r, s, &mut times),
            }
            .map_err(PartitionError::from)
        }));
        self.event(&timer, TimelineKind::GpuEnd, device);
        dev.end(&task.job_id, task.partition);
        drop(reservation);
        timer.merge_backend(&times);
        let outcome = match outcome {
            Err(p) => Err(panic_message(p)),
            Ok(r) => r,
        };
        Proved {
            task,
            timer,
            params,
            inputs,
            domain,
            pinned,
            backend: dev.backend.kind(),
            device,
            outcome,
        }
    }

    /// Verifies (the prepared key cached per circuit and size) and closes the record.
    pub fn verify(&self, proved: Proved) -> Outcome {
        let Proved {
            task,
            mut timer,
            params,
            inputs,
            domain,
            pinned,
            backend,
            device,
            outcome,
        } = proved;
        let checked = outcome.and_then(|proof| {
            let t = Instant::now();
            let ok = self.check(&task, &params, &proof, &inputs);
            timer.since(Phase::Verify, t);
            ok.map(|()| proof)
        });
        let error = checked.as_ref().err().map(|e| e.to_string());
        let record = timer.finish(domain, backend, device, pinned, error.clone());
        let proof = match checked {
            Ok(proof) => Ok(PartitionProof {
                partition: task.partition,
                proof: hex::encode(proof_bytes(&proof)),
                public_inputs: inputs.iter().map(|x| hex::encode(x.to_repr())).collect(),
                verified: true,
                device,
            }),
            Err(e) => Err(e.to_string()),
        };
        Outcome {
            task,
            record,
            proof,
        }
    }

    fn check(
        &self,
        task: &Task,
        params: &Params,
        proof: &Proof<Bls12>,
        inputs: &[Scalar],
    ) -> Result<(), PartitionError> {
        if let Circuit::Filecoin(work) = &task.circuit {
            return verdict(&work.key.pvk, proof, inputs, task.partition);
        }
        let key = task.key();
        let cached = self.pvks.lock().get(&key).cloned();
        let pvk = match cached {
            Some(p) => p,
            None => {
                let p = Arc::new(prepare_verifying_key(&params.vk));
                self.pvks.lock().insert(key, p.clone());
                p
            }
        };
        verdict(&pvk, proof, inputs, task.partition)
    }

    /// Closes the record of a partition that failed before its device.
    pub fn failed(&self, f: Failed) -> Outcome {
        let error = f.error.to_string();
        let record = f.timer.finish(
            0,
            self.backend,
            None,
            self.pool.page_locked(),
            Some(error.clone()),
        );
        Outcome {
            task: f.task,
            record,
            proof: Err(error),
        }
    }
}

/// A bundled job's size as the circuit module counts it.
fn bundled_size(b: &BundledStatement) -> Result<usize, CircuitError> {
    usize::try_from(b.size).map_err(|_| CircuitError::SizeOutOfRange {
        kind: b.kind,
        size: usize::MAX,
    })
}

/// A proof's verification as the partition's outcome.
fn verdict(
    pvk: &PreparedVerifyingKey<Bls12>,
    proof: &Proof<Bls12>,
    inputs: &[Scalar],
    partition: u32,
) -> Result<(), PartitionError> {
    match verify_proof(pvk, proof, inputs) {
        Ok(true) => Ok(()),
        Ok(false) => Err(PartitionError::Rejected(partition)),
        Err(source) => Err(PartitionError::Verify { partition, source }),
    }
}

/// Bellperson's proof serialisation: A (G1), B (G2), C (G1), compressed.
pub fn proof_bytes(proof: &Proof<Bls12>) -> Vec<u8> {
    let mut out = Vec::with_capacity(192);
    // Writing into a Vec cannot fail.
    let _ = proof.write(&mut out);
    out
}
