//! Counting a Filecoin partition circuit's shape, for what generating its
//! TEST-ONLY parameters needs before any of the work: the memory and disk
//! of the generation ([`crate::setup::preflight`], the rule bundled
//! circuits follow).
//!
//! The shape is counted, not looked up, from blank circuits of one and two
//! challenges (PoRep) or sectors (PoSt): every challenge of a PoRep
//! partition, and every sector of a PoSt, is the same sub-circuit over the
//! same preamble, so constraints, inputs and aux variables grow by the same
//! step each, and the whole partition is the one-challenge count plus that
//! step per further challenge. Counting three challenges' worth of a
//! 32 GiB partition (18 challenges, ~130 M constraints) takes seconds and
//! no memory to speak of, where synthesising the whole blank circuit takes
//! minutes and the generation ~100 GiB.
//!
//! Each kind counts its own circuit with these tools in its `ParamSet::shape`
//! ([`crate::filecoin::set`]); a circuit with a step of its own beside the
//! per-challenge one extends them there.

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
