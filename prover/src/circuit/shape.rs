//! Counting a circuit's shape (inputs, aux, constraints, domain) without assignments or matrices.

use bellperson::{Circuit, ConstraintSystem, Index, LinearCombination, SynthesisError, Variable};
use blstrs::Scalar;

use super::unnamed::unnamed_root;

/// How big a circuit is, as bellperson's prover and generator see it.
///
/// `num_inputs` includes the implicit ONE input. `num_constraints` is what the
/// circuit itself enforces; bellperson appends one more constraint per input
/// (`input * 0 = 0`) so that the IC query is dense, which is why the domain
/// holds `num_constraints + num_inputs` evaluations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CircuitShape {
    pub num_inputs: usize,
    pub num_aux: usize,
    pub num_constraints: usize,
}

impl CircuitShape {
    /// Counts the shape by synthesising `circuit` into a [`ShapeCounter`].
    pub fn of<C: Circuit<Scalar>>(circuit: C) -> Result<Self, SynthesisError> {
        let mut counter = ShapeCounter::default();
        circuit.synthesize(&mut counter)?;
        Ok(counter.shape())
    }

    /// Public inputs the verifier is given (the ONE input excluded).
    pub fn num_public_inputs(&self) -> usize {
        self.num_inputs.saturating_sub(1)
    }

    /// Constraints after bellperson's per-input padding constraints.
    pub fn padded_constraints(&self) -> usize {
        self.num_constraints + self.num_inputs
    }

    /// Evaluation domain size `m`: the next power of two at or above the padded
    /// constraint count, exactly as `EvaluationDomain::from_coeffs` picks it.
    pub fn domain_size(&self) -> usize {
        self.padded_constraints().max(1).next_power_of_two()
    }

    /// `log2(m)`.
    pub fn log2_domain(&self) -> u32 {
        self.domain_size().trailing_zeros()
    }

    /// Length of the `h` query in parameters for this shape (`m - 1`).
    pub fn h_len(&self) -> usize {
        self.domain_size() - 1
    }
}

/// A `ConstraintSystem` that only counts: it never evaluates assignment
/// closures nor keeps linear combinations, so shape-only circuits run through it.
#[derive(Debug)]
pub struct ShapeCounter {
    num_inputs: usize,
    num_aux: usize,
    num_constraints: usize,
}

impl Default for ShapeCounter {
    /// Starts with the ONE input allocated, as bellperson's prover and generator do.
    fn default() -> Self {
        ShapeCounter {
            num_inputs: 1,
            num_aux: 0,
            num_constraints: 0,
        }
    }
}

impl ShapeCounter {
    pub fn shape(&self) -> CircuitShape {
        CircuitShape {
            num_inputs: self.num_inputs,
            num_aux: self.num_aux,
            num_constraints: self.num_constraints,
        }
    }
}

impl ConstraintSystem<Scalar> for ShapeCounter {
    unnamed_root!();

    fn new() -> Self {
        Self::default()
    }

    fn alloc<F, A, AR>(&mut self, _: A, _: F) -> Result<Variable, SynthesisError>
    where
        F: FnOnce() -> Result<Scalar, SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        self.num_aux += 1;
        Ok(Variable::new_unchecked(Index::Aux(self.num_aux - 1)))
    }

    fn alloc_input<F, A, AR>(&mut self, _: A, _: F) -> Result<Variable, SynthesisError>
    where
        F: FnOnce() -> Result<Scalar, SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        self.num_inputs += 1;
        Ok(Variable::new_unchecked(Index::Input(self.num_inputs - 1)))
    }

    fn enforce<A, AR, LA, LB, LC>(&mut self, _: A, _: LA, _: LB, _: LC)
    where
        A: FnOnce() -> AR,
        AR: Into<String>,
        LA: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LB: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LC: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
    {
        self.num_constraints += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domain_is_next_power_of_two_of_padded_constraints() {
        let shape = CircuitShape {
            num_inputs: 2,
            num_aux: 10,
            num_constraints: 1022,
        };
        assert_eq!(shape.domain_size(), 1024);
        assert_eq!(shape.h_len(), 1023);
        let over = CircuitShape {
            num_constraints: 1023,
            ..shape
        };
        assert_eq!(over.domain_size(), 2048);
        assert_eq!(over.log2_domain(), 11);
    }
}
