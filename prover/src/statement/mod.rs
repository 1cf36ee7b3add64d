//! What the engine proves, one partition at a time: a [`Statement`] is a
//! proof's inputs, checked, that yields each partition's circuit
//! synthesised into the pinned pool, with the public inputs its verifier
//! takes. Every kind implements it: the bundled circuits ([`bundled`]) and
//! each Filecoin kind (whose own trait,
//! [`crate::filecoin::statement::FilStatement`], adds its parameter set).
//! The daemon's partition stage and the command line's one-shot jobs call
//! only this, so one per-partition path serves every kind.

pub mod bundled;

use std::sync::Arc;
use std::time::Instant;

use blstrs::Scalar;

use crate::circuit::{CircuitShape, SplitWitness};
use crate::compiled::CompiledR1cs;
use crate::pool::PinnedPool;
use crate::priority::Priority;
use crate::prove::ProveError;
use crate::synthesis::Synthesized;

/// A checked proof: its partitions' circuits, built and synthesised on
/// demand.
pub trait Statement: Send + Sync {
    /// Where its partitions queue unless its client says otherwise: a kind
    /// whose proofs are due within a deadline says so here.
    fn priority(&self) -> Priority {
        Priority::Normal
    }
    /// Groth16 proofs it takes.
    fn partitions(&self) -> usize;
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
    ) -> Result<Partition, StatementError>;
}

/// Why a partition could not be synthesised.
#[derive(Debug, thiserror::Error)]
pub enum StatementError {
    #[error("proving partition {partition}: {source}")]
    Prove {
        partition: usize,
        #[source]
        source: ProveError,
    },
    /// A bundled circuit's size or kind.
    #[error(transparent)]
    Circuit(#[from] crate::circuit::CircuitError),
    /// A kind's own refusal (its inputs, its proof crates), as the kind
    /// words it.
    #[error(transparent)]
    Kind(Box<dyn std::error::Error + Send + Sync>),
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
    /// [`Partition`]. With `defer_abc`, a circuit recorded in pieces leaves
    /// a, b, c to the backend as [`Mode::Compiled`] does.
    Record { defer_abc: bool },
    /// From an earlier partition's recording; with `defer_abc` a, b, c are
    /// left to the backend, which computes them on its device
    /// ([`crate::synthesis::synthesize_witness_split`]).
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
    pub recorded: Option<Arc<CompiledR1cs>>,
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
    ) -> Result<Partition, StatementError> {
        let circuit_ms = ms(started);
        let failed = |source: crate::synthesis::SynthesisError| StatementError::Prove {
            partition: k,
            source: source.into(),
        };
        let (syn, recorded) = match mode {
            Mode::Plain => (
                crate::synthesis::synthesize(circuit, shape, pool).map_err(failed)?,
                None,
            ),
            Mode::Compiled { r1cs, check, .. } => (
                crate::synthesis::synthesize_compiled(circuit, r1cs, shape, pool, check)
                    .map_err(failed)?,
                None,
            ),
            Mode::Record { .. } => {
                let recording = crate::compiled::compile(circuit.clone());
                from_recording(k, circuit, recording, shape, pool, |c, r| {
                    crate::synthesis::synthesize_compiled(c, r, shape, pool, true)
                })?
            }
        };
        Ok(Partition {
            syn,
            inputs,
            circuit_ms,
            recorded,
        })
    }

    /// [`Mode::Record`] for a circuit that comes in pieces, each repeating
    /// its preamble (a PoRep partition's challenges): the constraints are
    /// recorded in pieces on every core
    /// ([`crate::compiled::compile_split`]; minutes on one core at 32 GiB)
    /// and the partition synthesised from the recording, checked against
    /// the circuit as `Record` does, in the same pieces. `counted` is the circuit's own shape
    /// (counted, not the parameters' padded one), from which the pieces'
    /// common preamble follows. Where the recording fails the partition is
    /// still proved, the bellperson way.
    #[allow(clippy::too_many_arguments)]
    pub fn record_split<C: SplitWitness + bellperson::Circuit<Scalar>>(
        k: usize,
        circuit: C,
        inputs: Vec<Scalar>,
        started: Instant,
        shape: &CircuitShape,
        counted: &CircuitShape,
        pool: &PinnedPool,
        defer_abc: bool,
    ) -> Result<Partition, StatementError> {
        let circuit_ms = ms(started);
        let t = Instant::now();
        let pieces = circuit.pieces(rayon::current_num_threads());
        let recording = crate::compiled::compile_split(&circuit, pieces, counted);
        if let Ok(r1cs) = &recording {
            tracing::info!(
                partition = k,
                pieces,
                ms = ms(t),
                constraints = r1cs.num_constraints,
                "constraints recorded in pieces"
            );
        }
        // Checked in the pieces it was recorded in (the join's layout).
        let (syn, recorded) = from_recording(k, circuit, recording, shape, pool, |c, r| {
            if defer_abc {
                crate::synthesis::synthesize_witness_split(c, r, shape, pool, true)
            } else {
                crate::synthesis::synthesize_compiled_split(c, r, shape, pool, true)
            }
        })?;
        Ok(Partition {
            syn,
            inputs,
            circuit_ms,
            recorded,
        })
    }

    /// Synthesises partition `k` from `r1cs` (checked against the circuit's
    /// own constraints where `check`), with the witness pass in `circuit`'s
    /// pieces on every core (see [`crate::circuit::SplitWitness`]).
    #[allow(clippy::too_many_arguments)]
    pub fn synthesize_split<C: SplitWitness>(
        k: usize,
        circuit: C,
        inputs: Vec<Scalar>,
        started: Instant,
        shape: &CircuitShape,
        pool: &PinnedPool,
        r1cs: &Arc<CompiledR1cs>,
        check: bool,
        defer_abc: bool,
    ) -> Result<Partition, StatementError> {
        let circuit_ms = ms(started);
        let syn = if defer_abc {
            crate::synthesis::synthesize_witness_split(circuit, r1cs, shape, pool, check)
        } else {
            crate::synthesis::synthesize_compiled_split(circuit, r1cs, shape, pool, check)
        }
        .map_err(|source| StatementError::Prove {
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

/// [`Mode::Record`]'s synthesis once `recording` is made: from it by
/// `checked` (checked against the circuit); where it could not be made, the
/// bellperson way (the partition is still proved; only the recording is
/// given up).
fn from_recording<C: bellperson::Circuit<Scalar>>(
    k: usize,
    circuit: C,
    recording: Result<CompiledR1cs, crate::compiled::CompileError>,
    shape: &CircuitShape,
    pool: &PinnedPool,
    checked: impl FnOnce(C, &Arc<CompiledR1cs>) -> Result<Synthesized, crate::synthesis::SynthesisError>,
) -> Result<(Synthesized, Option<Arc<CompiledR1cs>>), StatementError> {
    let failed = |source: crate::synthesis::SynthesisError| StatementError::Prove {
        partition: k,
        source: source.into(),
    };
    match recording {
        Ok(r1cs) => {
            let r1cs = Arc::new(r1cs);
            let syn = checked(circuit, &r1cs).map_err(failed)?;
            Ok((syn, Some(r1cs)))
        }
        Err(e) => {
            tracing::warn!("partition {k}: {e}; synthesising the bellperson way");
            let syn = crate::synthesis::synthesize(circuit, shape, pool).map_err(failed)?;
            Ok((syn, None))
        }
    }
}

pub(crate) fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
