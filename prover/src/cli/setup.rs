//! `prover setup`: its arguments, converted into [`SetupOptions`].

use prover::backend::BackendKind;
use prover::circuit::CircuitKind;
use prover::params::DEFAULT_SEED;
use prover::setup::command::SetupOptions;
use prover::setup::parse_circuit_size;
use std::path::PathBuf;

/// `prover setup`: generate TEST-ONLY Groth16 parameters into the cache.
#[derive(Debug, Clone, clap::Args)]
#[command(
    about = "Generate TEST-ONLY Groth16 parameters (seeded toxic waste, NOT a trusted setup) into the parameter cache",
    long_about = "Generate Groth16 parameters for a bundled circuit and store them in the parameter cache.\n\n\
WARNING: the toxic waste (tau, alpha, beta, gamma, delta) is drawn from a seeded RNG. These parameters are \
NOT from a trusted setup and anyone who knows the seed can forge proofs. Use them only for tests and benchmarks."
)]
pub struct SetupArgs {
    /// Circuit to generate parameters for (chain, sha256).
    #[arg(long, default_value = "chain")]
    pub circuit: CircuitKind,
    /// Circuit size in constraints (the domain holds the circuit's constraints plus one per input): 1024 or 2^10.
    #[arg(long, value_parser = parse_circuit_size, required_unless_present_any = ["bench", "filecoin"])]
    pub size: Option<usize>,
    /// Parameter cache directory.
    #[arg(long, default_value = "params")]
    pub params_dir: PathBuf,
    /// Seed of the TEST-ONLY toxic waste.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    pub seed: u64,
    /// Regenerate even when valid parameters are already cached.
    #[arg(long)]
    pub force: bool,
    /// Instead of generating, time this generator against bellperson's at --bench-sizes.
    #[arg(long)]
    pub bench: bool,
    /// Sizes for --bench (comma separated; 1024 or 2^10).
    #[arg(long, value_parser = parse_circuit_size, value_delimiter = ',', default_values = ["2^10", "2^12", "2^14", "2^16"])]
    pub bench_sizes: Vec<usize>,
    /// Instead of a bundled circuit: a Filecoin circuit, the PoRep of a seal
    /// proof type (StackedDrg2KiBV1_1) or a PoSt (winning-post:2KiB,
    /// window-post:2KiB), written under Filecoin's file names into
    /// --param-cache; existing files are never replaced.
    #[arg(long, conflicts_with_all = ["size", "bench", "force"])]
    pub filecoin: Option<prover::filecoin::FilCircuit>,
    /// Where the fixed-base multiplications run: cpu, or cuda (device 0;
    /// fails on a host without a usable GPU). The parameters are the same
    /// byte for byte. With --bench, cuda adds a column next to the CPU's.
    #[arg(long, value_enum, default_value = "cpu")]
    pub backend: SetupBackend,
    /// Filecoin parameter cache folder, for --filecoin.
    #[arg(long, env = prover::filecoin::cache::CACHE_ENV, default_value = prover::filecoin::cache::DEFAULT_CACHE_DIR)]
    pub param_cache: PathBuf,
}

/// `prover setup --backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SetupBackend {
    Cpu,
    Cuda,
}

impl From<SetupBackend> for BackendKind {
    fn from(b: SetupBackend) -> Self {
        match b {
            SetupBackend::Cpu => BackendKind::Cpu,
            SetupBackend::Cuda => BackendKind::Cuda,
        }
    }
}

impl From<SetupArgs> for SetupOptions {
    fn from(a: SetupArgs) -> Self {
        SetupOptions {
            circuit: a.circuit,
            size: a.size,
            params_dir: a.params_dir,
            seed: a.seed,
            force: a.force,
            bench: a.bench,
            bench_sizes: a.bench_sizes,
            backend: a.backend.into(),
        }
    }
}
