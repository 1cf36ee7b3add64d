//! `sha256`: knowledge of a preimage of a public SHA-256 digest, from bellperson's gadgets.
//!
//! The preimage is `64·blocks − 9` bytes, the longest message whose padding
//! still fits in `blocks` 64-byte blocks, so every block hashes witness bits.
//! The digest's 256 bits are packed into two public inputs with `multipack`.
//! A size maps to the most blocks whose padded constraint count fits in it
//! (at least one block); see [`blocks_for_size`].

use std::sync::OnceLock;

use bellperson::gadgets::boolean::{AllocatedBit, Boolean};
use bellperson::gadgets::{multipack, sha256::sha256};
use bellperson::{Circuit, ConstraintSystem, SynthesisError};
use blstrs::Scalar;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use sha2::{Digest, Sha256};

use super::shape::CircuitShape;

/// Bytes of the SHA-256 length field plus the mandatory `0x80` padding byte.
const PADDING_BYTES: usize = 9;

/// The preimage circuit; `preimage == None` is the shape for parameter generation.
#[derive(Clone, Debug)]
pub struct Sha256Circuit {
    blocks: usize,
    preimage: Option<Vec<u8>>,
}

impl Sha256Circuit {
    /// The shape of a `blocks`-block preimage circuit (at least one block).
    pub fn shape(blocks: usize) -> Self {
        Sha256Circuit {
            blocks: blocks.max(1),
            preimage: None,
        }
    }

    /// A `blocks`-block circuit witnessed by a preimage drawn from `seed`.
    pub fn from_seed(blocks: usize, seed: u64) -> Self {
        let blocks = blocks.max(1);
        let mut preimage = vec![0u8; preimage_len(blocks)];
        ChaCha20Rng::seed_from_u64(seed).fill_bytes(&mut preimage);
        Sha256Circuit {
            blocks,
            preimage: Some(preimage),
        }
    }

    pub fn blocks(&self) -> usize {
        self.blocks
    }

    pub fn preimage(&self) -> Option<&[u8]> {
        self.preimage.as_deref()
    }

    /// The public inputs: the preimage's digest packed into field elements.
    pub fn public_inputs(&self) -> Option<Vec<Scalar>> {
        self.preimage
            .as_deref()
            .map(|p| digest_inputs(&Sha256::digest(p)))
    }
}

/// Preimage length in bytes for `blocks` blocks.
pub fn preimage_len(blocks: usize) -> usize {
    64 * blocks.max(1) - PADDING_BYTES
}

/// Packs a 32-byte digest into public inputs exactly as the circuit does.
pub fn digest_inputs(digest: &[u8]) -> Vec<Scalar> {
    multipack::compute_multipacking(&multipack::bytes_to_bits(digest))
}

impl Circuit<Scalar> for Sha256Circuit {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        let len = preimage_len(self.blocks);
        let mut bits = Vec::with_capacity(8 * len);
        for i in 0..len {
            let byte = self.preimage.as_ref().and_then(|p| p.get(i).copied());
            // SHA-256 reads each byte most significant bit first.
            for bit in (0..8).rev() {
                let value = byte.map(|b| (b >> bit) & 1 == 1);
                let allocated = AllocatedBit::alloc(
                    cs.namespace(|| format!("preimage bit {}", 8 * i + 7 - bit)),
                    value,
                )?;
                bits.push(Boolean::from(allocated));
            }
        }
        let digest = sha256(cs.namespace(|| "sha256"), &bits)?;
        multipack::pack_into_inputs(cs.namespace(|| "digest"), &digest)
    }
}

/// Padded constraint counts (circuit constraints + inputs) of 1, 2 and 3 blocks,
/// counted once. Every block after the first and before the last costs the same,
/// so these three fix the count for any number of blocks.
fn block_costs() -> Result<&'static [usize; 3], SynthesisError> {
    static COSTS: OnceLock<[usize; 3]> = OnceLock::new();
    if let Some(costs) = COSTS.get() {
        return Ok(costs);
    }
    let mut costs = [0; 3];
    for (blocks, cost) in (1..).zip(costs.iter_mut()) {
        *cost = CircuitShape::of(Sha256Circuit::shape(blocks))?.padded_constraints();
    }
    Ok(COSTS.get_or_init(|| costs))
}

/// Padded constraint count of a `blocks`-block circuit, without synthesising it.
pub fn padded_constraints(blocks: usize) -> Result<usize, SynthesisError> {
    let [one, two, three] = *block_costs()?;
    Ok(match blocks {
        0 | 1 => one,
        n => two + (n - 2) * (three - two),
    })
}

/// The most blocks whose padded constraint count is at most `size` (at least one).
pub fn blocks_for_size(size: usize) -> Result<usize, SynthesisError> {
    let [_, two, three] = *block_costs()?;
    if size < two {
        return Ok(1);
    }
    Ok(2 + (size - two) / (three - two))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bellperson::util_cs::test_cs::TestConstraintSystem;

    #[test]
    fn public_input_is_the_real_digest_of_the_preimage() {
        let circuit = Sha256Circuit::from_seed(1, 3);
        let preimage = circuit.preimage().expect("witness").to_vec();
        assert_eq!(preimage.len(), 55);
        let expected = digest_inputs(&Sha256::digest(&preimage));
        let mut cs = TestConstraintSystem::<Scalar>::new();
        circuit.synthesize(&mut cs).expect("synthesis");
        assert!(
            cs.is_satisfied(),
            "unsatisfied at {:?}",
            cs.which_is_unsatisfied()
        );
        assert_eq!(expected.len(), 2);
        assert!(cs.verify(&expected));
        assert!(!cs.verify(&digest_inputs(&Sha256::digest(b"another message"))));
    }

    #[test]
    fn block_count_formula_matches_counted_shapes() {
        for blocks in 1..=4 {
            let counted = CircuitShape::of(Sha256Circuit::shape(blocks)).expect("count");
            assert_eq!(
                padded_constraints(blocks).expect("costs"),
                counted.padded_constraints(),
                "{blocks} blocks"
            );
            assert_eq!(counted.num_inputs, 3);
        }
    }

    /// docs/params.md quotes these counts; this fails when a bellperson
    /// upgrade changes the gadget, so the table gets updated with it.
    #[test]
    fn documented_block_costs_are_current() {
        assert_eq!(padded_constraints(1).expect("costs"), 26_034);
        assert_eq!(padded_constraints(2).expect("costs"), 52_738);
        assert_eq!(
            padded_constraints(3).expect("costs") - padded_constraints(2).expect("costs"),
            26_704
        );
        assert_eq!(blocks_for_size(1 << 20).expect("costs"), 39);
        assert_eq!(blocks_for_size(1 << 27).expect("costs"), 5_026);
    }

    #[test]
    fn size_maps_to_the_largest_fitting_block_count() {
        let two = padded_constraints(2).expect("costs");
        let three = padded_constraints(3).expect("costs");
        assert_eq!(blocks_for_size(16).expect("costs"), 1);
        assert_eq!(blocks_for_size(two - 1).expect("costs"), 1);
        assert_eq!(blocks_for_size(two).expect("costs"), 2);
        assert_eq!(blocks_for_size(three - 1).expect("costs"), 2);
        assert_eq!(blocks_for_size(three).expect("costs"), 3);
        let big = 1 << 20;
        let blocks = blocks_for_size(big).expect("costs");
        assert!(padded_constraints(blocks).expect("costs") <= big);
        assert!(padded_constraints(blocks + 1).expect("costs") > big);
    }
}
