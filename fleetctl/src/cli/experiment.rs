//! `fleetctl experiment`: the clap arguments, their conversion into the
//! library's [`Options`], the printed report and the exit code.

use super::args::{DeployArgs, TargetArgs};
use super::exit;
use super::run::watch_ctrl_c;
use anyhow::Context;
use clap::Args;
use fleetctl::executor::Stop;
use fleetctl::experiment::report;
use fleetctl::experiment::run::{self, End, Options};
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
    pub target: TargetArgs,
    /// Continue an experiment that stopped, from the stage it reached.
    #[arg(long, value_name = "EXPERIMENT_ID", value_parser = super::args::id_arg)]
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
    // `--binary` here is the candidate.
    #[command(flatten)]
    pub deploy: DeployArgs,
}

impl ExperimentArgs {
    fn options(&self) -> Options {
        Options {
            definition: self.file.clone(),
            inventory: self.target.inventory.clone(),
            limit: self.target.limit.clone(),
            extra_vars: self.target.extra_vars.clone(),
            binary: self.deploy.binary.clone(),
            state_dir: self.deploy.state_dir.clone(),
            store: self.store.clone(),
            resume: self.resume.clone(),
            tty: self.deploy.tty(),
        }
    }

    /// The command that resumes experiment `id` from this one's state dir.
    fn resume_command(&self, id: &str) -> String {
        format!(
            "fleetctl experiment --resume {id}{}",
            self.deploy.state_dir_arg()
        )
    }
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
            "resume with: {}",
            args.resume_command(&done.report.experiment)
        );
    }
    Ok(exit::code(exit::experiment_end(done.end)))
}
