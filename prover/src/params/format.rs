//! bellperson's parameter file format, byte for byte: the length fields
//! walked and checked against the file size before bellperson reads it
//! ([`ParamsLayout`]), then read, mapped or written.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use bellperson::groth16::{MappedParameters, Parameters};
use blstrs::Bls12;

use crate::circuit::{CircuitKind, CircuitShape};
use crate::params::error::{io_err, ParamsError};
use crate::params::file::{stage_chunks, Chunk, Staged};
use crate::setup::SetPart;

/// Groth16 parameters over BLS12-381.
pub type Params = Parameters<Bls12>;
/// Parameters read lazily from a memory-mapped file.
pub type MappedParams = MappedParameters<Bls12>;

/// Uncompressed G1 point (x, y).
pub const G1_BYTES: u64 = 96;
/// Uncompressed G2 point (x, y over Fp2).
pub const G2_BYTES: u64 = 192;
/// The fixed verifying-key prefix: α₁, β₁, β₂, γ₂, δ₁, δ₂.
pub(crate) const VK_FIXED_BYTES: u64 = 3 * G1_BYTES + 3 * G2_BYTES;

/// Bytes of a verifying key with `ic` input points: where the file's h
/// query starts.
pub(crate) fn vk_bytes(ic: u64) -> u64 {
    VK_FIXED_BYTES + 4 + ic * G1_BYTES
}
/// Element counts of a parameter file, read from its length fields and
/// checked to add up to exactly the file's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ParamsLayout {
    pub ic: u64,
    pub h: u64,
    pub l: u64,
    pub a: u64,
    pub b_g1: u64,
    pub b_g2: u64,
    pub file_len: u64,
}

impl ParamsLayout {
    /// Reads and checks the layout of the file at `path` (only the length fields).
    pub fn read(path: &Path) -> Result<Self, ParamsError> {
        let mut file = File::open(path).map_err(io_err(path, "opening"))?;
        let file_len = file
            .metadata()
            .map_err(io_err(path, "reading metadata of"))?
            .len();
        Self::from_reader(&mut file, file_len, path)
    }

    /// Walks the length fields of a parameter file of `file_len` bytes.
    pub fn from_reader<R: Read + Seek>(
        reader: &mut R,
        file_len: u64,
        path: &Path,
    ) -> Result<Self, ParamsError> {
        let mut offset = 0u64;
        let mut skip = |reader: &mut R, section: &'static str, bytes: u64| {
            let available = file_len.saturating_sub(offset);
            if bytes > available {
                return Err(ParamsError::Truncated {
                    path: path.to_path_buf(),
                    section,
                    offset,
                    needed: bytes,
                    available,
                });
            }
            offset += bytes;
            reader
                .seek(SeekFrom::Start(offset))
                .map_err(io_err(path, "seeking in"))?;
            Ok(())
        };
        skip(reader, "verifying key", VK_FIXED_BYTES)?;
        let mut section = |reader: &mut R, name: &'static str, point_bytes: u64| {
            skip(reader, name, 4)?;
            let mut len = [0u8; 4];
            reader
                .seek(SeekFrom::Current(-4))
                .and_then(|_| reader.read_exact(&mut len))
                .map_err(io_err(path, "reading"))?;
            let count = u64::from(u32::from_be_bytes(len));
            skip(reader, name, count * point_bytes)?;
            Ok::<u64, ParamsError>(count)
        };
        let ic = section(reader, "ic", G1_BYTES)?;
        let h = section(reader, "h", G1_BYTES)?;
        let l = section(reader, "l", G1_BYTES)?;
        let a = section(reader, "a", G1_BYTES)?;
        let b_g1 = section(reader, "b_g1", G1_BYTES)?;
        let b_g2 = section(reader, "b_g2", G2_BYTES)?;
        let layout = ParamsLayout {
            ic,
            h,
            l,
            a,
            b_g1,
            b_g2,
            file_len,
        };
        let end = layout.expected_len();
        if end != file_len {
            return Err(ParamsError::Malformed {
                path: path.to_path_buf(),
                reason: format!(
                    "{} trailing bytes after the b_g2 section",
                    file_len.saturating_sub(end)
                ),
            });
        }
        if ic == 0 {
            return Err(ParamsError::Malformed {
                path: path.to_path_buf(),
                reason: "the verifying key has no IC points (not even the ONE input)".into(),
            });
        }
        if b_g1 != b_g2 {
            return Err(ParamsError::Malformed {
                path: path.to_path_buf(),
                reason: format!("b_g1 has {b_g1} points but b_g2 has {b_g2}"),
            });
        }
        Ok(layout)
    }

    /// The size a file with these counts has.
    pub fn expected_len(&self) -> u64 {
        VK_FIXED_BYTES
            + 6 * 4
            + (self.ic + self.h + self.l + self.a + self.b_g1) * G1_BYTES
            + self.b_g2 * G2_BYTES
    }

    /// The evaluation-domain size the `h` query was made for (`h + 1`).
    pub fn domain_size(&self) -> u64 {
        self.h + 1
    }

    /// Checks these parameters can prove `kind` at `size`, whose shape is `shape`.
    pub fn check_fits(
        &self,
        path: &Path,
        kind: CircuitKind,
        size: usize,
        shape: &CircuitShape,
    ) -> Result<(), ParamsError> {
        let domain = self.domain_size();
        if !domain.is_power_of_two() {
            return Err(ParamsError::Malformed {
                path: path.to_path_buf(),
                reason: format!(
                    "h has {} points; a domain of {domain} is not a power of two",
                    self.h
                ),
            });
        }
        if domain != shape.domain_size() as u64 {
            return Err(ParamsError::DomainMismatch {
                path: path.to_path_buf(),
                kind,
                size,
                have_log2: domain.trailing_zeros(),
                need_log2: shape.log2_domain(),
            });
        }
        let mismatch = |what: String| ParamsError::ShapeMismatch {
            path: path.to_path_buf(),
            kind,
            size,
            what,
        };
        if self.ic != shape.num_inputs as u64 {
            return Err(mismatch(format!(
                "they have {} inputs, the circuit {}",
                self.ic, shape.num_inputs
            )));
        }
        if self.l != shape.num_aux as u64 {
            return Err(mismatch(format!(
                "they have {} private variables, the circuit {}",
                self.l, shape.num_aux
            )));
        }
        let variables = (shape.num_inputs + shape.num_aux) as u64;
        if self.a > variables || self.b_g1 > variables {
            return Err(mismatch(format!(
                "their A/B queries have {}/{} points, more than the circuit's {variables} variables",
                self.a, self.b_g1
            )));
        }
        Ok(())
    }
}

fn malformed(path: &Path, err: io::Error) -> ParamsError {
    ParamsError::malformed(path, err.to_string())
}

/// Maps a parameter file after checking its layout; points are decoded when
/// the prover asks for them.
///
/// The layout check makes bellperson's mmap reader safe from truncated or
/// inconsistent files, as long as nobody rewrites the file in place between
/// the check and the mapping (the store only ever replaces files by rename).
pub fn read_mapped(
    path: &Path,
    checked: bool,
) -> Result<(MappedParams, ParamsLayout), ParamsError> {
    let layout = ParamsLayout::read(path)?;
    let mapped = Params::build_mapped_parameters(path.to_path_buf(), checked)
        .map_err(|e| malformed(path, e))?;
    Ok((mapped, layout))
}

/// Writes parameters atomically in bellperson's format; returns SHA-256 and length.
pub fn write_params(path: &Path, params: &Params) -> Result<(String, u64), ParamsError> {
    let staged = stage_params(path, params)?;
    let (sha256, bytes) = (staged.sha256.clone(), staged.bytes);
    staged.commit()?;
    Ok((sha256, bytes))
}

/// Writes `params` in full beside `path` without replacing anything yet
/// (see [`Staged`]).
pub(crate) fn stage_params(path: &Path, params: &Params) -> Result<Staged, ParamsError> {
    stage_chunks(path, |sink| {
        write_parts(
            &parts_of(params),
            &mut |buf| sink(Chunk::Next(buf)),
            WRITE_BATCH,
        )
    })
    .map(|((), staged)| staged)
}

/// Stages the file of a set while `generate` makes it: `generate` hands
/// each [`SetPart`] to the function it is given, in the file's order (false
/// back: the writer has stopped), and each part is encoded and written
/// while the next is computed. Returns what `generate` returned and the
/// staged file, each with its own error: a writer's error is the cause of
/// a generation stopped with [`crate::setup::SetupError::WriterStopped`].
pub(crate) fn stage_streamed<T, E>(
    path: &Path,
    generate: impl FnOnce(&mut dyn FnMut(SetPart) -> bool) -> Result<T, E>,
) -> (Result<T, E>, Result<Staged, ParamsError>) {
    // One part waiting: the generator runs at most one part ahead.
    let (tx, rx) = std::sync::mpsc::sync_channel::<SetPart>(1);
    std::thread::scope(|scope| {
        let writer = scope.spawn(move || {
            stage_chunks(path, |sink| {
                // Time spent waiting for the generator's next part: what
                // the file's writing is not the bound of.
                let mut idle = std::time::Duration::ZERO;
                // h written ahead of the key: where, and the vector that
                // comes again in order.
                let mut ahead: Option<(u64, std::sync::Arc<Vec<blstrs::G1Affine>>)> = None;
                let mut position = 0u64;
                loop {
                    let t = std::time::Instant::now();
                    let Ok(part) = rx.recv() else { break };
                    idle += t.elapsed();
                    match &part {
                        SetPart::HAhead { num_inputs, h } => {
                            let offset = vk_bytes(*num_inputs as u64);
                            let mut at = offset;
                            encode_section(&h[..], WRITE_BATCH, &mut |buf| {
                                let len = buf.len() as u64;
                                sink(Chunk::At(at, buf))?;
                                at += len;
                                Ok(())
                            })?;
                            ahead = Some((offset, h.clone()));
                        }
                        SetPart::G1(points)
                            if ahead
                                .as_ref()
                                .is_some_and(|(_, h)| std::sync::Arc::ptr_eq(h, points)) =>
                        {
                            let offset = ahead.take().map_or(0, |(o, _)| o);
                            if offset != position {
                                return Err(io::Error::other(format!(
                                    "h was written ahead at byte {offset}, but its place is byte {position}"
                                )));
                            }
                            encode_section(&points[..], WRITE_BATCH, &mut |buf| {
                                position += buf.len() as u64;
                                sink(Chunk::Written(buf))
                            })?;
                        }
                        _ => write_part(
                            &part,
                            &mut |buf| {
                                position += buf.len() as u64;
                                sink(Chunk::Next(buf))
                            },
                            WRITE_BATCH,
                        )?,
                    }
                }
                if ahead.is_some() {
                    return Err(io::Error::other(
                        "h was written ahead of the key but never came in order",
                    ));
                }
                tracing::debug!(idle_s = idle.as_secs_f64(), "parameter writer waited for parts");
                Ok(())
            })
            .map(|((), staged)| staged)
        });
        let generated = generate(&mut |part| tx.send(part).is_ok());
        drop(tx);
        let staged = writer.join().unwrap_or_else(|_| {
            Err(io_err(path, "writing")(io::Error::other(
                "the parameter writer panicked",
            )))
        });
        (generated, staged)
    })
}

/// Points encoded per batch: 24 MiB of G1, 48 MiB of G2.
const WRITE_BATCH: usize = 1 << 18;

/// The parts of `params` in the file's order.
fn parts_of(params: &Params) -> [SetPart; 6] {
    [
        SetPart::Vk(Box::new(params.vk.clone())),
        SetPart::G1(params.h.clone()),
        SetPart::G1(params.l.clone()),
        SetPart::G1(params.a.clone()),
        SetPart::G1(params.b_g1.clone()),
        SetPart::G2(params.b_g2.clone()),
    ]
}

fn write_parts(
    parts: &[SetPart],
    sink: &mut dyn FnMut(Vec<u8>) -> io::Result<()>,
    batch: usize,
) -> io::Result<()> {
    parts.iter().try_for_each(|p| write_part(p, sink, batch))
}

/// One part exactly as bellperson's `Parameters::write` writes it (the
/// verifying key through it; a query as its big-endian `u32` length and
/// its points uncompressed), the points encoded (one field conversion out
/// of Montgomery form per coordinate) on every core a batch at a time:
/// written point by point on one thread, a 2^26 set (about 40 GB) spent
/// longer encoding than generating.
fn write_part(
    part: &SetPart,
    sink: &mut dyn FnMut(Vec<u8>) -> io::Result<()>,
    batch: usize,
) -> io::Result<()> {
    match part {
        SetPart::Vk(vk) => {
            let mut buf = Vec::new();
            vk.write(&mut buf)?;
            sink(buf)
        }
        SetPart::G1(points) => encode_section(&points[..], batch, sink),
        SetPart::G2(points) => encode_section(&points[..], batch, sink),
        SetPart::HAhead { .. } => Err(io::Error::other(
            "a part written ahead of its place needs the streaming writer",
        )),
    }
}

/// A query's length field, then its points encoded in batches.
fn encode_section<P>(
    points: &[P],
    batch: usize,
    sink: &mut dyn FnMut(Vec<u8>) -> io::Result<()>,
) -> io::Result<()>
where
    P: group::UncompressedEncoding + Sync,
{
    use rayon::prelude::*;
    let len = u32::try_from(points.len())
        .map_err(|_| io::Error::other("a query of more than 2^32 - 1 points"))?;
    sink(len.to_be_bytes().to_vec())?;
    let width = P::Uncompressed::default().as_ref().len();
    points.chunks(batch.max(1)).try_for_each(|batch| {
        let mut buf = vec![0u8; batch.len() * width];
        buf.par_chunks_mut(width)
            .zip(batch.par_iter())
            .for_each(|(out, p)| out.copy_from_slice(p.to_uncompressed().as_ref()));
        sink(buf)
    })
}

/// `params` in the file's format into `w`, in batches of `batch` points.
#[cfg(test)]
fn write_batched(params: &Params, w: &mut dyn io::Write, batch: usize) -> io::Result<()> {
    write_parts(&parts_of(params), &mut |buf| w.write_all(&buf), batch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::circuit::ChainCircuit;
    use std::io::Write;

    #[test]
    fn batched_encoding_writes_bellpersons_bytes() {
        let params = crate::setup::generate(&ChainCircuit::for_size(100, None), 3).expect("setup");
        let mut theirs = Vec::new();
        params.write(&mut theirs).expect("bellperson writes");
        // Batches of 7 cut every query into several, the last one short.
        for batch in [7, WRITE_BATCH] {
            let mut ours = Vec::new();
            write_batched(&params, &mut ours, batch).expect("write");
            assert!(
                ours == theirs,
                "batch {batch}: bytes differ from bellperson's"
            );
        }
    }

    /// Fails after `left` bytes.
    struct Full {
        left: usize,
    }

    impl Write for Full {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.left == 0 {
                return Err(io::Error::new(io::ErrorKind::StorageFull, "disk full"));
            }
            let n = buf.len().min(self.left);
            self.left -= n;
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_write_error_stops_the_encoder_and_is_returned() {
        let params = crate::setup::generate(&ChainCircuit::for_size(100, None), 3).expect("setup");
        for left in [10, 2000, 9000] {
            let err = write_batched(&params, &mut Full { left }, 5).expect_err("disk full");
            assert_eq!(err.kind(), io::ErrorKind::StorageFull, "after {left} bytes");
        }
    }

    #[test]
    fn h_written_ahead_must_come_again_at_its_place() {
        use group::prime::PrimeCurveAffine;
        use std::sync::Arc;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.params");
        let h = Arc::new(vec![blstrs::G1Affine::generator(); 3]);
        // In order again, but without the key before it: the bytes written
        // ahead would sit at the wrong place.
        let (generated, staged) = stage_streamed(&path, |emit| {
            emit(SetPart::HAhead {
                num_inputs: 1,
                h: h.clone(),
            });
            emit(SetPart::G1(h.clone()));
            Ok::<(), ()>(())
        });
        assert!(generated.is_ok());
        let err = staged.map(drop).expect_err("misplaced");
        assert!(err.to_string().contains("its place is byte 0"), "{err}");
        // Never in order at all.
        let (_, staged) = stage_streamed(&path, |emit| {
            emit(SetPart::HAhead {
                num_inputs: 1,
                h: h.clone(),
            });
            Ok::<(), ()>(())
        });
        let err = staged.map(drop).expect_err("never placed");
        assert!(err.to_string().contains("never came in order"), "{err}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
