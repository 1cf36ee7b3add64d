//! A Filecoin proof checked against its inputs and ready to be proven one
//! partition at a time. The command line's loop ([`prove_all`]) and the
//! daemon's pipeline both take a [`Statement`], so neither needs the proof
//! crates' types (the merkle tree shape of the sector size stays inside).

use std::path::Path;
use std::time::Instant;

use bellperson::groth16::{prepare_verifying_key, verify_proof};
use blstrs::Scalar;
use fleet_wire::api::FilecoinKind;

use crate::backend::{Backend, BackendTimes};
use crate::circuit::CircuitShape;
use crate::compiled::CompiledR1cs;
use crate::filecoin::cache::{CacheEntry, Loaded};
use crate::filecoin::FilecoinError;
use crate::pool::PinnedPool;
use crate::prove::{self, IdentifiedKey};
use crate::synthesis::Synthesized;

/// Bytes of one Groth16 proof in Filecoin's (bellperson's compressed) encoding.
pub const PROOF_BYTES: usize = 192;

/// A checked Filecoin proof: its inputs verified (replica id, vanilla
/// proofs), its partitions' circuits built on demand.
pub trait Statement: Send + Sync {
    fn kind(&self) -> FilecoinKind;
    fn sector_size(&self) -> u64;
    /// The parameter file that proves it, in `cache_dir`.
    fn cache_entry(&self, cache_dir: &Path) -> Result<CacheEntry, FilecoinError>;
    /// Groth16 proofs it takes.
    fn partitions(&self) -> usize;
    /// Sectors it proves something of.
    fn sectors(&self) -> usize {
        1
    }
    /// Partition `k`'s number in the proof's own numbering (a WindowPoSt
    /// partition keeps its index in the deadline).
    fn partition_number(&self, k: usize) -> usize {
        k
    }
    /// Builds partition `k`'s circuit and synthesises it into `pool` as
    /// `mode` says.
    fn synthesize(
        &self,
        k: usize,
        shape: &CircuitShape,
        pool: &PinnedPool,
        mode: Mode<'_>,
    ) -> Result<Partition, FilecoinError>;
}

/// How a partition is synthesised. Every partition of one parameter set has
/// the same constraints (the parameters encode them), so one partition's
/// recording serves the others.
#[derive(Clone, Copy)]
pub enum Mode<'a> {
    /// The bellperson way.
    Plain,
    /// Record the constraints from this partition's circuit, then synthesise
    /// from the recording (checked); the recording comes back in the
    /// [`Partition`].
    Record,
    /// From an earlier partition's recording.
    Compiled { r1cs: &'a CompiledR1cs, check: bool },
}

/// One partition, synthesised.
pub struct Partition {
    pub syn: Synthesized,
    /// The public inputs a verifier computes for it.
    pub inputs: Vec<Scalar>,
    /// Building the circuit (before synthesis), ms.
    pub circuit_ms: f64,
    /// What [`Mode::Record`] recorded.
    pub recorded: Option<CompiledR1cs>,
}

impl Partition {
    /// Synthesises partition `k`'s built `circuit` into `pool` as `mode`
    /// says; `started` is when building it began.
    pub fn synthesize<C: bellperson::Circuit<Scalar> + Clone>(
        k: usize,
        circuit: C,
        inputs: Vec<Scalar>,
        started: Instant,
        shape: &CircuitShape,
        pool: &PinnedPool,
        mode: Mode<'_>,
    ) -> Result<Partition, FilecoinError> {
        let circuit_ms = ms(started);
        let failed = |source: crate::synthesis::SynthesisError| FilecoinError::Prove {
            partition: k,
            source: source.into(),
        };
        let mut recorded = None;
        let syn = match mode {
            Mode::Plain => crate::synthesis::synthesize(circuit, shape, pool).map_err(failed)?,
            Mode::Compiled { r1cs, check } => {
                crate::synthesis::synthesize_compiled(circuit, r1cs, shape, pool, check)
                    .map_err(failed)?
            }
            // A circuit that cannot be recorded is still proved, the
            // bellperson way; only the recording is given up.
            Mode::Record => match crate::compiled::compile(circuit.clone()) {
                Ok(r1cs) => {
                    let syn =
                        crate::synthesis::synthesize_compiled(circuit, &r1cs, shape, pool, true)
                            .map_err(failed)?;
                    recorded = Some(r1cs);
                    syn
                }
                Err(e) => {
                    tracing::warn!("partition {k}: {e}; synthesising the bellperson way");
                    crate::synthesis::synthesize(circuit, shape, pool).map_err(failed)?
                }
            },
        };
        Ok(Partition {
            syn,
            inputs,
            circuit_ms,
            recorded,
        })
    }
}

/// What one partition took.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PartitionReport {
    pub partition: usize,
    pub constraints: usize,
    pub domain_log2: u32,
    pub aux: usize,
    pub circuit_ms: f64,
    pub synthesis_ms: f64,
    /// Of `synthesis_ms`, where it ran from compiled constraints.
    pub witness_ms: Option<f64>,
    pub abc_ms: Option<f64>,
    pub prove_ms: f64,
    pub device_ms: f64,
    pub verify_ms: f64,
}

pub(crate) fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Proves every partition of `statement` in order with `loaded` on
/// `backend`, verifying each proof against the parameters' verifying key.
/// Returns the proofs concatenated as filecoin-proofs lays them out.
pub fn prove_all(
    statement: &dyn Statement,
    loaded: &Loaded,
    backend: &dyn Backend,
    pool: &PinnedPool,
    seed: Option<u64>,
    compiled: bool,
) -> Result<(Vec<u8>, Vec<PartitionReport>), FilecoinError> {
    let pvk = prepare_verifying_key(&loaded.params.vk);
    let key = IdentifiedKey {
        key: &loaded.params,
        sha256: &loaded.sha256,
    };
    let shape = prove::shape_of_key(&key);
    let blinding = prove::Blinding::from_seed(seed);
    let partitions = statement.partitions();
    let mut proof_bytes = Vec::with_capacity(partitions * PROOF_BYTES);
    let mut reports = Vec::with_capacity(partitions);
    let mut recording: Option<CompiledR1cs> = None;
    for k in 0..partitions {
        // Recording costs about one more synthesis: it pays only where
        // later partitions use it.
        let mode = match (&recording, compiled && partitions > 1) {
            (_, false) => Mode::Plain,
            (None, true) => Mode::Record,
            // Each proof is verified below, so a partition that strayed
            // from the recording cannot pass unnoticed.
            (Some(r1cs), true) => Mode::Compiled { r1cs, check: false },
        };
        let Partition {
            syn,
            inputs,
            circuit_ms,
            recorded,
        } = statement.synthesize(k, &shape, pool, mode)?;
        if recorded.is_some() {
            recording = recorded;
        }
        let (constraints, synthesis_ms, parts) = (syn.num_constraints, syn.synthesis_ms, syn.parts);
        let (r, s) = blinding.for_partition(k as u32);
        let t = Instant::now();
        let mut times = BackendTimes::default();
        let proof =
            prove::prove_synthesized(backend, &key, syn, r, s, &mut times).map_err(|source| {
                FilecoinError::Prove {
                    partition: k,
                    source,
                }
            })?;
        let prove_ms = ms(t);
        let t = Instant::now();
        if !verify_proof(&pvk, &proof, &inputs).unwrap_or(false) {
            return Err(FilecoinError::ProofRejected { partition: k });
        }
        let verify_ms = ms(t);
        // Writing into a Vec cannot fail.
        let _ = proof.write(&mut proof_bytes);
        reports.push(PartitionReport {
            partition: statement.partition_number(k),
            constraints,
            domain_log2: shape.log2_domain(),
            aux: shape.num_aux,
            circuit_ms,
            synthesis_ms,
            witness_ms: parts.map(|p| p.witness_ms),
            abc_ms: parts.map(|p| p.abc_ms),
            prove_ms,
            device_ms: times.device_ms,
            verify_ms,
        });
    }
    Ok((proof_bytes, reports))
}
