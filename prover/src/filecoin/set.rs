//! One Filecoin parameter set (a seal proof type's PoRep, a PoSt of a sector
//! size, any kind's circuit of one size): where its file is in the cache, the
//! shape of its partition circuit, and its blank (witness-free) circuit, from
//! which a daemon records the constraints when it preloads the set (so even
//! the first proof, a WinningPoSt due within its epoch, synthesises from the
//! recording) and `prover setup --filecoin` generates TEST-ONLY parameters.
//!
//! Each kind implements [`ParamSet`] in its own module (its `set` file, e.g.
//! `porep::set`); [`crate::filecoin::kind::param_set`] is the one
//! table from a [`crate::filecoin::FilCircuit`] to it. Preload, the
//! preflight and setup call only this trait.

use std::path::Path;

use bellperson::groth16::Parameters;
use blstrs::{Bls12, Scalar};

use crate::circuit::CircuitShape;
use crate::compiled::CompiledR1cs;
use crate::filecoin::cache::CacheEntry;
use crate::filecoin::FilecoinError;
use crate::setup::fixed_base::FixedBaseEngine;

/// A Filecoin parameter set. Object safe: the blank circuit's type depends
/// on the sector size's merkle tree, so a kind hands it to a [`BlankJob`]
/// rather than returning it.
pub trait ParamSet: Send + Sync {
    fn sector_size(&self) -> u64;
    /// Filecoin's file of the set in `cache_dir`.
    fn cache_entry(&self, cache_dir: &Path) -> Result<CacheEntry, FilecoinError>;
    /// The shape of one partition's circuit, counted without synthesising
    /// the whole blank circuit ([`crate::filecoin::need`]).
    fn shape(&self) -> Result<CircuitShape, FilecoinError>;
    /// Builds the blank circuit and runs `job` on it.
    fn with_blank(&self, job: BlankJob<'_>) -> Result<BlankOut, FilecoinError>;

    /// The blank circuit's constraints, recorded (assignments are never
    /// asked for). Every partition of the set has these constraints: the
    /// parameters were made from this circuit.
    fn record(&self) -> Result<CompiledR1cs, FilecoinError> {
        match self.with_blank(BlankJob::Record)? {
            BlankOut::Recorded(r1cs) => Ok(*r1cs),
            BlankOut::Generated(_) => Err(wrong_answer("recording the blank circuit")),
        }
    }

    /// TEST-ONLY parameters of the blank circuit from `seed`, the fixed-base
    /// multiplications on `engine`.
    fn generate(
        &self,
        seed: u64,
        engine: &dyn FixedBaseEngine,
    ) -> Result<Parameters<Bls12>, FilecoinError> {
        match self.with_blank(BlankJob::Generate { seed, engine })? {
            BlankOut::Generated(params) => Ok(*params),
            BlankOut::Recorded(_) => Err(wrong_answer("generating the parameters")),
        }
    }
}

/// What is done with a blank circuit.
#[derive(Clone, Copy)]
pub enum BlankJob<'a> {
    Record,
    Generate {
        seed: u64,
        engine: &'a dyn FixedBaseEngine,
    },
}

/// What a [`BlankJob`] made (boxed: both are a few hundred bytes of
/// headers over heap data, made once a set).
pub enum BlankOut {
    Recorded(Box<CompiledR1cs>),
    Generated(Box<Parameters<Bls12>>),
}

impl BlankJob<'_> {
    /// Runs the job on `blank`, a kind's blank circuit.
    pub fn run<C: bellperson::Circuit<Scalar> + Clone + Send>(
        self,
        blank: C,
    ) -> Result<BlankOut, FilecoinError> {
        match self {
            BlankJob::Record => crate::compiled::compile(blank)
                .map(|r1cs| BlankOut::Recorded(Box::new(r1cs)))
                .map_err(|e| FilecoinError::ProofCrates {
                    context: "recording the blank circuit's constraints",
                    reason: e.to_string(),
                }),
            BlankJob::Generate { seed, engine } => {
                let params = crate::setup::generate_on(&blank, seed, engine)?;
                Ok(BlankOut::Generated(Box::new(params)))
            }
        }
    }
}

/// A kind's `with_blank` that answered another job than it was given: it
/// did not pass the job to [`BlankJob::run`].
fn wrong_answer(context: &'static str) -> FilecoinError {
    FilecoinError::ProofCrates {
        context,
        reason: "the kind's blank circuit answered another job (a bug in its ParamSet)".into(),
    }
}
