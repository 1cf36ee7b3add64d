//! The first stage: each canary's release (what a restore brings back),
//! and a check that every host of the experiment serves.

use super::error::ExperimentError;
use super::stages::Exp;
use crate::experiment::log::Stage;
use crate::experiment::report::short;
use crate::experiment::workload;
use crate::fanout;
use crate::inventory::Host;
use crate::steps::{remote, Release, StepCtx};
use crate::transport::Transport;

impl Exp {
    /// Reads each canary's release (what a restore brings back) and checks
    /// that every host of the experiment serves: a baseline that does not
    /// answer cannot be measured against.
    pub(super) async fn prepare(&mut self) -> Result<(), ExperimentError> {
        self.log.started(
            Stage::Prepare,
            format!(
                "canary {}; baseline {}",
                self.st.canary.join(", "),
                self.st.baseline.join(", ")
            ),
        );
        let hosts: Vec<(Host, bool)> = self
            .groups
            .canary
            .iter()
            .map(|h| (h.clone(), true))
            .chain(self.groups.baseline.iter().map(|h| (h.clone(), false)))
            .collect();
        let results = fanout::for_each_host(
            &hosts,
            |(h, _)| h.name.as_str(),
            hosts.len(),
            |(host, _)| async move { preflight(&host).await },
        )
        .await;
        let mut problems = Vec::new();
        for ((host, is_canary), r) in hosts.into_iter().zip(results) {
            match r {
                Ok(Ok((release, build))) => {
                    self.log.host(
                        Stage::Prepare,
                        &host.name,
                        format!("release {}, daemon build {build}", short(&release)),
                    );
                    if is_canary {
                        self.st.baseline_release.insert(host.name, release);
                    }
                }
                Ok(Err(problem)) => problems.push((host.name, problem)),
                Err(failed) => problems.push((host.name, failed.reason)),
            }
        }
        if let Some((host, problem)) = problems.into_iter().next() {
            return Err(ExperimentError::Preflight { host, problem });
        }
        self.log.finished(Stage::Prepare, "every host serves");
        Ok(())
    }
}

/// The release a host serves and its daemon's build, or why it cannot take
/// part.
async fn preflight(host: &Host) -> Result<(String, String), String> {
    let t = Transport::connect(host).await.map_err(|e| e.to_string())?;
    let r = async {
        let release = Release::on_host(String::new(), None);
        let ctx = StepCtx::new(host, &t, &release);
        let current = remote::current_release(&ctx)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no release is current on the host: nothing to measure against or restore to")?;
        let status = workload::daemon_status(&t, host)
            .await
            .map_err(|e| format!("the daemon does not answer: {e}"))?;
        Ok((current, status.build))
    }
    .await;
    let _ = t.close().await;
    r
}
