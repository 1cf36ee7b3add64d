//! Running an experiment, stage by stage: pick the hosts and read each
//! canary's release; roll the candidate to the canaries with the rollout
//! playbook; drive the workload on canaries and baselines at once; collect
//! their timing records; judge; then promote (the rollout, to the rest of
//! the selection), restore (the restart playbook, on each canary's own
//! earlier release: drain, wait_release, start, verify, health) or keep.
//!
//! Ctrl-C or a failure before the verdict's action restores the canaries.
//! The state is saved after every stage; `--resume` continues from it.

use super::analysis::{analyse, Analysis, HostRecords, HostWindow};
use super::definition::{self, Definition, DefinitionError, Workload};
use super::groups::{self, GroupError, Groups};
use super::judge::Verdict;
use super::log::{ExperimentLog, Stage};
use super::raw::Action;
use super::records::{self, RecordsError};
use super::report::{self, short, Candidate, Report};
use super::state::{self, ExperimentState, Origin, Progress, StateError};
use super::workload::{self, HostLoad, WorkloadError};
use crate::audit::AuditError;
use crate::executor::{
    self, new_run_id, Build, ExecError, Prepared, RealRunner, Reporter, RunEnd, RunOptions, Stop,
};
use crate::fanout::{self, TaskFailed};
use crate::inventory::{self, select, Host, InventoryError};
use crate::playbook::{self, BatchSize, Playbook, PlaybookError, Strategy};
use crate::steps::{self, remote, Release, StepCtx};
use crate::timing::collect::{collect_all, CHUNK};
use crate::timing::store::Store;
use crate::transport::{quote::quote, Transport};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// What `fleetctl experiment` was asked to do, as plain values.
#[derive(Debug, Clone)]
pub struct Options {
    pub definition: Option<PathBuf>,
    pub inventory: Option<PathBuf>,
    pub limit: Option<String>,
    pub extra_vars: Vec<String>,
    /// The candidate; `None`: the default build (or a resumed one's).
    pub binary: Option<PathBuf>,
    pub state_dir: PathBuf,
    /// The timing store the records are collected into.
    pub store: PathBuf,
    pub resume: Option<String>,
    /// Draw progress spinners.
    pub tty: bool,
}

/// How an experiment ended, for the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The verdict was a pass and its action succeeded.
    Pass,
    /// The verdict was not a pass (fail, marginal, NODATA, or the candidate
    /// never deployed); its action succeeded.
    NotPass,
    /// The action's rollout or restore failed on a host.
    HostsFailed,
    Interrupted,
}

#[derive(Debug)]
pub struct Finished {
    pub report: Report,
    pub end: End,
}

#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    #[error(transparent)]
    Definition(#[from] DefinitionError),
    #[error(transparent)]
    Inventory(Box<InventoryError>),
    #[error(transparent)]
    Groups(#[from] GroupError),
    #[error(transparent)]
    Playbook(#[from] PlaybookError),
    #[error("candidate {}: {cause} (build it with `cargo build --release -p prover`, or pass --binary PATH)", path.display())]
    Binary {
        path: PathBuf,
        cause: Box<steps::Cause>,
    },
    #[error("{host}: {problem}")]
    Preflight { host: String, problem: String },
    #[error(transparent)]
    State(#[from] StateError),
    #[error(transparent)]
    Audit(#[from] AuditError),
    #[error(transparent)]
    Exec(Box<ExecError>),
    #[error(transparent)]
    Workload(#[from] WorkloadError),
    #[error(transparent)]
    Records(#[from] RecordsError),
    #[error(transparent)]
    Task(#[from] TaskFailed),
    #[error("--resume {0}: the experiment has no definition recorded, and none was given")]
    NoDefinition(String),
}

impl From<InventoryError> for ExperimentError {
    fn from(e: InventoryError) -> Self {
        ExperimentError::Inventory(Box::new(e))
    }
}

impl From<ExecError> for ExperimentError {
    fn from(e: ExecError) -> Self {
        ExperimentError::Exec(Box::new(e))
    }
}

impl From<select::SelectError> for ExperimentError {
    fn from(e: select::SelectError) -> Self {
        ExperimentError::Inventory(Box::new(InventoryError::Select(e)))
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Everything the stages share.
struct Exp {
    def: Definition,
    inventory: String,
    groups: Groups,
    candidate: Arc<Build>,
    opts: Options,
    log: ExperimentLog,
    st: ExperimentState,
    analysis: Option<Analysis>,
    runs: Vec<(String, String)>,
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

/// Whether the canaries may be off their baseline release at this point.
fn changed_canaries(p: Progress) -> bool {
    matches!(
        p,
        Progress::Deploying | Progress::Deployed | Progress::Measured | Progress::Judged
    )
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

fn interrupted(stop: &watch::Receiver<Stop>) -> bool {
    *stop.borrow() != Stop::Run
}

impl Exp {
    fn save(&self) -> Result<(), ExperimentError> {
        Ok(state::save(&self.opts.state_dir, &self.st)?)
    }

    /// Drives the stages from wherever the state says.
    async fn stages(&mut self, stop: watch::Receiver<Stop>) -> Result<End, ExperimentError> {
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

    /// Reads each canary's release (what a restore brings back) and checks
    /// that every host of the experiment serves: a baseline that does not
    /// answer cannot be measured against.
    async fn prepare(&mut self) -> Result<(), ExperimentError> {
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
        let cand = self.candidate.sha256.clone().unwrap_or_default();
        if self.def.candidate_config.is_some() {
            if let Some((h, _)) = self.st.baseline_release.iter().find(|(_, r)| **r == cand) {
                return Err(ExperimentError::Preflight {
                    host: h.clone(),
                    problem: format!(
                        "runs the candidate's binary (release {}) already: shipping the candidate's config into that release would change the baseline it is restored to; give the candidate a binary of its own",
                        short(&cand)
                    ),
                });
            }
        }
        self.log.finished(Stage::Prepare, "every host serves");
        Ok(())
    }

    fn sub_run_options(&self, playbook: &str, resume: Option<String>) -> RunOptions {
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

    async fn sub_run(
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
    async fn deploy(
        &mut self,
        stop: watch::Receiver<Stop>,
    ) -> Result<executor::Finished, ExperimentError> {
        let mut pb = playbook::load("rollout")?;
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

    /// The workload on every canary and baseline at once.
    async fn measure(
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
        let results = fanout::for_each_host(
            &hosts,
            |h| h.name.as_str(),
            hosts.len(),
            |host| {
                let (w, stop) = (w.clone(), stop.clone());
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
                            workload::drive(t.clone(), &host, Some(build), s, stop).await
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
    async fn collect(&mut self) {
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
                    None => format!("{} new bytes", s.new_bytes),
                    Some(e) => format!("collect failed: {e}"),
                },
            );
        }
        self.log.finished(Stage::Collect, "");
    }

    /// Canaries whose daemon does not answer now, each with why.
    async fn canaries_down(&self) -> Vec<String> {
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

    fn analyse(&self) -> Result<Analysis, ExperimentError> {
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

    /// Puts every canary back on its own earlier release, one restart run
    /// per release.
    async fn restore(
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
            let mut pb = playbook::load("restart")?;
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

    async fn interrupted_restore(
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

    async fn act(&mut self, stop: &watch::Receiver<Stop>) -> Result<End, ExperimentError> {
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
                let mut pb = playbook::load("rollout")?;
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

    fn report(&self) -> Report {
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

/// The release a host serves and its daemon's build, or why it cannot take
/// part.
async fn preflight(host: &Host) -> Result<(String, String), String> {
    let t = Transport::connect(host).await.map_err(|e| e.to_string())?;
    let r = async {
        let release = Release {
            binary: PathBuf::new(),
            sha256: String::new(),
            config: None,
            compressed: Default::default(),
        };
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

/// The command that puts kept canaries back: the experiment's own
/// inventory and variables (without `-i` it would act on the built-in local
/// inventory), the canaries by name.
pub fn keep_hint(origin: &Origin, canary: &[String], state_dir: &std::path::Path) -> String {
    let qt = |s: &str| quote(s).unwrap_or_else(|_| format!("{s:?}"));
    let mut cmd = "fleetctl run -p rollback".to_owned();
    if let Some(inv) = &origin.inventory {
        cmd.push_str(&format!(" -i {}", qt(inv)));
    }
    for e in &origin.extra_vars {
        cmd.push_str(&format!(" -e {}", qt(e)));
    }
    cmd.push_str(&format!(" --limit {}", qt(&canary.join(","))));
    if state_dir != std::path::Path::new(".fleetctl") {
        cmd.push_str(&format!(
            " --state-dir {}",
            qt(&state_dir.display().to_string())
        ));
    }
    cmd
}

fn workload_text(w: &Workload) -> String {
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
            keep_hint(&o, &canary, std::path::Path::new(".fleetctl")),
            "fleetctl run -p rollback -i 'lab fleet.yaml' -e config_file=p.toml --limit h1,h2"
        );
        let local = Origin {
            inventory: None,
            extra_vars: vec![],
            ..o
        };
        assert_eq!(
            keep_hint(&local, &canary[..1], std::path::Path::new("/var/fleet")),
            "fleetctl run -p rollback --limit h1 --state-dir /var/fleet"
        );
    }

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

    #[test]
    fn only_stages_that_touched_the_canaries_restore_them() {
        assert!(!changed_canaries(Progress::Prepared));
        assert!(changed_canaries(Progress::Deploying));
        assert!(changed_canaries(Progress::Judged));
        assert!(!changed_canaries(Progress::Acting));
        assert!(!changed_canaries(Progress::Done));
    }
}
