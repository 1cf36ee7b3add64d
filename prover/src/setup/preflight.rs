//! Whether a parameter generation fits this host, checked before any of its
//! work: the set and its working vectors against the memory available now
//! (the kernel's `MemAvailable`), the largest file it can write against the
//! free space of its folder. One rule for every generation `prover setup`
//! runs, bundled circuits and Filecoin's alike; without it a set larger
//! than the host ends in the OOM killer (a daemon's own generation is
//! admitted by its memory budget instead).

use std::path::{Path, PathBuf};

use crate::circuit::CircuitShape;
use crate::params::{file_bytes_bound, generation_bytes};
use crate::sys::meminfo;

/// What generating a set of `shape` holds: memory and disk, upper bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Need {
    pub memory: u64,
    pub disk: u64,
}

impl Need {
    pub fn of(shape: &CircuitShape) -> Need {
        Need {
            memory: generation_bytes(shape),
            disk: file_bytes_bound(shape),
        }
    }
}

/// A generation this host cannot hold.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error(
        "generating {what} holds up to {:.1} GiB in memory; this host has {:.1} GiB available (MemAvailable)",
        gib(*need),
        gib(*available)
    )]
    Memory {
        what: String,
        need: u64,
        available: u64,
    },
    #[error(
        "generating {what} writes up to {:.1} GiB into {dir}; its file system has {:.1} GiB free",
        gib(*need),
        gib(*free)
    )]
    Disk {
        what: String,
        dir: PathBuf,
        need: u64,
        free: u64,
    },
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 30)
}

/// The kernel's `MemAvailable`, or `None` (with a warning) where it cannot
/// be read.
pub fn mem_available() -> Option<u64> {
    let available = std::fs::read_to_string(meminfo::MEMINFO)
        .ok()
        .and_then(|text| meminfo::field(&text, "MemAvailable"));
    if available.is_none() {
        tracing::warn!(
            "{}: no MemAvailable; generating without a memory check",
            meminfo::MEMINFO
        );
    }
    available
}

/// Refuses `memory` bytes beyond `available` (`None`: not known, allowed).
pub fn check_memory(what: &str, memory: u64, available: Option<u64>) -> Result<(), PreflightError> {
    match available {
        Some(available) if memory > available => Err(PreflightError::Memory {
            what: what.to_string(),
            need: memory,
            available,
        }),
        _ => Ok(()),
    }
}

/// Refuses `disk` bytes beyond the free space `free` of `dir`'s file system.
pub fn check_disk(what: &str, dir: &Path, disk: u64, free: u64) -> Result<(), PreflightError> {
    if disk > free {
        return Err(PreflightError::Disk {
            what: what.to_string(),
            dir: dir.to_owned(),
            need: disk,
            free,
        });
    }
    Ok(())
}

/// The free space where `dir` is or will be made: of its nearest existing
/// folder (a folder not made yet lands on its parent's file system).
pub fn free_bytes(dir: &Path) -> std::io::Result<u64> {
    let existing = dir
        .ancestors()
        .find(|d| !d.as_os_str().is_empty() && d.is_dir())
        .unwrap_or(Path::new("."));
    crate::sys::disk::available_bytes(existing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generation_must_fit_the_available_memory_and_disk() {
        check_memory("`chain` size 67108864", 10 << 30, Some(10 << 30)).unwrap();
        check_memory("`chain` size 67108864", 10 << 30, None).unwrap();
        let err = check_memory("`chain` size 67108864", 10 << 30, Some(9 << 30)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "generating `chain` size 67108864 holds up to 10.0 GiB in memory; this host has 9.0 GiB available (MemAvailable)"
        );
        let err = check_disk("x", Path::new("/p"), 3 << 30, 1 << 30).unwrap_err();
        assert_eq!(
            err.to_string(),
            "generating x writes up to 3.0 GiB into /p; its file system has 1.0 GiB free"
        );
        let dir = tempfile::tempdir().unwrap();
        assert!(free_bytes(&dir.path().join("not/made/yet")).unwrap() > 0);
    }
}
