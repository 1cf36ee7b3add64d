//! The fleetctl binary: parse the command line, set up logging, hand over to
//! the library, turn the outcome into an exit code.

mod cli;

use clap::Parser;
use cli::exit::{EXIT_ERROR, EXIT_USAGE};
use cli::Cli;
use std::io::IsTerminal;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap's own exit code for a usage error is 2, which is ours for
            // "a host failed": a script retrying failed hosts would retry typos.
            let usage = e.use_stderr();
            let _ = e.print();
            return ExitCode::from(if usage { EXIT_USAGE } else { 0 });
        }
    };
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    // Colour only for a person at a terminal: a log file, a pipe or CI gets
    // plain text (and NO_COLOR, https://no-color.org, turns it off anyway).
    let colour = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    match runtime.block_on(cli.command.execute()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", fleet_wire::error_line::error_line(e.as_ref()));
            ExitCode::from(EXIT_ERROR)
        }
    }
}
