//! The memory limit of this process's cgroup (v2 `memory.max`, v1
//! `memory.limit_in_bytes`), which caps what the host's `MemTotal` offers.

use std::path::{Path, PathBuf};

/// A limit at or above this is "no limit" (cgroup v1 reports unlimited as
/// the largest page-aligned i64).
const UNLIMITED: u64 = 1 << 62;

/// The lowest memory limit set on this process's cgroup, and the file it
/// came from; `None` when no limit is set.
pub fn memory_limit() -> Option<(u64, PathBuf)> {
    limit_files()
        .into_iter()
        .filter_map(|file| read_limit(&file).map(|limit| (limit, file)))
        .min_by_key(|(limit, _)| *limit)
}

/// Candidate limit files: the process's own cgroup (v2 and v1 memory
/// controller) and the mount roots (what a container sees as its own).
fn limit_files() -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    let mut files = Vec::new();
    if let Ok(text) = std::fs::read_to_string("/proc/self/cgroup") {
        for line in text.lines() {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = match (parts.next(), parts.next(), parts.next()) {
                (Some(id), Some(c), Some(p)) => (id, c, p.trim_start_matches('/')),
                _ => continue,
            };
            if controllers.is_empty() {
                files.push(root.join(path).join("memory.max"));
            } else if controllers.split(',').any(|c| c == "memory") {
                files.push(root.join("memory").join(path).join("memory.limit_in_bytes"));
            }
        }
    }
    files.push(root.join("memory.max"));
    files.push(root.join("memory/memory.limit_in_bytes"));
    files
}

fn read_limit(file: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let value: u64 = text.trim().parse().ok()?; // "max" = no limit
    (value < UNLIMITED).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_files_read_unlimited_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("memory.max");
        for (text, want) in [
            ("max\n", None),
            ("8589934592\n", Some(8u64 << 30)),
            // cgroup v1's "unlimited": the largest page-aligned i64.
            ("9223372036854771712\n", None),
            ("garbage", None),
        ] {
            std::fs::write(&file, text).unwrap();
            assert_eq!(read_limit(&file), want, "{text:?}");
        }
        assert_eq!(read_limit(&dir.path().join("absent")), None);
    }
}
