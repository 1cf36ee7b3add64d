//! A Filecoin proof checked against its inputs and ready to be proven one
//! partition at a time: what the engine's per-partition stages take (the
//! daemon's and, in process, the command line's), so neither needs the
//! proof crates' types (the merkle tree shape of the sector size stays
//! inside).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use blstrs::Scalar;
use fleet_wire::api::FilecoinKind;

use crate::circuit::{CircuitShape, SplitWitness};
use crate::compiled::CompiledR1cs;
use crate::filecoin::cache::CacheEntry;
use crate::filecoin::set::ParamSet;
use crate::filecoin::FilecoinError;
use crate::pool::PinnedPool;
use crate::priority::Priority;
use crate::synthesis::Synthesized;

/// Bytes of one Groth16 proof in Filecoin's (bellperson's compressed) encoding.
pub const PROOF_BYTES: usize = 192;

/// A checked Filecoin proof: its inputs verified (replica id, vanilla
/// proofs), its partitions' circuits built on demand.
pub trait Statement: Send + Sync {
    fn kind(&self) -> FilecoinKind;
    /// The parameter set that proves it.
    fn param_set(&self) -> &dyn ParamSet;
    fn sector_size(&self) -> u64 {
        self.param_set().sector_size()
    }
    /// The parameter file that proves it, in `cache_dir`.
    fn cache_entry(&self, cache_dir: &Path) -> Result<CacheEntry, FilecoinError> {
        self.param_set().cache_entry(cache_dir)
    }
    /// Where its partitions queue unless its client says otherwise: a kind
    /// whose proofs are due within a deadline says so here.
    fn priority(&self) -> Priority {
        Priority::Normal
    }
    /// Groth16 proofs it takes.
    fn partitions(&self) -> usize;
    /// Sectors it proves something of.
    fn sectors(&self) -> usize {
        1
    }
    /// Whether its input is marked as test data (a forged sector's C1,
    /// [`crate::filecoin::forge`]): proved only where test parameters are
    /// allowed, never as a real sector's.
    fn test_data(&self) -> bool {
        false
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
    /// From an earlier partition's recording; with `defer_abc` (and
    /// unchecked) a, b, c are left to the backend, which computes them on
    /// its device ([`crate::synthesis::synthesize_witness_split`]).
    Compiled {
        r1cs: &'a Arc<CompiledR1cs>,
        check: bool,
        defer_abc: bool,
    },
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
            Mode::Compiled { r1cs, check, .. } => {
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

    /// Synthesises partition `k` from `r1cs`, unchecked, with the witness
    /// pass in `circuit`'s pieces on every core (see
    /// [`crate::circuit::SplitWitness`]).
    #[allow(clippy::too_many_arguments)]
    pub fn synthesize_split<C: SplitWitness>(
        k: usize,
        circuit: C,
        inputs: Vec<Scalar>,
        started: Instant,
        shape: &CircuitShape,
        pool: &PinnedPool,
        r1cs: &Arc<CompiledR1cs>,
        defer_abc: bool,
    ) -> Result<Partition, FilecoinError> {
        let circuit_ms = ms(started);
        let syn = if defer_abc {
            crate::synthesis::synthesize_witness_split(circuit, r1cs, shape, pool, false)
        } else {
            crate::synthesis::synthesize_compiled_split(circuit, r1cs, shape, pool, false)
        }
        .map_err(|source| FilecoinError::Prove {
            partition: k,
            source: source.into(),
        })?;
        if let Some(parts) = syn.parts {
            tracing::info!(
                partition = k,
                pieces = parts.pieces,
                witness_ms = parts.witness_ms,
                "witness pass in pieces"
            );
        }
        Ok(Partition {
            syn,
            inputs,
            circuit_ms,
            recorded: None,
        })
    }
}

pub(crate) fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
