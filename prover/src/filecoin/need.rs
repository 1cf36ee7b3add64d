//! Counting a Filecoin partition circuit's shape, for what generating its
//! TEST-ONLY parameters needs before any of the work: the memory and disk
//! of the generation ([`crate::setup::preflight`], the rule bundled
//! circuits follow).
//!
//! The shape is counted, not looked up, from blank circuits of one and two
//! challenges (PoRep, SnapDeals) or sectors (PoSt): every challenge of a PoRep
//! partition, and every sector of a PoSt, is the same sub-circuit over the
//! same preamble, so constraints, inputs and aux variables grow by the same
//! step each, and the whole partition is the one-challenge count plus that
//! step per further challenge. A SnapDeals challenge draws its bits from a
//! digest shared with the next ones, so its count also steps once per
//! digest ([`extend_by_digests`]). Counting three challenges' worth of a
//! 32 GiB partition (18 challenges, ~130 M constraints) takes seconds and
//! no memory to speak of, where synthesising the whole blank circuit takes
//! minutes and the generation ~100 GiB.
//!
//! Each kind counts its own circuit with these tools in its `ParamSet::shape`
//! ([`crate::filecoin::set`]).

use crate::circuit::CircuitShape;
use crate::filecoin::FilecoinError;

/// `n` repetitions of a sub-circuit from the counts of one and two.
pub(crate) fn extend(
    one: CircuitShape,
    two: CircuitShape,
    n: usize,
) -> Result<CircuitShape, FilecoinError> {
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
pub(crate) fn extend_by_digests(
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

pub(crate) fn count<C: bellperson::Circuit<blstrs::Scalar>>(
    circuit: C,
) -> Result<CircuitShape, FilecoinError> {
    CircuitShape::of(circuit).map_err(|e| FilecoinError::ProofCrates {
        context: "counting the circuit's shape",
        reason: e.to_string(),
    })
}

/// The counts of `counted(1)` and `counted(2)` extended to `n`; `n` of 1 or
/// 2 is counted as it is.
pub(crate) fn by_repetition(
    n: usize,
    counted: impl Fn(usize) -> Result<CircuitShape, FilecoinError>,
) -> Result<CircuitShape, FilecoinError> {
    match n {
        0..=2 => counted(n.max(1)),
        _ => extend(counted(1)?, counted(2)?, n),
    }
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
}
