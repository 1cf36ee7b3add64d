//! What generating a Filecoin circuit's TEST-ONLY parameters needs, known
//! before any of the work: the partition circuit's shape, and from it the
//! memory and disk of the generation ([`crate::setup::preflight`], the rule
//! bundled circuits follow).
//!
//! The shape is counted, not looked up, from blank circuits of one and two
//! challenges (PoRep) or sectors (PoSt): every challenge of a PoRep
//! partition, and every sector of a PoSt, is the same sub-circuit over the
//! same preamble, so constraints, inputs and aux variables grow by the same
//! step each, and the whole partition is the one-challenge count plus that
//! step per further challenge. Counting three challenges' worth of a 32 GiB
//! partition (18 challenges, ~130 M constraints) takes seconds and no
//! memory to speak of, where synthesising the whole blank circuit takes
//! minutes and the generation ~100 GiB.

use filecoin_proofs::constants::DefaultPieceHasher;
use storage_proofs_core::compound_proof::{self, CompoundProof};
use storage_proofs_core::merkle::MerkleTreeTrait;
use storage_proofs_porep::stacked::{self, Challenges, StackedCompound, StackedDrg};
use storage_proofs_post::fallback::{self, FallbackPoStCompound};

use crate::circuit::CircuitShape;
use crate::filecoin::post::{self, PostKind};
use crate::filecoin::registered::SealProof;
use crate::filecoin::{crates_err, FilCircuit, FilecoinError};

/// The shape of one partition of `circuit`.
pub fn shape(circuit: FilCircuit) -> Result<CircuitShape, FilecoinError> {
    match circuit {
        FilCircuit::PoRep(p) => crate::filecoin::with_tree!(p.sector_size, porep_shape, p),
        FilCircuit::Post(kind, size) => crate::filecoin::with_tree!(size, post_shape, kind, size),
    }
}

/// `n` repetitions of a sub-circuit from the counts of one and two.
fn extend(one: CircuitShape, two: CircuitShape, n: usize) -> Result<CircuitShape, FilecoinError> {
    let step = |a: usize, b: usize| {
        b.checked_sub(a)
            .and_then(|d| d.checked_mul(n.saturating_sub(1)))
            .and_then(|d| d.checked_add(a))
            .ok_or(FilecoinError::ProofCrates {
                context: "counting the circuit's shape",
                reason: "a second challenge made it smaller, or the count overflows".into(),
            })
    };
    Ok(CircuitShape {
        num_inputs: step(one.num_inputs, two.num_inputs)?,
        num_aux: step(one.num_aux, two.num_aux)?,
        num_constraints: step(one.num_constraints, two.num_constraints)?,
    })
}

fn count<C: bellperson::Circuit<blstrs::Scalar>>(
    circuit: C,
) -> Result<CircuitShape, FilecoinError> {
    CircuitShape::of(circuit).map_err(|e| FilecoinError::ProofCrates {
        context: "counting the circuit's shape",
        reason: e.to_string(),
    })
}

/// The counts of `counted(1)` and `counted(2)` extended to `n`; `n` of 1 or
/// 2 is counted as it is.
fn by_repetition(
    n: usize,
    counted: impl Fn(usize) -> Result<CircuitShape, FilecoinError>,
) -> Result<CircuitShape, FilecoinError> {
    match n {
        0..=2 => counted(n.max(1)),
        _ => extend(counted(1)?, counted(2)?, n),
    }
}

fn porep_shape<Tree: 'static + MerkleTreeTrait>(
    seal_proof: SealProof,
) -> Result<CircuitShape, FilecoinError> {
    let porep = PorepSetup::of(seal_proof)?;
    by_repetition(porep.challenges(), |k| porep.count::<Tree>(k))
}

/// A seal proof type's PoRep setup, whose partition circuit can be counted
/// with any number of challenges.
struct PorepSetup {
    vanilla: stacked::SetupParams,
    partitions: usize,
}

impl PorepSetup {
    fn of(seal_proof: SealProof) -> Result<Self, FilecoinError> {
        let config = seal_proof.porep_config();
        Ok(PorepSetup {
            vanilla: filecoin_proofs::parameters::setup_params(&config)
                .map_err(crates_err("setting up the PoRep parameters"))?,
            partitions: usize::from(config.partitions),
        })
    }

    /// Challenges a partition has.
    fn challenges(&self) -> usize {
        self.vanilla.challenges.num_challenges_per_partition()
    }

    /// The shape of a blank partition circuit of `k` challenges.
    fn count<Tree: 'static + MerkleTreeTrait>(
        &self,
        k: usize,
    ) -> Result<CircuitShape, FilecoinError> {
        let mut params = self.vanilla.clone();
        params.challenges = Challenges::new_interactive(k);
        let pub_params = <StackedCompound<Tree, DefaultPieceHasher> as CompoundProof<
            StackedDrg<'_, Tree, DefaultPieceHasher>,
            _,
        >>::setup(&compound_proof::SetupParams {
            vanilla_params: params,
            partitions: Some(self.partitions),
            priority: false,
        })
        .map_err(crates_err("setting up the compound PoRep"))?;
        count(
            <StackedCompound<Tree, DefaultPieceHasher> as CompoundProof<
                StackedDrg<'_, Tree, DefaultPieceHasher>,
                _,
            >>::blank_circuit(&pub_params.vanilla_params),
        )
    }
}

fn post_shape<Tree: 'static + MerkleTreeTrait>(
    kind: PostKind,
    sector_size: u64,
) -> Result<CircuitShape, FilecoinError> {
    let config = post::post_config(kind, sector_size)?;
    let full = post::public_params::<Tree>(&config, config.sector_count)?;
    let vanilla: fallback::SetupParams = fallback::SetupParams {
        sector_size: full.vanilla_params.sector_size,
        challenge_count: full.vanilla_params.challenge_count,
        sector_count: full.vanilla_params.sector_count,
        api_version: full.vanilla_params.api_version,
    };
    by_repetition(vanilla.sector_count, |k| {
        let pub_params = FallbackPoStCompound::<Tree>::setup(&compound_proof::SetupParams {
            vanilla_params: fallback::SetupParams {
                sector_count: k,
                ..vanilla.clone()
            },
            partitions: None,
            priority: false,
        })
        .map_err(crates_err("setting up the compound PoSt"))?;
        count(FallbackPoStCompound::<Tree>::blank_circuit(
            &pub_params.vanilla_params,
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repetition_extends_each_count_by_its_step() {
        let one = CircuitShape {
            num_inputs: 5,
            num_aux: 100,
            num_constraints: 90,
        };
        let two = CircuitShape {
            num_inputs: 8,
            num_aux: 180,
            num_constraints: 170,
        };
        let ten = extend(one, two, 10).unwrap();
        assert_eq!(
            (ten.num_inputs, ten.num_aux, ten.num_constraints),
            (5 + 9 * 3, 100 + 9 * 80, 90 + 9 * 80)
        );
        assert!(extend(two, one, 3).is_err());
    }

    /// The extension is exact: a 2 KiB partition of five challenges counted
    /// whole has the shape extended from one and two.
    #[test]
    fn a_porep_partition_is_its_first_challenge_plus_a_step_per_further_one() {
        type Tree = filecoin_proofs::constants::SectorShape2KiB;
        let p: SealProof = "StackedDrg2KiBV1_1".parse().expect("name");
        let porep = PorepSetup::of(p).expect("setup");
        assert_eq!(porep.challenges(), 2);
        let whole = porep.count::<Tree>(5).expect("five");
        let extended = extend(
            porep.count::<Tree>(1).expect("one"),
            porep.count::<Tree>(2).expect("two"),
            5,
        )
        .expect("five");
        assert_eq!(whole, extended);
    }

    /// A WinningPoSt is 66 sectors of one challenge: extended from one and
    /// two, it is the whole blank circuit's count (90 883 constraints with
    /// the inputs' padding, as proving it reports).
    #[test]
    fn a_winning_post_extended_from_two_sectors_is_the_whole_circuits_shape() {
        type Tree = filecoin_proofs::constants::SectorShape2KiB;
        let extended = shape(FilCircuit::Post(PostKind::Winning, 2048)).expect("shape");
        let config = post::post_config(PostKind::Winning, 2048).expect("config");
        let full = post::public_params::<Tree>(&config, config.sector_count).expect("params");
        let whole = count(FallbackPoStCompound::<Tree>::blank_circuit(
            &full.vanilla_params,
        ))
        .expect("count");
        assert_eq!(extended, whole);
        assert_eq!(whole.padded_constraints(), 90_883);
    }
}
