//! The PoRep parameter set of a seal proof type: its blank partition
//! circuit and its shape, counted from one and two challenges.

use std::path::Path;

use filecoin_proofs::constants::DefaultPieceHasher;
use storage_proofs_core::compound_proof::{self, CompoundProof};
use storage_proofs_core::merkle::MerkleTreeTrait;
use storage_proofs_porep::stacked::{self, Challenges, StackedCompound, StackedDrg};

use crate::circuit::CircuitShape;
use crate::filecoin::cache::CacheEntry;
use crate::filecoin::need::{by_repetition, count};
use crate::filecoin::registered::SealProof;
use crate::filecoin::set::{BlankJob, BlankOut, ParamSet};
use crate::filecoin::{crates_err, with_tree, FilecoinError};

type PorepCompound<Tree> = StackedCompound<Tree, DefaultPieceHasher>;
type PorepScheme<'a, Tree> = StackedDrg<'a, Tree, DefaultPieceHasher>;

impl ParamSet for SealProof {
    fn sector_size(&self) -> u64 {
        self.sector_size
    }

    fn cache_entry(&self, cache_dir: &Path) -> Result<CacheEntry, FilecoinError> {
        crate::filecoin::porep::cache_entry(cache_dir, *self)
    }

    fn shape(&self) -> Result<CircuitShape, FilecoinError> {
        with_tree!(self.sector_size, shape_of, *self)
    }

    fn with_blank(&self, job: BlankJob<'_>) -> Result<BlankOut, FilecoinError> {
        with_tree!(self.sector_size, blank_of, *self, job)
    }
}

fn shape_of<Tree: 'static + MerkleTreeTrait>(
    seal_proof: SealProof,
) -> Result<CircuitShape, FilecoinError> {
    let porep = PorepSetup::of(seal_proof, None)?;
    by_repetition(porep.challenges(), |k| {
        PorepSetup::of(seal_proof, Some(k))?.count::<Tree>()
    })
}

fn blank_of<Tree: 'static + MerkleTreeTrait>(
    seal_proof: SealProof,
    job: BlankJob<'_>,
) -> Result<BlankOut, FilecoinError> {
    job.run(PorepSetup::of(seal_proof, None)?.blank::<Tree>()?)
}

/// A seal proof type's PoRep setup, with its own number of challenges a
/// partition or another (what the shape is counted from).
struct PorepSetup {
    vanilla: stacked::SetupParams,
    partitions: usize,
}

impl PorepSetup {
    fn of(seal_proof: SealProof, challenges: Option<usize>) -> Result<Self, FilecoinError> {
        let config = seal_proof.porep_config();
        let mut vanilla = filecoin_proofs::parameters::setup_params(&config)
            .map_err(crates_err("setting up the PoRep parameters"))?;
        if let Some(k) = challenges {
            vanilla.challenges = Challenges::new_interactive(k);
        }
        Ok(PorepSetup {
            vanilla,
            partitions: usize::from(config.partitions),
        })
    }

    /// Challenges a partition has.
    fn challenges(&self) -> usize {
        self.vanilla.challenges.num_challenges_per_partition()
    }

    /// The blank partition circuit.
    fn blank<Tree: 'static + MerkleTreeTrait>(
        &self,
    ) -> Result<impl bellperson::Circuit<blstrs::Scalar> + Clone + Send, FilecoinError> {
        let pub_params = <PorepCompound<Tree> as CompoundProof<PorepScheme<'_, Tree>, _>>::setup(
            &compound_proof::SetupParams {
                vanilla_params: self.vanilla.clone(),
                partitions: Some(self.partitions),
                priority: false,
            },
        )
        .map_err(crates_err("setting up the compound PoRep"))?;
        Ok(<PorepCompound<Tree> as CompoundProof<
            PorepScheme<'_, Tree>,
            _,
        >>::blank_circuit(&pub_params.vanilla_params))
    }

    fn count<Tree: 'static + MerkleTreeTrait>(&self) -> Result<CircuitShape, FilecoinError> {
        count(self.blank::<Tree>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filecoin::need::extend;

    /// The extension is exact: a 2 KiB partition of five challenges counted
    /// whole has the shape extended from one and two.
    #[test]
    fn a_porep_partition_is_its_first_challenge_plus_a_step_per_further_one() {
        type Tree = filecoin_proofs::constants::SectorShape2KiB;
        let p: SealProof = "StackedDrg2KiBV1_1".parse().expect("name");
        assert_eq!(PorepSetup::of(p, None).expect("setup").challenges(), 2);
        let counted = |k| {
            PorepSetup::of(p, Some(k))
                .and_then(|s| s.count::<Tree>())
                .expect("count")
        };
        let extended = extend(counted(1), counted(2), 5).expect("five");
        assert_eq!(counted(5), extended);
        // The set's own shape is its blank circuit's.
        assert_eq!(p.shape().expect("shape"), counted(2));
    }
}
