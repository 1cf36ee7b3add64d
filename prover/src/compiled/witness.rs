//! The witness-only pass: the circuit's `synthesize` on a constraint system
//! that only assigns variables, straight into the pinned assignment buffers.
//!
//! `enforce` does not run its closures, so no linear combination is built or
//! evaluated: a, b, c come afterwards from the compiled matrices. With
//! `check` set it does run them and compares every constraint with the
//! recorded one, so that a circuit whose constraints depend on its witness is
//! refused, naming the first constraint that differs, instead of proved
//! against constraints it does not have.

use super::error::StructureMismatch;
use super::matrix::{CompiledR1cs, Matrix, INPUT};
use crate::lc::{self, UnknownVariable};
use crate::pool::PinnedVec;
use bellperson::{ConstraintSystem, Index, LinearCombination, Variable};
use blstrs::Scalar;
use ff::Field;

/// Why the witness pass failed.
#[derive(Debug, thiserror::Error)]
pub enum WitnessError {
    #[error("circuit synthesis failed: {0}")]
    Circuit(#[from] bellperson::SynthesisError),
    #[error(
        "circuit is larger than its compiled constraints: more than {limit} {what} (they were \
         compiled for a different or smaller circuit)"
    )]
    TooLarge { what: &'static str, limit: usize },
    #[error(transparent)]
    Structure(#[from] StructureMismatch),
    #[error("circuit is malformed: {0}")]
    Malformed(#[source] UnknownVariable),
}

/// Runs `circuit` for its witness into `inputs` and `aux` (cleared first),
/// ONE as input 0 as the proving system allocates it.
pub fn assign<C: bellperson::Circuit<Scalar>>(
    circuit: C,
    r1cs: &CompiledR1cs,
    inputs: &mut PinnedVec<Scalar>,
    aux: &mut PinnedVec<Scalar>,
    check: bool,
) -> Result<(), WitnessError> {
    inputs.clear();
    aux.clear();
    let mut cs = WitnessSystem {
        r1cs,
        inputs,
        aux,
        constraints: 0,
        check,
        names: Vec::new(),
        error: None,
    };
    cs.alloc_input(|| "", || Ok(Scalar::ONE))
        .map_err(|e| cs.explain(e))?;
    circuit.synthesize(&mut cs).map_err(|e| cs.explain(e))?;
    if let Some(e) = cs.error.take() {
        return Err(e);
    }
    // bellperson's `input · 0 = 0` constraints close the recording.
    let enforced = cs.constraints + cs.inputs.len();
    let counts = [
        ("inputs", cs.inputs.len(), r1cs.num_inputs),
        ("aux variables", cs.aux.len(), r1cs.num_aux),
        ("constraints", enforced, r1cs.num_constraints),
    ];
    for (what, got, recorded) in counts {
        if got != recorded {
            return Err(StructureMismatch {
                index: cs.constraints.min(r1cs.num_constraints),
                name: "the end of the circuit".into(),
                what: format!("it has {got} {what}, the recording {recorded}"),
            }
            .into());
        }
    }
    Ok(())
}

struct WitnessSystem<'a> {
    r1cs: &'a CompiledR1cs,
    inputs: &'a mut PinnedVec<Scalar>,
    aux: &'a mut PinnedVec<Scalar>,
    /// Circuit constraints seen so far (the row of the next one).
    constraints: usize,
    check: bool,
    /// Namespace path, kept only when checking (for the mismatch's name).
    names: Vec<String>,
    error: Option<WitnessError>,
}

impl WitnessSystem<'_> {
    fn explain(&mut self, e: bellperson::SynthesisError) -> WitnessError {
        self.error.take().unwrap_or(WitnessError::Circuit(e))
    }

    fn fail(&mut self, e: WitnessError) -> bellperson::SynthesisError {
        if self.error.is_none() {
            self.error = Some(e);
        }
        bellperson::SynthesisError::PolynomialDegreeTooLarge
    }
}

/// The differences of `lc` (over `inputs` inputs, ONE included, and `aux`
/// aux variables) from row `row` of `matrix`, a matrix of `r1cs`, as a
/// sentence (None if equal). `column` takes a column of `lc` to the
/// recording's (a piece's own numbering to the whole circuit's).
#[allow(clippy::too_many_arguments)]
pub(super) fn differs(
    r1cs: &CompiledR1cs,
    which: &str,
    matrix: &Matrix,
    row: usize,
    lc: &LinearCombination<Scalar>,
    inputs: usize,
    aux: usize,
    column: impl Fn(u32) -> u32,
) -> Result<Option<String>, UnknownVariable> {
    let mut terms = Vec::new();
    lc::walk(lc, inputs, aux, |var, coeff| {
        if !bool::from(coeff.is_zero()) {
            terms.push((column(super::record::column(var)), *coeff));
        }
    })?;
    let (cols, coeffs) = matrix.row(row);
    if terms.len() != cols.len() {
        return Ok(Some(format!(
            "{which} has {} terms, the recording {}",
            terms.len(),
            cols.len()
        )));
    }
    for (k, ((col, coeff), (&rcol, &rid))) in terms.iter().zip(cols.iter().zip(coeffs)).enumerate()
    {
        let recorded = r1cs.table[rid as usize];
        if *col != rcol || *coeff != recorded {
            return Ok(Some(format!(
                "term {k} of {which} is {} x {coeff:?}, the recording has {} x {recorded:?}",
                describe(*col),
                describe(rcol)
            )));
        }
    }
    Ok(None)
}

fn describe(col: u32) -> String {
    if col & INPUT != 0 {
        format!("input {}", col & !INPUT)
    } else {
        format!("aux {col}")
    }
}

impl ConstraintSystem<Scalar> for WitnessSystem<'_> {
    type Root = Self;

    fn alloc<F, A, AR>(&mut self, _: A, f: F) -> Result<Variable, bellperson::SynthesisError>
    where
        F: FnOnce() -> Result<Scalar, bellperson::SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        let limit = self.r1cs.num_aux;
        if self.aux.len() >= limit {
            return Err(self.fail(WitnessError::TooLarge {
                what: "aux variables",
                limit,
            }));
        }
        let value = f()?;
        if self.aux.push(value).is_err() {
            return Err(self.fail(WitnessError::TooLarge {
                what: "aux variables",
                limit: self.aux.capacity(),
            }));
        }
        Ok(Variable(Index::Aux(self.aux.len() - 1)))
    }

    fn alloc_input<F, A, AR>(&mut self, _: A, f: F) -> Result<Variable, bellperson::SynthesisError>
    where
        F: FnOnce() -> Result<Scalar, bellperson::SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        let limit = self.r1cs.num_inputs;
        if self.inputs.len() >= limit {
            return Err(self.fail(WitnessError::TooLarge {
                what: "inputs",
                limit,
            }));
        }
        let value = f()?;
        if self.inputs.push(value).is_err() {
            return Err(self.fail(WitnessError::TooLarge {
                what: "inputs",
                limit: self.inputs.capacity(),
            }));
        }
        Ok(Variable(Index::Input(self.inputs.len() - 1)))
    }

    fn enforce<A, AR, LA, LB, LC>(&mut self, name: A, a: LA, b: LB, c: LC)
    where
        A: FnOnce() -> AR,
        AR: Into<String>,
        LA: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LB: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
        LC: FnOnce(LinearCombination<Scalar>) -> LinearCombination<Scalar>,
    {
        if self.error.is_some() {
            return;
        }
        let row = self.constraints;
        self.constraints += 1;
        // The recording's last rows are the input constraints, which the
        // circuit never enforces itself.
        if row >= self.r1cs.num_constraints {
            self.fail(WitnessError::TooLarge {
                what: "constraints",
                limit: self.r1cs.num_constraints,
            });
            return;
        }
        if !self.check {
            return;
        }
        let lcs = [
            ("A", &self.r1cs.a, a(LinearCombination::zero())),
            ("B", &self.r1cs.b, b(LinearCombination::zero())),
            ("C", &self.r1cs.c, c(LinearCombination::zero())),
        ];
        for (which, matrix, lc) in &lcs {
            let (inputs, aux) = (self.inputs.len(), self.aux.len());
            match differs(self.r1cs, which, matrix, row, lc, inputs, aux, |c| c) {
                Ok(None) => {}
                Ok(Some(what)) => {
                    let mut path = self.names.clone();
                    path.push(name().into());
                    self.fail(WitnessError::Structure(StructureMismatch {
                        index: row,
                        name: path.join("/"),
                        what,
                    }));
                    return;
                }
                Err(e) => {
                    self.fail(WitnessError::Malformed(e));
                    return;
                }
            }
        }
    }

    fn push_namespace<NR, N>(&mut self, name: N)
    where
        NR: Into<String>,
        N: FnOnce() -> NR,
    {
        if self.check {
            self.names.push(name().into());
        }
    }

    fn pop_namespace(&mut self) {
        if self.check {
            self.names.pop();
        }
    }

    fn get_root(&mut self) -> &mut Self::Root {
        self
    }
}
