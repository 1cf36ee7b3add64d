//! The pid file: created exclusively at start, removed on exit, and checked
//! against `/proc/<pid>` so a stale file left by a crash never blocks a start
//! while a live daemon always does.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum PidFileError {
    #[error("another prover daemon (pid {pid}, {exe}) holds pid file {file}; stop it first")]
    HeldByLiveDaemon {
        pid: u32,
        exe: String,
        file: PathBuf,
    },
    #[error("pid file {file}: {action}: {source}")]
    Io {
        file: PathBuf,
        action: &'static str,
        source: std::io::Error,
    },
}

/// An acquired pid file; removed by [`PidFile::remove`] (or on drop).
#[derive(Debug)]
pub struct PidFile {
    path: PathBuf,
    removed: bool,
}

/// What a pid names right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PidOwner {
    /// No such process, or a zombie.
    Gone,
    /// A live process running a `prover` binary (the exe path).
    Prover(String),
    /// A live process running something else: the pid was reused.
    Other(String),
}

/// Looks at `/proc/<pid>`: alive and not a zombie, and what binary it runs.
pub fn owner(pid: u32) -> PidOwner {
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    match std::fs::read_to_string(proc_dir.join("stat")) {
        Ok(stat) if stat_state(&stat) != Some('Z') => {}
        _ => return PidOwner::Gone,
    }
    // A replaced release shows its binary as `<path> (deleted)`; it is still a prover.
    let exe = std::fs::read_link(proc_dir.join("exe"))
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let name = exe
        .trim_end_matches(" (deleted)")
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    if name.starts_with("prover") {
        PidOwner::Prover(exe)
    } else {
        // Unreadable exe (another user's process) counts as a live foreign process.
        PidOwner::Other(exe)
    }
}

/// The state letter of a `/proc/<pid>/stat` line (after the `(comm)` field,
/// which may itself contain spaces and parentheses).
pub fn stat_state(stat: &str) -> Option<char> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.trim_start().chars().next()
}

/// Reads the pid written in `path`.
pub fn read_pid(path: &Path) -> Result<u32, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    text.trim()
        .parse::<u32>()
        .map_err(|_| format!("does not hold a pid: {:?}", text.trim()))
}

/// Fails when `path` names a live prover: lets the caller refuse a second
/// daemon before binding its port (which would fail less clearly).
pub fn check_free(path: &Path) -> Result<(), PidFileError> {
    match read_pid(path) {
        Ok(pid) if pid != std::process::id() => match owner(pid) {
            PidOwner::Prover(exe) => Err(PidFileError::HeldByLiveDaemon {
                pid,
                exe,
                file: path.to_path_buf(),
            }),
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

impl PidFile {
    /// Creates `path` holding this process's pid. An existing file naming a
    /// live prover refuses the start; a stale one (dead pid, zombie, pid reused
    /// by another program, garbage) is replaced.
    pub fn acquire(path: &Path) -> Result<Self, PidFileError> {
        let io = |action: &'static str| {
            move |source| PidFileError::Io {
                file: path.to_path_buf(),
                action,
                source,
            }
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io("create its directory"))?;
        }
        for _ in 0..3 {
            match OpenOptions::new().write(true).create_new(true).open(path) {
                Ok(mut f) => {
                    writeln!(f, "{}", std::process::id()).map_err(io("write"))?;
                    f.sync_all().map_err(io("sync"))?;
                    return Ok(Self {
                        path: path.to_path_buf(),
                        removed: false,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let holder = read_pid(path).ok();
                    if let Some(pid) = holder.filter(|p| *p != std::process::id()) {
                        if let PidOwner::Prover(exe) = owner(pid) {
                            return Err(PidFileError::HeldByLiveDaemon {
                                pid,
                                exe,
                                file: path.to_path_buf(),
                            });
                        }
                    }
                    tracing::warn!(file = %path.display(), stale_pid = ?holder, "removing stale pid file");
                    match std::fs::remove_file(path) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => return Err(io("remove stale file")(e)),
                    }
                }
                Err(e) => return Err(io("create")(e)),
            }
        }
        Err(io("create")(std::io::Error::other(
            "another process keeps recreating it",
        )))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the file if it still names this process.
    pub fn remove(mut self) -> Result<(), PidFileError> {
        self.removed = true;
        self.remove_inner()
    }

    fn remove_inner(&self) -> Result<(), PidFileError> {
        if read_pid(&self.path).ok() != Some(std::process::id()) {
            return Ok(());
        }
        std::fs::remove_file(&self.path).map_err(|source| PidFileError::Io {
            file: self.path.clone(),
            action: "remove",
            source,
        })
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        if !self.removed {
            if let Err(e) = self.remove_inner() {
                tracing::warn!("{e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_state_skips_a_comm_with_spaces_and_parens() {
        assert_eq!(stat_state("42 (a (b) c) S 1 2 3"), Some('S'));
        assert_eq!(stat_state("42 (x) Z 1"), Some('Z'));
        assert_eq!(stat_state("garbage"), None);
    }

    #[test]
    fn stale_pid_file_is_replaced_and_removed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/prover.pid");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        // Pid 0 is never a user process: the file is stale.
        std::fs::write(&path, "0\n").unwrap();
        let pf = PidFile::acquire(&path).unwrap();
        assert_eq!(read_pid(&path).unwrap(), std::process::id());
        drop(pf);
        assert!(!path.exists());
    }

    #[test]
    fn pid_of_a_foreign_live_process_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.pid");
        // pid 1 is alive but is not a prover binary.
        std::fs::write(&path, "1\n").unwrap();
        let pf = PidFile::acquire(&path).unwrap();
        pf.remove().unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn garbage_pid_file_is_stale() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.pid");
        std::fs::write(&path, "not a pid").unwrap();
        let pf = PidFile::acquire(&path).unwrap();
        assert_eq!(pf.path(), path);
    }
}
