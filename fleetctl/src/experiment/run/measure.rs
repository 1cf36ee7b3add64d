//! The measurement: the workload on every canary and baseline at once,
//! their records collected into the timing store, and the judgement.

use super::error::ExperimentError;
use super::stages::{workload_text, Exp};
use super::ticker;
use crate::executor::Stop;
use crate::experiment::analysis::{analyse, Analysis, HostRecords, HostWindow};
use crate::experiment::definition::Workload;
use crate::experiment::log::Stage;
use crate::experiment::records;
use crate::experiment::workload::{self, HostLoad, WorkloadError};
use crate::fanout;
use crate::inventory::Host;
use crate::timing::collect::{collect_all, CHUNK};
use crate::timing::store::Store;
use crate::transport::Transport;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};
use tokio::sync::watch;

impl Exp {
    /// The workload on every canary and baseline at once.
    pub(super) async fn measure(
        &mut self,
        stop: watch::Receiver<Stop>,
    ) -> Result<Vec<HostLoad>, ExperimentError> {
        let what = workload_text(&self.def.workload);
        self.log.started(Stage::Measure, &what);
        let hosts: Vec<Host> = self
            .groups
            .canary
            .iter()
            .chain(&self.groups.baseline)
            .cloned()
            .collect();
        let w = self.def.workload.clone();
        let tally = Arc::new(workload::Tally::default());
        let work = fanout::for_each_host(
            &hosts,
            |h| h.name.as_str(),
            hosts.len(),
            |host| {
                let (w, stop, tally) = (w.clone(), stop.clone(), tally.clone());
                async move {
                    let t = Arc::new(Transport::connect(&host).await.map_err(|source| {
                        WorkloadError::Transport {
                            host: host.name.clone(),
                            source,
                        }
                    })?);
                    let build = workload::daemon_status(&t, &host).await?.build;
                    let load = match &w {
                        Workload::Submit(s) => {
                            workload::drive(t.clone(), &host, Some(build), s, stop, tally).await
                        }
                        Workload::Observe { duration } => {
                            workload::observe(&t, &host, Some(build), *duration, stop).await
                        }
                    };
                    if let Ok(t) = Arc::try_unwrap(t) {
                        let _ = t.close().await;
                    }
                    load
                }
            },
        );
        let n = hosts.len();
        let results = ticker::with_progress(
            work,
            ticker::EVERY,
            |elapsed| ticker::measure_line(elapsed, &tally, n, &what),
            |line| eprintln!("{line}"),
        )
        .await;
        let mut loads: Vec<(usize, HostLoad)> = Vec::new();
        let mut first_error = None;
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(Ok(l)) => {
                    self.log.host(
                        Stage::Measure,
                        &l.window.host,
                        format!(
                            "{} ok, {} failed in {} ms{}",
                            l.ok,
                            l.failed,
                            l.window.end_ms.saturating_sub(l.window.start_ms),
                            l.errors
                                .first()
                                .map(|e| format!("; first failure: {e}"))
                                .unwrap_or_default()
                        ),
                    );
                    loads.push((i, l));
                }
                Ok(Err(e)) => {
                    self.log.failed(Stage::Measure, e.to_string());
                    first_error.get_or_insert(ExperimentError::Workload(e));
                }
                Err(failed) => {
                    self.log.failed(Stage::Measure, failed.to_string());
                    first_error.get_or_insert(ExperimentError::Task(failed));
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        loads.sort_by_key(|(i, _)| *i);
        self.log.finished(Stage::Measure, what);
        Ok(loads.into_iter().map(|(_, l)| l).collect())
    }

    /// Fetches every experiment host's new timing records into the store.
    /// A host that cannot be collected contributes fewer samples, which the
    /// judge reports (NODATA), so this never fails the experiment by itself.
    pub(super) async fn collect(&mut self) {
        let hosts: Vec<Host> = self
            .groups
            .canary
            .iter()
            .chain(&self.groups.baseline)
            .cloned()
            .collect();
        self.log
            .started(Stage::Collect, self.opts.store.display().to_string());
        let store = Store::new(&self.opts.store);
        let summary = collect_all(&hosts, &store, Duration::from_secs(120), 64, CHUNK).await;
        for s in summary {
            self.log.host(
                Stage::Collect,
                &s.host,
                match &s.error {
                    None if s.skipped > 0 => format!(
                        "{} new bytes; left out {} line(s):\n{}",
                        s.new_bytes,
                        s.skipped,
                        crate::timing::collect::skipped_text(s.skipped, &s.skipped_lines)
                    ),
                    None => format!("{} new bytes", s.new_bytes),
                    Some(e) => format!("collect failed: {e}"),
                },
            );
        }
        self.log.finished(Stage::Collect, "");
    }

    /// Canaries whose daemon does not answer now, each with why.
    pub(super) async fn canaries_down(&self) -> Vec<String> {
        let results = fanout::for_each_host(
            &self.groups.canary,
            |h| h.name.as_str(),
            self.groups.canary.len(),
            |host| async move {
                let t = Transport::connect(&host).await.map_err(|e| e.to_string())?;
                let r = workload::daemon_status(&t, &host)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string());
                let _ = t.close().await;
                r
            },
        )
        .await;
        let mut down = Vec::new();
        for (host, r) in self.groups.canary.iter().zip(results) {
            let why = match r {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => e,
                Err(failed) => failed.reason,
            };
            self.log
                .host(Stage::Measure, &host.name, format!("daemon gone: {why}"));
            down.push(format!("{} ({why})", host.name));
        }
        down
    }

    pub(super) fn analyse(&self) -> Result<Analysis, ExperimentError> {
        let store = Store::new(&self.opts.store);
        // Files fetched before the experiment began cannot hold its records
        // (a minute of slack for coarse file times).
        let since = UNIX_EPOCH + Duration::from_millis(self.st.started_ms.saturating_sub(60_000));
        let mut recs: BTreeMap<String, HostRecords> = BTreeMap::new();
        let mut windows: BTreeMap<String, HostWindow> = BTreeMap::new();
        for l in &self.st.loads {
            let (r, _unreadable) = records::read(&store, &l.window, since)?;
            recs.insert(l.window.host.clone(), r);
            windows.insert(l.window.host.clone(), l.window.clone());
        }
        let pick = |names: &[String]| -> Vec<HostWindow> {
            names
                .iter()
                .filter_map(|n| windows.get(n).cloned())
                .collect()
        };
        Ok(analyse(
            &self.def.analysis,
            &pick(&self.st.canary),
            &pick(&self.st.baseline),
            &recs,
        ))
    }
}
