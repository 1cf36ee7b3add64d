//! Groth16 prover over BLS12-381 for any `bellperson` circuit.
//!
//! # Layout
//! Data flows: [`circuit`] -> [`synthesis`] into [`pool`] buffers -> [`backend`]
//! (NTT, MSM; `cpu`, `cuda`) -> [`prove`] (assembly) -> [`timing`] record.
//! Beside it: [`budget`], [`params`] and [`setup`], [`sys`] (meminfo,
//! cgroup limits, hostname, clocks), [`daemon`]
//! (`config`, `api`, `engine`, `lifecycle`), [`health`] (the host probe),
//! [`bench`], [`pool_bench`], [`filecoin`] (Filecoin's PoRep C2 and its
//! parameter cache), [`priority`] (where a job queues: the kinds name it, the
//! engine queues by it). The command line (clap types, signal handling, exit
//! codes) belongs to the binary's `src/cli/`, which converts its arguments
//! into the plain types these modules take.

pub mod backend;
pub mod bench;
pub mod budget;
pub mod circuit;
pub mod compiled;
pub mod daemon;
pub mod density;
pub mod filecoin;
pub mod health;
pub mod lc;
pub mod memory_plan;
pub mod params;
pub mod pool;
pub mod pool_bench;
pub mod priority;
pub mod prove;
pub mod setup;
pub mod statement;
pub mod synthesis;
pub mod sys;
pub mod timing;

/// Build identity stamped by `build.rs`.
pub const BUILD_HASH: &str = env!("PROVER_GIT_HASH");
/// Crate version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
