//! Reading the local files fleetctl is given (inventories, playbooks,
//! timing logs, the build it ships). Their content is not ours: a path may
//! name a FIFO (whose open blocks until a writer comes), a device that never
//! ends, or a file of one endless line. Every such read goes through here so
//! that each input is a regular file and never more than a bound is held in
//! memory.

use std::fs::{File, Metadata};
use std::io::{self, BufRead, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Longest line a line-by-line reader holds: a timing record is a few KiB,
/// so a longer line is a damaged or hostile file, not data.
pub const MAX_LINE: usize = 1 << 20;

/// An input file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("cannot read {kind} {}: {source}", path.display())]
    Io {
        /// What the file is (`inventory`, `timing file`, ...).
        kind: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{kind} {}: is a {found}, not a regular file", path.display())]
    NotRegular {
        kind: &'static str,
        path: PathBuf,
        found: &'static str,
    },
    #[error("{kind} {}: {size} bytes, more than the {max} allowed", path.display())]
    TooLarge {
        kind: &'static str,
        path: PathBuf,
        size: u64,
        max: u64,
    },
    #[error("{kind} {}: is empty", path.display())]
    Empty { kind: &'static str, path: PathBuf },
    #[error("{kind} {}: not an ELF executable ({why})", path.display())]
    NotElf {
        kind: &'static str,
        path: PathBuf,
        why: &'static str,
    },
    #[error("{kind} {}:{line}: line longer than {max} bytes", path.display())]
    LineTooLong {
        kind: &'static str,
        path: PathBuf,
        line: u64,
        max: usize,
    },
}

impl InputError {
    fn io(kind: &'static str, path: &Path, source: io::Error) -> InputError {
        InputError::Io {
            kind,
            path: path.to_owned(),
            source,
        }
    }
}

/// What a file type is called in a message.
fn type_name(m: &Metadata) -> &'static str {
    let t = m.file_type();
    if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else if t.is_char_device() || t.is_block_device() {
        "device"
    } else {
        "special file"
    }
}

/// Opens `path` for reading if it is a regular file (symbolic links
/// followed). The open does not block on a FIFO, and the type is taken
/// from the opened file, so a swap between check and read is no way around it.
pub fn open_regular(kind: &'static str, path: &Path) -> Result<(File, Metadata), InputError> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| InputError::io(kind, path, e))?;
    let meta = file.metadata().map_err(|e| InputError::io(kind, path, e))?;
    if !meta.is_file() {
        return Err(InputError::NotRegular {
            kind,
            path: path.to_owned(),
            found: type_name(&meta),
        });
    }
    Ok((file, meta))
}

/// Reads a whole regular file of at most `max` bytes as UTF-8 text.
pub fn read_text(kind: &'static str, path: &Path, max: u64) -> Result<String, InputError> {
    let (file, meta) = open_regular(kind, path)?;
    let too_large = |size| InputError::TooLarge {
        kind,
        path: path.to_owned(),
        size,
        max,
    };
    if meta.len() > max {
        return Err(too_large(meta.len()));
    }
    let mut text = String::new();
    // One byte over the bound tells a file that grew since the stat.
    file.take(max + 1)
        .read_to_string(&mut text)
        .map_err(|e| InputError::io(kind, path, e))?;
    if text.len() as u64 > max {
        return Err(too_large(text.len() as u64));
    }
    Ok(text)
}

/// The identification every ELF file starts with.
const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
/// `e_type` values of a program that can be run: fixed-address, and
/// position-independent (every Rust binary of a default build).
const ET_EXEC: u16 = 2;
const ET_DYN: u16 = 3;

/// Checks that `path` is a build to ship: a regular, non-empty ELF
/// executable. Only the header is read. A directory, FIFO, script or
/// half-written file given as the build would otherwise be hashed, copied
/// to every host and fail only there, when the daemon is started.
pub fn check_elf(kind: &'static str, path: &Path) -> Result<(), InputError> {
    let (file, meta) = open_regular(kind, path)?;
    if meta.len() == 0 {
        return Err(InputError::Empty {
            kind,
            path: path.to_owned(),
        });
    }
    let not_elf = |why| InputError::NotElf {
        kind,
        path: path.to_owned(),
        why,
    };
    // Identification (16 bytes) and e_type (2): all that is looked at.
    let mut head = Vec::with_capacity(18);
    file.take(18)
        .read_to_end(&mut head)
        .map_err(|e| InputError::io(kind, path, e))?;
    if !head.starts_with(ELF_MAGIC) {
        return Err(not_elf("it does not start with the ELF magic bytes"));
    }
    if head.len() < 18 {
        return Err(not_elf("shorter than an ELF header"));
    }
    let e_type = match head[5] {
        1 => u16::from_le_bytes([head[16], head[17]]),
        2 => u16::from_be_bytes([head[16], head[17]]),
        _ => return Err(not_elf("no valid byte order in its header")),
    };
    if e_type != ET_EXEC && e_type != ET_DYN {
        return Err(not_elf("an ELF object or core file, not a program"));
    }
    Ok(())
}

/// Lines of a regular file, each at most [`MAX_LINE`] bytes.
pub struct Lines<R> {
    reader: R,
    kind: &'static str,
    path: PathBuf,
    line: u64,
    max: usize,
}

impl Lines<io::BufReader<File>> {
    /// Opens `path` (a regular file only) for reading line by line.
    pub fn open(kind: &'static str, path: &Path) -> Result<Self, InputError> {
        let (file, _) = open_regular(kind, path)?;
        Ok(Lines::new(
            io::BufReader::with_capacity(1 << 20, file),
            kind,
            path,
        ))
    }
}

impl<R: BufRead> Lines<R> {
    /// Lines of `reader`; `kind` and `path` only name it in errors.
    pub fn new(reader: R, kind: &'static str, path: &Path) -> Self {
        Lines {
            reader,
            kind,
            path: path.to_owned(),
            line: 0,
            max: MAX_LINE,
        }
    }

    /// Number of the line last read (1-based; 0 before the first).
    pub fn line_number(&self) -> u64 {
        self.line
    }

    /// Reads the next line, its newline included, into `buf` (cleared
    /// first); returns the bytes read, 0 at the end. A line longer than the
    /// bound is an error, found having read no more than the bound of it.
    pub fn read_line(&mut self, buf: &mut Vec<u8>) -> Result<usize, InputError> {
        buf.clear();
        let limit = self.max as u64 + 1;
        let n = (&mut self.reader)
            .take(limit)
            .read_until(b'\n', buf)
            .map_err(|e| InputError::io(self.kind, &self.path, e))?;
        if n == 0 {
            return Ok(0);
        }
        self.line += 1;
        if n as u64 == limit && buf.last() != Some(&b'\n') {
            return Err(InputError::LineTooLong {
                kind: self.kind,
                path: self.path.clone(),
                line: self.line,
                max: self.max,
            });
        }
        Ok(n)
    }

    /// Reads the next line as [`read_line`](Self::read_line) does, but a
    /// line past the bound is passed over instead of being an error: the
    /// rest of it is read and dropped piece by piece (never more than the
    /// reader's buffer held), so a reader of many records can go on to the
    /// next one and say which line it left out.
    pub fn read_line_or_skip(&mut self, buf: &mut Vec<u8>) -> Result<LineRead, InputError> {
        match self.read_line(buf) {
            Ok(0) => Ok(LineRead::End),
            Ok(n) => Ok(LineRead::Line(n)),
            Err(InputError::LineTooLong { .. }) => {
                let mut bytes = buf.len() as u64;
                buf.clear();
                // Ends at the newline or at the end of the file, which a
                // regular file has.
                loop {
                    let piece = self
                        .reader
                        .fill_buf()
                        .map_err(|e| InputError::io(self.kind, &self.path, e))?;
                    if piece.is_empty() {
                        break;
                    }
                    let (used, done) = match piece.iter().position(|b| *b == b'\n') {
                        Some(i) => (i + 1, true),
                        None => (piece.len(), false),
                    };
                    self.reader.consume(used);
                    bytes += used as u64;
                    if done {
                        break;
                    }
                }
                Ok(LineRead::TooLong {
                    line: self.line,
                    bytes,
                })
            }
            Err(e) => Err(e),
        }
    }
}

/// What [`Lines::read_line_or_skip`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineRead {
    /// The end of the file.
    End,
    /// A line of this many bytes (its newline included) is in the buffer.
    Line(usize),
    /// Line `line` was longer than the bound: `bytes` of it were passed
    /// over, its newline included; the buffer is empty.
    TooLong { line: u64, bytes: u64 },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fifo(dir: &Path) -> PathBuf {
        let path = dir.join("fifo");
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates the node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        path
    }

    #[test]
    fn only_regular_files_are_read_and_a_fifo_does_not_block() {
        let dir = tempfile::tempdir().unwrap();
        let f = fifo(dir.path());
        let e = read_text("inventory", &f, 10).unwrap_err().to_string();
        assert_eq!(
            e,
            format!("inventory {}: is a FIFO, not a regular file", f.display())
        );
        let e = Lines::open("timing file", dir.path())
            .err()
            .unwrap()
            .to_string();
        assert_eq!(
            e,
            format!(
                "timing file {}: is a directory, not a regular file",
                dir.path().display()
            )
        );
        let e = read_text("playbook", Path::new("/dev/zero"), 10)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "playbook /dev/zero: is a device, not a regular file");
    }

    /// The first 18 bytes of an x86-64 position-independent executable.
    fn elf_head(e_type: u8) -> Vec<u8> {
        let mut h = b"\x7fELF\x02\x01\x01\x00".to_vec();
        h.extend([0u8; 8]);
        h.extend([e_type, 0]);
        h
    }

    #[test]
    fn a_build_is_a_regular_non_empty_elf_executable() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let p = dir.path().join(name);
            std::fs::write(&p, bytes).unwrap();
            p
        };
        let pie = write("pie", &[elf_head(3), b"code".to_vec()].concat());
        check_elf("binary", &pie).unwrap();
        check_elf("binary", &write("exec", &elf_head(2))).unwrap();
        check_elf("binary", &std::env::current_exe().unwrap()).unwrap();
        let cases = [
            (
                write("script", b"#!/bin/sh\necho prover\n"),
                "not an ELF executable (it does not start with the ELF magic bytes)",
            ),
            (write("empty", b""), "is empty"),
            (
                write("short", b"\x7fELF\x02"),
                "not an ELF executable (shorter than an ELF header)",
            ),
            (
                write("object", &elf_head(1)),
                "not an ELF executable (an ELF object or core file, not a program)",
            ),
            (dir.path().to_owned(), "is a directory, not a regular file"),
            (fifo(dir.path()), "is a FIFO, not a regular file"),
        ];
        for (path, what) in cases {
            let e = check_elf("binary", &path).unwrap_err().to_string();
            assert_eq!(e, format!("binary {}: {what}", path.display()));
        }
    }

    #[test]
    fn a_file_over_the_bound_is_refused_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.yaml");
        std::fs::write(&path, "x".repeat(11)).unwrap();
        let e = read_text("inventory", &path, 10).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "inventory {}: 11 bytes, more than the 10 allowed",
                path.display()
            )
        );
        assert_eq!(read_text("inventory", &path, 11).unwrap().len(), 11);
    }

    #[test]
    fn lines_up_to_the_bound_are_read_longer_ones_refused_with_their_number() {
        let mut text = Vec::new();
        text.extend_from_slice(b"short\n");
        text.extend(std::iter::repeat_n(b'a', 8));
        text.push(b'\n');
        text.extend(std::iter::repeat_n(b'b', 9));
        text.extend_from_slice(b"\nnever read\n");
        let mut lines = Lines::new(&text[..], "timing file", Path::new("t.jsonl"));
        lines.max = 8;
        let mut buf = Vec::new();
        assert_eq!(lines.read_line(&mut buf).unwrap(), 6);
        assert_eq!(lines.read_line(&mut buf).unwrap(), 9);
        assert_eq!(buf, b"aaaaaaaa\n");
        let e = lines.read_line(&mut buf).unwrap_err().to_string();
        assert_eq!(e, "timing file t.jsonl:3: line longer than 8 bytes");
        // A last line without its newline, within the bound, is a line.
        let mut lines = Lines::new(&b"a\nbbbbbbbb"[..], "t", Path::new("t"));
        lines.max = 8;
        assert_eq!(lines.read_line(&mut buf).unwrap(), 2);
        assert_eq!(lines.read_line(&mut buf).unwrap(), 8);
        assert_eq!(lines.read_line(&mut buf).unwrap(), 0);
        assert_eq!(lines.line_number(), 2);
    }

    /// Regression (issue 51, item 11): one overlong line must not hide the
    /// records after it.
    #[test]
    fn an_overlong_line_is_passed_over_and_the_next_one_read() {
        let mut text = b"short\n".to_vec();
        text.extend(std::iter::repeat_n(b'x', 40));
        text.extend_from_slice(b"\nafter\n");
        text.extend(std::iter::repeat_n(b'y', 20));
        let mut lines = Lines::new(
            io::BufReader::with_capacity(4, &text[..]),
            "timing file",
            Path::new("t.jsonl"),
        );
        lines.max = 8;
        let mut buf = Vec::new();
        assert_eq!(
            lines.read_line_or_skip(&mut buf).unwrap(),
            LineRead::Line(6)
        );
        assert_eq!(
            lines.read_line_or_skip(&mut buf).unwrap(),
            LineRead::TooLong { line: 2, bytes: 41 }
        );
        assert!(buf.is_empty());
        assert_eq!(
            lines.read_line_or_skip(&mut buf).unwrap(),
            LineRead::Line(6)
        );
        assert_eq!(buf, b"after\n");
        // An overlong last line without its newline ends at the end of the file.
        assert_eq!(
            lines.read_line_or_skip(&mut buf).unwrap(),
            LineRead::TooLong { line: 4, bytes: 20 }
        );
        assert_eq!(lines.read_line_or_skip(&mut buf).unwrap(), LineRead::End);
    }
}
