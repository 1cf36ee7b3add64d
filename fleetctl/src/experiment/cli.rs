//! `fleetctl experiment`: the clap arguments, their conversion into
//! [`Options`], the printed report and the exit code. Nothing else of the
//! command line reaches the experiment modules.

use super::report;
use super::run::{self, End, Options};
use crate::executor::{
    watch_ctrl_c, Stop, EXIT_HOSTS_FAILED, EXIT_INTERRUPTED, EXIT_NOT_PASSED, EXIT_OK,
};
use anyhow::Context;
use clap::Args;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use tokio::sync::watch;

#[derive(Debug, Clone, Args)]
pub struct ExperimentArgs {
    /// Experiment definition (YAML; see docs/experiment.md). A resume
    /// takes the experiment's own.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub target: crate::cli::TargetArgs,
    /// The candidate prover binary [default: target/release/prover; a
    /// resume takes the experiment's own].
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// Continue an experiment that stopped, from the stage it reached.
    #[arg(long, value_name = "EXPERIMENT_ID")]
    pub resume: Option<String>,
    /// Local timing store the records are collected into.
    #[arg(long, default_value = ".fleetctl/timing")]
    pub store: PathBuf,
    /// Also write the report as a self-contained HTML page.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Also write the report as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Never draw progress spinners, even on a terminal.
    #[arg(long)]
    pub plain: bool,
    /// Where state (`experiments/<id>.json`) and audit logs are kept.
    #[arg(
        long,
        value_name = "DIR",
        env = "FLEETCTL_STATE_DIR",
        default_value = ".fleetctl"
    )]
    pub state_dir: PathBuf,
}

impl ExperimentArgs {
    fn options(&self) -> Options {
        Options {
            definition: self.file.clone(),
            inventory: self.target.inventory.clone(),
            limit: self.target.limit.clone(),
            extra_vars: self.target.extra_vars.clone(),
            binary: self.binary.clone(),
            state_dir: self.state_dir.clone(),
            store: self.store.clone(),
            resume: self.resume.clone(),
            tty: !self.plain && std::io::stderr().is_terminal(),
        }
    }
}

/// The one mapping from an experiment's end to the exit code.
fn exit(end: End) -> ExitCode {
    ExitCode::from(match end {
        End::Pass => EXIT_OK,
        End::NotPass => EXIT_NOT_PASSED,
        End::HostsFailed => EXIT_HOSTS_FAILED,
        End::Interrupted => EXIT_INTERRUPTED,
    })
}

/// `fleetctl experiment`.
pub async fn run(args: ExperimentArgs) -> anyhow::Result<ExitCode> {
    let (tx, rx) = watch::channel(Stop::Run);
    watch_ctrl_c(tx);
    let done = run::run(args.options(), rx).await?;
    print!("{}", report::table(&done.report));
    if let Some(p) = &args.html {
        std::fs::write(p, report::html(&done.report))
            .with_context(|| format!("writing {}", p.display()))?;
        println!("html report: {}", p.display());
    }
    if let Some(p) = &args.json {
        std::fs::write(p, report::json(&done.report))
            .with_context(|| format!("writing {}", p.display()))?;
        println!("json report: {}", p.display());
    }
    if done.end == End::Interrupted {
        println!(
            "resume with: fleetctl experiment --resume {}",
            done.report.experiment
        );
    }
    Ok(exit(done.end))
}
