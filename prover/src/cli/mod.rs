//! Command-line types of the prover binary: the only place that knows clap,
//! signals and exit codes ([`exit`]). Each subcommand's arguments convert
//! into plain library types before the library is called.
//!
//! One [`Command`] enum; `main` dispatches on it. A subcommand is added by
//! adding a variant here and a match arm in `main.rs`.

pub mod bench_pool;
pub mod daemon;
pub mod exit;
pub mod filecoin;
pub mod kernels;
pub mod params;
pub mod prove;
pub mod setup;

use clap::{Args, Parser, Subcommand, ValueEnum};
use prover::circuit::CircuitKind;
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(name = "prover", version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("PROVER_GIT_HASH"), ")"), about = "Groth16 (BLS12-381) prover")]
pub struct Cli {
    /// Log filter (tracing-subscriber EnvFilter syntax); RUST_LOG overrides it.
    #[arg(long, global = true, default_value = "info", env = "PROVER_LOG")]
    pub log: String,
    /// Log as JSON lines instead of text.
    #[arg(long, global = true)]
    pub log_json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Prove a bundled circuit once, verify it, print the proof and timings.
    Prove(ProveArgs),
    /// Verify a proof (hex, as `prove` prints it) against a bundled circuit's parameters.
    Verify(VerifyArgs),
    /// Compare this prover with bellperson's on the same circuits and parameters.
    Bench(BenchArgs),
    /// Run the proving daemon (HTTP API, pipelined engine) until SIGTERM.
    Daemon(daemon::DaemonArgs),
    /// Talk to a running daemon (address and token from its config).
    Client(daemon::ClientArgs),
    /// Print a JSON probe of this host: memory, the daemon, GPUs.
    Health(daemon::HealthArgs),
    /// Measure the pinned pool: pinning, freeing, host-to-device copies.
    BenchPool(bench_pool::PoolBenchArgs),
    /// Generate TEST-ONLY parameters (seeded toxic waste, NOT a trusted setup) into the cache.
    Setup(setup::SetupArgs),
    /// Import, list and verify the parameter directory's files.
    Params(params::ParamsCmdArgs),
    /// Compile the CUDA kernels into the kernel cache ahead of a daemon start.
    Kernels(kernels::KernelsArgs),
    /// Filecoin PoRep C2: prove a C1 output with Filecoin's parameters.
    C2(filecoin::C2Args),
    /// Filecoin Window or Winning PoSt from vanilla proofs, with Filecoin's parameters.
    Post(filecoin::PostArgs),
}

/// `--backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    /// CUDA when a device is usable, else the CPU.
    Auto,
    Cpu,
    Cuda,
}

#[derive(Debug, Args)]
pub struct ParamsArgs {
    /// Bundled circuit.
    #[arg(long, default_value = "chain")]
    pub circuit: CircuitKind,
    /// Constraint count the circuit is sized for (domain = next power of two): 65536 or 2^16.
    #[arg(long, default_value = "2^16", value_parser = prover::setup::parse_size)]
    pub size: usize,
    /// Parameter directory.
    #[arg(long, default_value = "params")]
    pub params_dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct ProveArgs {
    #[command(flatten)]
    pub params: ParamsArgs,
    /// Independent proofs of the same circuit (partitions).
    #[arg(long, default_value_t = 1)]
    pub partitions: u32,
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendChoice,
    /// Seed of the witness and of each partition's r, s.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Append timing records to this JSON-lines file.
    #[arg(long)]
    pub timing_log: Option<PathBuf>,
    /// CPU backend worker threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// When the parameter directory has no file for this circuit and size,
    /// generate TEST-ONLY parameters (seeded toxic waste, NOT a trusted setup).
    #[arg(long)]
    pub test_params: bool,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub params: ParamsArgs,
    /// Proof bytes as hex (bellperson's encoding, 192 bytes per partition).
    #[arg(long)]
    pub proof: String,
    /// Seed the witness was drawn from (it fixes the public inputs).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Circuits to run.
    #[arg(long, value_delimiter = ',', default_value = "chain,sha256")]
    pub circuits: Vec<CircuitKind>,
    /// log2 of the sizes to run.
    #[arg(long, value_delimiter = ',', default_value = "14,15,16,17,18,19,20")]
    pub log_sizes: Vec<u32>,
    /// Parameter cache directory.
    #[arg(long, default_value = "params")]
    pub params_dir: PathBuf,
    /// Repetitions per measurement (the fastest is reported).
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// Skip bellperson (only time this prover).
    #[arg(long)]
    pub no_baseline: bool,
    /// Also time the CUDA backend on device 0 (fails without a usable GPU).
    #[arg(long)]
    pub cuda: bool,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Generate TEST-ONLY parameters for sizes the parameter directory lacks.
    #[arg(long)]
    pub test_params: bool,
}
