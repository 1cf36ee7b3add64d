//! The experiment in progress ([`Exp`]) and the loop that takes it from
//! the stage its state names to the next, saving after each; the report
//! of where it got.

use super::error::ExperimentError;
use super::options::{End, Options};
use crate::executor::{Build, RunEnd, Stop};
use crate::experiment::analysis::Analysis;
use crate::experiment::definition::{self, Definition, Workload};
use crate::experiment::groups::Groups;
use crate::experiment::judge::Verdict;
use crate::experiment::log::{ExperimentLog, Stage};
use crate::experiment::raw::Action;
use crate::experiment::report::{self, Candidate, Report};
use crate::experiment::state::{self, ExperimentState, Progress};
use std::sync::Arc;
use tokio::sync::watch;

/// Everything the stages share.
pub(super) struct Exp {
    pub(super) def: Definition,
    pub(super) inventory: String,
    pub(super) groups: Groups,
    pub(super) candidate: Arc<Build>,
    pub(super) opts: Options,
    pub(super) log: ExperimentLog,
    pub(super) st: ExperimentState,
    pub(super) analysis: Option<Analysis>,
    pub(super) runs: Vec<(String, String)>,
}

/// Whether the canaries may be off their baseline release at this point.
pub(super) fn changed_canaries(p: Progress) -> bool {
    matches!(
        p,
        Progress::Deploying | Progress::Deployed | Progress::Measured | Progress::Judged
    )
}

fn interrupted(stop: &watch::Receiver<Stop>) -> bool {
    *stop.borrow() != Stop::Run
}

impl Exp {
    pub(super) fn save(&self) -> Result<(), ExperimentError> {
        Ok(state::save(&self.opts.state_dir, &self.st)?)
    }

    /// Drives the stages from wherever the state says.
    pub(super) async fn stages(
        &mut self,
        stop: watch::Receiver<Stop>,
    ) -> Result<End, ExperimentError> {
        loop {
            if interrupted(&stop) && changed_canaries(self.st.progress) {
                return self.interrupted_restore(&stop).await;
            }
            match self.st.progress {
                Progress::Prepared => {
                    self.prepare().await?;
                    self.st.progress = Progress::Deploying;
                }
                Progress::Deploying => {
                    let fin = self.deploy(stop.clone()).await?;
                    self.st.deploy_run = Some(fin.summary.run_id.clone());
                    self.runs
                        .push(("deploy".into(), fin.summary.run_id.clone()));
                    match fin.summary.end {
                        RunEnd::Ok => self.st.progress = Progress::Deployed,
                        RunEnd::Interrupted => return self.interrupted_restore(&stop).await,
                        RunEnd::HostsFailed | RunEnd::Halted => {
                            let failed: Vec<String> = fin
                                .summary
                                .hosts
                                .iter()
                                .filter(|(_, s)| s.is_failure())
                                .map(|(h, s)| {
                                    let why = fin
                                        .table
                                        .rows()
                                        .into_iter()
                                        .find(|r| r.host == *h)
                                        .and_then(|r| r.error)
                                        .unwrap_or_default();
                                    format!("{h} {}: {why}", s.label())
                                })
                                .collect();
                            let e = format!("the candidate did not deploy: {}", failed.join("; "));
                            self.log.failed(Stage::Deploy, &e);
                            self.st.deploy_error = Some(e.clone());
                            self.st.verdict = Some(Verdict::Fail);
                            self.st.reason = Some(e);
                            self.st.action = Some(Action::Restore);
                            self.st.progress = Progress::Acting;
                        }
                    }
                }
                Progress::Deployed => {
                    let loads = self.measure(stop.clone()).await?;
                    let cut = loads.iter().any(|l| l.interrupted);
                    self.st.loads = loads;
                    self.st.progress = Progress::Measured;
                    if cut || interrupted(&stop) {
                        self.save()?;
                        return self.interrupted_restore(&stop).await;
                    }
                }
                Progress::Measured => {
                    self.collect().await;
                    let mut a = self.analyse()?;
                    let mut action = match a.verdict {
                        Verdict::Pass => self.def.actions.pass,
                        Verdict::Marginal => self.def.actions.marginal,
                        Verdict::Fail => self.def.actions.fail,
                        Verdict::Nodata => self.def.actions.nodata,
                    };
                    // A canary whose daemon is gone serves nothing, whatever
                    // its records say (a dead daemon writes none): the
                    // candidate fails and the canaries go back.
                    let down = self.canaries_down().await;
                    if !down.is_empty() {
                        a.reason = format!(
                            "the daemon of canary {} is gone at the end of the measurement; the statistics ({}: {}) do not count",
                            down.join("; "),
                            a.verdict.label(),
                            a.reason
                        );
                        a.verdict = Verdict::Fail;
                        action = Action::Restore;
                    }
                    self.log.finished(
                        Stage::Analyse,
                        format!(
                            "{} ({}): {}",
                            a.verdict.label(),
                            a.reason,
                            report::action_name(action)
                        ),
                    );
                    self.st.verdict = Some(a.verdict);
                    self.st.reason = Some(a.reason.clone());
                    self.st.action = Some(action);
                    self.analysis = Some(a);
                    self.st.progress = Progress::Judged;
                }
                Progress::Judged => self.st.progress = Progress::Acting,
                Progress::Acting => {
                    let end = self.act(&stop).await?;
                    self.st.progress = Progress::Done;
                    self.save()?;
                    return Ok(end);
                }
                Progress::Done => {
                    return Ok(match self.st.verdict {
                        Some(Verdict::Pass) => End::Pass,
                        _ => End::NotPass,
                    })
                }
            }
            self.save()?;
        }
    }

    pub(super) fn report(&self) -> Report {
        let (verdict, reason) = match (&self.st.verdict, &self.st.reason) {
            (Some(v), Some(r)) => (*v, r.clone()),
            _ => (
                Verdict::Nodata,
                "not judged: the experiment stopped before its analysis".to_owned(),
            ),
        };
        let mut runs = self.runs.clone();
        if runs.is_empty() {
            if let Some(d) = &self.st.deploy_run {
                runs.push(("deploy".into(), d.clone()));
            }
            runs.extend(
                self.st
                    .action_runs
                    .iter()
                    .map(|r| ("action".into(), r.clone())),
            );
        }
        Report {
            experiment: self.st.id.clone(),
            name: self.def.name.clone(),
            definition: self.def.source.clone(),
            candidate: Candidate {
                binary: self.st.origin.binary.clone(),
                sha256: self.st.origin.sha256.clone(),
                config: self
                    .def
                    .candidate_config
                    .as_ref()
                    .map(|c| c.display().to_string()),
            },
            canary: self
                .st
                .canary
                .iter()
                .map(|h| {
                    (
                        h.clone(),
                        self.st.baseline_release.get(h).cloned().unwrap_or_default(),
                    )
                })
                .collect(),
            baseline: self.st.baseline.clone(),
            workload: workload_text(&self.def.workload),
            loads: self.st.loads.clone(),
            deploy_error: self.st.deploy_error.clone(),
            analysis: self.analysis.clone(),
            verdict,
            reason,
            action: self.st.action,
            action_result: self.st.action_result.clone(),
            runs,
            audit: self.log.path().display().to_string(),
        }
    }
}

pub(super) fn workload_text(w: &Workload) -> String {
    match w {
        Workload::Observe { duration } => {
            format!("observe real traffic for {}", humantime::format_duration(*duration))
        }
        Workload::Submit(s) => format!(
            "{} {} of size {} ({} partition(s)), {} in flight per host, on every canary and baseline at once",
            match s.amount {
                definition::Amount::Jobs(n) => format!("{n} jobs of"),
                definition::Amount::Duration(d) =>
                    format!("{} of", humantime::format_duration(d)),
            },
            s.circuit,
            s.size,
            s.partitions,
            s.concurrency
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_stages_that_touched_the_canaries_restore_them() {
        assert!(!changed_canaries(Progress::Prepared));
        assert!(changed_canaries(Progress::Deploying));
        assert!(changed_canaries(Progress::Judged));
        assert!(!changed_canaries(Progress::Acting));
        assert!(!changed_canaries(Progress::Done));
    }
}
