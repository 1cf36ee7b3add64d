//! fleetctl's integration tests, in one test binary (one link of the crate
//! instead of one per file). A new test file goes here as a module, not
//! beside this folder. `cargo test -p fleetctl --test it MODULE::` runs one
//! module.
//!
//! - [`bench_rollout`]: the built-in rollout in batches of 16 on a lab of 64
//!   against a plain upload-and-restart loop (ignored by default;
//!   `scripts/bench-rollout.sh`).
//! - [`bench_staging`]: the staging benchmark on a lab of 32 (ignored by
//!   default; `scripts/bench-staging.sh`).
//! - [`cli`]: the binary as a user runs it: exit codes, error locations,
//!   plans, runs on the local host, Ctrl-C.
//! - [`lab`]: the lab fleet itself (namespaces, sshd, faults), needing root.
//! - [`steps`]: each rollout step against a lab host.

use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

mod bench_rollout;
mod bench_staging;
mod cli;
mod lab;
mod steps;

/// A stand-in build that never runs: an x86-64 ELF header (what fleetctl
/// checks of `--binary`) and `marker`, which makes its sha256 its own.
fn fake_build(marker: &[u8]) -> Vec<u8> {
    let mut b = b"\x7fELF\x02\x01\x01\x00".to_vec();
    b.extend([0u8; 8]);
    // e_type ET_DYN, little-endian: a position-independent executable.
    b.extend([3u8, 0]);
    b.extend_from_slice(marker);
    b
}

/// Labs of any module run in parallel while each holds this shared; the
/// timing test and the reaping test hold it alone (any `Lab::start` reaps
/// orphans, and would take the reaping test's before it is counted).
static LABS: RwLock<()> = RwLock::new(());

/// A turn to run a lab beside others (see [`LABS`]).
fn labs_shared() -> RwLockReadGuard<'static, ()> {
    LABS.read().unwrap_or_else(PoisonError::into_inner)
}

/// A turn to run with no other lab up (see [`LABS`]).
fn labs_alone() -> RwLockWriteGuard<'static, ()> {
    LABS.write().unwrap_or_else(PoisonError::into_inner)
}
