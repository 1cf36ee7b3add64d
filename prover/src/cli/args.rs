//! The arguments the prove, verify and bench subcommands share with others
//! (the backend choice, a bundled circuit's parameters), in their own file so
//! that the subcommands' modules import them from here, not from `cli`.

use clap::{Args, ValueEnum};
use prover::circuit::CircuitKind;
use std::path::PathBuf;

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
    #[arg(long, default_value = "2^16", value_parser = prover::setup::parse_circuit_size)]
    pub size: usize,
    /// Parameter directory.
    #[arg(long, default_value = "params")]
    pub params_dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct ProveArgs {
    #[command(flatten)]
    pub params: ParamsArgs,
    /// Independent proofs of the same circuit (partitions), 1 to 1024 (the
    /// daemon's limit per job).
    #[arg(
        long,
        default_value_t = 1,
        value_parser = clap::value_parser!(u32)
            .range(1..=i64::from(prover::daemon::engine::MAX_PARTITIONS))
    )]
    pub partitions: u32,
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendChoice,
    /// Seed of the witness and of each partition's r, s.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Append timing records to this JSON-lines file.
    #[arg(long)]
    pub timing_log: Option<PathBuf>,
    /// CPU backend worker threads, 1 to 1024 (default: all cores).
    #[arg(long, value_parser = parse_threads)]
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
    /// log2 of the sizes to run (4 to 27).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "14,15,16,17,18,19,20",
        value_parser = clap::value_parser!(u32).range(
            i64::from(prover::circuit::MIN_LOG_SIZE)..=i64::from(prover::circuit::MAX_LOG_SIZE)
        )
    )]
    pub log_sizes: Vec<u32>,
    /// Parameter cache directory.
    #[arg(long, default_value = "params")]
    pub params_dir: PathBuf,
    /// Repetitions per measurement (the fastest is reported), 1 to 1000.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub repeat: u32,
    /// Skip bellperson (only time this prover).
    #[arg(long)]
    pub no_baseline: bool,
    /// Also time the CUDA backend on device 0 (fails without a usable GPU);
    /// missing TEST-ONLY parameters are then generated on the GPU.
    #[arg(long)]
    pub cuda: bool,
    /// Leave out the CPU backend (minutes a proof at 2^26): the CUDA proofs
    /// are then judged by the verifier and against bellperson's bytes.
    #[arg(long, requires = "cuda")]
    pub no_cpu: bool,
    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Generate TEST-ONLY parameters for sizes the parameter directory lacks.
    #[arg(long)]
    pub test_params: bool,
    /// Generate TEST-ONLY parameters for every size in memory and never
    /// write them (nor read the parameter directory): for sets larger
    /// than the disk, such as 2^27 (about 77 GB).
    #[arg(long, conflicts_with = "test_params")]
    pub params_in_memory: bool,
    /// Skip synthesis from compiled constraints (the second table).
    #[arg(long)]
    pub no_compiled: bool,
}

/// The most CPU worker threads a command takes: more is a typo, and
/// starting them costs seconds to minutes before any work.
pub const MAX_THREADS: usize = 1024;

/// `--threads`: 1 to [`MAX_THREADS`].
pub fn parse_threads(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_THREADS).contains(&n) => Ok(n),
        Ok(n) => Err(format!(
            "{n} is out of range: 1 to {MAX_THREADS} threads (leave the option out for all cores)"
        )),
        Err(_) => Err(format!("`{s}` is not a number of threads")),
    }
}
