//! A Filecoin proof checked against its inputs and ready to be proven one
//! partition at a time: a [`crate::statement::Statement`] (what the engine's
//! per-partition stages take, the daemon's and, in process, the command
//! line's) that also names its kind and its parameter set, so neither stage
//! needs the proof crates' types (the merkle tree shape of the sector size
//! stays inside).

use std::path::Path;

use fleet_wire::api::FilecoinKind;

use crate::filecoin::cache::CacheEntry;
use crate::filecoin::set::ParamSet;
use crate::filecoin::FilecoinError;
use crate::statement::{Statement, StatementError};

/// Bytes of one Groth16 proof in Filecoin's (bellperson's compressed) encoding.
pub const PROOF_BYTES: usize = 192;

/// A checked Filecoin proof: its inputs verified (replica id, vanilla
/// proofs), its partitions' circuits built on demand
/// ([`Statement::synthesize`]), its parameters one of Filecoin's sets.
pub trait FilStatement: Statement {
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
}

/// A Filecoin kind's refusal while synthesising, kept whole (its message
/// and source) for the partition's record.
impl From<FilecoinError> for StatementError {
    fn from(e: FilecoinError) -> Self {
        StatementError::Kind(Box::new(e))
    }
}
