//! Command-line types of the prover binary: the only place that knows clap,
//! signals and exit codes ([`exit`]). Each subcommand's arguments convert
//! into plain library types before the library is called.
//!
//! One [`Command`] enum; `main` dispatches on it. A subcommand is added by
//! adding a variant here and a match arm in `main.rs`; a Filecoin proof kind
//! only in [`filecoin`], whose commands `Command` and the client's take
//! flattened.

pub mod args;
pub mod bench_pool;
pub mod checked;
pub mod daemon;
pub mod exit;
pub mod filecoin;
pub mod kernels;
pub mod one_shot;
pub mod out_path;
pub mod params;
pub mod prove;
pub mod send;
pub mod setup;

use args::{BenchArgs, ProveArgs, VerifyArgs};
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "prover", version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("PROVER_GIT_HASH"), ")"), about = "Groth16 (BLS12-381) prover")]
pub struct Cli {
    /// Log filter (tracing-subscriber EnvFilter syntax); RUST_LOG overrides it.
    #[arg(long, global = true, default_value = "info", env = "PROVER_LOG", value_parser = parse_log_filter)]
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
    #[command(flatten)]
    Filecoin(filecoin::FilecoinCommand),
}

/// `--log`: a filter tracing accepts; one it would ignore in part (a typo
/// in a target or level) is a usage error, not silently less logging.
fn parse_log_filter(s: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::builder()
        .parse(s)
        .map(|_| s.to_string())
        .map_err(|e| format!("`{s}` is not a log filter (tracing EnvFilter syntax): {e}"))
}
