//! The local timing store: `<store>/<host>/` holds the host's timing files as
//! fetched (same names as on the host) and `.collect.json`, the record of what
//! has been fetched, so each collect only moves new bytes.

use super::line::SkippedLine;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Errors reading or writing the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("timing store {path}: {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        source: io::Error,
    },
    #[error(
        "timing store {path}: state file is corrupt ({source}); move it away to re-fetch that host"
    )]
    State {
        path: PathBuf,
        source: serde_json::Error,
    },
}

fn io_err<'a>(path: &'a Path, action: &'static str) -> impl FnOnce(io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        action,
        source,
    }
}

/// What is known about one remote file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileState {
    /// Inode on the host: a rotation renames the file, so the inode follows
    /// the data, not the name.
    pub inode: u64,
    /// Bytes of the remote file passed so far: the local copy's length,
    /// plus the lines left out ([`super::line`]).
    pub fetched: u64,
    /// Local file name inside the host folder.
    pub local: String,
    /// Lines of the remote file passed so far, to say where a skipped one
    /// was. `None` in a state written before it was counted: then every
    /// line fetched was kept, and the local copy's lines are the count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<u64>,
}

/// The `.collect.json` of one host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostState {
    /// Keyed by inode (as a string, for JSON).
    pub files: BTreeMap<String, FileState>,
    /// Lines collect left out, ever, for this host.
    #[serde(default)]
    pub skipped_count: u64,
    /// The first [`SKIPPED_KEPT`] of them, with where they were.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedLine>,
}

/// How many skipped lines a host's state names (the count goes on): a log
/// of nothing but garbage must not grow the state without bound.
pub const SKIPPED_KEPT: usize = 100;

impl HostState {
    /// Counts a line left out, and keeps where it was while there is room.
    pub fn skip(&mut self, line: SkippedLine) {
        self.skipped_count += 1;
        if self.skipped.len() < SKIPPED_KEPT {
            self.skipped.push(line);
        }
    }
}

/// An exclusive hold on one host's folder of the store (an advisory `flock`
/// on `<store>/<host>/.lock`), released when dropped or when the process
/// dies, so a killed collect never blocks the next one.
#[derive(Debug)]
pub struct HostLock {
    _file: fs::File,
}

/// A store rooted at a folder.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
}

impl Store {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Store { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn host_dir(&self, host: &str) -> PathBuf {
        self.root.join(host)
    }

    /// Host folders present in the store, sorted.
    pub fn hosts(&self) -> Result<Vec<String>, StoreError> {
        let mut out = Vec::new();
        let rd = match fs::read_dir(&self.root) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(io_err(&self.root, "list")(e)),
        };
        for entry in rd {
            let entry = entry.map_err(io_err(&self.root, "list"))?;
            if entry.path().is_dir() {
                if let Some(name) = entry.file_name().to_str() {
                    if !name.starts_with('.') {
                        out.push(name.to_string());
                    }
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Timing files of one host (everything but the state file), sorted.
    pub fn files(&self, host: &str) -> Result<Vec<PathBuf>, StoreError> {
        let dir = self.host_dir(host);
        let mut out = Vec::new();
        for entry in fs::read_dir(&dir).map_err(io_err(&dir, "list"))? {
            let entry = entry.map_err(io_err(&dir, "list"))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if entry.path().is_file() && !name.starts_with('.') {
                out.push(entry.path());
            }
        }
        out.sort();
        Ok(out)
    }

    /// Takes the host's folder for this process alone, or `None` while
    /// another collect (another fleetctl, or another task of this one) holds
    /// it. Two collects of one host at once would each append what the other
    /// fetched: every record stored twice.
    pub fn try_lock_host(&self, host: &str) -> Result<Option<HostLock>, StoreError> {
        let dir = self.host_dir(host);
        fs::create_dir_all(&dir).map_err(io_err(&dir, "create"))?;
        let path = dir.join(".lock");
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_err(&path, "open"))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(HostLock { _file: file })),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => Err(io_err(&path, "lock")(e)),
        }
    }

    /// Every host's lines left out at collect: how many, and the first
    /// ones of each host with where they were.
    pub fn skipped(&self) -> Result<(u64, Vec<SkippedLine>), StoreError> {
        let (mut count, mut lines) = (0, Vec::new());
        for host in self.hosts()? {
            let st = self.load_state(&host)?;
            count += st.skipped_count;
            lines.extend(st.skipped);
        }
        Ok((count, lines))
    }

    pub fn load_state(&self, host: &str) -> Result<HostState, StoreError> {
        let path = self.host_dir(host).join(".collect.json");
        match fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes).map_err(|source| StoreError::State { path, source })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(HostState::default()),
            Err(e) => Err(io_err(&path, "read")(e)),
        }
    }

    /// Replaces the state whole, so an interrupted collect leaves either
    /// the old or the new state, never half of one.
    pub fn save_state(&self, host: &str, state: &HostState) -> Result<(), StoreError> {
        let path = self.host_dir(host).join(".collect.json");
        crate::persist::write_json(&path, state).map_err(io_err(&path, "write"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_and_hosts_are_listed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        assert!(store.hosts().unwrap().is_empty());
        let mut st = HostState::default();
        st.files.insert(
            "42".into(),
            FileState {
                inode: 42,
                fetched: 10,
                local: "timing.jsonl@42".into(),
                lines: None,
            },
        );
        store.save_state("h01", &st).unwrap();
        assert_eq!(store.load_state("h01").unwrap(), st);
        assert_eq!(store.hosts().unwrap(), vec!["h01".to_string()]);
        assert!(
            store.files("h01").unwrap().is_empty(),
            "state file is not a timing file"
        );
    }

    #[test]
    fn a_host_folder_is_held_by_one_collect_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let held = store.try_lock_host("h1").unwrap().expect("free");
        assert!(store.try_lock_host("h1").unwrap().is_none(), "held");
        assert!(store.try_lock_host("h2").unwrap().is_some(), "other host");
        drop(held);
        assert!(store.try_lock_host("h1").unwrap().is_some(), "released");
        assert_eq!(store.hosts().unwrap(), vec!["h1", "h2"]);
        assert!(
            store.files("h1").unwrap().is_empty(),
            "the lock is no timing file"
        );
    }

    #[test]
    fn corrupt_state_names_the_file_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        fs::create_dir_all(dir.path().join("h1")).unwrap();
        fs::write(dir.path().join("h1/.collect.json"), b"{nope").unwrap();
        let err = store.load_state("h1").unwrap_err().to_string();
        assert!(
            err.contains(".collect.json") && err.contains("move it away"),
            "{err}"
        );
    }
}
