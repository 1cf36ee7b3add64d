//! Arguments shared by several subcommands (host selection, how a run
//! executes), in their own file so that the subcommands' modules import them
//! from here, not from `cli`, which imports those modules.

use clap::{Args, Subcommand};
use fleetctl::executor::{state_dir_flag, DEFAULT_BINARY, DEFAULT_STATE_DIR};
use fleetctl::inventory::{select, Target};
use fleetctl::persist;
use fleetctl::steps::params;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

/// Inventory file and host selection, shared by every subcommand that
/// touches hosts.
#[derive(Debug, Clone, Args)]
pub struct TargetArgs {
    /// Inventory file (YAML). Without it, the built-in local inventory.
    #[arg(short, long, value_name = "FILE")]
    pub inventory: Option<PathBuf>,
    /// Hosts to act on: names, groups, `tag:NAME`, globs or `@FILE` (a
    /// retry file: host names one per line), separated by `,` or `:`;
    /// `!PATTERN` leaves hosts out (`lab,!h3`, `all:!h3`), `&PATTERN`
    /// intersects (`lab:&h1`).
    #[arg(short, long, value_name = "PATTERN", value_parser = limit_arg)]
    pub limit: Option<String>,
    /// Extra variable with the highest precedence, `key=value` (repeatable).
    #[arg(short = 'e', long = "extra-var", value_name = "KEY=VALUE")]
    pub extra_vars: Vec<String>,
}

/// A per-host `--deadline`: a step's timeout bounds (1s to a day); past
/// those, `Instant + deadline` could overflow and panic.
pub fn deadline_arg(value: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(value).map_err(|e| e.to_string())?;
    params::duration_in("deadline", d, &params::TIMEOUTS)?;
    Ok(d)
}

/// `--resume ID` as clap reads it: an id names a state file, so one that
/// is not an id is a usage error ([`persist::check_id`]).
pub fn id_arg(value: &str) -> Result<String, String> {
    persist::check_id(value).map(|()| value.to_owned())
}

/// `--limit` as clap reads it: one without a pattern is a usage error
/// (exit 64), as a typo in a flag is, not a run on every host or on none.
fn limit_arg(value: &str) -> Result<String, String> {
    select::check_limit(value)
        .map(|()| value.to_owned())
        .map_err(|_| select::NO_PATTERN.to_owned())
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

/// The build shipped, how progress is drawn and where state is kept: shared
/// by every command that deploys (`run`, `rollout`, `experiment`).
#[derive(Debug, Clone, Args)]
pub struct DeployArgs {
    /// Prover binary to ship [default: target/release/prover; a resume
    /// takes the run's or experiment's own].
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// Never draw progress spinners, even on a terminal.
    #[arg(long)]
    pub plain: bool,
    /// Where state (runs' `state/<run-id>.json`, experiments'
    /// `experiments/<id>.json`) and audit logs (`audit/<id>.jsonl`) are kept.
    #[arg(
        long,
        value_name = "DIR",
        env = "FLEETCTL_STATE_DIR",
        default_value = DEFAULT_STATE_DIR
    )]
    pub state_dir: PathBuf,
}

impl DeployArgs {
    /// Whether progress is drawn live: on a terminal, unless `--plain`.
    pub fn tty(&self) -> bool {
        !self.plain && std::io::stderr().is_terminal()
    }

    /// ` --state-dir DIR` for a printed resume command (empty for the default).
    pub fn state_dir_arg(&self) -> String {
        state_dir_flag(&self.state_dir)
    }
}

#[derive(Debug, Clone, Args)]
pub struct ExecArgs {
    /// Show the plan and change nothing.
    #[arg(long)]
    pub check: bool,
    /// Continue a halted or interrupted run, skipping hosts it completed.
    #[arg(long, value_name = "RUN_ID", value_parser = id_arg)]
    pub resume: Option<String>,
    #[command(flatten)]
    pub deploy: DeployArgs,
    /// Also write the run's summary as JSON here: each host's result,
    /// step times and serving gap, the fleet's sum and maximum.
    #[arg(long, value_name = "PATH")]
    pub summary_json: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// A built-in playbook by bare name (`rollout`, `restart`, `rollback`,
    /// `health`, `stop`, `collect-timing`), or a YAML file by a path with a
    /// `/` (`./mine.yaml`).
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
    /// A built-in playbook by bare name, or a YAML file by a path with a
    /// `/` (`./mine.yaml`).
    #[arg(short, long, value_name = "PLAYBOOK", default_value = "rollout")]
    pub playbook: String,
    #[command(flatten)]
    pub target: TargetArgs,
    /// Prover binary the plan would ship.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_BINARY)]
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
