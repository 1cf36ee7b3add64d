//! Files of the parameter directory as bytes: streamed SHA-256 while
//! reading or writing, and atomic replacement (a synced temporary file
//! renamed into place, so a reader sees the old file or the whole new one).

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

use crate::params::error::{io_err, ParamsError};

/// Counts the bytes passing through and hashes them.
pub(crate) struct Hashing<T> {
    inner: T,
    hasher: Sha256,
    bytes: u64,
}

impl<T> Hashing<T> {
    pub(crate) fn new(inner: T) -> Self {
        Hashing {
            inner,
            hasher: Sha256::new(),
            bytes: 0,
        }
    }

    pub(crate) fn finish(self) -> (T, String, u64) {
        (self.inner, hex::encode(self.hasher.finalize()), self.bytes)
    }
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

/// SHA-256 of a file, streamed.
pub fn file_sha256(path: &Path) -> Result<String, ParamsError> {
    let file = File::open(path).map_err(io_err(path, "opening"))?;
    let mut reader = Hashing::new(BufReader::with_capacity(1 << 20, file));
    io::copy(&mut reader, &mut io::sink()).map_err(io_err(path, "reading"))?;
    Ok(reader.finish().1)
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `path` through a temporary file in the same directory that is
/// synced and renamed into place, so readers see the old file or the complete
/// new one. Returns what `write` returned plus the SHA-256 and length written.
pub(crate) fn write_atomic<T>(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> io::Result<T>,
) -> Result<(T, String, u64), ParamsError> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.tmp.{}.{}",
        std::process::id(),
        TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let file = File::create(&tmp).map_err(io_err(&tmp, "creating"))?;
        let mut writer = Hashing::new(BufWriter::with_capacity(1 << 20, file));
        let value = write(&mut writer).map_err(io_err(&tmp, "writing"))?;
        writer.flush().map_err(io_err(&tmp, "writing"))?;
        let (buffered, sha256, bytes) = writer.finish();
        let file = buffered
            .into_inner()
            .map_err(|e| io_err(&tmp, "writing")(e.into_error()))?;
        file.sync_all().map_err(io_err(&tmp, "syncing"))?;
        fs::rename(&tmp, path).map_err(io_err(path, "renaming into place"))?;
        // Make the rename itself durable.
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        Ok((value, sha256, bytes))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}
