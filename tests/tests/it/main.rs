//! End-to-end tests across the prover and fleetctl, in one test binary (one
//! link of both crates instead of one per file). A new test file goes here
//! as a module, not beside this folder.
//!
//! - [`docs`]: docs/ARCHITECTURE.md names only paths that exist.
//! - [`experiment`]: `fleetctl experiment` on a lab of four.
//! - [`fleet_ops`]: status, health and timing on a lab of eight.
//! - [`rollout`]: rollouts on a lab of eight and on the local inventory.

use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

mod docs;
mod experiment;
mod fleet_ops;
mod rollout;

/// Each test that starts a lab of real daemons holds this while its lab is
/// up, so labs run one at a time, as when each file was a binary of its
/// own: two labs of eight provers would compete for the CPU with each
/// other's timings (the experiment's verdict is made of them).
static LABS: Mutex<()> = Mutex::new(());

/// This test's turn to start a lab (see [`LABS`]); a test that panicked
/// holding it does not stop the others.
fn lab_turn() -> MutexGuard<'static, ()> {
    LABS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The release id fleetctl gives `binary` shipped with `config`: its folder
/// under `releases/` on a host, and the name the tables show.
fn release_id(binary: &Path, config: &Path) -> String {
    let sum = |p: &Path| fleetctl::steps::sha256_file(p).expect("hash");
    fleetctl::steps::release_id(&sum(binary), Some(&sum(config)))
}
