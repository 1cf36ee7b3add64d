//! Command-line types of the fleetctl binary, and the one place each
//! subcommand is handed to the library. Only the binary knows clap, Ctrl-C
//! and exit codes ([`exit`]); the library takes plain types
//! ([`fleetctl::inventory::Target`], [`fleetctl::executor::RunOptions`]).
//!
//! Adding a subcommand: add a variant to [`Command`] and an arm to
//! [`Command::execute`]; keep the work itself in the library module.

pub mod exit;
mod experiment;
mod health;
mod inventory;
mod lab;
mod run;
mod timing;

use clap::{Args, Parser, Subcommand};
use fleetctl::inventory::Target;
use std::path::PathBuf;
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

/// Inventory file and host selection, shared by every subcommand that
/// touches hosts.
#[derive(Debug, Clone, Args)]
pub struct TargetArgs {
    /// Inventory file (YAML). Without it, the built-in local inventory.
    #[arg(short, long, value_name = "FILE")]
    pub inventory: Option<PathBuf>,
    /// Hosts to act on: names, groups, `tag:NAME` or globs, comma-separated;
    /// `!PATTERN` leaves hosts out (`lab,!h3`), `&PATTERN` intersects.
    #[arg(short, long, value_name = "PATTERN")]
    pub limit: Option<String>,
    /// Extra variable with the highest precedence, `key=value` (repeatable).
    #[arg(short = 'e', long = "extra-var", value_name = "KEY=VALUE")]
    pub extra_vars: Vec<String>,
}

impl From<TargetArgs> for Target {
    fn from(a: TargetArgs) -> Self {
        Target {
            inventory: a.inventory,
            limit: a.limit,
            extra_vars: a.extra_vars,
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct ExecArgs {
    /// Show the plan and change nothing.
    #[arg(long)]
    pub check: bool,
    /// Continue a halted or interrupted run, skipping hosts it completed.
    #[arg(long, value_name = "RUN_ID")]
    pub resume: Option<String>,
    /// Prover binary to ship [default: target/release/prover; a resume
    /// takes the run's own].
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// Never draw progress spinners, even on a terminal.
    #[arg(long)]
    pub plain: bool,
    /// Also write the run's summary as JSON here: each host's result,
    /// step times and serving gap, the fleet's sum and maximum.
    #[arg(long, value_name = "PATH")]
    pub summary_json: Option<PathBuf>,
    /// Where run state (`state/<run-id>.json`) and audit logs
    /// (`audit/<run-id>.jsonl`) are kept.
    #[arg(
        long,
        value_name = "DIR",
        env = "FLEETCTL_STATE_DIR",
        default_value = ".fleetctl"
    )]
    pub state_dir: PathBuf,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Playbook file (YAML), or the name of a built-in one (`rollout`,
    /// `restart`, `rollback`, `health`, `stop`, `collect-timing`).
    #[arg(short, long, value_name = "PLAYBOOK")]
    pub playbook: String,
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub exec: ExecArgs,
}

#[derive(Debug, Clone, Args)]
pub struct RolloutArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub exec: ExecArgs,
}

#[derive(Debug, Clone, Args)]
pub struct PlanArgs {
    /// Playbook file (YAML), or the name of a built-in one.
    #[arg(short, long, value_name = "PLAYBOOK", default_value = "rollout")]
    pub playbook: String,
    #[command(flatten)]
    pub target: TargetArgs,
    /// Prover binary the plan would ship.
    #[arg(long, value_name = "PATH", default_value = "target/release/prover")]
    pub binary: PathBuf,
}

#[derive(Debug, Subcommand)]
pub enum InventoryCommand {
    /// One line per selected host: name, transport, address, groups, tags.
    List(TargetArgs),
    /// Every resolved variable of one host, with where it came from.
    Show {
        /// Host name.
        host: String,
        #[command(flatten)]
        target: TargetArgs,
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
