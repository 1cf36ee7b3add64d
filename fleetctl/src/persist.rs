//! How fleetctl's own files are written, each rule once: a document (a
//! run's or an experiment's state, a host's collect state, an export) is
//! replaced whole, so a crash leaves the old one or the new one; a log (a
//! run's or an experiment's audit log) is appended a line at a time, so a
//! crash loses at most the line being written.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Longest id of a run or an experiment (theirs are about 25 characters).
pub const MAX_ID: usize = 128;

/// Whether `c` may be in a name fleetctl makes a file or folder of, or
/// hands to ssh (a run or experiment id, a host's inventory name, a login):
/// letters, digits, `-`, `_` and `.`. With [`bad_start`], the one rule for
/// all of them; each caller adds its own length limit and message.
pub fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

/// Whether such a name starts where it must not: `-` (read as an option)
/// or `.` (`..`, the folder above; a hidden file).
pub fn bad_start(name: &str) -> bool {
    name.starts_with(['-', '.'])
}

/// Checks an id that names one of fleetctl's own files (`state/ID.json`,
/// `experiments/ID.json`) as `--resume` gives it: [`name_char`]s, not
/// starting with `.` or `-`. Anything else (`../x`, a slash) would read,
/// and then replace, a file outside the state folder.
pub fn check_id(id: &str) -> Result<(), String> {
    let ok_chars = id.chars().all(name_char);
    if id.is_empty() || id.len() > MAX_ID || !ok_chars || bad_start(id) {
        return Err(format!(
            "{id:?} is not an id of fleetctl's (letters, digits, `-`, `_` and `.`, 1 to \
             {MAX_ID} characters, not starting with `.` or `-`)"
        ));
    }
    Ok(())
}

/// Puts `bytes` at `path` through `<path>.tmp` and a rename, creating the
/// folder first.
pub fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// [`replace`] with `value` as pretty JSON.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    replace(path, &bytes)
}

/// An append-only JSON-lines log. After the first failed write it warns once
/// and drops the rest: a full disk must not stop the run it records.
#[derive(Debug)]
pub struct JsonLines {
    path: PathBuf,
    file: File,
    broken: bool,
}

impl JsonLines {
    /// Opens `path` for appending, creating it and its folder.
    pub fn open(path: PathBuf) -> io::Result<JsonLines> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        Ok(JsonLines {
            path,
            file,
            broken: false,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `value` as one line, in one write.
    pub fn append<T: Serialize>(&mut self, value: &T) {
        let mut line = match serde_json::to_string(value) {
            Ok(line) => line,
            Err(e) => {
                tracing::warn!("{}: cannot encode a line: {e}", self.path.display());
                return;
            }
        };
        line.push('\n');
        if let Err(e) = self.file.write_all(line.as_bytes()) {
            if !self.broken {
                tracing::warn!("{}: {e}; later lines are lost", self.path.display());
                self.broken = true;
            }
        }
    }

    /// Flushes the file to disk: the end of a run.
    pub fn sync(&mut self) {
        if let Err(e) = self.file.sync_all() {
            tracing::warn!("{}: {e}", self.path.display());
        }
    }
}

/// Reads a JSON-lines file back, blank lines skipped.
pub fn read_lines<T: DeserializeOwned>(path: &Path) -> io::Result<Vec<T>> {
    std::fs::read_to_string(path)?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_name_a_file_in_the_state_folder_and_nothing_else() {
        for ok in ["20261129T194529Z-9edc", "exp-1", "r1", "a.b_c"] {
            check_id(ok).unwrap();
        }
        assert_eq!(
            check_id("../../etc/x").unwrap_err(),
            "\"../../etc/x\" is not an id of fleetctl's (letters, digits, `-`, `_` and `.`, 1 to \
             128 characters, not starting with `.` or `-`)"
        );
        for bad in ["", "a/b", ".hidden", "-x", "a b", &"x".repeat(129)] {
            assert!(check_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_replaced_document_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state").join("r1.json");
        write_json(&path, &vec![1, 2]).unwrap();
        write_json(&path, &vec![3]).unwrap();
        let back: Vec<u32> = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(back, [3]);
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["r1.json"]);
    }

    #[test]
    fn lines_append_across_opens_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit").join("r1.jsonl");
        let mut log = JsonLines::open(path.clone()).unwrap();
        log.append(&"one");
        log.sync();
        drop(log);
        let mut again = JsonLines::open(path.clone()).unwrap();
        again.append(&"two");
        std::fs::write(dir.path().join("bad.jsonl"), "\"ok\"\nnot json\n").unwrap();
        assert_eq!(read_lines::<String>(&path).unwrap(), ["one", "two"]);
        let err = read_lines::<String>(&dir.path().join("bad.jsonl")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}
