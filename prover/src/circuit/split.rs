//! Circuits whose witness can be computed in pieces, one per core.
//!
//! The witness-only pass (`compiled::assign_split`) never builds a linear
//! combination, so a variable's index is never read: only the order of the
//! allocations matters. A circuit whose later part depends on its earlier part
//! through values it can compute natively and cheaply (a hash's chaining
//! state) can therefore start each piece from those values, allocated
//! [`Detached`] from the system, and run the pieces on separate threads. The
//! pieces' allocations, concatenated in piece order, are exactly the
//! allocations of [`Circuit::synthesize`].
//!
//! The pieces' own constraints are not the circuit's (their first
//! variables are detached), so they are only ever run on a system that drops
//! constraints; the structure check of the first proofs of a shape runs the
//! whole circuit on one thread. The exception is a circuit whose pieces
//! repeat its preamble (below): each piece is then a whole circuit of its
//! own, and `compiled::compile_split` records the pieces side by side.

use bellperson::{Circuit, ConstraintSystem, Index, LinearCombination, SynthesisError, Variable};
use blstrs::Scalar;

use super::unnamed::unnamed_root;

/// A circuit whose witness comes in `pieces(max)` pieces.
///
/// Contract: for every `n = pieces(max)`, running `synthesize_piece(i, n, cs)`
/// for `i` in `0..n` allocates the same values, inputs and aux, in the same
/// order as `synthesize` does (ONE, which the proving system allocates
/// itself, excluded). Each piece may run on its own thread.
///
/// Where [`SplitWitness::repeats_preamble`] is true the contract is looser:
/// every piece first allocates the same preamble (the same number of inputs,
/// aux variables and constraints, and the same values), then its share of
/// the circuit; the whole circuit is the preamble once, then every piece's
/// share in order. That is what a circuit built from a subset of its
/// sections gives (a PoRep partition from some of its challenges): the
/// preamble's length follows from the counts, and its repeats are checked
/// value for value and dropped.
pub trait SplitWitness: Circuit<Scalar> + Sync {
    /// Whether every piece repeats the circuit's preamble (see above).
    fn repeats_preamble(&self) -> bool {
        false
    }

    /// How many pieces to cut the witness into when `max` threads are free
    /// (1 when the circuit cannot be cut or has no witness).
    fn pieces(&self, max: usize) -> usize;

    /// Allocates piece `piece` of `pieces` into `cs`.
    fn synthesize_piece<CS: ConstraintSystem<Scalar>>(
        &self,
        piece: usize,
        pieces: usize,
        cs: &mut CS,
    ) -> Result<(), SynthesisError>;
}

/// A system that keeps nothing: gadgets allocated here carry their values
/// (an `AllocatedBit` holds its bit) but take no place in the assignment. A
/// piece builds the values it starts from here.
pub struct Detached;

impl ConstraintSystem<Scalar> for Detached {
    unnamed_root!();

    fn alloc<F, A, AR>(&mut self, _: A, _: F) -> Result<Variable, SynthesisError>
    where
        F: FnOnce() -> Result<Scalar, SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        Ok(Variable::new_unchecked(Index::Aux(0)))
    }

    fn alloc_input<F, A, AR>(&mut self, _: A, _: F) -> Result<Variable, SynthesisError>
    where
        F: FnOnce() -> Result<Scalar, SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        Ok(Variable::new_unchecked(Index::Input(0)))
    }

    fn enforce<A, AR, LA, LB, LC>(&mut self, _: A, _: LA, _: LB, _: LC)
    where
        A: FnOnce() -> AR,
        AR: Into<String>,
        LA: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LB: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LC: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
    {
    }
}

/// The half-open range of `items` that piece `piece` of `pieces` takes:
/// contiguous, in order, sizes differing by at most one.
pub fn piece_range(items: usize, piece: usize, pieces: usize) -> std::ops::Range<usize> {
    let pieces = pieces.max(1);
    items * piece / pieces..items * (piece + 1) / pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn piece_ranges_cover_every_item_once_in_order() {
        for items in [1, 2, 7, 39, 150] {
            for pieces in 1..=items.min(17) {
                let mut next = 0;
                for p in 0..pieces {
                    let r = piece_range(items, p, pieces);
                    assert_eq!(r.start, next, "{items} items, {pieces} pieces");
                    assert!(!r.is_empty(), "{items} items, piece {p} of {pieces}");
                    next = r.end;
                }
                assert_eq!(next, items);
            }
        }
    }
}
