//! The pid file: taken at start under an advisory lock, removed on exit, and
//! checked against `/proc/<pid>` so a stale file left by a crash never blocks
//! a start while a live daemon always does. Beside it, the address the daemon
//! bound (`<pid file>.addr`), so a client of a daemon told to listen on port
//! 0 finds the port the kernel chose.
//!
//! The lock (`flock` on `<pid file>.lock`, held for the daemon's life and
//! released by the kernel however the process ends) is what makes a start
//! exclusive: two starters that both find a stale file cannot both replace
//! it, and the binary takes it before binding its port, so the loser of a
//! race names the winner instead of failing with `Address already in use`.
//! The lock file is never removed: unlinking it would let a third starter
//! lock a new file while the second still holds the old one.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum PidFileError {
    #[error("another prover daemon (pid {pid}, {exe}) holds pid file {file}; stop it first")]
    HeldByLiveDaemon {
        pid: u32,
        exe: String,
        file: PathBuf,
    },
    #[error(
        "another prover daemon is starting on pid file {file} (it holds {}; its pid is not written yet); stop it first",
        lock_path(file).display()
    )]
    HeldByStartingDaemon { file: PathBuf },
    #[error("pid file {file}: {action}: {source}")]
    Io {
        file: PathBuf,
        action: &'static str,
        source: std::io::Error,
    },
}

/// An acquired pid file; removed by [`PidFile::remove`] (or on drop), with
/// the bound-address file [`PidFile::record_listen`] wrote.
#[derive(Debug)]
pub struct PidFile {
    path: PathBuf,
    removed: bool,
    /// The locked `<pid file>.lock`; the lock goes with the descriptor,
    /// after the files are removed (fields drop after [`Drop::drop`]).
    _lock: File,
}

/// `<pid file>.lock`: the file whose `flock` makes a start exclusive.
pub fn lock_path(pid_file: &Path) -> PathBuf {
    let mut name = OsString::from(pid_file.as_os_str());
    name.push(".lock");
    PathBuf::from(name)
}

/// `<pid file>.addr`: where a running daemon records the address it bound.
pub fn addr_path(pid_file: &Path) -> PathBuf {
    let mut name = OsString::from(pid_file.as_os_str());
    name.push(".addr");
    PathBuf::from(name)
}

/// The address recorded beside `pid_file` by the daemon that holds it.
pub fn read_listen(pid_file: &Path) -> Result<SocketAddr, String> {
    let path = addr_path(pid_file);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.trim()
        .parse()
        .map_err(|_| format!("{}: not an address: {:?}", path.display(), text.trim()))
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

impl PidFile {
    /// Takes the lock, then writes `path` holding this process's pid. A lock
    /// held by another process, or an existing file naming a live prover (one
    /// of a build from before the lock), refuses the start; a stale file (dead
    /// pid, zombie, pid reused by another program, garbage) is replaced.
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
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(lock_path(path))
            .map_err(io("open its lock file"))?;
        // SAFETY: flock on a descriptor this function owns; no memory is shared.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EWOULDBLOCK) => held_by_locker(path),
                _ => io("lock")(e),
            });
        }
        if let Some(pid) = read_pid(path).ok().filter(|p| *p != std::process::id()) {
            if let PidOwner::Prover(exe) = owner(pid) {
                return Err(PidFileError::HeldByLiveDaemon {
                    pid,
                    exe,
                    file: path.to_path_buf(),
                });
            }
            tracing::warn!(file = %path.display(), stale_pid = pid, "replacing stale pid file");
        }
        // The file appears with its pid already in it (written to a private
        // name, then renamed into place): a reader never sees it empty.
        let staged = staged_path(path);
        let written = write_synced(&staged, &format!("{}\n", std::process::id()))
            .map_err(io("write"))
            .and_then(|()| std::fs::rename(&staged, path).map_err(io("rename into place")));
        if written.is_err() {
            let _ = std::fs::remove_file(&staged);
        }
        written.map(|()| Self {
            path: path.to_path_buf(),
            removed: false,
            _lock: lock,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records the address the daemon bound beside the pid file (see
    /// [`addr_path`]); replaced atomically, removed with the pid file.
    pub fn record_listen(&self, listen: SocketAddr) -> Result<(), PidFileError> {
        let addr = addr_path(&self.path);
        let staged = staged_path(&addr);
        let io = |action: &'static str| {
            let file = addr.clone();
            move |source| PidFileError::Io {
                file,
                action,
                source,
            }
        };
        write_synced(&staged, &format!("{listen}\n")).map_err(io("write"))?;
        std::fs::rename(&staged, &addr).map_err(io("rename into place"))
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
        let addr = addr_path(&self.path);
        match std::fs::remove_file(&addr) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(PidFileError::Io {
                    file: addr,
                    action: "remove",
                    source,
                })
            }
        }
        std::fs::remove_file(&self.path).map_err(|source| PidFileError::Io {
            file: self.path.clone(),
            action: "remove",
            source,
        })
    }
}

/// The refusal when another process holds the lock: it names that process
/// once its pid is in the file (it writes it right after locking; bounded).
fn held_by_locker(path: &Path) -> PidFileError {
    for _ in 0..40 {
        // Until the holder renames its file into place, the file is absent
        // or still names the dead process it replaces.
        if let Some(pid) = read_pid(path).ok().filter(|p| *p != std::process::id()) {
            if let PidOwner::Prover(exe) | PidOwner::Other(exe) = owner(pid) {
                return PidFileError::HeldByLiveDaemon {
                    pid,
                    exe,
                    file: path.to_path_buf(),
                };
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    PidFileError::HeldByStartingDaemon {
        file: path.to_path_buf(),
    }
}

/// A name beside `path` only this process uses.
fn staged_path(path: &Path) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(format!(".{}.tmp", std::process::id()));
    PathBuf::from(name)
}

fn write_synced(path: &Path, text: &str) -> std::io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()
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
        for garbage in ["not a pid", ""] {
            std::fs::write(&path, garbage).unwrap();
            let pf = PidFile::acquire(&path).unwrap();
            assert_eq!(read_pid(&path).unwrap(), std::process::id(), "{garbage:?}");
            pf.remove().unwrap();
        }
        // Only the lock file stays (it is never removed; see the module docs).
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers, vec![std::ffi::OsString::from("p.pid.lock")]);
    }

    #[test]
    fn the_bound_address_lives_beside_the_pid_file_and_goes_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/prover.pid");
        let pf = PidFile::acquire(&path).unwrap();
        assert!(read_listen(&path).is_err(), "nothing recorded yet");
        let addr: SocketAddr = "127.0.0.1:40123".parse().unwrap();
        pf.record_listen(addr).unwrap();
        assert_eq!(addr_path(&path), dir.path().join("run/prover.pid.addr"));
        assert_eq!(read_listen(&path).unwrap(), addr);
        pf.remove().unwrap();
        assert!(!path.exists() && !addr_path(&path).exists());
    }

    /// A child process that ends at once and is not waited for: a zombie.
    fn zombie() -> std::process::Child {
        let child = std::process::Command::new("true").spawn().unwrap();
        let stat = format!("/proc/{}/stat", child.id());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::fs::read_to_string(&stat)
            .ok()
            .and_then(|s| stat_state(&s))
            != Some('Z')
        {
            assert!(std::time::Instant::now() < deadline, "no zombie");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child
    }

    #[test]
    fn a_zombie_is_gone_and_its_pid_file_stale() {
        let mut z = zombie();
        assert_eq!(owner(z.id()), PidOwner::Gone);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.pid");
        std::fs::write(&path, format!("{}\n", z.id())).unwrap();
        PidFile::acquire(&path).unwrap().remove().unwrap();
        z.wait().unwrap();
    }

    /// A running copy of `sleep` named like a prover release, its file
    /// deleted as a rollout replacing the release deletes it; killed on drop.
    struct DeletedProver(std::process::Child);

    impl Drop for DeletedProver {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn a_live_prover_whose_binary_was_deleted_still_holds_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("prover");
        std::fs::copy("/bin/sleep", &bin).unwrap();
        let child = std::process::Command::new(&bin).arg("300").spawn().unwrap();
        let running = DeletedProver(child);
        std::fs::remove_file(&bin).unwrap();
        let pid = running.0.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let exe = loop {
            match owner(pid) {
                PidOwner::Prover(exe) if exe.ends_with(" (deleted)") => break exe,
                other => assert!(std::time::Instant::now() < deadline, "{other:?}"),
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        let path = dir.path().join("p.pid");
        std::fs::write(&path, format!("{pid}\n")).unwrap();
        match PidFile::acquire(&path) {
            Err(PidFileError::HeldByLiveDaemon { pid: p, exe: e, .. }) => {
                assert_eq!((p, e), (pid, exe))
            }
            other => panic!("a live deleted prover must hold the file: {other:?}"),
        }
    }

    const RACE_VAR: &str = "PIDFILE_RACE_PATH";

    #[test]
    fn racing_starts_do_not_both_hold_the_file() {
        use std::io::BufRead;
        use std::process::{Command, Stdio};
        // The child half, run by this test below: acquires the file (this
        // test binary is named `prover-…`, so a holder counts as a live
        // daemon), says whether it holds it, and keeps it until stdin closes.
        if let Some(path) = std::env::var_os(RACE_VAR) {
            let held = PidFile::acquire(Path::new(&path));
            println!("RACE {}", if held.is_ok() { "held" } else { "refused" });
            let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.pid");
        for round in 0..6 {
            // Half the rounds start from a stale file, which every racer
            // reads as stale: only one may replace it.
            if round % 2 == 1 {
                std::fs::write(&path, "0\n").unwrap();
            }
            let children: Vec<_> = (0..6)
                .map(|_| {
                    Command::new(std::env::current_exe().unwrap())
                        .args([
                            "--exact",
                            "daemon::pidfile::tests::racing_starts_do_not_both_hold_the_file",
                        ])
                        .args(["--nocapture", "--test-threads=1"])
                        .env(RACE_VAR, &path)
                        .stdin(Stdio::piped())
                        .stdout(Stdio::piped())
                        .stderr(Stdio::null())
                        .spawn()
                        .unwrap()
                })
                .collect();
            let mut guard = ChildGuard(children);
            let mut held = 0;
            for c in &mut guard.0 {
                let out = std::io::BufReader::new(c.stdout.take().unwrap());
                // Each child answers within its own start-up; if one dies,
                // its stdout closes and the loop ends without a line.
                let answer = out
                    .lines()
                    .map_while(Result::ok)
                    .find_map(|l| Some(l.split_once("RACE ")?.1.trim().to_string()));
                held += usize::from(answer.as_deref() == Some("held"));
            }
            assert_eq!(
                held, 1,
                "exactly one of the racing starts holds the pid file"
            );
            drop(guard);
            assert!(!path.exists(), "the holder removed it");
        }
    }

    /// Closes the children's stdin (they release and exit), then reaps them;
    /// kills any that does not exit.
    struct ChildGuard(Vec<std::process::Child>);

    impl Drop for ChildGuard {
        fn drop(&mut self) {
            for c in &mut self.0 {
                drop(c.stdin.take());
            }
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
            for c in &mut self.0 {
                while matches!(c.try_wait(), Ok(None)) {
                    if std::time::Instant::now() > deadline {
                        let _ = c.kill();
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            }
        }
    }
}
