//! The SnapDeals update's parameter set of an update proof type: its blank
//! circuit and its shape, counted from a few challenges. A challenge draws
//! its bits from a digest shared with the next ones, so beside the step per
//! challenge that `need` extends by, the count also steps once per digest
//! (`extend_by_digests`).

use std::marker::PhantomData;
use std::path::Path;

use bellperson::{Circuit, ConstraintSystem, SynthesisError};
use blstrs::Scalar;
use ff::PrimeField;
use storage_proofs_core::merkle::MerkleTreeTrait;
use storage_proofs_update::constants::TreeRHasher;
use storage_proofs_update::{circuit, EmptySectorUpdateCircuit, PublicParams};

use crate::circuit::CircuitShape;
use crate::filecoin::cache::CacheEntry;
use crate::filecoin::need::{by_repetition, count};
use crate::filecoin::set::{BlankJob, BlankOut, ParamSet};
use crate::filecoin::snap::update_proof::UpdateProof;
use crate::filecoin::{with_tree, FilecoinError};

impl ParamSet for UpdateProof {
    fn sector_size(&self) -> u64 {
        self.sector_size
    }

    fn cache_entry(&self, cache_dir: &Path) -> Result<CacheEntry, FilecoinError> {
        crate::filecoin::snap::cache_entry(cache_dir, *self)
    }

    fn shape(&self) -> Result<CircuitShape, FilecoinError> {
        with_tree!(self.sector_size, shape_of, self.sector_size)
    }

    fn with_blank(&self, job: BlankJob<'_>) -> Result<BlankOut, FilecoinError> {
        with_tree!(self.sector_size, blank_of, self.sector_size, job)
    }
}

fn blank_of<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>>(
    sector_size: u64,
    job: BlankJob<'_>,
) -> Result<BlankOut, FilecoinError> {
    job.run(blank_circuit::<Tree>(sector_size))
}

/// The update circuit's shape: counted whole where its challenges come from
/// one digest (2 KiB, 8 MiB: linear in them, extended from one and two),
/// else from one, two and one digest's yield plus one challenges (32 GiB:
/// 86 challenges, 9 a digest).
fn shape_of<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>>(
    sector_size: u64,
) -> Result<CircuitShape, FilecoinError> {
    let (n, per_digest) = challenge_counts(sector_size);
    let counted = |k: usize| count(blank_with_challenges::<Tree>(sector_size, k));
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

/// The update circuit of a sector size with no witness: what parameters are
/// generated from. The crates' own circuit is not `Clone`, which this
/// crate's setup needs, so this builds it where it is synthesised.
struct BlankSnap<Tree> {
    pub_params: PublicParams,
    tree: PhantomData<fn() -> Tree>,
}

impl<Tree> Clone for BlankSnap<Tree> {
    fn clone(&self) -> Self {
        BlankSnap {
            pub_params: self.pub_params.clone(),
            tree: PhantomData,
        }
    }
}

impl<Tree: MerkleTreeTrait<Hasher = TreeRHasher>> Circuit<Scalar> for BlankSnap<Tree> {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        EmptySectorUpdateCircuit::<Tree>::blank(self.pub_params).synthesize(cs)
    }
}

/// The blank update circuit of `sector_size`, one of the sizes of
/// [`crate::filecoin::registered::SECTOR_SIZES`].
fn blank_circuit<Tree: MerkleTreeTrait<Hasher = TreeRHasher>>(sector_size: u64) -> BlankSnap<Tree> {
    BlankSnap {
        pub_params: PublicParams::from_sector_size(sector_size),
        tree: PhantomData,
    }
}

/// The blank update circuit of `sector_size` with `challenges` challenges in
/// place of its own count: what the shape is counted from. With its own
/// count it is the crates' blank circuit.
fn blank_with_challenges<Tree: MerkleTreeTrait<Hasher = TreeRHasher>>(
    sector_size: u64,
    challenges: usize,
) -> EmptySectorUpdateCircuit<Tree> {
    let pub_params = PublicParams::from_sector_size(sector_size);
    let nodes = pub_params.sector_nodes;
    let mut priv_inputs = circuit::PrivateInputs::<Tree>::empty(nodes);
    priv_inputs.challenge_proofs = vec![circuit::ChallengeProof::empty(nodes); challenges];
    EmptySectorUpdateCircuit {
        pub_params: PublicParams {
            challenge_count: challenges,
            ..pub_params
        },
        pub_inputs: circuit::PublicInputs::empty(),
        priv_inputs,
    }
}

/// Challenges of one partition of `sector_size`'s update, and how many of
/// them one digest of the circuit's challenge generation yields.
fn challenge_counts(sector_size: u64) -> (usize, usize) {
    let p = PublicParams::from_sector_size(sector_size);
    let bits = p.challenge_bit_len - p.partition_bit_len;
    (p.challenge_count, Scalar::CAPACITY as usize / bits.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    type Tree = filecoin_proofs::constants::SectorShape2KiB;

    fn two_kib() -> UpdateProof {
        UpdateProof::of_size(2048).expect("2KiB")
    }

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

    #[test]
    fn challenges_and_their_digests_follow_the_sector_size() {
        assert_eq!(challenge_counts(2048), (10, 42));
        assert_eq!(challenge_counts(32 << 30), (86, 9));
    }

    /// 2 KiB's ten challenges come from one digest: the shape extended from
    /// one and two challenges is the crates' whole blank circuit's.
    #[test]
    fn a_2kib_snap_partition_is_counted_as_the_crates_blank_circuit() {
        let extended = two_kib().shape().expect("shape");
        let whole = count(blank_circuit::<Tree>(2048)).expect("count");
        assert_eq!(extended, whole);
        let own = count(blank_with_challenges::<Tree>(2048, 10)).expect("count");
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
        let counted = |k: usize| count(blank_with_challenges::<Tree>(2048, k)).expect("count");
        let (_, per_digest) = challenge_counts(2048);
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
}
