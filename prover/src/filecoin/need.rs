//! What generating a Filecoin circuit's TEST-ONLY parameters needs, known
//! before any of the work: the partition circuit's shape, and from it the
//! memory and disk of the generation ([`crate::setup::preflight`], the rule
//! bundled circuits follow).
//!
//! The shape is counted, not looked up, from blank circuits of one and two
//! challenges (PoRep, SnapDeals) or sectors (PoSt): every challenge of a PoRep
//! partition, and every sector of a PoSt, is the same sub-circuit over the
//! same preamble, so constraints, inputs and aux variables grow by the same
//! step each, and the whole partition is the one-challenge count plus that
//! step per further challenge. A SnapDeals challenge draws its bits from a
//! digest shared with the next ones, so its count also steps once per
//! digest (see [`snap_shape`]). Counting three challenges' worth of a 32 GiB
//! partition (18 challenges, ~130 M constraints) takes seconds and no
//! memory to speak of, where synthesising the whole blank circuit takes
//! minutes and the generation ~100 GiB.

use filecoin_proofs::constants::DefaultPieceHasher;
use storage_proofs_core::compound_proof::{self, CompoundProof};
use storage_proofs_core::merkle::MerkleTreeTrait;
use storage_proofs_porep::stacked::{self, Challenges, StackedCompound, StackedDrg};
use storage_proofs_post::fallback::{self, FallbackPoStCompound};
use storage_proofs_update::constants::TreeRHasher;

use crate::circuit::CircuitShape;
use crate::filecoin::post::{self, PostKind};
use crate::filecoin::registered::SealProof;
use crate::filecoin::{crates_err, snap, FilCircuit, FilecoinError};

/// The shape of one partition of `circuit`.
pub fn shape(circuit: FilCircuit) -> Result<CircuitShape, FilecoinError> {
    match circuit {
        FilCircuit::PoRep(p) => crate::filecoin::with_tree!(p.sector_size, porep_shape, p),
        FilCircuit::Post(kind, size) => crate::filecoin::with_tree!(size, post_shape, kind, size),
        FilCircuit::Snap(size) => crate::filecoin::with_tree!(size, snap_shape, size),
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

/// `n` challenges of the SnapDeals circuit from the counts of one, two and
/// `per_digest + 1` challenges: a base, a step per challenge and a step per
/// digest of `per_digest` challenges' bits (`gen_challenge_bits`), so
/// `f(n) = f(1) + (n - 1) c + (⌈n / per_digest⌉ - 1) d`.
fn extend_by_digests(
    one: CircuitShape,
    two: CircuitShape,
    two_digests: CircuitShape,
    n: usize,
    per_digest: usize,
) -> Result<CircuitShape, FilecoinError> {
    let step = |f1: usize, f2: usize, fd: usize| {
        let c = f2.checked_sub(f1)?;
        let d = fd
            .checked_sub(f1)?
            .checked_sub(c.checked_mul(per_digest)?)?;
        f1.checked_add(c.checked_mul(n.checked_sub(1)?)?)?
            .checked_add(d.checked_mul(n.div_ceil(per_digest.max(1)).checked_sub(1)?)?)
    };
    let field = |f1, f2, fd| {
        step(f1, f2, fd).ok_or(FilecoinError::ProofCrates {
            context: "counting the SnapDeals circuit's shape",
            reason: "more challenges made it smaller, or the count overflows".into(),
        })
    };
    Ok(CircuitShape {
        num_inputs: field(one.num_inputs, two.num_inputs, two_digests.num_inputs)?,
        num_aux: field(one.num_aux, two.num_aux, two_digests.num_aux)?,
        num_constraints: field(
            one.num_constraints,
            two.num_constraints,
            two_digests.num_constraints,
        )?,
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

/// The SnapDeals update circuit's shape: counted whole where its
/// challenges come from one digest (2 KiB, 8 MiB: linear in them, extended
/// from one and two), else from one, two and one digest's yield plus one
/// challenges (32 GiB: 86 challenges, 9 a digest).
fn snap_shape<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>>(
    sector_size: u64,
) -> Result<CircuitShape, FilecoinError> {
    let (n, per_digest) = snap::challenge_counts(sector_size);
    let counted = |k: usize| count(snap::blank_with_challenges::<Tree>(sector_size, k));
    if n <= per_digest || per_digest < 2 {
        return by_repetition(n, counted);
    }
    extend_by_digests(
        counted(1)?,
        counted(2)?,
        counted(per_digest + 1)?,
        n,
        per_digest,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_add_their_step_once_per_digest() {
        let shape = |c: usize| CircuitShape {
            num_inputs: 5,
            num_aux: c,
            num_constraints: 2 * c,
        };
        // f(n) = 1000 + 100 n + 7 ⌈n / 4⌉ (aux), twice that (constraints).
        let f = |n: usize| shape(1000 + 100 * n + 7 * n.div_ceil(4));
        for n in [5, 8, 9, 86] {
            assert_eq!(
                extend_by_digests(f(1), f(2), f(5), n, 4).unwrap(),
                f(n),
                "{n}"
            );
        }
        assert!(extend_by_digests(f(2), f(1), f(5), 9, 4).is_err());
    }

    /// 2 KiB's ten challenges come from one digest: the shape extended from
    /// one and two challenges is the crates' whole blank circuit's.
    #[test]
    fn a_2kib_snap_partition_is_counted_as_the_crates_blank_circuit() {
        type Tree = filecoin_proofs::constants::SectorShape2KiB;
        let extended = shape(FilCircuit::Snap(2048)).expect("shape");
        let whole = count(snap::blank_circuit::<Tree>(2048)).expect("count");
        assert_eq!(extended, whole);
        let own = count(snap::blank_with_challenges::<Tree>(2048, 10)).expect("count");
        assert_eq!(own, whole);
        eprintln!(
            "2 KiB SnapDeals: {whole:?}, domain 2^{}",
            whole.log2_domain()
        );
    }

    /// The digest extension is exact: 50 challenges of a 2 KiB partition
    /// (two digests of 42) counted whole are the extension from 1, 2 and 43.
    #[test]
    fn a_snap_circuit_of_two_digests_is_its_extension_from_one_two_and_a_digest_more() {
        type Tree = filecoin_proofs::constants::SectorShape2KiB;
        let counted =
            |k: usize| count(snap::blank_with_challenges::<Tree>(2048, k)).expect("count");
        let (_, per_digest) = snap::challenge_counts(2048);
        let extended = extend_by_digests(
            counted(1),
            counted(2),
            counted(per_digest + 1),
            50,
            per_digest,
        )
        .expect("extend");
        assert_eq!(extended, counted(50));
    }

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
