//! `fleetctl run`, `rollout` and `plan`: from the command line to a
//! prepared run, the resume rules (a resume finishes the run it names), and
//! the Ctrl-C handler that feeds the dispatcher's stop channel.

use super::args::{PlanArgs, RunArgs};
use super::exit;
use anyhow::Context;
use fleetctl::executor::state::{self, RunState, StateError};
use fleetctl::executor::{
    execute, prepare, progress, ExecError, RealRunner, Reporter, RunEnd, RunOptions, Stop,
    DEFAULT_BINARY,
};
use fleetctl::plan;
use fleetctl::transport::quote::quote_shown;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use tokio::sync::watch;

/// `fleetctl plan`.
pub fn plan(args: PlanArgs) -> anyhow::Result<ExitCode> {
    let prepared = prepare(&args.playbook, &args.target.into(), &args.binary)?;
    print!("{}", plan::render(&prepared));
    Ok(exit::code(exit::EXIT_OK))
}

/// A resume continues the run it names: the inventory, host selection,
/// variables, playbook and binary come from the run's state file. An
/// argument that says otherwise is refused, naming both values, since
/// going on with it would finish a different run than the one started.
pub fn resume_args(mut args: RunArgs, st: &RunState) -> Result<RunArgs, StateError> {
    let o = &st.origin;
    if o.playbook.is_none() {
        // A state file of an older fleetctl: nothing recorded to check.
        tracing::warn!(
            "run {} was started by an older fleetctl that did not record its arguments; \
             resuming with this command's",
            st.run_id
        );
        return Ok(args);
    }
    // The one command that resumes this run: its own playbook (`run -p`
    // is required, `rollout` is `run -p rollout`), this state dir, nothing
    // else: the rest comes from the state file.
    let resume = format!(
        "{} --resume {}",
        resume_command(&RunArgs {
            playbook: o.playbook.clone().unwrap_or_default(),
            ..args.clone()
        }),
        st.run_id
    );
    let conflict = |what, was: String, now: String| StateError::Conflict {
        run_id: st.run_id.clone(),
        what,
        was,
        now,
        resume: resume.clone(),
    };
    if o.playbook.as_deref() != Some(args.playbook.as_str()) {
        return Err(conflict(
            "playbook",
            o.playbook.clone().unwrap_or_default(),
            args.playbook.clone(),
        ));
    }
    let shown = |i: &Option<String>| {
        i.clone()
            .unwrap_or_else(|| "the built-in local inventory".to_owned())
    };
    match &args.target.inventory {
        None => args.target.inventory = o.inventory.as_ref().map(PathBuf::from),
        Some(given) => {
            let given = Some(given.display().to_string());
            if given != o.inventory {
                return Err(conflict("inventory", shown(&o.inventory), shown(&given)));
            }
        }
    }
    match &args.target.limit {
        None => args.target.limit = o.limit.clone(),
        Some(given) if Some(given) != o.limit.as_ref() => {
            return Err(conflict(
                "--limit",
                o.limit.clone().unwrap_or_else(|| "no limit".to_owned()),
                given.clone(),
            ))
        }
        Some(_) => {}
    }
    if args.target.extra_vars.is_empty() {
        args.target.extra_vars = o.extra_vars.clone();
    } else if args.target.extra_vars != o.extra_vars {
        return Err(conflict(
            "variables",
            o.extra_vars.join(" "),
            args.target.extra_vars.join(" "),
        ));
    }
    if args.exec.deploy.binary.is_none() {
        args.exec.deploy.binary = o.binary.as_ref().map(PathBuf::from);
    }
    Ok(args)
}

/// The command line that resumes a run of `args` (without `--resume ID`).
pub fn resume_command(args: &RunArgs) -> String {
    let cmd = if args.playbook == "rollout" {
        "fleetctl rollout".to_owned()
    } else {
        format!("fleetctl run -p {}", quote_shown(&args.playbook))
    };
    cmd + &args.exec.deploy.state_dir_arg()
}

/// Sends Ctrl-C presses into the stop channel: first `Finish`, then `Abort`.
pub(super) fn watch_ctrl_c(tx: watch::Sender<Stop>) {
    tokio::spawn(async move {
        for level in [Stop::Finish, Stop::Abort] {
            if tokio::signal::ctrl_c().await.is_err() {
                return;
            }
            if tx.send(level).is_err() {
                return;
            }
        }
    });
}

/// `fleetctl run` / `fleetctl rollout`.
pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let mut args = args;
    let resumed = match &args.exec.resume {
        Some(id) => {
            let st = state::load(&args.exec.deploy.state_dir, id)?;
            args = resume_args(args, &st)?;
            Some(st)
        }
        None => None,
    };
    let binary = args
        .exec
        .deploy
        .binary
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_BINARY));
    let prepared = prepare(&args.playbook, &args.target.clone().into(), &binary)?;
    if let Some(st) = &resumed {
        if let (Some(was), Some(now)) = (&st.origin.sha256, &prepared.release.sha256) {
            if was != now {
                return Err(ExecError::from(state::StateError::OtherBuild {
                    run_id: st.run_id.clone(),
                    binary: binary.display().to_string(),
                    was: was.clone(),
                    now: now.clone(),
                })
                .into());
            }
        }
    }
    if args.exec.check {
        print!("{}", plan::render(&prepared));
    }
    let opts = RunOptions {
        check: args.exec.check,
        resume: args.exec.resume.clone(),
        state_dir: args.exec.deploy.state_dir.clone(),
        origin: state::Origin {
            playbook: Some(args.playbook.clone()),
            inventory: args
                .target
                .inventory
                .as_ref()
                .map(|p| p.display().to_string()),
            limit: args.target.limit.clone(),
            extra_vars: args.target.extra_vars.clone(),
            binary: prepared
                .release
                .sha256
                .is_some()
                .then(|| binary.display().to_string()),
            sha256: prepared.release.sha256.clone(),
        },
        resume_with: Some(resume_command(&args)),
    };
    let (tx, rx) = watch::channel(Stop::Run);
    watch_ctrl_c(tx);
    let progress: Box<dyn Reporter> = Box::new(progress::Progress::new(args.exec.deploy.tty()));
    let done = execute(prepared, &opts, Arc::new(RealRunner), vec![progress], rx).await?;
    print!("{}", done.table.render());
    println!("audit log: {}", done.audit.display());
    if let Some(retry) = &done.retry {
        println!(
            "retry file: {} (the hosts that failed; --limit @{} runs only them)",
            retry.display(),
            retry.display()
        );
    }
    if let Some(path) = &args.exec.summary_json {
        let text = serde_json::to_string_pretty(&done.table.json())
            .context("encoding the JSON summary")?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("writing the JSON summary {}", path.display()))?;
        println!("summary: {}", path.display());
    }
    if matches!(done.summary.end, RunEnd::Halted | RunEnd::Interrupted) && !opts.check {
        println!(
            "resume with: {} --resume {}",
            resume_command(&args),
            done.summary.run_id
        );
    }
    Ok(exit::code(exit::run_end(done.summary.end)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args::{DeployArgs, ExecArgs, TargetArgs};
    use fleetctl::executor::state;
    use std::path::Path;

    fn args(playbook: &str) -> RunArgs {
        RunArgs {
            playbook: playbook.into(),
            target: TargetArgs {
                inventory: None,
                limit: None,
                extra_vars: Vec::new(),
            },
            exec: ExecArgs {
                check: false,
                resume: Some("r1".into()),
                deploy: DeployArgs {
                    binary: None,
                    plain: false,
                    state_dir: ".fleetctl".into(),
                },
                summary_json: None,
            },
        }
    }

    fn started() -> RunState {
        let mut st = RunState::new("r1", "rollout", "fleet.yaml");
        st.origin = state::Origin {
            playbook: Some("rollout".into()),
            inventory: Some("fleet.yaml".into()),
            limit: Some("gpu".into()),
            extra_vars: vec!["drain_timeout=30s".into()],
            binary: Some("build/prover".into()),
            sha256: Some("aa".into()),
        };
        st
    }

    #[test]
    fn a_resume_takes_what_the_run_was_started_with() {
        let a = resume_args(args("rollout"), &started()).unwrap();
        assert_eq!(a.target.inventory.as_deref(), Some(Path::new("fleet.yaml")));
        assert_eq!(a.target.limit.as_deref(), Some("gpu"));
        assert_eq!(a.target.extra_vars, ["drain_timeout=30s"]);
        assert_eq!(
            a.exec.deploy.binary.as_deref(),
            Some(Path::new("build/prover"))
        );
        // The same values given again are no conflict.
        let mut same = args("rollout");
        same.target.inventory = Some("fleet.yaml".into());
        same.target.limit = Some("gpu".into());
        assert!(resume_args(same, &started()).is_ok());
    }

    #[test]
    fn a_resume_with_a_conflicting_argument_names_both_values() {
        let mut other = args("rollout");
        other.target.inventory = Some("lab.yaml".into());
        let e = resume_args(other, &started()).unwrap_err().to_string();
        assert!(
            e.contains("`fleet.yaml`") && e.contains("`lab.yaml`"),
            "{e}"
        );
        // The command that resumes it as started, no "leave -p out".
        assert!(
            e.contains("resume it with `fleetctl rollout --resume r1`"),
            "{e}"
        );

        let mut local = started();
        local.origin.inventory = None;
        let mut other = args("rollout");
        other.target.inventory = Some("lab.yaml".into());
        let e = resume_args(other, &local).unwrap_err().to_string();
        assert!(
            e.contains("built-in local inventory") && e.contains("lab.yaml"),
            "{e}"
        );

        let e = resume_args(args("restart"), &started())
            .unwrap_err()
            .to_string();
        assert!(e.contains("`rollout`") && e.contains("`restart`"), "{e}");

        let mut other = args("rollout");
        other.target.limit = Some("h1".into());
        let e = resume_args(other, &started()).unwrap_err().to_string();
        assert!(e.contains("`gpu`") && e.contains("`h1`"), "{e}");

        let mut other = args("rollout");
        other.target.extra_vars = vec!["drain_timeout=5s".into()];
        let e = resume_args(other, &started()).unwrap_err().to_string();
        assert!(
            e.contains("drain_timeout=30s") && e.contains("drain_timeout=5s"),
            "{e}"
        );
    }

    #[test]
    fn the_resume_command_is_one_that_runs() {
        assert_eq!(resume_command(&args("rollout")), "fleetctl rollout");
        let mut a = args("my playbook.yaml");
        a.exec.deploy.state_dir = "/var/lib/fleet".into();
        assert_eq!(
            resume_command(&a),
            "fleetctl run -p 'my playbook.yaml' --state-dir /var/lib/fleet"
        );
    }
}
