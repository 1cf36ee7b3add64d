//! Recording a circuit's constraints into a [`CompiledR1cs`]: one synthesis,
//! once per circuit and size.
//!
//! It walks the circuit as the proving system does (ONE as input 0, the
//! circuit, then `input · 0 = 0` for every input) so that row `i` is the
//! constraint whose evaluation lands at `a[i]`, `b[i]`, `c[i]`. Zero
//! coefficients are dropped, as bellperson's evaluator skips them (and so
//! does not count them in the densities); a term on an unallocated variable
//! is refused by the one rule of [`crate::lc::walk`].

use super::error::CompileError;
use super::matrix::{
    base_table, CompiledR1cs, Matrix, COEFF_MINUS_ONE, COEFF_ONE, INPUT, MAX_VARIABLES,
};
use crate::circuit::unnamed_root;
use crate::lc::{self, Var};
use bellperson::{Circuit, ConstraintSystem, Index, LinearCombination, Variable};
use blstrs::Scalar;
use ff::{Field, PrimeField};
use std::collections::HashMap;

/// Records `circuit`'s constraints. Assignment closures are not called, so
/// a circuit without a witness records as well as one with.
pub fn compile<C: Circuit<Scalar>>(circuit: C) -> Result<CompiledR1cs, CompileError> {
    let r = record_with(circuit, Recorder::deduplicating())?;
    let [a, b, c] = r.matrices;
    Ok(CompiledR1cs::new(r.num_inputs, r.num_aux, a, b, c, r.table))
}

/// A circuit's constraints as recorded, before [`CompiledR1cs`] derives
/// its densities and digest: what parameter generation needs. It reads the
/// matrices once and keeps nothing, so it skips hashing gigabytes, and its
/// table is not deduplicated: every term whose coefficient is not ±1 has an
/// entry of its own (looking each up in a map of distinct ones made
/// recording a circuit with a constant per constraint take 4x longer
/// than synthesising it).
#[derive(Debug)]
pub struct Recorded {
    /// Inputs, ONE included.
    pub num_inputs: usize,
    pub num_aux: usize,
    /// A, B, C; bellperson's `input · 0 = 0` rows included.
    pub matrices: [Matrix; 3],
    /// The coefficients the matrices index, [`COEFF_ONE`] and
    /// [`COEFF_MINUS_ONE`] first (distinct where recorded by [`compile`]).
    pub table: Vec<Scalar>,
}

impl Recorded {
    /// Rows of each matrix (constraints, padding included).
    pub fn num_constraints(&self) -> usize {
        self.matrices[0].rows()
    }
}

/// Records `circuit`'s constraints without deriving anything from them.
pub fn record<C: Circuit<Scalar>>(circuit: C) -> Result<Recorded, CompileError> {
    record_with(circuit, Recorder::plain())
}

fn record_with<C: Circuit<Scalar>>(
    circuit: C,
    mut rec: Recorder,
) -> Result<Recorded, CompileError> {
    rec.alloc_input(|| "", || Ok(Scalar::ONE))
        .map_err(|e| rec.explain(e))?;
    circuit.synthesize(&mut rec).map_err(|e| rec.explain(e))?;
    for i in 0..rec.inputs {
        rec.enforce(|| "", |lc| lc + Variable(Index::Input(i)), |lc| lc, |lc| lc);
    }
    if let Some(e) = rec.error.take() {
        return Err(e);
    }
    Ok(Recorded {
        num_inputs: rec.inputs,
        num_aux: rec.aux,
        matrices: [rec.a, rec.b, rec.c],
        table: rec.table,
    })
}

/// The column of a variable (see [`INPUT`]).
pub(crate) fn column(var: Var) -> u32 {
    match var {
        Var::Input(i) => i as u32 | INPUT,
        Var::Aux(i) => i as u32,
    }
}

pub(super) struct Recorder {
    pub(super) inputs: usize,
    pub(super) aux: usize,
    pub(super) a: Matrix,
    pub(super) b: Matrix,
    pub(super) c: Matrix,
    pub(super) table: Vec<Scalar>,
    /// Distinct coefficients' indices; `None`: every coefficient that is
    /// not ±1 is appended to the table.
    index: Option<HashMap<[u8; 32], u32>>,
    /// The limbs of 1 and −1, which take the add-only coefficient indices.
    units: [[u64; 4]; 2],
    /// The first error `enforce` could not return.
    pub(super) error: Option<CompileError>,
}

impl Recorder {
    fn plain() -> Self {
        Recorder {
            inputs: 0,
            aux: 0,
            a: Matrix::default(),
            b: Matrix::default(),
            c: Matrix::default(),
            table: base_table(),
            index: None,
            units: [limbs(&Scalar::ONE), limbs(&-Scalar::ONE)],
            error: None,
        }
    }

    pub(super) fn deduplicating() -> Self {
        let mut rec = Self::plain();
        rec.index = Some(
            rec.table
                .iter()
                .enumerate()
                .map(|(i, s)| (s.to_repr(), i as u32))
                .collect(),
        );
        rec
    }
}

impl Recorder {
    pub(super) fn explain(&mut self, e: bellperson::SynthesisError) -> CompileError {
        self.error.take().unwrap_or(CompileError::Circuit(e))
    }

    fn fail(&mut self, e: CompileError) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }

    fn record(&mut self, lc: &LinearCombination<Scalar>, which: usize) -> Result<(), CompileError> {
        let [one, minus_one] = self.units;
        let Recorder {
            a,
            b,
            c,
            table,
            index,
            ..
        } = self;
        let matrix = match which {
            0 => a,
            1 => b,
            _ => c,
        };
        let mut failed = None;
        lc::walk(lc, self.inputs, self.aux, |var, coeff| {
            // Compared by their limbs: the constant-time equality of the
            // field type was a tenth of recording a large circuit.
            let raw = limbs(coeff);
            let id = if raw == one {
                COEFF_ONE
            } else if raw == minus_one {
                COEFF_MINUS_ONE
            } else if raw == [0; 4] {
                return;
            } else {
                match coefficient(table, index.as_mut(), coeff) {
                    Ok(id) => id,
                    Err(e) => {
                        failed.get_or_insert(e);
                        return;
                    }
                }
            };
            matrix.push(column(var), id);
        })
        .map_err(CompileError::Malformed)?;
        failed.map_or(Ok(()), Err)
    }
}

/// The limbs of `s` (its Montgomery form): equal limbs, equal elements.
#[inline]
fn limbs(s: &Scalar) -> [u64; 4] {
    const _: () = assert!(std::mem::size_of::<Scalar>() == 32);
    // SAFETY: Scalar is repr(transparent) over blst_fr, four u64 limbs
    // of plain data (the layout the device code relies on too).
    unsafe { std::ptr::read_unaligned((s as *const Scalar).cast::<[u64; 4]>()) }
}

/// The table index of a coefficient that is neither 0 nor ±1: its first
/// entry's where `index` deduplicates, a new entry otherwise.
fn coefficient(
    table: &mut Vec<Scalar>,
    index: Option<&mut HashMap<[u8; 32], u32>>,
    s: &Scalar,
) -> Result<u32, CompileError> {
    let key = index.as_ref().map(|_| s.to_repr());
    if let (Some(key), Some(index)) = (&key, &index) {
        if let Some(&i) = index.get(key) {
            return Ok(i);
        }
    }
    let i = u32::try_from(table.len()).map_err(|_| CompileError::TooLarge {
        what: "coefficients",
        limit: u32::MAX as usize,
    })?;
    table.push(*s);
    if let (Some(key), Some(index)) = (key, index) {
        index.insert(key, i);
    }
    Ok(i)
}

impl ConstraintSystem<Scalar> for Recorder {
    unnamed_root!();

    fn alloc<F, A, AR>(&mut self, _: A, _: F) -> Result<Variable, bellperson::SynthesisError>
    where
        F: FnOnce() -> Result<Scalar, bellperson::SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        if self.aux >= MAX_VARIABLES {
            self.fail(CompileError::TooLarge {
                what: "aux variables",
                limit: MAX_VARIABLES,
            });
            return Err(bellperson::SynthesisError::PolynomialDegreeTooLarge);
        }
        self.aux += 1;
        Ok(Variable(Index::Aux(self.aux - 1)))
    }

    fn alloc_input<F, A, AR>(&mut self, _: A, _: F) -> Result<Variable, bellperson::SynthesisError>
    where
        F: FnOnce() -> Result<Scalar, bellperson::SynthesisError>,
        A: FnOnce() -> AR,
        AR: Into<String>,
    {
        if self.inputs >= MAX_VARIABLES {
            self.fail(CompileError::TooLarge {
                what: "inputs",
                limit: MAX_VARIABLES,
            });
            return Err(bellperson::SynthesisError::PolynomialDegreeTooLarge);
        }
        self.inputs += 1;
        Ok(Variable(Index::Input(self.inputs - 1)))
    }

    fn enforce<A, AR, LA, LB, LC>(&mut self, _: A, a: LA, b: LB, c: LC)
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
        let lcs = [
            a(LinearCombination::zero()),
            b(LinearCombination::zero()),
            c(LinearCombination::zero()),
        ];
        for (which, lc) in lcs.iter().enumerate() {
            if let Err(e) = self.record(lc, which) {
                self.fail(e);
                return;
            }
        }
        for m in [&mut self.a, &mut self.b, &mut self.c] {
            m.end_row();
        }
    }
}
