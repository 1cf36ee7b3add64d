//! `chain`: a cheap arithmetic chain `x_{i+1} = x_i² + x_i + k_i`, one constraint per step.
//!
//! The round constants `k_i` are fixed (not seeded): they are part of the
//! circuit's shape, and parameters are cached per kind and size only. The seed
//! picks the private start `x_0`; the public input is the final value `x_n`,
//! which [`evaluate`] computes natively, without a constraint system.

use bellperson::{Circuit, ConstraintSystem, SynthesisError};
use blstrs::Scalar;
use ff::Field;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;

/// Inputs of the chain: ONE and the final value.
pub const NUM_INPUTS: usize = 2;

/// Step between successive round constants (`k_i = (i + 1) * K_STEP`): an odd
/// 64-bit constant so consecutive constants share no structure worth noting.
const K_STEP: u64 = 0x9e37_79b9_7f4a_7c15;

/// The chain circuit; `x0 == None` is the shape used for parameter generation.
#[derive(Clone, Debug)]
pub struct ChainCircuit {
    steps: usize,
    x0: Option<Scalar>,
}

impl ChainCircuit {
    /// A chain whose domain holds exactly `size` padded constraints: `size - 2`
    /// steps plus bellperson's two input constraints. `size` must be at least 3.
    pub fn for_size(size: usize, x0: Option<Scalar>) -> Self {
        ChainCircuit {
            steps: size.saturating_sub(NUM_INPUTS).max(1),
            x0,
        }
    }

    /// The witnessed chain of `size` starting from the seed's `x_0`.
    pub fn from_seed(size: usize, seed: u64) -> Self {
        Self::for_size(size, Some(start_from_seed(seed)))
    }

    pub fn steps(&self) -> usize {
        self.steps
    }

    pub fn x0(&self) -> Option<Scalar> {
        self.x0
    }

    /// The public input (`x_n`), when the witness is known.
    pub fn public_input(&self) -> Option<Scalar> {
        self.x0.map(|x0| evaluate(x0, self.steps))
    }
}

/// The private start value drawn from `seed`.
pub fn start_from_seed(seed: u64) -> Scalar {
    Scalar::random(ChaCha20Rng::seed_from_u64(seed))
}

/// Runs the chain natively: `x_n` after `steps` steps from `x0`.
pub fn evaluate(x0: Scalar, steps: usize) -> Scalar {
    let k_step = Scalar::from(K_STEP);
    let mut k = Scalar::ZERO;
    let mut x = x0;
    for _ in 0..steps {
        k += k_step;
        x = x.square() + x + k;
    }
    x
}

impl Circuit<Scalar> for ChainCircuit {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        let k_step = Scalar::from(K_STEP);
        let mut k = Scalar::ZERO;
        let mut value = self.x0;
        let mut x = cs.alloc(|| "x 0", || value.ok_or(SynthesisError::AssignmentMissing))?;
        for i in 0..self.steps {
            k += k_step;
            let next_value = value.map(|v| v.square() + v + k);
            let assignment = || next_value.ok_or(SynthesisError::AssignmentMissing);
            let next = if i + 1 == self.steps {
                cs.alloc_input(|| "x n", assignment)?
            } else {
                cs.alloc(|| format!("x {}", i + 1), assignment)?
            };
            // x_i * (x_i + 1) = x_{i+1} - k_i
            cs.enforce(
                || format!("step {i}"),
                |lc| lc + x,
                |lc| lc + x + CS::one(),
                |lc| lc + next - (k, CS::one()),
            );
            x = next;
            value = next_value;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::circuit::shape::CircuitShape;
    use bellperson::util_cs::test_cs::TestConstraintSystem;

    #[test]
    fn chain_is_satisfied_and_exposes_the_native_result() {
        let circuit = ChainCircuit::from_seed(64, 7);
        let expected = circuit.public_input();
        let mut cs = TestConstraintSystem::<Scalar>::new();
        circuit.synthesize(&mut cs).expect("synthesis");
        assert!(
            cs.is_satisfied(),
            "unsatisfied at {:?}",
            cs.which_is_unsatisfied()
        );
        assert_eq!(cs.num_inputs(), NUM_INPUTS);
        assert_eq!(cs.num_constraints(), 62);
        let expected = expected.expect("witnessed chain has a public input");
        assert!(cs.verify(&[expected]));
    }

    #[test]
    fn wrong_public_input_is_rejected() {
        let circuit = ChainCircuit::from_seed(32, 1);
        let mut cs = TestConstraintSystem::<Scalar>::new();
        circuit.synthesize(&mut cs).expect("synthesis");
        cs.set("x n", Scalar::ONE);
        assert!(!cs.is_satisfied());
    }

    #[test]
    fn shape_fills_the_domain_exactly() {
        for size in [16, 1024, 4096] {
            let shape = CircuitShape::of(ChainCircuit::for_size(size, None)).expect("count");
            assert_eq!(shape.padded_constraints(), size);
            assert_eq!(shape.domain_size(), size);
            assert_eq!(shape.num_aux, size - NUM_INPUTS);
        }
    }

    #[test]
    fn seeds_give_different_witnesses_and_the_same_result_twice() {
        let a = ChainCircuit::from_seed(100, 1).public_input();
        let b = ChainCircuit::from_seed(100, 2).public_input();
        assert_ne!(a, b);
        assert_eq!(a, ChainCircuit::from_seed(100, 1).public_input());
    }
}
