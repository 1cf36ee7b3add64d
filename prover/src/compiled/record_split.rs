//! Recording a circuit's constraints in pieces on every core, for a circuit
//! whose pieces each repeat its preamble and name nothing of another piece
//! (a PoRep partition's challenges: [`SplitWitness::repeats_preamble`]).
//! A 32 GiB partition recorded on one core takes minutes; its 18
//! challenges recorded side by side take a round or two of one challenge.
//!
//! Each piece is recorded on its own, from ONE and its own copy of the
//! preamble; the preamble's length follows from the pieces' counts against
//! the whole circuit's shape (`n` pieces hold it `n` times, the circuit
//! once), as the witness pass in pieces finds it. The pieces are then laid
//! end to end: the first whole, the others without their preamble (checked
//! row for row against the first's), their own variables renumbered after
//! the pieces before them, their coefficients entered in the table in the
//! order a recording of the whole circuit meets them. So the result is the
//! whole circuit's recording, digest included (tests compare them).

use std::collections::HashMap;

use bellperson::ConstraintSystem;
use blstrs::Scalar;
use ff::{Field, PrimeField};
use rayon::prelude::*;

use super::error::CompileError;
use super::layout::{Counts, PieceLayout};
use super::matrix::{
    base_table, piece_column, CompiledR1cs, Matrix, COEFF_MINUS_ONE, COEFF_ONE, INPUT,
};
use super::record::Recorder;
use crate::circuit::{CircuitShape, SplitWitness};

/// Records `circuit` in `pieces` pieces on as many threads (1: whole, on
/// this one). `shape` is the whole circuit's (inputs with ONE, aux,
/// constraints without bellperson's input rows).
pub fn compile_split<C: SplitWitness>(
    circuit: &C,
    pieces: usize,
    shape: &CircuitShape,
) -> Result<CompiledR1cs, CompileError> {
    let pieces = if circuit.repeats_preamble() {
        pieces.max(1)
    } else {
        1
    };
    let recorded: Vec<Recorder> = (0..pieces)
        .into_par_iter()
        .map(|p| record_piece(circuit, p, pieces))
        .collect::<Result<_, _>>()?;
    let preamble = preamble(&recorded, shape)?;
    let sizes = recorded
        .iter()
        .map(|r| Counts {
            inputs: r.inputs - 1,
            aux: r.aux,
            constraints: r.a.rows(),
        })
        .collect();
    Ok(join(recorded, PieceLayout::new(preamble, sizes)))
}

fn record_piece<C: SplitWitness>(
    circuit: &C,
    piece: usize,
    pieces: usize,
) -> Result<Recorder, CompileError> {
    let mut rec = Recorder::deduplicating();
    rec.alloc_input(|| "", || Ok(Scalar::ONE))
        .map_err(|e| rec.explain(e))?;
    circuit
        .synthesize_piece(piece, pieces, &mut rec)
        .map_err(|e| rec.explain(e))?;
    match rec.error.take() {
        Some(e) => Err(e),
        None => Ok(rec),
    }
}

/// What every piece records before its own share: inputs after ONE, aux
/// variables, constraints.
fn preamble(recorded: &[Recorder], shape: &CircuitShape) -> Result<Counts, CompileError> {
    let repeats = recorded.len().saturating_sub(1);
    let sums = [
        (
            "inputs",
            recorded.iter().map(|r| r.inputs - 1).sum::<usize>(),
            shape.num_inputs.saturating_sub(1),
        ),
        (
            "aux variables",
            recorded.iter().map(|r| r.aux).sum(),
            shape.num_aux,
        ),
        (
            "constraints",
            recorded.iter().map(|r| r.a.rows()).sum(),
            shape.num_constraints,
        ),
    ];
    let mut len = [0usize; 3];
    for (slot, (what, pieces, whole)) in len.iter_mut().zip(sums) {
        let extra = pieces.checked_sub(whole);
        *slot = match (extra, repeats) {
            (Some(0), 0) => 0,
            (Some(e), r) if r > 0 && e % r == 0 => e / r,
            _ => {
                return Err(CompileError::Pieces(format!(
                    "{} pieces have {pieces} {what} together against the circuit's {whole}, which \
                     is not one preamble repeated",
                    recorded.len()
                )))
            }
        };
    }
    let [inputs, aux, constraints] = len;
    let first = &recorded[0];
    for (k, r) in recorded.iter().enumerate().skip(1) {
        let same = r.inputs > inputs
            && r.aux >= aux
            && (0..constraints).all(|row| {
                [(&first.a, &r.a), (&first.b, &r.b), (&first.c, &r.c)]
                    .into_iter()
                    .all(|(x, y)| same_row(x, &first.table, y, &r.table, row))
            });
        if !same {
            return Err(CompileError::Pieces(format!(
                "piece {k} does not start with the first piece's {constraints} constraints"
            )));
        }
    }
    Ok(Counts {
        inputs,
        aux,
        constraints,
    })
}

/// Whether row `row` is the same in both matrices, coefficients by value.
fn same_row(x: &Matrix, xt: &[Scalar], y: &Matrix, yt: &[Scalar], row: usize) -> bool {
    if row >= x.rows() || row >= y.rows() {
        return false;
    }
    let ((xc, xk), (yc, yk)) = (x.row(row), y.row(row));
    xc == yc
        && xk.len() == yk.len()
        && xk
            .iter()
            .zip(yk)
            .all(|(a, b)| xt[*a as usize] == yt[*b as usize])
}

/// The pieces end to end, as one recording of the whole circuit.
fn join(recorded: Vec<Recorder>, layout: PieceLayout) -> CompiledR1cs {
    let mut out = Joined::default();
    // Room for every piece's terms at once: growing by doubling would copy
    // gigabytes at 32 GiB.
    for (m, matrix) in out.matrices.iter_mut().enumerate() {
        let (rows, nnz) = recorded.iter().fold((0, 0), |(r, n), rec| {
            let x = [&rec.a, &rec.b, &rec.c][m];
            (r + x.rows(), n + x.nnz())
        });
        matrix.reserve(rows, nnz);
    }
    for (k, rec) in recorded.into_iter().enumerate() {
        let skip = if k == 0 {
            0
        } else {
            layout.preamble.constraints
        };
        // The piece's coefficient ids to the whole table's, entered in the
        // order a whole recording meets them: row by row, A, B, C.
        let mut ids = vec![u32::MAX; rec.table.len()];
        ids[COEFF_ONE as usize] = COEFF_ONE;
        ids[COEFF_MINUS_ONE as usize] = COEFF_MINUS_ONE;
        let mut left = ids.iter().filter(|i| **i == u32::MAX).count();
        'scan: for row in skip..rec.a.rows() {
            for from in [&rec.a, &rec.b, &rec.c] {
                for id in from.row(row).1 {
                    let local = *id as usize;
                    if ids[local] == u32::MAX {
                        ids[local] = out.coefficient(*id, &rec.table);
                        left -= 1;
                        if left == 0 {
                            break 'scan;
                        }
                    }
                }
            }
        }
        // Then each matrix in three straight passes over the piece's rows.
        for (to, from) in out.matrices.iter_mut().zip([&rec.a, &rec.b, &rec.c]) {
            let lo = from.row_ptr[skip];
            let base = to.cols.len() as u64;
            to.row_ptr
                .extend(from.row_ptr[skip + 1..].iter().map(|p| p - lo + base));
            let (cols, coeffs) = (&from.cols[lo as usize..], &from.coeffs[lo as usize..]);
            if k == 0 {
                to.cols.extend_from_slice(cols);
            } else {
                to.cols
                    .extend(cols.iter().map(|c| piece_column(&layout, k, *c)));
            }
            to.coeffs.extend(coeffs.iter().map(|i| ids[*i as usize]));
        }
    }
    // bellperson's `input · 0 = 0` rows close the recording, as `compile` has them.
    let (inputs, aux) = (0..layout.pieces()).fold((1, 0), |(i, a), k| {
        let own = layout.own(k);
        (i + own.inputs, a + own.aux)
    });
    for i in 0..inputs {
        out.matrices[0].push(i as u32 | INPUT, COEFF_ONE);
        for m in &mut out.matrices {
            m.end_row();
        }
    }
    let [a, b, c] = out.matrices;
    let mut r1cs = CompiledR1cs::new(inputs, aux, a, b, c, out.table);
    r1cs.layout = Some(layout);
    r1cs
}

/// The whole recording as it is laid out.
struct Joined {
    matrices: [Matrix; 3],
    table: Vec<Scalar>,
    index: HashMap<[u8; 32], u32>,
}

impl Default for Joined {
    fn default() -> Self {
        let table = base_table();
        let index = table
            .iter()
            .enumerate()
            .map(|(i, s)| (s.to_repr(), i as u32))
            .collect();
        Joined {
            matrices: Default::default(),
            table,
            index,
        }
    }
}

impl Joined {
    /// The whole table's index of a piece's coefficient `id`: its first
    /// entry's, entered where the whole circuit's recording first meets it.
    fn coefficient(&mut self, id: u32, table: &[Scalar]) -> u32 {
        if id == COEFF_ONE || id == COEFF_MINUS_ONE {
            return id;
        }
        let s = table[id as usize];
        let next = self.table.len() as u32;
        let entry = *self.index.entry(s.to_repr()).or_insert(next);
        if entry == next {
            self.table.push(s);
        }
        entry
    }
}
