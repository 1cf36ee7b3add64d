//! The one walk over a linear combination's terms, shared by synthesis
//! (evaluating a, b, c) and setup (folding Lagrange coefficients into the
//! QAP), with one rule for a term whose variable was never allocated: it is
//! rejected, as bellperson's prover rejects it (by indexing out of range),
//! whatever its coefficient. Reading it as zero instead would prove a
//! different circuit than the one the parameters were made for.

use bellperson::LinearCombination;
use blstrs::Scalar;

/// A variable of one of the two kinds, by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Var {
    Input(usize),
    Aux(usize),
}

/// A term names a variable the constraint system never allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a constraint uses {var:?}, which was never allocated ({inputs} inputs and {aux} aux variables exist)")]
pub struct UnknownVariable {
    pub var: Var,
    pub inputs: usize,
    pub aux: usize,
}

/// Calls `term` for every term of `lc` in order (inputs, then aux), after
/// checking its variable exists among `inputs` inputs and `aux` aux
/// variables. Stops at the first unknown variable.
#[inline]
pub fn walk(
    lc: &LinearCombination<Scalar>,
    inputs: usize,
    aux: usize,
    mut term: impl FnMut(Var, &Scalar),
) -> Result<(), UnknownVariable> {
    let unknown = |var| UnknownVariable { var, inputs, aux };
    for (&i, coeff) in lc.iter_inputs() {
        if i >= inputs {
            return Err(unknown(Var::Input(i)));
        }
        term(Var::Input(i), coeff);
    }
    for (&i, coeff) in lc.iter_aux() {
        if i >= aux {
            return Err(unknown(Var::Aux(i)));
        }
        term(Var::Aux(i), coeff);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bellperson::{Index, Variable};
    use ff::Field;

    #[test]
    fn every_term_is_visited_and_an_unallocated_one_is_refused() {
        let lc = LinearCombination::<Scalar>::zero()
            + (Scalar::from(2), Variable::new_unchecked(Index::Input(0)))
            + (Scalar::from(3), Variable::new_unchecked(Index::Aux(1)));
        let mut seen = Vec::new();
        walk(&lc, 1, 2, |v, c| seen.push((v, *c))).unwrap();
        assert_eq!(
            seen,
            [
                (Var::Input(0), Scalar::from(2)),
                (Var::Aux(1), Scalar::from(3))
            ]
        );
        let e = walk(&lc, 1, 1, |_, _| {}).unwrap_err();
        assert_eq!(e.var, Var::Aux(1));
        // A zero coefficient does not excuse an unknown variable.
        let zero = LinearCombination::<Scalar>::zero()
            + (Scalar::ZERO, Variable::new_unchecked(Index::Input(5)));
        assert_eq!(walk(&zero, 1, 0, |_, _| {}).unwrap_err().var, Var::Input(5));
    }
}
