//! The release's binary gzip-compressed once per run, for `upload` to send
//! to every host: a Rust build of tens of MB shrinks to about 40 %, and
//! every host has `gzip` to inflate it (checked, with a plain upload when
//! not). The digest is still checked on the file the host ends up with.
//!
//! gzip rather than zstd: its copy of a Rust build is about a tenth larger
//! than `zstd -3`'s, but the host side needs nothing beyond what every Linux
//! ships, and the encoder (flate2 over zlib-rs) is pure Rust: no C build on
//! the operator's machine.

use flate2::write::GzEncoder;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::OnceCell;

/// How the bytes are sent, as the audit log and the summary name it.
pub const ENCODING: &str = "gzip";
/// The host's side of the pipe: inflates stdin to stdout.
pub const DECODER: &[&str] = &["gzip", "-dc"];
/// Level 3 of 9. On a 42 MB Rust release binary, on the 2-core build
/// machine: level 1 keeps 48 % in 0.6 s, level 3 39 % in 1.3 s, level 6
/// 37 % in 1.9 s. Level 3 is most of the saving for two thirds of the time,
/// spent once per run; the 2 % more of level 6 is 0.04 s per host at
/// 100 Mbit/s.
const LEVEL: u32 = 3;
/// A copy over this share of the file (in thousandths) saves too little to
/// be worth inflating on the host (an already compressed build).
const WORTH_PER_MILLE: u64 = 900;

/// A compressed copy of one file, in a temporary file removed on drop.
#[derive(Debug)]
pub struct Compressed {
    file: tempfile::NamedTempFile,
    /// Bytes of the compressed copy: what goes over the link.
    pub len: u64,
    /// Bytes of the file it was made from.
    pub source_len: u64,
}

impl Compressed {
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Whether sending this instead of the file is worth it; the reason
    /// when not.
    pub fn pays(&self) -> Result<(), String> {
        if self.len.saturating_mul(1000) <= self.source_len.saturating_mul(WORTH_PER_MILLE) {
            return Ok(());
        }
        Err(format!(
            "{ENCODING} keeps {} of its {} bytes (over {}%): not worth inflating on the host",
            self.len,
            self.source_len,
            WORTH_PER_MILLE / 10
        ))
    }
}

#[derive(Debug, thiserror::Error)]
#[error("compressing {} for upload: {source}", path.display())]
pub struct CompressError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Compresses `path` into a new temporary file (blocking: CPU and disk).
pub fn compress(path: &Path) -> Result<Compressed, CompressError> {
    let err = |source| CompressError {
        path: path.to_owned(),
        source,
    };
    let source = std::fs::File::open(path).map_err(err)?;
    let file = tempfile::Builder::new()
        .prefix("fleetctl-upload-")
        .suffix(".gz")
        .tempfile()
        .map_err(err)?;
    let mut encoder = GzEncoder::new(
        BufWriter::new(file.as_file()),
        flate2::Compression::new(LEVEL),
    );
    let source_len = std::io::copy(&mut BufReader::new(source), &mut encoder).map_err(err)?;
    encoder.finish().and_then(|mut w| w.flush()).map_err(err)?;
    let len = file.as_file().metadata().map_err(err)?.len();
    Ok(Compressed {
        file,
        len,
        source_len,
    })
}

/// [`compress`] off the async runtime's threads.
pub async fn compress_async(path: &Path) -> Result<Compressed, CompressError> {
    let owned = path.to_owned();
    tokio::task::spawn_blocking(move || compress(&owned))
        .await
        .unwrap_or_else(|e| {
            Err(CompressError {
                path: path.to_owned(),
                source: std::io::Error::other(format!("the compressing task died: {e}")),
            })
        })
}

/// One compressed copy of the release's binary, made by the first host
/// whose upload asks for it while the others wait, then shared by all of
/// them: a fleet costs one compression, not one per host. A failure is
/// kept too (and every host sends plain), so it is not retried per host.
#[derive(Clone, Default)]
pub struct CompressedOnce(Arc<OnceCell<Result<Arc<Compressed>, String>>>);

impl CompressedOnce {
    /// The copy of `path`, compressed on the first call.
    pub async fn get(&self, path: &Path) -> Result<Arc<Compressed>, String> {
        self.0
            .get_or_init(|| async {
                compress_async(path)
                    .await
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .await
            .clone()
    }
}

impl std::fmt::Debug for CompressedOnce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.0.get() {
            None => "not yet",
            Some(Ok(_)) => "compressed",
            Some(Err(_)) => "failed",
        };
        f.debug_tuple("CompressedOnce").field(&state).finish()
    }
}

/// A cache, not part of what a release is: two releases of the same files
/// are equal whether or not either was compressed yet.
impl PartialEq for CompressedOnce {
    fn eq(&self, _: &CompressedOnce) -> bool {
        true
    }
}

impl Eq for CompressedOnce {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn inflate(path: &Path) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn a_compressed_copy_inflates_to_the_same_bytes_and_counts_both_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("prover");
        // Text-like bytes compress well, as a build's symbol tables do.
        let bytes: Vec<u8> = (0..200_000u32)
            .flat_map(|i| format!("symbol_{}\n", i % 977).into_bytes())
            .collect();
        std::fs::write(&src, &bytes).unwrap();
        let c = compress(&src).unwrap();
        assert_eq!(c.source_len, bytes.len() as u64);
        assert_eq!(c.len, std::fs::metadata(c.path()).unwrap().len());
        assert!(c.len * 10 < c.source_len, "{} of {}", c.len, c.source_len);
        assert_eq!(c.pays(), Ok(()));
        assert_eq!(inflate(c.path()), bytes);
        let path = c.path().to_owned();
        drop(c);
        assert!(!path.exists(), "the temporary copy outlived its owner");
    }

    #[test]
    fn incompressible_bytes_are_not_worth_sending_compressed() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("prover");
        let bytes: Vec<u8> = (0..100_000).map(|_| rand::random::<u8>()).collect();
        std::fs::write(&src, &bytes).unwrap();
        let c = compress(&src).unwrap();
        let why = c.pays().unwrap_err();
        assert!(why.contains("not worth") && why.contains("gzip"), "{why}");
        assert_eq!(inflate(c.path()), bytes);
    }

    #[test]
    fn the_shared_copy_is_made_once_and_a_failure_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("prover");
        std::fs::write(&src, b"abc".repeat(1000)).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let once = CompressedOnce::default();
            let shared = once.clone();
            let (a, b) = tokio::join!(once.get(&src), shared.get(&src));
            let (a, b) = (a.unwrap(), b.unwrap());
            assert!(Arc::ptr_eq(&a, &b), "compressed twice");
            std::fs::remove_file(&src).unwrap();
            // Served from the copy: the source is no longer read.
            assert!(Arc::ptr_eq(&once.get(&src).await.unwrap(), &a));

            let missing = CompressedOnce::default();
            let e = missing.get(&src).await.unwrap_err();
            assert!(e.contains("compressing") && e.contains("prover"), "{e}");
            std::fs::write(&src, b"back").unwrap();
            assert_eq!(missing.get(&src).await.unwrap_err(), e);
        });
    }
}
