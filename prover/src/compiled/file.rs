//! Compiled constraints on disk, next to the parameters they belong to.
//!
//! Layout (little-endian): the magic, the digest, four counts (inputs, aux,
//! constraints, coefficients), for each of A, B, C its number of terms, then
//! the coefficient table (32-byte canonical scalars) and each matrix's row
//! pointers, columns and coefficient indices. Every count is checked against
//! the file's length before anything is allocated, every column and
//! coefficient index against the counts, and the digest is recomputed: a
//! damaged file is refused, never proved from. Written to a temporary name
//! and renamed, so a crash leaves no half file under the real name.

use super::error::FileError;
use super::matrix::{words_u32, words_u64, CompiledR1cs, Matrix, INPUT};
use blstrs::Scalar;
use ff::PrimeField;
use std::fs;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Format 2: the digest hashes the matrices in chunks (see
/// `CompiledR1cs::structure_digest`). A format-1 file is refused by name and
/// recorded again by its user.
const MAGIC: &[u8; 8] = b"FLR1CS\x00\x02";
/// The magic of format 1, whose digest hashed the matrices straight through.
const MAGIC_V1: &[u8; 8] = b"FLR1CS\x00\x01";
const HEADER: usize = 8 + 32 + 4 * 8 + 3 * 8;

/// The file that holds the compiled constraints for the parameters at `params`.
pub fn path_for(params: &Path) -> PathBuf {
    let mut name = params.file_name().unwrap_or_default().to_os_string();
    name.push(".r1cs");
    params.with_file_name(name)
}

/// Writes `r1cs` to `path` (through a temporary file in the same folder).
pub fn save(r1cs: &CompiledR1cs, path: &Path) -> Result<(), FileError> {
    let io = |action| {
        move |source| FileError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    };
    let tmp = path.with_extension(format!("r1cs.tmp{}", std::process::id()));
    let result = (|| {
        let file = fs::File::create(&tmp).map_err(io("creating"))?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        w.write_all(MAGIC).map_err(io("writing"))?;
        w.write_all(&r1cs.digest).map_err(io("writing"))?;
        for n in [
            r1cs.num_inputs,
            r1cs.num_aux,
            r1cs.num_constraints,
            r1cs.table.len(),
        ]
        .into_iter()
        .chain(r1cs.matrices().map(|m| m.nnz()))
        {
            w.write_all(&(n as u64).to_le_bytes())
                .map_err(io("writing"))?;
        }
        for s in &r1cs.table {
            w.write_all(&s.to_repr()).map_err(io("writing"))?;
        }
        for m in r1cs.matrices() {
            w.write_all(words_u64(&m.row_ptr)).map_err(io("writing"))?;
            w.write_all(words_u32(&m.cols)).map_err(io("writing"))?;
            w.write_all(words_u32(&m.coeffs)).map_err(io("writing"))?;
        }
        let file = w.into_inner().map_err(|e| io("writing")(e.into_error()))?;
        file.sync_all().map_err(io("syncing"))?;
        fs::rename(&tmp, path).map_err(io("renaming into place"))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Reads and checks the compiled constraints at `path`.
pub fn load(path: &Path) -> Result<CompiledR1cs, FileError> {
    let invalid = |reason: String| FileError::Invalid {
        path: path.to_path_buf(),
        reason,
    };
    let mut file = fs::File::open(path).map_err(|source| FileError::Io {
        action: "opening",
        path: path.to_path_buf(),
        source,
    })?;
    let len = file
        .metadata()
        .map_err(|source| FileError::Io {
            action: "reading the size of",
            path: path.to_path_buf(),
            source,
        })?
        .len();
    let mut read = |buf: &mut [u8]| {
        file.read_exact(buf).map_err(|source| FileError::Io {
            action: "reading",
            path: path.to_path_buf(),
            source,
        })
    };
    if len < HEADER as u64 {
        return Err(invalid(format!("{len} bytes is shorter than the header")));
    }
    let mut header = [0u8; HEADER];
    read(&mut header)?;
    if &header[..8] == MAGIC_V1 {
        return Err(invalid(
            "a compiled-constraints file of an older format (1, another digest)".into(),
        ));
    }
    if &header[..8] != MAGIC {
        return Err(invalid(
            "not a compiled-constraints file (bad magic)".into(),
        ));
    }
    let mut digest = [0u8; 32];
    digest.copy_from_slice(&header[8..40]);
    let counts: Vec<u64> = header[40..]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8-byte chunk")))
        .collect();
    let (inputs, aux, rows, coeffs) = (counts[0], counts[1], counts[2], counts[3]);
    let nnz = [counts[4], counts[5], counts[6]];
    let limit = (INPUT - 1) as u64;
    if inputs == 0 || inputs > limit || aux > limit || coeffs < 2 || coeffs > u32::MAX as u64 {
        return Err(invalid(format!(
            "counts out of range: {inputs} inputs, {aux} aux, {coeffs} coefficients"
        )));
    }
    // The exact length these counts imply; computed in u128 so that no
    // count can overflow it, and compared before any allocation.
    let expected: u128 = HEADER as u128
        + coeffs as u128 * 32
        + nnz
            .iter()
            .map(|&n| (rows as u128 + 1) * 8 + n as u128 * 8)
            .sum::<u128>();
    if expected != len as u128 {
        return Err(invalid(format!(
            "the header's counts need {expected} bytes, the file has {len}"
        )));
    }
    let (rows, inputs, aux) = (rows as usize, inputs as usize, aux as usize);
    let mut table = Vec::with_capacity(coeffs as usize);
    for i in 0..coeffs {
        let mut repr = [0u8; 32];
        read(&mut repr)?;
        let s = Option::<Scalar>::from(Scalar::from_repr(repr))
            .ok_or_else(|| invalid(format!("coefficient {i} is not a canonical scalar")))?;
        table.push(s);
    }
    let mut matrices = Vec::with_capacity(3);
    for (which, &n) in ["A", "B", "C"].iter().zip(&nnz) {
        let n = n as usize;
        let mut row_ptr = vec![0u64; rows + 1];
        read(bytes_of_u64(&mut row_ptr))?;
        let mut cols = vec![0u32; n];
        read(bytes_of_u32(&mut cols))?;
        let mut ids = vec![0u32; n];
        read(bytes_of_u32(&mut ids))?;
        if row_ptr[0] != 0 || row_ptr[rows] != n as u64 || row_ptr.windows(2).any(|w| w[0] > w[1]) {
            return Err(invalid(format!(
                "{which}'s row pointers are not a partition of its terms"
            )));
        }
        if let Some(col) = cols.iter().find(|&&c| {
            if c & INPUT != 0 {
                (c & !INPUT) as usize >= inputs
            } else {
                c as usize >= aux
            }
        }) {
            return Err(invalid(format!(
                "{which} names variable {col:#x}, which does not exist"
            )));
        }
        if ids.iter().any(|&id| id as u64 >= coeffs) {
            return Err(invalid(format!(
                "{which} names a coefficient past the table"
            )));
        }
        matrices.push(Matrix {
            row_ptr,
            cols,
            coeffs: ids,
        });
    }
    let c = matrices.pop().expect("three matrices");
    let b = matrices.pop().expect("three matrices");
    let a = matrices.pop().expect("three matrices");
    let r1cs = CompiledR1cs::new(inputs, aux, a, b, c, table);
    if r1cs.digest != digest {
        return Err(FileError::Digest {
            path: path.to_path_buf(),
            expected: hex(&digest),
            got: r1cs.digest_hex(),
        });
    }
    Ok(r1cs)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

fn bytes_of_u64(w: &mut [u64]) -> &mut [u8] {
    // SAFETY: every byte pattern is a valid u64; the length is the slice's size.
    unsafe { std::slice::from_raw_parts_mut(w.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(w)) }
}

fn bytes_of_u32(w: &mut [u32]) -> &mut [u8] {
    // SAFETY: as for `bytes_of_u64`.
    unsafe { std::slice::from_raw_parts_mut(w.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(w)) }
}
