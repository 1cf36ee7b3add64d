//! Retry files, as Ansible writes them: the names of the hosts a run failed
//! on, one per line. fleetctl writes one at the end of a run with failures
//! and reads one given as `--limit @FILE`, so the next run takes only those
//! hosts, whether the file came from fleetctl or from `ansible-playbook`.

use crate::input::{self, InputError};
use std::io;
use std::path::{Path, PathBuf};

/// Largest retry file read: a name is at most 253 bytes, so 1 MiB holds
/// thousands of hosts; a larger file is not a retry file.
pub const MAX_BYTES: u64 = 1 << 20;

/// Where a run's retry file is written: `<state_dir>/retry/<run_id>.retry`.
pub fn path(state_dir: &Path, run_id: &str) -> PathBuf {
    state_dir.join("retry").join(format!("{run_id}.retry"))
}

/// Writes `hosts` one per line, replacing the file whole.
pub fn write(path: &Path, hosts: &[&str]) -> io::Result<()> {
    let text: String = hosts.iter().map(|h| format!("{h}\n")).collect();
    crate::persist::replace(path, text.as_bytes())
}

/// The host names of a retry file with their line numbers (blank lines and
/// surrounding white space ignored).
pub fn read(path: &Path) -> Result<Vec<(u64, String)>, InputError> {
    let text = input::read_text("retry file", path, MAX_BYTES)?;
    Ok(text
        .lines()
        .enumerate()
        .map(|(i, l)| (i as u64 + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty())
        .map(|(i, l)| (i, l.to_owned()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_names_read_back_and_a_large_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), "run-1");
        write(&p, &["h1", "h3"]).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "h1\nh3\n");
        std::fs::write(&p, "h1\n\n  h3 \n").unwrap();
        assert_eq!(read(&p).unwrap(), vec![(1, "h1".into()), (3, "h3".into())]);
        std::fs::write(&p, vec![b'h'; MAX_BYTES as usize + 1]).unwrap();
        assert!(matches!(read(&p), Err(InputError::TooLarge { .. })));
    }
}
