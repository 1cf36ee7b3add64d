//! The prover binary: parse the command line, set up logging, hand over to
//! the library, turn the outcome into an exit code (see `cli::exit`).

mod cli;

use clap::Parser;
use cli::{Cli, Command};
use std::process::ExitCode;

fn init_tracing(cli: &Cli) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&cli.log));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Escape codes only where a terminal interprets them, not in files or pipes.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    if cli.log_json {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are not errors.
            let code = if e.use_stderr() {
                cli::exit::USAGE
            } else {
                cli::exit::OK
            };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    // The daemon logs where its config says (file and stderr) and sets that up itself.
    if !matches!(cli.command, Command::Daemon(_)) {
        init_tracing(&cli);
    }
    let outcome = match cli.command {
        Command::Prove(args) => cli::prove::run_prove(args),
        Command::Verify(args) => cli::prove::run_verify(args),
        Command::Bench(args) => cli::prove::run_bench(args),
        Command::Daemon(args) => cli::daemon::run_daemon(args),
        Command::Client(args) => cli::daemon::run_client(args),
        Command::Health(args) => cli::daemon::run_health(args),
        Command::BenchPool(args) => prover::pool_bench::run(&(&args).into())
            .map(|()| cli::exit::OK)
            .map_err(Into::into),
        Command::Setup(args) if args.filecoin.is_some() => cli::filecoin::run_setup(args),
        Command::Setup(args) => prover::setup::command::run(args.into()).map(|()| cli::exit::OK),
        Command::Params(args) => cli::params::run(args),
        Command::Kernels(args) => cli::kernels::run(args),
        Command::Filecoin(command) => cli::filecoin::run(command),
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {}", fleet_wire::error_line::error_line(e.as_ref()));
            ExitCode::from(cli::exit::ERROR)
        }
    }
}
