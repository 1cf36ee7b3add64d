//! a = A·z, b = B·z, c = C·z from the compiled matrices, on the host's cores.
//!
//! Field arithmetic is exact, so the sums equal the ones synthesis builds
//! term by term whatever the order. Most terms of real circuits have a
//! coefficient of ±1 or a boolean value; those take additions only, which is
//! where this beats building and evaluating linear combinations.

use super::matrix::{CompiledR1cs, Matrix, COEFF_MINUS_ONE, COEFF_ONE, INPUT};
use blstrs::Scalar;
use ff::Field;
use rayon::prelude::*;

/// Rows per parallel task: large enough that scheduling is noise, small
/// enough that cores share the tail of the work.
const ROWS_PER_TASK: usize = 1 << 12;

/// The assignments a, b, c are evaluated over, checked against the recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "assignments do not fit the compiled constraints: {inputs} inputs and {aux} aux values \
     for {want_inputs} and {want_aux}, or outputs of {out} elements for {rows} rows"
)]
pub struct EvalShapeError {
    pub inputs: usize,
    pub aux: usize,
    pub want_inputs: usize,
    pub want_aux: usize,
    pub out: usize,
    pub rows: usize,
}

/// Writes rows `0..num_constraints` of a, b, c; the rest of each output is
/// left as it is (the caller pads with zeros to the domain).
pub fn evaluate(
    r1cs: &CompiledR1cs,
    inputs: &[Scalar],
    aux: &[Scalar],
    a: &mut [Scalar],
    b: &mut [Scalar],
    c: &mut [Scalar],
) -> Result<(), EvalShapeError> {
    let rows = r1cs.num_constraints;
    let out = a.len().min(b.len()).min(c.len());
    if inputs.len() != r1cs.num_inputs || aux.len() != r1cs.num_aux || out < rows {
        return Err(EvalShapeError {
            inputs: inputs.len(),
            aux: aux.len(),
            want_inputs: r1cs.num_inputs,
            want_aux: r1cs.num_aux,
            out,
            rows,
        });
    }
    let table = &r1cs.table;
    for (matrix, dst) in [(&r1cs.a, a), (&r1cs.b, b), (&r1cs.c, c)] {
        dst[..rows]
            .par_chunks_mut(ROWS_PER_TASK)
            .enumerate()
            .for_each(|(task, chunk)| {
                let first = task * ROWS_PER_TASK;
                for (k, slot) in chunk.iter_mut().enumerate() {
                    *slot = row_value(matrix, first + k, table, inputs, aux);
                }
            });
    }
    Ok(())
}

/// Σ coeff·z over one row. Columns were checked against the counts when the
/// matrices were recorded or loaded, and the counts against the assignments
/// above, so indexing cannot fail.
#[inline]
fn row_value(
    matrix: &Matrix,
    row: usize,
    table: &[Scalar],
    inputs: &[Scalar],
    aux: &[Scalar],
) -> Scalar {
    let (cols, coeffs) = matrix.row(row);
    let mut acc = Scalar::ZERO;
    for (&col, &id) in cols.iter().zip(coeffs) {
        let v = if col & INPUT != 0 {
            &inputs[(col & !INPUT) as usize]
        } else {
            &aux[col as usize]
        };
        match id {
            COEFF_ONE => acc += v,
            COEFF_MINUS_ONE => acc -= v,
            _ => {
                // Booleans are most of a hash circuit's witness: 0 adds
                // nothing and 1 adds the coefficient, without a multiplication.
                if bool::from(v.is_zero()) {
                    continue;
                }
                let k = &table[id as usize];
                if *v == Scalar::ONE {
                    acc += k;
                } else {
                    acc += *v * k;
                }
            }
        }
    }
    acc
}
