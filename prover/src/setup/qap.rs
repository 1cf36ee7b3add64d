//! Evaluates a circuit's QAP polynomials at τ while it is synthesised.
//!
//! bellperson's generator first records every constraint's terms per
//! variable and evaluates afterwards; we already know the Lagrange
//! coefficients `L_j(τ)` (the domain size comes from a counting pass), so each
//! term `coeff · var` in constraint `j` is folded at once into
//! `u_var(τ) += coeff · L_j(τ)` (`v`, `w` likewise). Memory is three scalars
//! per variable, whatever the number of terms.

use crate::lc::{self, UnknownVariable, Var};
use bellperson::{ConstraintSystem, Index, LinearCombination, SynthesisError, Variable};
use blstrs::Scalar;
use ff::Field;

use crate::circuit::unnamed_root;

/// `u_i(τ)`, `v_i(τ)`, `w_i(τ)` for one class of variables (inputs or aux).
#[derive(Default)]
pub struct Evaluations {
    pub at: Vec<Scalar>,
    pub bt: Vec<Scalar>,
    pub ct: Vec<Scalar>,
}

impl Evaluations {
    /// Room for `n` variables: the vectors never grow (and copy) during
    /// synthesis.
    fn with_capacity(n: usize) -> Self {
        Evaluations {
            at: Vec::with_capacity(n),
            bt: Vec::with_capacity(n),
            ct: Vec::with_capacity(n),
        }
    }

    fn push(&mut self) -> usize {
        self.at.push(Scalar::ZERO);
        self.bt.push(Scalar::ZERO);
        self.ct.push(Scalar::ZERO);
        self.at.len() - 1
    }

    pub fn len(&self) -> usize {
        self.at.len()
    }

    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }
}

/// A `ConstraintSystem` that accumulates the QAP evaluations at τ.
pub struct QapEvaluator<'a> {
    lagrange: &'a [Scalar],
    pub inputs: Evaluations,
    pub aux: Evaluations,
    pub num_constraints: usize,
    minus_one: Scalar,
    /// Set when the circuit enforces more constraints than the domain holds
    /// (its shape is not deterministic) or uses a variable it never
    /// allocated; `enforce` cannot fail, so the caller checks this after.
    pub malformed: Option<&'static str>,
}

impl<'a> QapEvaluator<'a> {
    /// An evaluator over Lagrange coefficients `lagrange[j] = L_j(τ)`, with the
    /// ONE input already allocated, sized for the variables counted before
    /// (`inputs` with ONE, `aux`); a circuit that allocates more still works.
    pub fn new(lagrange: &'a [Scalar], inputs: usize, aux: usize) -> Self {
        let mut ins = Evaluations::with_capacity(inputs.max(1));
        ins.push();
        QapEvaluator {
            lagrange,
            inputs: ins,
            aux: Evaluations::with_capacity(aux),
            num_constraints: 0,
            minus_one: -Scalar::ONE,
            malformed: None,
        }
    }

    /// Appends bellperson's `input_i · 0 = 0` constraints, which make the IC
    /// query dense.
    pub fn pad_inputs(&mut self) {
        for i in 0..self.inputs.len() {
            match self.lagrange.get(self.num_constraints) {
                Some(l) => self.inputs.at[i] += l,
                None => self.malformed = Some(TOO_MANY_CONSTRAINTS),
            }
            self.num_constraints += 1;
        }
    }
}

const TOO_MANY_CONSTRAINTS: &str = "the circuit enforced more constraints than it did when counted";
const UNKNOWN_VARIABLE: &str = "a constraint uses a variable that was never allocated";

/// Adds `coeff · l` to each term's variable, refusing an unknown one by the
/// rule synthesis uses too ([`lc::walk`]).
fn fold(
    lc: &LinearCombination<Scalar>,
    l: Scalar,
    minus_one: Scalar,
    inputs: &mut [Scalar],
    aux: &mut [Scalar],
) -> Result<(), UnknownVariable> {
    let (n_inputs, n_aux) = (inputs.len(), aux.len());
    lc::walk(lc, n_inputs, n_aux, |var, coeff| {
        // `walk` checked the index against these very lengths.
        let slot = match var {
            Var::Input(i) => &mut inputs[i],
            Var::Aux(i) => &mut aux[i],
        };
        // Most coefficients are ±1: an addition, not a multiplication.
        if *coeff == Scalar::ONE {
            *slot += l;
        } else if *coeff == minus_one {
            *slot -= l;
        } else {
            *slot += *coeff * l;
        }
    })
}

impl ConstraintSystem<Scalar> for QapEvaluator<'_> {
    unnamed_root!();

    fn alloc<F, A, AR>(&mut self, _: A, _: F) -> Result<Variable, SynthesisError>
    where
        F: FnOnce() -> Result<Scalar, SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        Ok(Variable::new_unchecked(Index::Aux(self.aux.push())))
    }

    fn alloc_input<F, A, AR>(&mut self, _: A, _: F) -> Result<Variable, SynthesisError>
    where
        F: FnOnce() -> Result<Scalar, SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        Ok(Variable::new_unchecked(Index::Input(self.inputs.push())))
    }

    fn enforce<A, AR, LA, LB, LC>(&mut self, _: A, a: LA, b: LB, c: LC)
    where
        A: FnOnce() -> AR,
        AR: Into<String>,
        LA: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LB: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LC: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
    {
        let Some(&l) = self.lagrange.get(self.num_constraints) else {
            self.malformed = Some(TOO_MANY_CONSTRAINTS);
            self.num_constraints += 1;
            return;
        };
        self.num_constraints += 1;
        let minus_one = self.minus_one;
        let (inputs, aux) = (&mut self.inputs, &mut self.aux);
        let folded = fold(
            &a(LinearCombination::zero()),
            l,
            minus_one,
            &mut inputs.at,
            &mut aux.at,
        )
        .and_then(|()| {
            fold(
                &b(LinearCombination::zero()),
                l,
                minus_one,
                &mut inputs.bt,
                &mut aux.bt,
            )
        })
        .and_then(|()| {
            fold(
                &c(LinearCombination::zero()),
                l,
                minus_one,
                &mut inputs.ct,
                &mut aux.ct,
            )
        });
        if folded.is_err() {
            self.malformed = Some(UNKNOWN_VARIABLE);
        }
    }
}
