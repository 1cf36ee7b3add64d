//! A parameter file read in one pass: a reader thread takes the file in
//! blocks of whole points, in the order its [`ParamsLayout`] gives; each
//! block goes to a SHA-256 thread, a BLAKE2b thread where the caller needs
//! Filecoin's digest, and the decoder, which converts its points on every
//! core while the reader fetches the next block. bellperson's own reader
//! decodes point by point on one thread, and a digest computed apart reads
//! the file again: a 2^23 Filecoin file took 11.5 s to load that way on a
//! 16-core host.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;

use bellperson::groth16::VerifyingKey;
use blstrs::{Bls12, G1Affine, G2Affine};
use group::prime::PrimeCurveAffine;
use group::UncompressedEncoding;
use rayon::prelude::*;
use sha2::{Digest, Sha256};

use crate::params::error::{io_err, ParamsError};
use crate::params::format::{vk_bytes, Params, ParamsLayout, G1_BYTES, G2_BYTES};

/// Points per block: 24 MiB of G1, 48 MiB of G2.
const BLOCK_POINTS: u64 = 1 << 18;
/// Blocks queued to each consumer: what the reader may run ahead.
const BLOCKS_IN_FLIGHT: usize = 2;

/// The digests of a file read by [`read_file`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Digests {
    pub sha256: String,
    /// BLAKE2b-512 in hex (128 digits), where asked for.
    pub blake2b_512: Option<String>,
}

/// One block of the file, in file order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Piece {
    /// The verifying key with its input query.
    Vk,
    /// A query's big-endian `u32` length field.
    Len(Query),
    /// `count` points of a query.
    Points(Query, u64),
}

/// The queries in the file's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Query {
    H,
    L,
    A,
    BG1,
    BG2,
}

impl Query {
    const ALL: [Query; 5] = [Query::H, Query::L, Query::A, Query::BG1, Query::BG2];

    fn count(self, layout: &ParamsLayout) -> u64 {
        match self {
            Query::H => layout.h,
            Query::L => layout.l,
            Query::A => layout.a,
            Query::BG1 => layout.b_g1,
            Query::BG2 => layout.b_g2,
        }
    }

    fn point_bytes(self) -> u64 {
        match self {
            Query::BG2 => G2_BYTES,
            _ => G1_BYTES,
        }
    }
}

impl Piece {
    fn bytes(self, layout: &ParamsLayout) -> u64 {
        match self {
            Piece::Vk => vk_bytes(layout.ic),
            Piece::Len(_) => 4,
            Piece::Points(q, n) => n * q.point_bytes(),
        }
    }
}

/// The file's blocks in order: the reader and the decoder walk the same list.
fn plan(layout: &ParamsLayout) -> Vec<Piece> {
    let mut pieces = vec![Piece::Vk];
    for q in Query::ALL {
        pieces.push(Piece::Len(q));
        let mut left = q.count(layout);
        while left > 0 {
            let n = left.min(BLOCK_POINTS);
            pieces.push(Piece::Points(q, n));
            left -= n;
        }
    }
    pieces
}

/// Reads the parameter file at `path`, whose length fields gave `layout`,
/// in one pass. `checked` also verifies every point is in its subgroup
/// (files of unknown origin); `blake2b` also computes BLAKE2b-512.
pub fn read_file(
    path: &Path,
    layout: &ParamsLayout,
    checked: bool,
    blake2b: bool,
) -> Result<(Params, Digests), ParamsError> {
    let pieces = plan(layout);
    let total: u64 = pieces.iter().map(|p| p.bytes(layout)).sum();
    if total != layout.file_len {
        return Err(ParamsError::malformed(
            path,
            format!(
                "its length fields add up to {total} bytes, the layout to {}",
                layout.file_len
            ),
        ));
    }
    let mut file = File::open(path).map_err(io_err(path, "opening"))?;
    let (to_sha, sha_rx) = sync_channel::<Arc<Vec<u8>>>(BLOCKS_IN_FLIGHT);
    let (to_blake, blake_rx) = sync_channel::<Arc<Vec<u8>>>(BLOCKS_IN_FLIGHT);
    let (to_decode, decode_rx) = sync_channel::<Arc<Vec<u8>>>(BLOCKS_IN_FLIGHT);
    std::thread::scope(|scope| {
        let sha = scope.spawn(move || {
            let mut h = Sha256::new();
            for block in sha_rx {
                h.update(&block[..]);
            }
            hex::encode(h.finalize())
        });
        let blake = blake2b.then(|| {
            scope.spawn(move || {
                let mut state = blake2b_simd::Params::new().to_state();
                for block in blake_rx {
                    state.update(&block[..]);
                }
                state.finalize().to_hex().to_string()
            })
        });
        let pieces_for_reader = &pieces;
        let reader = scope.spawn(move || -> io::Result<()> {
            for piece in pieces_for_reader {
                let len = usize::try_from(piece.bytes(layout))
                    .map_err(|_| io::Error::other("a block larger than memory"))?;
                let mut block = vec![0u8; len];
                file.read_exact(&mut block)?;
                let block = Arc::new(block);
                // A consumer that is gone has failed; the decoder's error
                // is the one reported.
                let _ = to_sha.send(Arc::clone(&block));
                if blake2b {
                    let _ = to_blake.send(Arc::clone(&block));
                }
                if to_decode.send(block).is_err() {
                    return Ok(());
                }
            }
            let mut extra = [0u8; 1];
            if file.read(&mut extra)? != 0 {
                return Err(io::Error::other(
                    "the file is longer than its length fields say (changed while reading?)",
                ));
            }
            Ok(())
        });
        let decoded = decode(path, layout, &pieces, decode_rx, checked);
        let read = reader
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the reader thread panicked")));
        let sha256 = sha.join().unwrap_or_default();
        let blake2b_512 = blake.and_then(|b| b.join().ok());
        // The reader's error (a short file, an I/O error) explains a
        // decoder that ran out of blocks.
        read.map_err(io_err(path, "reading"))?;
        let params = decoded?;
        Ok((
            params,
            Digests {
                sha256,
                blake2b_512,
            },
        ))
    })
}

/// Reads a parameter file fully into memory after checking its layout, in
/// one pass with the points decoded on every core ([`read_file`]).
/// `checked` also verifies every point is on the curve and in the subgroup
/// (needed for files of unknown origin). Returns the file's SHA-256.
pub fn read_params(
    path: &Path,
    checked: bool,
) -> Result<(Params, ParamsLayout, String), ParamsError> {
    let layout = ParamsLayout::read(path)?;
    let (params, digests) = read_file(path, &layout, checked, false)?;
    Ok((params, layout, digests.sha256))
}

/// Builds the parameters from the blocks of `pieces` as `blocks` delivers them.
fn decode(
    path: &Path,
    layout: &ParamsLayout,
    pieces: &[Piece],
    blocks: Receiver<Arc<Vec<u8>>>,
    checked: bool,
) -> Result<Params, ParamsError> {
    let capacity = |q: Query| usize::try_from(q.count(layout)).unwrap_or(0);
    let mut vk = None;
    let mut g1: [Vec<G1Affine>; 4] = [
        Vec::with_capacity(capacity(Query::H)),
        Vec::with_capacity(capacity(Query::L)),
        Vec::with_capacity(capacity(Query::A)),
        Vec::with_capacity(capacity(Query::BG1)),
    ];
    let mut g2: Vec<G2Affine> = Vec::with_capacity(capacity(Query::BG2));
    for piece in pieces {
        let block = blocks
            .recv()
            .map_err(|_| ParamsError::malformed(path, "the file ended early"))?;
        match *piece {
            Piece::Vk => {
                let key = VerifyingKey::<Bls12>::read(&block[..])
                    .map_err(|e| ParamsError::malformed(path, format!("verifying key: {e}")))?;
                vk = Some(key);
            }
            Piece::Len(q) => {
                let field: [u8; 4] = block[..]
                    .try_into()
                    .map_err(|_| ParamsError::malformed(path, "a short length field"))?;
                let len = u64::from(u32::from_be_bytes(field));
                if len != q.count(layout) {
                    return Err(ParamsError::malformed(
                        path,
                        format!(
                            "{q:?} has {len} points, {} when its layout was read (changed while reading?)",
                            q.count(layout)
                        ),
                    ));
                }
            }
            Piece::Points(Query::BG2, _) => {
                g2.extend(decode_points::<G2Affine>(path, &block, checked)?);
            }
            Piece::Points(q, _) => {
                let at = match q {
                    Query::H => 0,
                    Query::L => 1,
                    Query::A => 2,
                    _ => 3,
                };
                g1[at].extend(decode_points::<G1Affine>(path, &block, checked)?);
            }
        }
    }
    let vk = vk.ok_or_else(|| ParamsError::malformed(path, "no verifying key"))?;
    let [h, l, a, b_g1] = g1;
    Ok(Params {
        vk,
        h: Arc::new(h),
        l: Arc::new(l),
        a: Arc::new(a),
        b_g1: Arc::new(b_g1),
        b_g2: Arc::new(g2),
    })
}

/// A block's points, decoded on every core exactly as bellperson's reader
/// decodes one: on the curve (and in the subgroup when `checked`), never
/// the identity.
fn decode_points<P>(path: &Path, block: &[u8], checked: bool) -> Result<Vec<P>, ParamsError>
where
    P: UncompressedEncoding + PrimeCurveAffine + Send,
{
    let width = P::Uncompressed::default().as_ref().len();
    block
        .par_chunks(width)
        .map(|bytes| {
            let mut repr = P::Uncompressed::default();
            repr.as_mut().copy_from_slice(bytes);
            let point = if checked {
                P::from_uncompressed(&repr)
            } else {
                P::from_uncompressed_unchecked(&repr)
            };
            let point: P = Option::from(point).ok_or("not on curve")?;
            if bool::from(point.is_identity()) {
                return Err("point at infinity");
            }
            Ok(point)
        })
        .collect::<Result<Vec<P>, &str>>()
        .map_err(|why| ParamsError::malformed(path, why))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::circuit::ChainCircuit;

    fn written(params: &Params) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("p.params");
        let mut bytes = Vec::new();
        params.write(&mut bytes).expect("bellperson writes");
        std::fs::write(&path, bytes).expect("write");
        (dir, path)
    }

    #[test]
    fn one_pass_reads_what_bellperson_reads_with_both_digests() {
        let params = crate::setup::generate(&ChainCircuit::for_size(300, None), 5).expect("setup");
        let (_dir, path) = written(&params);
        let bytes = std::fs::read(&path).expect("read");
        let layout = ParamsLayout::read(&path).expect("layout");
        for checked in [false, true] {
            let (ours, digests) = read_file(&path, &layout, checked, true).expect("read");
            let theirs = Params::read(&bytes[..], checked).expect("bellperson reads");
            assert!(ours == theirs, "checked {checked}: parameters differ");
            assert_eq!(digests.sha256, hex::encode(Sha256::digest(&bytes)));
            let blake = blake2b_simd::Params::new()
                .hash(&bytes)
                .to_hex()
                .to_string();
            assert_eq!(digests.blake2b_512.as_deref(), Some(blake.as_str()));
        }
        let (_, digests) = read_file(&path, &layout, false, false).expect("read");
        assert_eq!(digests.blake2b_512, None);
    }

    #[test]
    fn a_point_off_the_curve_and_a_file_that_grew_are_refused() {
        let params = crate::setup::generate(&ChainCircuit::for_size(64, None), 5).expect("setup");
        let (_dir, path) = written(&params);
        let layout = ParamsLayout::read(&path).expect("layout");
        let mut bytes = std::fs::read(&path).expect("read");
        // The last byte of the last G2 point: its y coordinate changes.
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).expect("write");
        let err = read_file(&path, &layout, false, false)
            .map(drop)
            .expect_err("off the curve");
        assert!(err.to_string().contains("not on curve"), "{err}");
        bytes[last] ^= 1;
        bytes.push(0);
        std::fs::write(&path, &bytes).expect("write");
        let err = read_file(&path, &layout, false, false)
            .map(drop)
            .expect_err("longer");
        assert!(
            err.to_string().contains("longer than its length fields"),
            "{err}"
        );
    }
}
