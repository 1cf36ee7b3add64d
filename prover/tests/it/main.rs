//! The prover's integration tests, in one test binary: the crate and its
//! dependencies are linked into one executable instead of one per file,
//! which is most of the time a build of the tests takes. A new test file
//! goes here as a module, not beside this folder (each `tests/*.rs` is a
//! binary of its own). `cargo test -p prover --test it MODULE::` runs one
//! module.
//!
//! - [`cuda`]: the CUDA backend on a real GPU (skipped without one).
//! - [`daemon`]: the real `prover` binary, its daemon over HTTP and its
//!   subcommands' exit codes.
//! - [`filecoin_cli`]: the Filecoin subcommands' checks before any proving.
//! - [`hostile`]: the daemon's API and server against hostile clients, in-process.
//! - [`kernels_compile`]: every CUDA C file compiles to a cubin through NVRTC.
//! - [`kernels_warm`]: `prover kernels warm` fills the kernel cache and reads it back.
//! - [`params`]: parameter generation, the on-disk cache and bad files.
//! - [`pool`]: the pinned pool and the memory budget from the outside.
//! - [`proofs`]: proofs byte-identical to bellperson's on every backend.

mod cuda;
mod daemon;
mod filecoin_cli;
mod hostile;
mod kernels_compile;
mod kernels_warm;
mod params;
mod pool;
mod proofs;
