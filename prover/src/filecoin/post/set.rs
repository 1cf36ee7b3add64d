//! The parameter set of a Winning or Window PoSt of a sector size: its
//! blank circuit and its shape, counted from one and two sectors.

use std::path::Path;

use storage_proofs_core::compound_proof::{self, CompoundProof};
use storage_proofs_core::merkle::MerkleTreeTrait;
use storage_proofs_post::fallback::{self, FallbackPoStCompound};

use crate::circuit::CircuitShape;
use crate::filecoin::cache::CacheEntry;
use crate::filecoin::need::{by_repetition, count};
use crate::filecoin::post;
pub use crate::filecoin::registered::PostSet;
use crate::filecoin::set::{BlankJob, BlankOut, ParamSet};
use crate::filecoin::{crates_err, with_tree, FilecoinError};

impl ParamSet for PostSet {
    fn sector_size(&self) -> u64 {
        self.sector_size
    }

    fn cache_entry(&self, cache_dir: &Path) -> Result<CacheEntry, FilecoinError> {
        post::cache_entry(cache_dir, self.kind, self.sector_size)
    }

    fn shape(&self) -> Result<CircuitShape, FilecoinError> {
        with_tree!(self.sector_size, shape_of, *self)
    }

    fn with_blank(&self, job: BlankJob<'_>) -> Result<BlankOut, FilecoinError> {
        with_tree!(self.sector_size, blank_of, *self, job)
    }
}

/// The set's vanilla setup, as filecoin-proofs makes it for the kind.
fn vanilla<Tree: 'static + MerkleTreeTrait>(
    set: PostSet,
) -> Result<fallback::SetupParams, FilecoinError> {
    let config = post::post_config(set.kind, set.sector_size)?;
    let full = post::public_params::<Tree>(&config, config.sector_count)?;
    Ok(fallback::SetupParams {
        sector_size: full.vanilla_params.sector_size,
        challenge_count: full.vanilla_params.challenge_count,
        sector_count: full.vanilla_params.sector_count,
        api_version: full.vanilla_params.api_version,
    })
}

/// The blank circuit of `vanilla`'s PoSt.
fn blank<Tree: 'static + MerkleTreeTrait>(
    vanilla: fallback::SetupParams,
) -> Result<impl bellperson::Circuit<blstrs::Scalar> + Clone + Send, FilecoinError> {
    let pub_params = FallbackPoStCompound::<Tree>::setup(&compound_proof::SetupParams {
        vanilla_params: vanilla,
        partitions: None,
        priority: false,
    })
    .map_err(crates_err("setting up the compound PoSt"))?;
    Ok(FallbackPoStCompound::<Tree>::blank_circuit(
        &pub_params.vanilla_params,
    ))
}

fn shape_of<Tree: 'static + MerkleTreeTrait>(set: PostSet) -> Result<CircuitShape, FilecoinError> {
    let vanilla = vanilla::<Tree>(set)?;
    by_repetition(vanilla.sector_count, |k| {
        count(blank::<Tree>(fallback::SetupParams {
            sector_count: k,
            ..vanilla.clone()
        })?)
    })
}

fn blank_of<Tree: 'static + MerkleTreeTrait>(
    set: PostSet,
    job: BlankJob<'_>,
) -> Result<BlankOut, FilecoinError> {
    job.run(blank::<Tree>(vanilla::<Tree>(set)?)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filecoin::registered::PostKind;

    /// A WinningPoSt is 66 sectors of one challenge: extended from one and
    /// two, it is the whole blank circuit's count (90 883 constraints with
    /// the inputs' padding, as proving it reports).
    #[test]
    fn a_winning_post_extended_from_two_sectors_is_the_whole_circuits_shape() {
        type Tree = filecoin_proofs::constants::SectorShape2KiB;
        let set = PostSet {
            kind: PostKind::Winning,
            sector_size: 2048,
        };
        let extended = set.shape().expect("shape");
        let whole = count(blank::<Tree>(vanilla::<Tree>(set).expect("setup")).expect("blank"))
            .expect("count");
        assert_eq!(extended, whole);
        assert_eq!(whole.padded_constraints(), 90_883);
    }
}
