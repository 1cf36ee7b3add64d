//! `sha256`: knowledge of a preimage of a public SHA-256 digest, from bellperson's gadgets.
//!
//! The preimage is `64·blocks − 9` bytes, the longest message whose padding
//! still fits in `blocks` 64-byte blocks, so every block hashes witness bits.
//! The digest's 256 bits are packed into two public inputs with `multipack`.
//! A size maps to the most blocks whose padded constraint count fits in it
//! (at least one block); see [`blocks_for_size`].

use std::sync::OnceLock;

use std::ops::Range;

use bellperson::gadgets::boolean::{AllocatedBit, Boolean};
use bellperson::gadgets::sha256::sha256_compression_function;
use bellperson::gadgets::{multipack, uint32::UInt32};
use bellperson::{Circuit, ConstraintSystem, SynthesisError};
use blstrs::Scalar;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use sha2::digest::generic_array::GenericArray;
use sha2::{Digest, Sha256};

use super::shape::CircuitShape;
use super::split::{piece_range, Detached, SplitWitness};

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
        self.synthesize_piece(0, 1, cs)
    }
}

/// SHA-256's initial hash value (FIPS 180-4, section 5.3.3).
const IV: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// Bits in a block.
const BLOCK_BITS: usize = 512;

/// The pieces are runs of whole blocks. A piece after the first starts from
/// the chaining state after the blocks before it, computed natively (a
/// microsecond a block) and allocated detached, as are the preimage bits it
/// hashes: the first piece allocates every preimage bit, as the circuit does
/// before hashing, and the last one packs the digest into the inputs.
impl SplitWitness for Sha256Circuit {
    fn pieces(&self, max: usize) -> usize {
        if self.preimage.is_none() {
            return 1;
        }
        max.clamp(1, self.blocks)
    }

    fn synthesize_piece<CS: ConstraintSystem<Scalar>>(
        &self,
        piece: usize,
        pieces: usize,
        cs: &mut CS,
    ) -> Result<(), SynthesisError> {
        let len = preimage_len(self.blocks);
        let blocks = piece_range(self.blocks, piece, pieces);
        let data_bits = 8 * len;
        let bit_range = if piece == 0 {
            0..data_bits
        } else {
            (BLOCK_BITS * blocks.start).min(data_bits)..(BLOCK_BITS * blocks.end).min(data_bits)
        };
        let bits = if piece == 0 {
            self.alloc_bits(cs, bit_range.clone())?
        } else {
            self.alloc_bits(&mut Detached, bit_range.clone())?
        };
        let mut cur: Vec<UInt32> = if blocks.start == 0 {
            IV.iter().map(|&v| UInt32::constant(v)).collect()
        } else {
            let preimage = self
                .preimage
                .as_deref()
                .ok_or(SynthesisError::AssignmentMissing)?;
            chaining_state(preimage, blocks.start)
                .iter()
                .map(|&v| UInt32::alloc(Detached, Some(v)))
                .collect::<Result<_, _>>()?
        };
        {
            let mut cs = cs.namespace(|| "sha256");
            let mut block = Vec::with_capacity(BLOCK_BITS);
            for b in blocks.clone() {
                block.clear();
                block.extend((BLOCK_BITS * b..BLOCK_BITS * (b + 1)).map(|i| {
                    if i < data_bits {
                        bits[i - bit_range.start].clone()
                    } else {
                        padding_bit(i, data_bits)
                    }
                }));
                cur = sha256_compression_function(
                    cs.namespace(|| format!("block {b}")),
                    &block,
                    &cur,
                )?;
            }
        }
        if blocks.end == self.blocks {
            let digest: Vec<Boolean> = cur.into_iter().flat_map(|e| e.into_bits_be()).collect();
            multipack::pack_into_inputs(cs.namespace(|| "digest"), &digest)?;
        }
        Ok(())
    }
}

impl Sha256Circuit {
    /// The preimage bits `range` (in message order, each byte most
    /// significant bit first, as SHA-256 reads them), allocated into `cs`.
    fn alloc_bits<CS: ConstraintSystem<Scalar>>(
        &self,
        cs: &mut CS,
        range: Range<usize>,
    ) -> Result<Vec<Boolean>, SynthesisError> {
        let mut bits = Vec::with_capacity(range.len());
        for n in range {
            let byte = self.preimage.as_ref().and_then(|p| p.get(n / 8).copied());
            let value = byte.map(|b| (b >> (7 - n % 8)) & 1 == 1);
            let allocated =
                AllocatedBit::alloc(cs.namespace(|| format!("preimage bit {n}")), value)?;
            bits.push(Boolean::from(allocated));
        }
        Ok(bits)
    }
}

/// Bit `i` of the padding after `data_bits` bits of message: a one, zeros,
/// then the message length in bits as a 64-bit big-endian number ending the
/// last block (FIPS 180-4, section 5.1.1).
fn padding_bit(i: usize, data_bits: usize) -> Boolean {
    let total = (data_bits + 1 + 64).div_ceil(BLOCK_BITS) * BLOCK_BITS;
    let length_start = total - 64;
    if i == data_bits {
        Boolean::constant(true)
    } else if i < length_start {
        Boolean::constant(false)
    } else {
        let shift = 63 - (i - length_start);
        Boolean::constant((data_bits as u64 >> shift) & 1 == 1)
    }
}

/// SHA-256's chaining state after the first `blocks` blocks of `preimage`,
/// which must all be message (no padding).
fn chaining_state(preimage: &[u8], blocks: usize) -> [u32; 8] {
    let mut state = IV;
    let whole: Vec<_> = preimage[..64 * blocks]
        .chunks_exact(64)
        .map(|c| *GenericArray::from_slice(c))
        .collect();
    sha2::compress256(&mut state, &whole);
    state
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
