//! Files of the parameter directory as bytes: streamed SHA-256 while
//! reading or writing, and atomic replacement (a synced temporary file
//! renamed into place, so a reader sees the old file or the whole new one);
//! and the directory a command creates, removed again if it stops
//! ([`NewDirectory`]).

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

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

/// The prefix of a temporary file's name beside `name`; the writer's pid
/// follows it, so a later start can tell a dead writer's leftovers from a
/// live writer's file.
fn tmp_prefix(name: &str) -> String {
    format!(".{name}.tmp.")
}

/// A file written completely and synced under a temporary name beside its
/// destination, not yet in place: [`Staged::commit`] renames it there;
/// dropping it uncommitted removes it. Lets two files (parameters and their
/// sidecar) be written in full before either replaces anything.
#[must_use = "a staged file is removed unless committed"]
pub(crate) struct Staged {
    tmp: std::path::PathBuf,
    path: std::path::PathBuf,
    pub sha256: String,
    pub bytes: u64,
    committed: bool,
}

impl Staged {
    /// Renames the file into place and makes the rename durable.
    pub(crate) fn commit(mut self) -> Result<(), ParamsError> {
        fs::rename(&self.tmp, &self.path).map_err(io_err(&self.path, "renaming into place"))?;
        self.committed = true;
        let dir = self.path.parent().unwrap_or_else(|| Path::new("."));
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// A not yet written [`Staged`] file beside `path`.
fn staged_beside(path: &Path) -> Staged {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        "{}{}.{}",
        tmp_prefix(&name),
        std::process::id(),
        TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    Staged {
        tmp,
        path: path.to_path_buf(),
        sha256: String::new(),
        bytes: 0,
        committed: false,
    }
}

/// Writes what `write` produces to a synced temporary file beside `path`.
pub(crate) fn stage<T>(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> io::Result<T>,
) -> Result<(T, Staged), ParamsError> {
    let mut staged = staged_beside(path);
    let tmp = staged.tmp.clone();
    let file = File::create(&tmp).map_err(io_err(&tmp, "creating"))?;
    let mut writer = Hashing::new(BufWriter::with_capacity(1 << 20, file));
    let value = write(&mut writer).map_err(io_err(&tmp, "writing"))?;
    writer.flush().map_err(io_err(&tmp, "writing"))?;
    let (buffered, sha256, bytes) = writer.finish();
    let file = buffered
        .into_inner()
        .map_err(|e| io_err(&tmp, "writing")(e.into_error()))?;
    file.sync_all().map_err(io_err(&tmp, "syncing"))?;
    staged.sha256 = sha256;
    staged.bytes = bytes;
    Ok((value, staged))
}

/// What a producer hands [`stage_chunks`].
pub(crate) enum Chunk {
    /// The file's next bytes: hashed and written.
    Next(Vec<u8>),
    /// Bytes for `offset`, ahead of the file's order: written now, hashed
    /// when they come again in order as [`Chunk::Written`].
    At(u64, Vec<u8>),
    /// The file's next bytes, already written by [`Chunk::At`]: hashed,
    /// and the file's position moves past them.
    Written(Vec<u8>),
}

/// What [`stage_chunks`]' writer does with a buffer.
enum WriteJob {
    Append(Arc<Vec<u8>>),
    At(u64, Vec<u8>),
    Skip(u64),
}

/// Buffers in flight to each of [`stage_chunks`]' threads.
const CHUNKS_IN_FLIGHT: usize = 4;
/// [`stage_chunks`] asks the kernel to start writing back every this many bytes.
const WRITEBACK_EVERY: u64 = 256 << 20;
/// Ranges the flusher may lag behind the writer before the writer waits.
const RANGES_IN_FLIGHT: usize = 16;

/// [`stage`] for a producer of owned buffers (a parameter set, tens of GB
/// at production sizes): each buffer is hashed on one thread and written on
/// another, so SHA-256, which runs on one core, overlaps the write and the
/// producer instead of following them; and writeback to the disk is started
/// as the file grows (`sync_file_range`) from a third thread, so the final
/// sync waits for the last part rather than the whole file, and copying into
/// the page cache goes on while the disk takes the ranges before (started
/// from the writer itself, each range held the writer until the disk had
/// accepted it, so the two alternated). Memory beyond the producer's is a
/// few buffers.
pub(crate) fn stage_chunks<T>(
    path: &Path,
    produce: impl FnOnce(&mut dyn FnMut(Chunk) -> io::Result<()>) -> io::Result<T>,
) -> Result<(T, Staged), ParamsError> {
    use std::sync::mpsc::sync_channel;
    use std::time::{Duration, Instant};
    let mut staged = staged_beside(path);
    let tmp = staged.tmp.clone();
    let file = File::create(&tmp).map_err(io_err(&tmp, "creating"))?;
    let flush_file = file.try_clone().map_err(io_err(&tmp, "opening"))?;
    let started = Instant::now();
    let (to_hash, hash_rx) = sync_channel::<Arc<Vec<u8>>>(CHUNKS_IN_FLIGHT);
    let (to_write, write_rx) = sync_channel::<WriteJob>(CHUNKS_IN_FLIGHT);
    let (to_flush, flush_rx) = sync_channel::<(u64, u64)>(RANGES_IN_FLIGHT);
    let mut waited = Duration::ZERO;
    let (produced, hashed, wrote, flushed) = std::thread::scope(|scope| {
        let hasher = scope.spawn(move || {
            let mut hasher = Sha256::new();
            let mut busy = Duration::ZERO;
            for buf in hash_rx {
                let t = Instant::now();
                hasher.update(&buf[..]);
                busy += t.elapsed();
            }
            (hex::encode(hasher.finalize()), busy)
        });
        let flusher = scope.spawn(move || {
            let mut busy = Duration::ZERO;
            for (offset, len) in flush_rx {
                let t = Instant::now();
                start_writeback(&flush_file, offset, len);
                busy += t.elapsed();
            }
            busy
        });
        let writer = scope.spawn(move || -> io::Result<(File, u64, Duration)> {
            use std::io::{Seek, SeekFrom};
            use std::os::unix::fs::FileExt;
            let mut file = file;
            let (mut position, mut flushed) = (0u64, 0u64);
            let mut busy = Duration::ZERO;
            for job in write_rx {
                let t = Instant::now();
                match job {
                    WriteJob::Append(buf) => {
                        file.write_all(&buf)?;
                        position += buf.len() as u64;
                    }
                    WriteJob::Skip(len) => {
                        position += len;
                        file.seek(SeekFrom::Start(position))?;
                    }
                    WriteJob::At(offset, buf) => {
                        file.write_all_at(&buf, offset)?;
                        // A flusher that is gone only loses the head start.
                        let _ = to_flush.send((offset, buf.len() as u64));
                    }
                }
                busy += t.elapsed();
                if position - flushed >= WRITEBACK_EVERY {
                    let _ = to_flush.send((flushed, position - flushed));
                    flushed = position;
                }
            }
            Ok((file, position, busy))
        });
        let produced = {
            let mut sink = |chunk: Chunk| -> io::Result<()> {
                let stopped = || io::Error::other("the file's writer stopped");
                let t = Instant::now();
                let sent = match chunk {
                    Chunk::Next(buf) => {
                        let buf = Arc::new(buf);
                        to_hash.send(Arc::clone(&buf)).map_err(|_| stopped())?;
                        to_write.send(WriteJob::Append(buf))
                    }
                    Chunk::At(offset, buf) => to_write.send(WriteJob::At(offset, buf)),
                    Chunk::Written(buf) => {
                        let len = buf.len() as u64;
                        to_hash.send(Arc::new(buf)).map_err(|_| stopped())?;
                        to_write.send(WriteJob::Skip(len))
                    }
                }
                .map_err(|_| stopped());
                waited += t.elapsed();
                sent
            };
            produce(&mut sink)
        };
        drop((to_hash, to_write));
        let hashed = hasher.join().unwrap_or_default();
        let wrote = writer
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the file's writer panicked")));
        let flushed = flusher.join().unwrap_or_default();
        (produced, hashed, wrote, flushed)
    });
    // The writer's own error says more than the producer's "stopped".
    let (file, bytes, write_busy) = wrote.map_err(io_err(&tmp, "writing"))?;
    let value = produced.map_err(io_err(&tmp, "writing"))?;
    let written = started.elapsed();
    file.sync_all().map_err(io_err(&tmp, "syncing"))?;
    let (sha256, hash_busy) = hashed;
    tracing::debug!(
        path = %path.display(),
        bytes,
        write_s = written.as_secs_f64(),
        sync_s = (started.elapsed() - written).as_secs_f64(),
        producer_waited_s = waited.as_secs_f64(),
        hash_busy_s = hash_busy.as_secs_f64(),
        write_busy_s = write_busy.as_secs_f64(),
        writeback_busy_s = flushed.as_secs_f64(),
        "staged a file"
    );
    staged.sha256 = sha256;
    staged.bytes = bytes;
    Ok((value, staged))
}

/// Asks the kernel to start writing `len` bytes at `offset` back to the
/// disk without waiting for them; advisory, so a failure is ignored (the
/// final sync still covers the range).
fn start_writeback(file: &File, offset: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
            return;
        };
        // SAFETY: the descriptor is open for the call's duration; the call
        // reads no memory of ours.
        unsafe {
            libc::sync_file_range(file.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
}

/// Writes `path` through a temporary file in the same directory that is
/// synced and renamed into place, so readers see the old file or the complete
/// new one. Returns what `write` returned plus the SHA-256 and length written.
pub(crate) fn write_atomic<T>(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> io::Result<T>,
) -> Result<(T, String, u64), ParamsError> {
    let (value, staged) = stage(path, write)?;
    let (sha256, bytes) = (staged.sha256.clone(), staged.bytes);
    staged.commit()?;
    Ok((value, sha256, bytes))
}

/// A temporary file of an unfinished write found in a directory.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TempFile {
    pub path: std::path::PathBuf,
    pub bytes: u64,
    /// The pid of the process that wrote it, from its name; `None` when the
    /// name carries none (not one of ours, or damaged): nobody finishes it.
    pub writer: Option<u32>,
    /// Whether its writer may still be writing it: the pid names a live
    /// process that started before the file was last written. A pid alone
    /// proves nothing once its writer is gone: the kernel hands it out again.
    pub writer_alive: bool,
}

/// A parameter directory a command is about to create: removed again when
/// this is dropped unless [`NewDirectory::keep`] was called, so a command
/// that is refused or fails leaves no folder behind where there was none.
/// Only an empty folder is removed (`remove_dir`), never anything in it.
#[must_use = "dropped at once, it removes the directory before it is used"]
pub struct NewDirectory(Option<std::path::PathBuf>);

impl NewDirectory {
    /// Notes `dir` if it does not exist yet (call before creating it).
    pub fn if_absent(dir: &Path) -> Self {
        NewDirectory((!dir.exists()).then(|| dir.to_owned()))
    }

    /// The command succeeded: the directory stays.
    pub fn keep(mut self) {
        self.0 = None;
    }
}

impl Drop for NewDirectory {
    fn drop(&mut self) {
        if let Some(dir) = &self.0 {
            let _ = fs::remove_dir(dir);
        }
    }
}

/// How much later than a temporary file's last write a process holding its
/// writer's pid may have started and still be its writer: the start time
/// is known to a second (the boot time is whole seconds).
const START_SLACK_S: f64 = 2.0;

/// Whether the process `pid` may be the writer of a file last written at
/// `modified`: it runs, and it started before that write (a process started
/// later holds a reused pid). Where either time cannot be read, a live pid
/// is taken as the writer: a file is never removed from under a write.
fn writer_alive(pid: u32, modified: Option<std::time::SystemTime>) -> bool {
    if !crate::sys::process_alive(pid) {
        return false;
    }
    let modified = modified
        .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs_f64());
    match (crate::sys::process_started_unix(pid), modified) {
        (Some(started), Some(modified)) => started <= modified + START_SLACK_S,
        _ => true,
    }
}

/// The temporary files of writes in `dir` (ours: `.<name>.tmp.<pid>.<n>`;
/// any `.<name>.tmp.<rest>` is listed, a `rest` without a pid as writerless).
pub fn temp_files(dir: &Path) -> Result<Vec<TempFile>, ParamsError> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err(dir, "listing"))? {
        let entry = entry.map_err(io_err(dir, "listing"))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(writer) = tmp_writer(name) else {
            continue;
        };
        let meta = entry.metadata().ok();
        let bytes = meta.as_ref().map_or(0, |m| m.len());
        let modified = meta.and_then(|m| m.modified().ok());
        out.push(TempFile {
            path: entry.path(),
            bytes,
            writer,
            writer_alive: writer.is_some_and(|pid| writer_alive(pid, modified)),
        });
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// Whether `name` is a temporary file's (`Some`), and then the writer's pid
/// in it, if it carries one.
fn tmp_writer(name: &str) -> Option<Option<u32>> {
    let rest = name.strip_prefix('.')?;
    let (_, tail) = rest.split_once(".tmp.")?;
    if tail.is_empty() {
        return None;
    }
    let pid = tail
        .split_once('.')
        .filter(|(_, counter)| counter.parse::<u64>().is_ok())
        .and_then(|(pid, _)| pid.parse().ok());
    Some(pid)
}

/// Removes the temporary files in `dir` whose writer is gone (a write killed
/// half-way) or unknown; a live writer's are left alone. Returns what was
/// removed.
pub fn remove_dead_temp_files(dir: &Path) -> Result<Vec<TempFile>, ParamsError> {
    let mut removed = Vec::new();
    for t in temp_files(dir)? {
        if t.writer_alive || t.writer == Some(std::process::id()) {
            continue;
        }
        match fs::remove_file(&t.path) {
            Ok(()) => removed.push(t),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&t.path, "removing a dead write's temporary file")(e)),
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_directory_goes_unless_kept_and_only_when_new_and_empty() {
        let root = tempfile::tempdir().unwrap();
        let new = root.path().join("params");
        let guard = NewDirectory::if_absent(&new);
        fs::create_dir(&new).unwrap();
        drop(guard);
        assert!(!new.exists(), "a dropped new directory stays");

        let guard = NewDirectory::if_absent(&new);
        fs::create_dir(&new).unwrap();
        guard.keep();
        assert!(new.is_dir(), "a kept directory was removed");

        // It existed before: never removed, empty or not.
        drop(NewDirectory::if_absent(&new));
        assert!(new.is_dir());

        let other = root.path().join("other");
        let guard = NewDirectory::if_absent(&other);
        fs::create_dir(&other).unwrap();
        fs::write(other.join("chain-1024.params"), b"x").unwrap();
        drop(guard);
        assert!(
            other.join("chain-1024.params").is_file(),
            "a file was removed"
        );
    }

    #[test]
    fn temp_names_carry_the_writer() {
        assert_eq!(
            tmp_writer(".chain-1024.params.tmp.4242.7"),
            Some(Some(4242))
        );
        assert_eq!(tmp_writer(".chain-1024.json.tmp.1.0"), Some(Some(1)));
        assert_eq!(tmp_writer("chain-1024.params"), None);
        assert_eq!(tmp_writer(".chain-1024.params.tmp."), None);
        // Temporary names without a pid: listed, writerless.
        assert_eq!(tmp_writer(".chain-1024.params.tmp.x.7"), Some(None));
        assert_eq!(tmp_writer(".chain-1024.params.tmp.12"), Some(None));
    }

    #[test]
    fn a_temp_file_named_for_a_pid_that_a_later_program_holds_is_removed() {
        use std::time::{Duration, SystemTime};
        let dir = tempfile::tempdir().unwrap();
        // A live program that started after the file was last written: the
        // pid was handed out again, its writer is gone.
        let mut later = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let reused = dir
            .path()
            .join(format!(".chain-1024.params.tmp.{}.0", later.id()));
        let file = fs::File::create(&reused).unwrap();
        file.set_modified(SystemTime::now() - Duration::from_secs(3600))
            .unwrap();
        drop(file);
        // The same live program, with a file written after it started: kept.
        let current = dir
            .path()
            .join(format!(".chain-2048.params.tmp.{}.0", later.id()));
        fs::write(&current, b"partial").unwrap();
        let writerless = dir.path().join(".chain-4096.params.tmp.x.y");
        fs::write(&writerless, b"partial").unwrap();
        let listed = temp_files(dir.path()).unwrap();
        assert_eq!(listed.len(), 3, "{listed:?}");
        let removed = remove_dead_temp_files(dir.path()).unwrap();
        let _ = later.kill();
        let _ = later.wait();
        let mut gone: Vec<_> = removed.into_iter().map(|t| t.path).collect();
        gone.sort();
        assert_eq!(gone, vec![reused.clone(), writerless.clone()]);
        assert!(current.exists());
    }

    #[test]
    fn dead_writers_temp_files_go_and_live_ones_stay() {
        let dir = tempfile::tempdir().unwrap();
        // A child that has exited and was reaped: its pid names no process.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let dead_tmp = dir.path().join(format!(".chain-1024.params.tmp.{dead}.0"));
        let live_tmp = dir
            .path()
            .join(format!(".chain-1024.params.tmp.{}.0", std::process::id()));
        let other = dir.path().join("chain-1024.params");
        for p in [&dead_tmp, &live_tmp, &other] {
            fs::write(p, b"partial").unwrap();
        }
        let listed = temp_files(dir.path()).unwrap();
        assert_eq!(listed.len(), 2, "{listed:?}");
        assert!(listed.iter().all(|t| t.writer.is_some()));
        let removed = remove_dead_temp_files(dir.path()).unwrap();
        assert_eq!(removed.len(), 1);
        assert_eq!(removed[0].path, dead_tmp);
        assert!(!dead_tmp.exists() && live_tmp.exists() && other.exists());
    }

    #[test]
    fn a_staged_file_dropped_uncommitted_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.params");
        let ((), staged) = stage(&path, |w| w.write_all(b"abc")).unwrap();
        assert_eq!(staged.bytes, 3);
        drop(staged);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
        let ((), staged) = stage(&path, |w| w.write_all(b"abc")).unwrap();
        staged.commit().unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"abc");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
