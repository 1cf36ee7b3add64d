//! Command-line types of the fleetctl binary, and the one place each
//! subcommand is handed to the library. Only the binary knows clap, Ctrl-C
//! and exit codes ([`exit`]); the library takes plain types
//! ([`fleetctl::inventory::Target`], [`fleetctl::executor::RunOptions`]).
//!
//! Adding a subcommand: add a variant to [`Command`] and an arm to
//! [`Command::execute`]; keep the work itself in the library module.

mod args;
pub mod exit;
mod experiment;
mod health;
mod inventory;
mod lab;
mod run;
mod timing;

use args::{InventoryCommand, PlanArgs, RolloutArgs, RunArgs};
use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Rolls prover builds out to fleets of GPU hosts over SSH.
#[derive(Debug, Parser)]
#[command(name = "fleetctl", version, about, propagate_version = true)]
pub struct Cli {
    /// More log output on stderr (-v info, -vv debug, -vvv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a playbook against the selected hosts.
    Run(RunArgs),
    /// Roll the local build out: `run` with the built-in rollout playbook
    /// and, without -i, the built-in local inventory.
    Rollout(RolloutArgs),
    /// Print what a playbook would do on which host, changing nothing.
    Plan(PlanArgs),
    /// Inspect an inventory.
    #[command(subcommand)]
    Inventory(InventoryCommand),
    /// One row per host: reachable, daemon build, pid, memory, GPUs, queue.
    Status(health::StatusArgs),
    /// The health policy's verdict per host and GPU.
    Health(health::HealthArgs),
    /// Roll a candidate to canaries, measure it against baselines under the
    /// same load, then promote it, restore the canaries, or keep them.
    Experiment(experiment::ExperimentArgs),
    /// Fleet-wide timing: collect, report, export.
    #[command(subcommand)]
    Timing(timing::TimingCommand),
    /// A fleet of real sshd hosts on this machine (root only).
    Lab {
        #[command(subcommand)]
        cmd: lab::LabCommand,
    },
}

impl Command {
    /// Runs the subcommand and returns the process exit code.
    pub async fn execute(self) -> anyhow::Result<ExitCode> {
        match self {
            Command::Run(args) => run::run(args).await,
            Command::Rollout(args) => {
                run::run(RunArgs {
                    playbook: "rollout".to_string(),
                    target: args.target,
                    exec: args.exec,
                })
                .await
            }
            Command::Plan(args) => run::plan(args),
            Command::Status(args) => health::run_status(args).await,
            Command::Health(args) => health::run_health(args).await,
            Command::Timing(cmd) => timing::run(cmd).await,
            Command::Experiment(args) => experiment::run(args).await,
            Command::Inventory(cmd) => inventory::run(cmd),
            Command::Lab { cmd } => lab::run(cmd).map(|()| exit::code(exit::EXIT_OK)),
        }
    }
}
