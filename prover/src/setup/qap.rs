//! Evaluates a circuit's QAP polynomials at τ from its recorded constraints.
//!
//! `u_i(τ) = Σ_j A[j][i] · L_j(τ)` (`v` from B, `w` from C): the transposed
//! matrices times the Lagrange coefficients. Synthesis is one thread and
//! runs once ([`crate::compiled::record`]); this product then runs on every
//! core. For the aux variables each task owns a range of them and walks
//! every term, folding only its own: no transposed copy of the matrices and
//! no merging. The inputs, few, are summed per task over a range of rows
//! and the sums added. Field arithmetic is exact, so the order of the
//! additions does not change a value.

use crate::compiled::{Matrix, Recorded, COEFF_MINUS_ONE, COEFF_ONE, INPUT};
use blstrs::Scalar;
use ff::Field;
use rayon::prelude::*;

/// `u_i(τ)`, `v_i(τ)`, `w_i(τ)` for one class of variables (inputs or aux).
#[derive(Default, Debug, PartialEq, Eq)]
pub struct Evaluations {
    pub at: Vec<Scalar>,
    pub bt: Vec<Scalar>,
    pub ct: Vec<Scalar>,
}

/// The recording has more rows than there are Lagrange coefficients.
#[derive(Debug, thiserror::Error)]
#[error("{rows} constraints do not fit a domain of {domain}")]
pub struct DomainTooSmall {
    pub rows: usize,
    pub domain: usize,
}

fn check(rec: &Recorded, lagrange: &[Scalar]) -> Result<(), DomainTooSmall> {
    let rows = rec.num_constraints();
    if rows > lagrange.len() {
        return Err(DomainTooSmall {
            rows,
            domain: lagrange.len(),
        });
    }
    Ok(())
}

/// The inputs' (ONE first) QAP, `lagrange[j] = L_j(τ)`: all the
/// verifying key needs, so it can be written while the aux variables' is
/// still being evaluated.
pub fn inputs(rec: &Recorded, lagrange: &[Scalar]) -> Result<Evaluations, DomainTooSmall> {
    check(rec, lagrange)?;
    Ok(each_matrix(rec, |m| {
        inputs_times(m, &rec.table, lagrange, rec.num_inputs)
    }))
}

/// The aux variables' QAP.
pub fn aux(rec: &Recorded, lagrange: &[Scalar]) -> Result<Evaluations, DomainTooSmall> {
    check(rec, lagrange)?;
    Ok(each_matrix(rec, |m| {
        aux_times(m, &rec.table, lagrange, rec.num_aux)
    }))
}

/// `product` of A, B and C, side by side.
fn each_matrix(rec: &Recorded, product: impl Fn(&Matrix) -> Vec<Scalar> + Sync) -> Evaluations {
    let [a, b, c] = &rec.matrices;
    let (at, (bt, ct)) = rayon::join(|| product(a), || rayon::join(|| product(b), || product(c)));
    Evaluations { at, bt, ct }
}

/// `coeff · l` folded into `slot`, ±1 without a product.
#[inline]
fn fold(slot: &mut Scalar, id: u32, table: &[Scalar], l: Scalar) {
    match id {
        COEFF_ONE => *slot += l,
        COEFF_MINUS_ONE => *slot -= l,
        id => *slot += table[id as usize] * l,
    }
}

/// `Mᵀ · lagrange` over the input columns: rows are cut between tasks,
/// each summing into a vector of every input (there are few), and the
/// vectors are added.
fn inputs_times(
    m: &Matrix,
    table: &[Scalar],
    lagrange: &[Scalar],
    num_inputs: usize,
) -> Vec<Scalar> {
    (0..m.rows())
        .into_par_iter()
        .with_min_len(1 << 14)
        .fold(
            || vec![Scalar::ZERO; num_inputs],
            |mut acc, row| {
                let (cols, coeffs) = m.row(row);
                for (&col, &id) in cols.iter().zip(coeffs) {
                    if col & INPUT != 0 {
                        // Recording checked every column against the counts.
                        fold(&mut acc[(col & !INPUT) as usize], id, table, lagrange[row]);
                    }
                }
                acc
            },
        )
        .reduce(
            || vec![Scalar::ZERO; num_inputs],
            |mut a, b| {
                a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
                a
            },
        )
}

/// `Mᵀ · lagrange` over the aux columns, cut into one range per thread.
fn aux_times(m: &Matrix, table: &[Scalar], lagrange: &[Scalar], num_aux: usize) -> Vec<Scalar> {
    let mut out = vec![Scalar::ZERO; num_aux];
    let span = num_aux.div_ceil(rayon::current_num_threads().max(1)).max(1);
    out.par_chunks_mut(span).enumerate().for_each(|(t, own)| {
        let lo = (t * span) as u32;
        let len = own.len() as u32;
        for (row, &l) in lagrange.iter().enumerate().take(m.rows()) {
            let (cols, coeffs) = m.row(row);
            for (&col, &id) in cols.iter().zip(coeffs) {
                // An input column has the top bit set and so falls outside
                // every range.
                let i = col.wrapping_sub(lo);
                if i < len {
                    fold(&mut own[i as usize], id, table, l);
                }
            }
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::circuit::{ChainCircuit, Sha256Circuit};
    use bellperson::Circuit;

    /// The definition, one term at a time on one thread.
    fn by_definition(rec: &Recorded, lagrange: &[Scalar]) -> (Evaluations, Evaluations) {
        let mut ins = Evaluations::default();
        let mut aux = Evaluations::default();
        for (k, m) in rec.matrices.iter().enumerate() {
            let mut vi = vec![Scalar::ZERO; rec.num_inputs];
            let mut va = vec![Scalar::ZERO; rec.num_aux];
            for (row, l) in lagrange.iter().enumerate().take(m.rows()) {
                let (cols, coeffs) = m.row(row);
                for (&col, &id) in cols.iter().zip(coeffs) {
                    let term = rec.table[id as usize] * l;
                    if col & INPUT != 0 {
                        vi[(col & !INPUT) as usize] += term;
                    } else {
                        va[col as usize] += term;
                    }
                }
            }
            let (di, da) = match k {
                0 => (&mut ins.at, &mut aux.at),
                1 => (&mut ins.bt, &mut aux.bt),
                _ => (&mut ins.ct, &mut aux.ct),
            };
            (*di, *da) = (vi, va);
        }
        (ins, aux)
    }

    fn check<C: Circuit<Scalar>>(circuit: C) {
        let rec = crate::compiled::record(circuit).expect("records");
        let domain = rec.num_constraints().next_power_of_two();
        let lagrange: Vec<Scalar> = (0..domain as u64)
            .map(|j| Scalar::from(j * 7 + 3).square())
            .collect();
        let ours = (
            inputs(&rec, &lagrange).expect("fits"),
            aux(&rec, &lagrange).expect("fits"),
        );
        assert!(ours == by_definition(&rec, &lagrange));
        assert_eq!(ours.0.at.len(), rec.num_inputs);
        assert_eq!(ours.1.at.len(), rec.num_aux);
    }

    #[test]
    fn the_parallel_product_is_the_definition() {
        // More threads than some circuits have variables, and ranges that
        // cut through the inputs.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(5)
            .build()
            .expect("pool");
        pool.install(|| {
            check(ChainCircuit::for_size(3, None));
            check(ChainCircuit::for_size(200, None));
            check(Sha256Circuit::shape(1));
        });
    }

    #[test]
    fn a_domain_smaller_than_the_rows_is_refused() {
        let rec = crate::compiled::record(ChainCircuit::for_size(64, None)).expect("records");
        for err in [
            inputs(&rec, &[Scalar::ONE; 8]).expect_err("too small"),
            aux(&rec, &[Scalar::ONE; 8]).expect_err("too small"),
        ] {
            assert_eq!(err.domain, 8);
        }
    }
}
