//! Running an experiment, stage by stage: pick the hosts and read each
//! canary's release; roll the candidate to the canaries with the rollout
//! playbook; drive the workload on canaries and baselines at once; collect
//! their timing records; judge; then promote (the rollout, to the rest of
//! the selection), restore (the restart playbook, on each canary's own
//! earlier release: drain, wait_release, start, verify, health) or keep.
//!
//! Ctrl-C or a failure before the verdict's action restores the canaries.
//! The state is saved after every stage; `--resume` continues from it.
//!
//! # Layout
//! This file starts or resumes an experiment; `stages.rs` drives it from
//! stage to stage over the state, and each stage lives with its kind:
//! `prepare.rs` (the preflight), `measure.rs` (workload, collect, analyse),
//! `rollouts.rs` (every playbook run: deploy, restore, promote); the
//! options and ends (`options.rs`) and errors (`error.rs`) have files of
//! their own so that those files import them from there, not from here.

mod error;
mod measure;
mod options;
mod prepare;
mod rollouts;
mod stages;
mod ticker;

pub use error::ExperimentError;
pub use options::{End, Options};
pub use rollouts::keep_hint;

use super::definition;
use super::groups;
use super::log::{ExperimentLog, Stage};
use super::report::Report;
use super::state::{self, ExperimentState, Origin, Progress, StateError};
use crate::executor::{self, new_run_id, Build, Stop};
use crate::inventory::{self, select, Host};
use crate::steps;
use stages::{changed_canaries, Exp};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

#[derive(Debug)]
pub struct Finished {
    pub report: Report,
    pub end: End,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Runs (or resumes) an experiment to its end. `stop` carries Ctrl-C.
pub async fn run(opts: Options, stop: watch::Receiver<Stop>) -> Result<Finished, ExperimentError> {
    let mut opts = opts;
    let resumed = match opts.resume.clone() {
        Some(id) => Some(resume_options(&mut opts, &id)?),
        None => None,
    };
    let def_path = opts
        .definition
        .clone()
        .ok_or_else(|| ExperimentError::NoDefinition(opts.resume.clone().unwrap_or_default()))?;
    let def = definition::load(&def_path)?;
    let inv = inventory::load(opts.inventory.as_deref(), &opts.extra_vars)?;
    let selection = select::select(&inv, opts.limit.as_deref())?;
    let mut groups = groups::split(&inv, &selection, &def.canary, &def.baseline)?;
    if let Some(config) = &def.candidate_config {
        // The candidate's config goes out with it, to canaries and (on
        // promotion) to the rest; the baselines keep theirs.
        std::fs::metadata(config).map_err(|source| ExperimentError::Binary {
            path: config.clone(),
            cause: Box::new(steps::Cause::Local {
                path: config.clone(),
                source,
            }),
        })?;
        for h in groups.canary.iter_mut().chain(groups.rest.iter_mut()) {
            h.config_file = Some(config.clone());
        }
    }
    let binary = opts
        .binary
        .clone()
        .unwrap_or_else(|| PathBuf::from(executor::DEFAULT_BINARY));
    crate::input::check_elf("candidate", &binary).map_err(ExperimentError::NotABuild)?;
    let sha256 = steps::sha256_file(&binary).map_err(|cause| ExperimentError::Binary {
        path: binary.clone(),
        cause: Box::new(cause),
    })?;
    let st = match resumed {
        Some(st) => {
            if st.origin.sha256 != sha256 {
                return Err(StateError::Conflict {
                    id: st.id.clone(),
                    what: "a candidate of sha256",
                    was: st.origin.sha256.clone(),
                    now: sha256,
                }
                .into());
            }
            let names = |hs: &[Host]| hs.iter().map(|h| h.name.clone()).collect::<Vec<_>>();
            if names(&groups.canary) != st.canary || names(&groups.baseline) != st.baseline {
                return Err(StateError::Conflict {
                    id: st.id.clone(),
                    what: "canaries and baselines",
                    was: format!("{:?} / {:?}", st.canary, st.baseline),
                    now: format!(
                        "{:?} / {:?}",
                        names(&groups.canary),
                        names(&groups.baseline)
                    ),
                }
                .into());
            }
            st
        }
        None => ExperimentState {
            id: format!("exp-{}", new_run_id()),
            origin: Origin {
                definition: def_path.display().to_string(),
                inventory: opts.inventory.as_ref().map(|p| p.display().to_string()),
                limit: opts.limit.clone(),
                extra_vars: opts.extra_vars.clone(),
                binary: binary.display().to_string(),
                sha256: sha256.clone(),
                store: opts.store.display().to_string(),
            },
            started_ms: now_ms(),
            canary: groups.canary.iter().map(|h| h.name.clone()).collect(),
            baseline: groups.baseline.iter().map(|h| h.name.clone()).collect(),
            baseline_release: BTreeMap::new(),
            progress: Progress::Prepared,
            deploy_run: None,
            deploy_error: None,
            loads: Vec::new(),
            verdict: None,
            reason: None,
            action: None,
            action_runs: Vec::new(),
            action_result: None,
        },
    };
    let log = ExperimentLog::open(&opts.state_dir, &st.id)?;
    let mut exp = Exp {
        def,
        inventory: inv.file.clone(),
        groups,
        candidate: Arc::new(Build::new(binary, Some(sha256))),
        opts,
        log,
        st,
        analysis: None,
        runs: Vec::new(),
    };
    let end = match exp.stages(stop.clone()).await {
        Ok(end) => end,
        Err(e) => {
            exp.log.failed(Stage::Finish, e.to_string());
            // The canaries may run the candidate now: put them back before
            // the error goes up.
            if changed_canaries(exp.st.progress) {
                exp.log
                    .started(Stage::Restore, format!("after a failure: {e}"));
                let _ = exp.restore(&stop).await;
                exp.st.progress = Progress::Done;
                let _ = state::save(&exp.opts.state_dir, &exp.st);
            }
            return Err(e);
        }
    };
    if exp.analysis.is_none() && !exp.st.loads.is_empty() {
        exp.analysis = exp.analyse().ok();
    }
    let report = exp.report();
    exp.log.finished(
        Stage::Finish,
        format!("{} ({})", report.verdict.label(), report.reason),
    );
    Ok(Finished { report, end })
}

/// A resume takes what the experiment was started with; a different value
/// on this command line is refused, as `run --resume` does.
fn resume_options(opts: &mut Options, id: &str) -> Result<ExperimentState, ExperimentError> {
    let st = state::load(&opts.state_dir, id)?;
    let o = &st.origin;
    let conflict = |what, was: String, now: String| StateError::Conflict {
        id: id.to_owned(),
        what,
        was,
        now,
    };
    match &opts.definition {
        None => opts.definition = Some(PathBuf::from(&o.definition)),
        Some(d) if d.display().to_string() != o.definition => {
            return Err(conflict("-f", o.definition.clone(), d.display().to_string()).into())
        }
        Some(_) => {}
    }
    match &opts.inventory {
        None => opts.inventory = o.inventory.as_ref().map(PathBuf::from),
        Some(i) if Some(i.display().to_string()) != o.inventory => {
            return Err(conflict(
                "-i",
                o.inventory.clone().unwrap_or_default(),
                i.display().to_string(),
            )
            .into())
        }
        Some(_) => {}
    }
    match &opts.limit {
        None => opts.limit = o.limit.clone(),
        Some(l) if Some(l) != o.limit.as_ref() => {
            return Err(conflict("--limit", o.limit.clone().unwrap_or_default(), l.clone()).into())
        }
        Some(_) => {}
    }
    if opts.extra_vars.is_empty() {
        opts.extra_vars = o.extra_vars.clone();
    }
    if opts.binary.is_none() {
        opts.binary = Some(PathBuf::from(&o.binary));
    }
    opts.store = PathBuf::from(&o.store);
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started(dir: &std::path::Path) -> ExperimentState {
        let st = ExperimentState {
            id: "exp-1".into(),
            origin: Origin {
                definition: "defs/x.yaml".into(),
                inventory: Some("lab.yaml".into()),
                limit: Some("gpu".into()),
                extra_vars: vec!["config_file=p.toml".into()],
                binary: "build/prover".into(),
                sha256: "aa".into(),
                store: "store".into(),
            },
            started_ms: 1,
            canary: vec!["h01".into()],
            baseline: vec!["h02".into()],
            baseline_release: BTreeMap::new(),
            progress: Progress::Measured,
            deploy_run: None,
            deploy_error: None,
            loads: Vec::new(),
            verdict: None,
            reason: None,
            action: None,
            action_runs: Vec::new(),
            action_result: None,
        };
        state::save(dir, &st).unwrap();
        st
    }

    fn opts(dir: &std::path::Path) -> Options {
        Options {
            definition: None,
            inventory: None,
            limit: None,
            extra_vars: Vec::new(),
            binary: None,
            state_dir: dir.to_owned(),
            store: ".fleetctl/timing".into(),
            resume: Some("exp-1".into()),
            tty: false,
        }
    }

    #[test]
    fn a_resume_takes_what_the_experiment_was_started_with() {
        let dir = tempfile::tempdir().unwrap();
        started(dir.path());
        let mut o = opts(dir.path());
        let st = resume_options(&mut o, "exp-1").unwrap();
        assert_eq!(st.progress, Progress::Measured);
        assert_eq!(
            o.definition.as_deref(),
            Some(std::path::Path::new("defs/x.yaml"))
        );
        assert_eq!(
            o.inventory.as_deref(),
            Some(std::path::Path::new("lab.yaml"))
        );
        assert_eq!(o.limit.as_deref(), Some("gpu"));
        assert_eq!(o.extra_vars, ["config_file=p.toml"]);
        assert_eq!(
            o.binary.as_deref(),
            Some(std::path::Path::new("build/prover"))
        );
        assert_eq!(o.store, PathBuf::from("store"));
    }

    #[test]
    fn a_resume_with_other_arguments_is_refused_naming_both() {
        let dir = tempfile::tempdir().unwrap();
        started(dir.path());
        let mut o = opts(dir.path());
        o.limit = Some("h09".into());
        let e = resume_options(&mut o, "exp-1").unwrap_err().to_string();
        assert!(
            e.contains("--limit") && e.contains("\"gpu\"") && e.contains("\"h09\""),
            "{e}"
        );
        let mut o = opts(dir.path());
        o.definition = Some("other.yaml".into());
        let e = resume_options(&mut o, "exp-1").unwrap_err().to_string();
        assert!(e.contains("-f") && e.contains("defs/x.yaml"), "{e}");
        let e = resume_options(&mut opts(dir.path()), "exp-9")
            .unwrap_err()
            .to_string();
        assert!(e.contains("exp-9.json"), "{e}");
    }
}
