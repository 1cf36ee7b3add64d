//! Every playbook run an experiment starts: the candidate's deployment to
//! the canaries, their restore, and the promotion to the rest.

use super::error::ExperimentError;
use super::options::End;
use super::stages::Exp;
use crate::executor::{self, Build, Prepared, RealRunner, Reporter, RunEnd, RunOptions, Stop};
use crate::experiment::judge::Verdict;
use crate::experiment::log::Stage;
use crate::experiment::raw::Action;
use crate::experiment::report::short;
use crate::experiment::state::{Origin, Progress};
use crate::inventory::Host;
use crate::playbook::{self, BatchSize, Playbook, Strategy};
use crate::transport::quote::quote_shown;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::watch;

impl Exp {
    pub(super) fn sub_run_options(&self, playbook: &str, resume: Option<String>) -> RunOptions {
        RunOptions {
            check: false,
            resume,
            state_dir: self.opts.state_dir.clone(),
            origin: executor::state::Origin {
                playbook: Some(playbook.to_owned()),
                inventory: self.st.origin.inventory.clone(),
                limit: self.st.origin.limit.clone(),
                extra_vars: self.st.origin.extra_vars.clone(),
                binary: Some(self.st.origin.binary.clone()),
                sha256: Some(self.st.origin.sha256.clone()),
            },
            resume_with: None,
        }
    }

    pub(super) async fn sub_run(
        &self,
        stage: Stage,
        playbook: Playbook,
        hosts: Vec<Host>,
        release: Arc<Build>,
        resume: Option<String>,
        stop: watch::Receiver<Stop>,
    ) -> Result<executor::Finished, ExperimentError> {
        let name = playbook.name.clone();
        let prepared = Prepared {
            playbook: Arc::new(playbook),
            inventory: self.inventory.clone(),
            hosts,
            release,
        };
        let reporters: Vec<Box<dyn Reporter>> = vec![
            Box::new(executor::progress::Progress::new(self.opts.tty)),
            self.log.reporter(stage),
        ];
        let opts = self.sub_run_options(&name, resume);
        Ok(executor::execute(prepared, &opts, Arc::new(RealRunner), reporters, stop).await?)
    }

    /// The rollout playbook on the canaries, all at once: the experiment
    /// is the canary stage, so the rollout's own canary batch is not used.
    pub(super) async fn deploy(
        &mut self,
        stop: watch::Receiver<Stop>,
    ) -> Result<executor::Finished, ExperimentError> {
        let mut pb = playbook::builtin("rollout")?.load()?;
        pb.strategy = Strategy {
            canary: 0,
            batch: BatchSize::Percent(100),
            max_fail: self.groups.canary.len(),
            rollback_on_failure: true,
            ..pb.strategy.clone()
        };
        self.log.started(
            Stage::Deploy,
            format!(
                "candidate {} to {}",
                short(&self.st.origin.sha256),
                self.st.canary.join(", ")
            ),
        );
        self.save()?;
        // A run that did not finish is resumed, skipping hosts it completed.
        let resume = self.st.deploy_run.clone();
        let fin = self
            .sub_run(
                Stage::Deploy,
                pb,
                self.groups.canary.clone(),
                self.candidate.clone(),
                resume,
                stop,
            )
            .await?;
        self.log.finished(
            Stage::Deploy,
            format!("run {}: {:?}", fin.summary.run_id, fin.summary.end),
        );
        Ok(fin)
    }

    /// Puts every canary back on its own earlier release, one restart run
    /// per release.
    pub(super) async fn restore(
        &mut self,
        stop: &watch::Receiver<Stop>,
    ) -> Result<(bool, String), ExperimentError> {
        let mut by_release: BTreeMap<String, Vec<Host>> = BTreeMap::new();
        for h in &self.groups.canary {
            if let Some(rel) = self.st.baseline_release.get(&h.name) {
                by_release.entry(rel.clone()).or_default().push(h.clone());
            }
        }
        let mut ok = true;
        let mut done = Vec::new();
        for (release, hosts) in by_release {
            let mut pb = playbook::builtin("restart")?.load()?;
            pb.strategy = Strategy {
                canary: 0,
                batch: BatchSize::Percent(100),
                max_fail: hosts.len(),
                // This is the way back; there is nothing behind it to roll to.
                rollback_on_failure: false,
                ..pb.strategy.clone()
            };
            let names: Vec<String> = hosts.iter().map(|h| h.name.clone()).collect();
            self.log.started(
                Stage::Restore,
                format!("{} back to release {}", names.join(", "), short(&release)),
            );
            // Nothing is uploaded: the release is on the host already.
            let spec = Arc::new(Build::new(PathBuf::new(), Some(release.clone())));
            let fin = self
                .sub_run(Stage::Restore, pb, hosts, spec, None, abort_only(stop))
                .await?;
            self.st.action_runs.push(fin.summary.run_id.clone());
            self.runs
                .push(("restore".into(), fin.summary.run_id.clone()));
            let good = fin.summary.end == RunEnd::Ok;
            ok &= good;
            self.log.finished(
                Stage::Restore,
                format!("run {}: {:?}", fin.summary.run_id, fin.summary.end),
            );
            done.push(format!(
                "{} {} release {}",
                names.join(", "),
                if good { "back on" } else { "NOT all back on" },
                short(&release)
            ));
        }
        Ok((ok, done.join("; ")))
    }

    pub(super) async fn interrupted_restore(
        &mut self,
        stop: &watch::Receiver<Stop>,
    ) -> Result<End, ExperimentError> {
        self.log
            .started(Stage::Restore, "interrupted: restoring the canaries");
        let (_, detail) = self.restore(stop).await?;
        self.st.action = Some(Action::Restore);
        self.st.action_result = Some(format!("interrupted; {detail}"));
        // A resume starts over from the deployment.
        self.st.progress = Progress::Prepared;
        self.st.deploy_run = None;
        self.st.action_runs.clear();
        self.save()?;
        Ok(End::Interrupted)
    }

    pub(super) async fn act(
        &mut self,
        stop: &watch::Receiver<Stop>,
    ) -> Result<End, ExperimentError> {
        let action = self.st.action.unwrap_or(Action::Restore);
        let pass = self.st.verdict == Some(Verdict::Pass);
        let verdict_end = if pass { End::Pass } else { End::NotPass };
        match action {
            Action::Keep => {
                let msg = format!(
                    "the canaries stay on the candidate; to put them back: {}",
                    keep_hint(&self.st.origin, &self.st.canary, &self.opts.state_dir)
                );
                self.log.finished(Stage::Keep, &msg);
                self.st.action_result = Some(msg);
                Ok(verdict_end)
            }
            Action::Restore => {
                let (ok, detail) = self.restore(stop).await?;
                self.st.action_result = Some(detail);
                Ok(if ok { verdict_end } else { End::HostsFailed })
            }
            Action::Promote => {
                let rest = self.groups.rest.clone();
                if rest.is_empty() {
                    let msg =
                        "nothing to promote to: the selection has no hosts besides the canaries"
                            .to_owned();
                    self.log.finished(Stage::Promote, &msg);
                    self.st.action_result = Some(msg);
                    return Ok(verdict_end);
                }
                let mut pb = playbook::builtin("rollout")?.load()?;
                pb.strategy = self.def.promote.clone();
                self.log.started(
                    Stage::Promote,
                    format!(
                        "candidate {} to {} host(s)",
                        short(&self.st.origin.sha256),
                        rest.len()
                    ),
                );
                let resume = self.st.action_runs.last().cloned();
                let fin = self
                    .sub_run(
                        Stage::Promote,
                        pb,
                        rest.clone(),
                        self.candidate.clone(),
                        resume,
                        stop.clone(),
                    )
                    .await?;
                if self.st.action_runs.last() != Some(&fin.summary.run_id) {
                    self.st.action_runs.push(fin.summary.run_id.clone());
                }
                self.runs
                    .push(("promote".into(), fin.summary.run_id.clone()));
                let ok = fin
                    .summary
                    .hosts
                    .iter()
                    .filter(|(_, s)| !s.is_failure())
                    .count();
                let msg = format!(
                    "run {}: {:?}, {ok} of {} host(s) on the candidate",
                    fin.summary.run_id,
                    fin.summary.end,
                    rest.len()
                );
                self.log.finished(Stage::Promote, &msg);
                self.st.action_result = Some(msg);
                Ok(match fin.summary.end {
                    RunEnd::Ok => verdict_end,
                    RunEnd::Interrupted => End::Interrupted,
                    RunEnd::HostsFailed | RunEnd::Halted => End::HostsFailed,
                })
            }
        }
    }
}

/// A stop channel that only follows the second Ctrl-C (abort): a restore
/// must not be cut short by the Ctrl-C that asked for it.
fn abort_only(stop: &watch::Receiver<Stop>) -> watch::Receiver<Stop> {
    let (tx, rx) = watch::channel(Stop::Run);
    let mut outer = stop.clone();
    tokio::spawn(async move {
        if outer.wait_for(|s| *s == Stop::Abort).await.is_ok() {
            let _ = tx.send(Stop::Abort);
        }
    });
    rx
}

/// The command that puts kept canaries back: the experiment's own
/// inventory and variables (without `-i` it would act on the built-in local
/// inventory), the canaries by name.
pub fn keep_hint(origin: &Origin, canary: &[String], state_dir: &Path) -> String {
    let mut cmd = "fleetctl run -p rollback".to_owned();
    if let Some(inv) = &origin.inventory {
        cmd.push_str(&format!(" -i {}", quote_shown(inv)));
    }
    for e in &origin.extra_vars {
        cmd.push_str(&format!(" -e {}", quote_shown(e)));
    }
    cmd.push_str(&format!(" --limit {}", quote_shown(&canary.join(","))));
    cmd + &executor::state_dir_flag(state_dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keep_hint_names_the_experiments_inventory_and_variables() {
        let o = Origin {
            definition: "d.yaml".into(),
            inventory: Some("lab fleet.yaml".into()),
            limit: Some("lab".into()),
            extra_vars: vec!["config_file=p.toml".into()],
            binary: "prover".into(),
            sha256: "aa".into(),
            store: ".fleetctl/timing".into(),
        };
        let canary = ["h1".to_string(), "h2".to_string()];
        assert_eq!(
            keep_hint(&o, &canary, Path::new(".fleetctl")),
            "fleetctl run -p rollback -i 'lab fleet.yaml' -e config_file=p.toml --limit h1,h2"
        );
        let local = Origin {
            inventory: None,
            extra_vars: vec![],
            ..o
        };
        assert_eq!(
            keep_hint(&local, &canary[..1], Path::new("/var/fleet")),
            "fleetctl run -p rollback --limit h1 --state-dir /var/fleet"
        );
    }
}
