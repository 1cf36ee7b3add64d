//! The compiled form of a circuit's R1CS: A, B and C as compressed sparse
//! rows over one table of distinct coefficients, and the digest that names it.
//!
//! A column names a variable as synthesis sees it: an input by its index with
//! [`INPUT`] set, an aux variable by its index. A coefficient is an index into
//! the table, whose first two entries are 1 and -1 so that the evaluator can
//! take its add-only paths from the index alone.

use super::layout::PieceLayout;
use crate::density::Density;
use blstrs::Scalar;
use ff::{Field, PrimeField};
use rayon::prelude::*;

/// Set on a column that names an input; clear for an aux variable.
pub const INPUT: u32 = 1 << 31;
/// The most variables of either kind a compiled circuit can name.
pub const MAX_VARIABLES: usize = (INPUT - 1) as usize;
/// Coefficient index of 1.
pub const COEFF_ONE: u32 = 0;
/// Coefficient index of -1.
pub const COEFF_MINUS_ONE: u32 = 1;

/// One of A, B, C: row `i` holds the terms of constraint `i`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matrix {
    /// `row_ptr[i]..row_ptr[i + 1]` are row `i`'s terms; `rows + 1` entries.
    pub(crate) row_ptr: Vec<u64>,
    pub(crate) cols: Vec<u32>,
    pub(crate) coeffs: Vec<u32>,
}

impl Default for Matrix {
    fn default() -> Self {
        Matrix {
            row_ptr: vec![0],
            cols: Vec::new(),
            coeffs: Vec::new(),
        }
    }
}

impl Matrix {
    pub fn rows(&self) -> usize {
        self.row_ptr.len() - 1
    }

    /// Non-zero terms over all rows.
    pub fn nnz(&self) -> usize {
        self.cols.len()
    }

    /// Row `i`'s columns and coefficient indices.
    #[inline]
    pub fn row(&self, i: usize) -> (&[u32], &[u32]) {
        let (lo, hi) = (self.row_ptr[i] as usize, self.row_ptr[i + 1] as usize);
        (&self.cols[lo..hi], &self.coeffs[lo..hi])
    }

    pub(crate) fn push(&mut self, col: u32, coeff: u32) {
        self.cols.push(col);
        self.coeffs.push(coeff);
    }

    /// Room for `rows` more rows of `nnz` terms in all.
    pub(crate) fn reserve(&mut self, rows: usize, nnz: usize) {
        self.row_ptr.reserve(rows);
        self.cols.reserve(nnz);
        self.coeffs.reserve(nnz);
    }

    pub(crate) fn end_row(&mut self) {
        self.row_ptr.push(self.cols.len() as u64);
    }

    pub(crate) fn bytes(&self) -> usize {
        self.row_ptr.len() * 8 + self.cols.len() * 4 + self.coeffs.len() * 4
    }
}

/// A circuit's constraints, recorded once, with what the prover derives from
/// them alone: the densities of the A and B queries.
#[derive(Debug, Clone)]
pub struct CompiledR1cs {
    /// Inputs, ONE included.
    pub num_inputs: usize,
    pub num_aux: usize,
    /// Constraints, bellperson's `input · 0 = 0` ones included (the rows of A, B, C).
    pub num_constraints: usize,
    pub(crate) a: Matrix,
    pub(crate) b: Matrix,
    pub(crate) c: Matrix,
    /// Distinct coefficients; [`COEFF_ONE`] and [`COEFF_MINUS_ONE`] first.
    pub(crate) table: Vec<Scalar>,
    pub a_aux_density: Density,
    pub b_input_density: Density,
    pub b_aux_density: Density,
    /// Blake2b-256 of the structure ([`CompiledR1cs::structure_digest`]).
    pub digest: [u8; 32],
    /// Where a recording made in pieces put each piece
    /// ([`crate::compiled::compile_split`]), so that a checked witness pass
    /// can run in the same pieces; None for one made whole or read from a
    /// file. Not part of the structure or its digest.
    pub layout: Option<PieceLayout>,
}

/// Piece `k`'s column `col` in the whole recording laid out by `layout`.
pub(crate) fn piece_column(layout: &PieceLayout, k: usize, col: u32) -> u32 {
    if col & INPUT != 0 {
        layout.input(k, (col & !INPUT) as usize) as u32 | INPUT
    } else {
        layout.aux(k, col as usize) as u32
    }
}

/// The first two entries of every coefficient table.
pub(crate) fn base_table() -> Vec<Scalar> {
    vec![Scalar::ONE, -Scalar::ONE]
}

impl CompiledR1cs {
    /// Assembles the parts, deriving densities and digest.
    pub(crate) fn new(
        num_inputs: usize,
        num_aux: usize,
        a: Matrix,
        b: Matrix,
        c: Matrix,
        table: Vec<Scalar>,
    ) -> Self {
        let num_constraints = a.rows();
        let mut a_aux_density = Density::with_len(num_aux);
        let mut b_input_density = Density::with_len(num_inputs);
        let mut b_aux_density = Density::with_len(num_aux);
        for &col in &a.cols {
            if col & INPUT == 0 {
                a_aux_density.inc(col as usize);
            }
        }
        for &col in &b.cols {
            if col & INPUT != 0 {
                b_input_density.inc((col & !INPUT) as usize);
            } else {
                b_aux_density.inc(col as usize);
            }
        }
        let mut r1cs = CompiledR1cs {
            num_inputs,
            num_aux,
            num_constraints,
            a,
            b,
            c,
            table,
            a_aux_density,
            b_input_density,
            b_aux_density,
            digest: [0; 32],
            layout: None,
        };
        r1cs.digest = r1cs.structure_digest();
        r1cs
    }

    pub fn matrices(&self) -> [&Matrix; 3] {
        [&self.a, &self.b, &self.c]
    }

    /// Distinct coefficients.
    pub fn coefficients(&self) -> &[Scalar] {
        &self.table
    }

    /// Terms of A, B and C together.
    pub fn nnz(&self) -> usize {
        self.matrices().iter().map(|m| m.nnz()).sum()
    }

    /// Bytes the matrices and the table take in memory.
    pub fn bytes(&self) -> usize {
        self.matrices().iter().map(|m| m.bytes()).sum::<usize>() + self.table.len() * 32
    }

    /// The digest as lowercase hex.
    pub fn digest_hex(&self) -> String {
        self.digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Blake2b-256 over the counts, the three matrices and the table, in the
    /// order the file stores them: two recordings of the same constraints
    /// have the same digest, and any change to one term changes it. Each
    /// matrix array enters as its length and the digests of its
    /// [`DIGEST_CHUNK`]-byte chunks, hashed side by side on every core (a
    /// 32 GiB partition's recording is ~8.9 GB: ~7.5 s of one core hashed
    /// straight through, once per daemon).
    pub fn structure_digest(&self) -> [u8; 32] {
        let mut h = blake2b_simd::Params::new()
            .hash_length(32)
            .personal(b"fleet-r1cs-v2")
            .to_state();
        for n in [
            self.num_inputs,
            self.num_aux,
            self.num_constraints,
            self.table.len(),
        ] {
            h.update(&(n as u64).to_le_bytes());
        }
        for m in self.matrices() {
            h.update(&(m.nnz() as u64).to_le_bytes());
            for bytes in [
                words_u64(&m.row_ptr),
                words_u32(&m.cols),
                words_u32(&m.coeffs),
            ] {
                h.update(&(bytes.len() as u64).to_le_bytes());
                for chunk in chunk_digests(bytes) {
                    h.update(chunk.as_bytes());
                }
            }
        }
        for s in &self.table {
            h.update(&s.to_repr());
        }
        let mut out = [0; 32];
        out.copy_from_slice(h.finalize().as_bytes());
        out
    }
}

/// Bytes of a matrix array hashed as one chunk of the digest. Fixed, so the
/// digest never depends on the number of threads; large enough that the
/// chunks' own digests (32 bytes per 64 MiB) cost nothing to hash again.
pub const DIGEST_CHUNK: usize = 64 << 20;

/// The Blake2b-256 digests of `bytes`' [`DIGEST_CHUNK`]-byte chunks, in order.
fn chunk_digests(bytes: &[u8]) -> Vec<blake2b_simd::Hash> {
    bytes
        .par_chunks(DIGEST_CHUNK)
        .map(|chunk| {
            blake2b_simd::Params::new()
                .hash_length(32)
                .personal(b"fleet-r1cs-part")
                .hash(chunk)
        })
        .collect()
}

/// The little-endian bytes of a `u64` slice, without a copy.
pub(crate) fn words_u64(w: &[u64]) -> &[u8] {
    #[cfg(not(target_endian = "little"))]
    compile_error!("the compiled-constraints file and digest assume a little-endian host");
    // SAFETY: u64 has no padding and any byte pattern is a valid u8; the
    // length is the slice's size in bytes.
    unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u8>(), std::mem::size_of_val(w)) }
}

/// The little-endian bytes of a `u32` slice, without a copy.
pub(crate) fn words_u32(w: &[u32]) -> &[u8] {
    // SAFETY: as for `words_u64`.
    unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u8>(), std::mem::size_of_val(w)) }
}
