//! The bundled circuits ([`crate::circuit`]: a chain of multiplications,
//! SHA-256 blocks) as a [`Statement`]: every partition of a job is the
//! circuit of one kind and size, its witness drawn from the job's seed.
//! Their parameters are the prover's own (generated TEST-ONLY on demand,
//! [`crate::params`]), not one of Filecoin's sets, so this is all a bundled
//! kind is.

use std::time::Instant;

use crate::circuit::{self, CircuitKind, CircuitShape};
use crate::pool::PinnedPool;
use crate::statement::{Mode, Partition, Statement, StatementError};

/// A job of a bundled circuit: `partitions` proofs of `kind` at `size`
/// constraints, each witnessed from `witness_seed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BundledStatement {
    pub kind: CircuitKind,
    pub size: u64,
    pub witness_seed: u64,
    pub partitions: usize,
}

impl Statement for BundledStatement {
    fn partitions(&self) -> usize {
        self.partitions
    }

    fn synthesize(
        &self,
        k: usize,
        shape: &CircuitShape,
        pool: &PinnedPool,
        mode: Mode<'_>,
    ) -> Result<Partition, StatementError> {
        let t = Instant::now();
        let size =
            usize::try_from(self.size).map_err(|_| circuit::CircuitError::SizeOutOfRange {
                kind: self.kind,
                size: usize::MAX,
            })?;
        let (circuit, inputs) = circuit::bundled(self.kind, size, self.witness_seed)?;
        match mode {
            // Every bundled circuit splits its witness pass, checked or not.
            Mode::Compiled {
                r1cs,
                check,
                defer_abc,
            } => Partition::synthesize_split(
                k, circuit, inputs, t, shape, pool, r1cs, check, defer_abc,
            ),
            Mode::Plain | Mode::Record { .. } => {
                Partition::synthesize(k, circuit, inputs, t, shape, pool, mode)
            }
        }
    }
}
