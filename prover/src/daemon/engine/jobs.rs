//! The job registry: every accepted job's state and its partitions' proofs,
//! and the finished jobs kept for status queries. Plain data under the
//! engine's lock; no threads, no clocks but the job's own `Instant`s.

use crate::daemon::engine::partition::Priority;
use fleet_wire::api::{JobResult, JobState, JobStatus, PartitionProof, TimingSummary};
use fleet_wire::timing::Phase;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Finished jobs kept for `GET /v1/jobs/{id}` before the oldest are forgotten.
pub const KEEP_FINISHED: usize = 1024;

/// Longest job id the engine makes (`j<unix ms in hex>-<counter>`) with room.
pub const MAX_JOB_ID: usize = 64;

/// A client's job id as a message may name it: quoted when it could be one
/// of ours, else only its length (never a whole hostile input).
pub fn job_ref(id: &str) -> String {
    match id.len() <= MAX_JOB_ID && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        true => format!("{id:?}"),
        false => format!("of {} bytes (not a job id of this daemon)", id.len()),
    }
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// What a job is, as its status reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// The bundled circuit or the Filecoin proof kind.
    pub circuit: String,
    /// Constraints per partition.
    pub size: u64,
    pub partitions: u32,
    /// Set for a Filecoin job: its result also carries the partitions'
    /// proofs concatenated, as filecoin-proofs returns them.
    pub sector_size: Option<u64>,
    /// Its place in the queues.
    pub priority: Priority,
    /// Reading its parameter file at submission, ms (`None`: it was loaded).
    pub params_load_ms: Option<f64>,
}

struct JobEntry {
    req: JobSpec,
    state: JobState,
    submitted: Instant,
    submitted_ms: u64,
    started: bool,
    partitions_done: u32,
    proofs: Vec<Option<PartitionProof>>,
    phases_ms: BTreeMap<Phase, f64>,
    error: Option<String>,
    cancelled: Arc<AtomicBool>,
    total_ms: f64,
}

impl JobEntry {
    fn status(&self, id: &str, backend: &str) -> JobStatus {
        let result = (self.state == JobState::Done).then(|| JobResult {
            proofs: self.proofs.iter().flatten().cloned().collect(),
            proof: self.req.sector_size.map(|_| {
                self.proofs
                    .iter()
                    .flatten()
                    .map(|p| p.proof.as_str())
                    .collect::<String>()
            }),
            verified: self
                .proofs
                .iter()
                .all(|p| p.as_ref().is_some_and(|p| p.verified)),
            backend: backend.to_string(),
            timing: TimingSummary {
                total_ms: self.total_ms,
                phases_ms: self.phases_ms.clone(),
            },
        });
        JobStatus {
            job_id: id.to_string(),
            state: self.state,
            circuit: self.req.circuit.clone(),
            size: self.req.size,
            sector_size: self.req.sector_size,
            partitions: self.req.partitions,
            partitions_done: self.partitions_done,
            submitted_ms: self.submitted_ms,
            priority: Some(self.req.priority.name().to_string()),
            params_load_ms: self.req.params_load_ms,
            error: self.error.clone(),
            result,
        }
    }

    /// Ends the job with `state`; its partitions not yet started are skipped.
    fn end(&mut self, state: JobState, error: Option<String>) {
        self.cancelled.store(true, Ordering::SeqCst);
        self.state = state;
        if error.is_some() {
            self.error = error;
        }
        self.total_ms = ms_since(self.submitted);
    }
}

/// A job that just finished, for the proof record and the counters.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub state: JobState,
    pub total_ms: f64,
    pub error: Option<String>,
    pub partitions: u32,
}

/// What recording a partition's result did.
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    /// The job is gone (forgotten) or already finished: the result is dropped.
    Dropped,
    /// Counted; the job goes on.
    Progress,
    /// The job finished with this partition.
    Finished(Finished),
}

/// Every job the engine accepted and has not forgotten.
pub struct Jobs {
    map: HashMap<String, JobEntry>,
    finished: VecDeque<String>,
    next_id: u64,
    keep: usize,
}

impl Default for Jobs {
    fn default() -> Self {
        Self::with_keep(KEEP_FINISHED)
    }
}

impl Jobs {
    /// A registry that remembers `keep` finished jobs.
    pub fn with_keep(keep: usize) -> Self {
        Jobs {
            map: HashMap::new(),
            finished: VecDeque::new(),
            next_id: 0,
            keep,
        }
    }

    /// Jobs accepted and not finished.
    pub fn unfinished(&self) -> u64 {
        self.map.values().filter(|j| !j.state.is_finished()).count() as u64
    }

    /// (unfinished, of which started).
    pub fn depth(&self) -> (u64, u64) {
        let unfinished = self.map.values().filter(|j| !j.state.is_finished());
        unfinished.fold((0, 0), |(d, s), j| (d + 1, s + u64::from(j.started)))
    }

    /// Unfinished jobs by what they prove (`circuit`): (queued, running).
    pub fn by_circuit(&self) -> BTreeMap<String, (u32, u32)> {
        let mut out = BTreeMap::<String, (u32, u32)>::new();
        for j in self.map.values().filter(|j| !j.state.is_finished()) {
            let e = out.entry(j.req.circuit.clone()).or_default();
            match j.started {
                true => e.1 += 1,
                false => e.0 += 1,
            }
        }
        out
    }

    /// Registers a queued job; returns its id. `now_ms` is the wall clock
    /// (Unix ms) the id and the status carry.
    pub fn insert(
        &mut self,
        req: JobSpec,
        cancelled: Arc<AtomicBool>,
        submitted: Instant,
        now_ms: u64,
    ) -> String {
        self.next_id += 1;
        let id = format!("j{:x}-{}", now_ms, self.next_id);
        let partitions = req.partitions as usize;
        self.map.insert(
            id.clone(),
            JobEntry {
                state: JobState::Queued,
                submitted,
                submitted_ms: now_ms,
                started: false,
                partitions_done: 0,
                proofs: vec![None; partitions],
                phases_ms: BTreeMap::new(),
                error: None,
                cancelled,
                total_ms: 0.0,
                req,
            },
        );
        id
    }

    pub fn status(&self, id: &str, backend: &str) -> Option<JobStatus> {
        self.map.get(id).map(|j| j.status(id, backend))
    }

    /// Marks the job running; false when it finished (or was cancelled) meanwhile.
    pub fn start(&mut self, id: &str) -> bool {
        match self.map.get_mut(id) {
            Some(job) if !job.state.is_finished() => {
                job.started = true;
                job.state = JobState::Running;
                true
            }
            _ => false,
        }
    }

    /// Cancels an unfinished job. `None`: no such job; `Some(false)`: it had
    /// finished already and is unchanged.
    pub fn cancel(&mut self, id: &str, why: &str) -> Option<bool> {
        let job = self.map.get_mut(id)?;
        if job.state.is_finished() {
            return Some(false);
        }
        job.end(JobState::Cancelled, Some(why.to_string()));
        self.finished.push_back(id.to_string());
        self.forget_old();
        Some(true)
    }

    /// Cancels every queued job none of whose partitions started; returns
    /// how many.
    pub fn cancel_unstarted(&mut self, why: &str) -> usize {
        let ids: Vec<String> = self
            .map
            .iter()
            .filter(|(_, j)| j.state == JobState::Queued && !j.started)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &ids {
            if let Some(job) = self.map.get_mut(id) {
                job.end(JobState::Cancelled, Some(why.to_string()));
            }
            self.finished.push_back(id.clone());
        }
        self.forget_old();
        ids.len()
    }

    /// Records partition `partition`'s outcome with its phases. A failure
    /// fails the job and skips its other partitions.
    pub fn record(
        &mut self,
        id: &str,
        partition: u32,
        phases_ms: &BTreeMap<Phase, f64>,
        proof: Result<PartitionProof, String>,
    ) -> Recorded {
        let Some(job) = self.map.get_mut(id) else {
            return Recorded::Dropped;
        };
        if job.state.is_finished() {
            // Cancelled or already failed: the partition's work is dropped.
            return Recorded::Dropped;
        }
        for (phase, v) in phases_ms {
            *job.phases_ms.entry(*phase).or_insert(0.0) += v;
        }
        match proof {
            Ok(p) => {
                let slot = job.proofs.get_mut(partition as usize);
                // A partition counts once, however often it is reported.
                if let Some(slot @ None) = slot {
                    *slot = Some(p);
                    job.partitions_done += 1;
                }
                if job.partitions_done < job.req.partitions {
                    return Recorded::Progress;
                }
                job.end(JobState::Done, None);
            }
            Err(e) => job.end(
                JobState::Failed,
                Some(format!("partition {partition}: {e}")),
            ),
        }
        let done = Finished {
            state: job.state,
            total_ms: job.total_ms,
            error: job.error.clone(),
            partitions: job.req.partitions,
        };
        self.finished.push_back(id.to_string());
        self.forget_old();
        Recorded::Finished(done)
    }

    fn forget_old(&mut self) {
        while self.finished.len() > self.keep {
            if let Some(old) = self.finished.pop_front() {
                self.map.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(partitions: u32) -> JobSpec {
        JobSpec {
            circuit: "chain".into(),
            size: 1024,
            partitions,
            sector_size: None,
            priority: Priority::Normal,
            params_load_ms: None,
        }
    }

    fn proof(partition: u32) -> PartitionProof {
        PartitionProof {
            partition,
            proof: format!("p{partition}"),
            public_inputs: vec![],
            verified: true,
            device: Some(partition % 2),
        }
    }

    fn phases(ms: f64) -> BTreeMap<Phase, f64> {
        BTreeMap::from([(Phase::Synthesis, ms)])
    }

    fn job(jobs: &mut Jobs, partitions: u32) -> (String, Arc<AtomicBool>) {
        let flag = Arc::new(AtomicBool::new(false));
        let id = jobs.insert(req(partitions), flag.clone(), Instant::now(), 0x10);
        (id, flag)
    }

    #[test]
    fn a_job_is_done_when_every_partition_is_in_and_keeps_their_order() {
        let mut jobs = Jobs::default();
        let (id, flag) = job(&mut jobs, 2);
        assert!(id.starts_with("j10-"), "{id}");
        assert_eq!(jobs.depth(), (1, 0));
        assert!(jobs.start(&id));
        assert_eq!(jobs.depth(), (1, 1));
        assert_eq!(
            jobs.record(&id, 1, &phases(2.0), Ok(proof(1))),
            Recorded::Progress
        );
        // A duplicate report of the same partition does not finish the job.
        assert_eq!(
            jobs.record(&id, 1, &phases(0.0), Ok(proof(1))),
            Recorded::Progress
        );
        let Recorded::Finished(f) = jobs.record(&id, 0, &phases(3.0), Ok(proof(0))) else {
            panic!("not finished");
        };
        assert_eq!((f.state, f.partitions, f.error), (JobState::Done, 2, None));
        let s = jobs.status(&id, "cpu").expect("status");
        let r = s.result.expect("result");
        assert_eq!(
            r.proofs.iter().map(|p| p.partition).collect::<Vec<_>>(),
            [0, 1]
        );
        assert!(r.verified);
        assert_eq!(r.timing.phases_ms[&Phase::Synthesis], 5.0);
        assert_eq!(jobs.unfinished(), 0);
        // Finishing marks the job so its leftover partitions are skipped.
        assert!(flag.load(Ordering::SeqCst));
    }

    #[test]
    fn a_failed_partition_fails_the_job_and_later_results_are_dropped() {
        let mut jobs = Jobs::default();
        let (id, flag) = job(&mut jobs, 3);
        jobs.start(&id);
        let Recorded::Finished(f) = jobs.record(&id, 2, &phases(1.0), Err("boom".into())) else {
            panic!("not finished");
        };
        assert_eq!(f.state, JobState::Failed);
        assert_eq!(f.error.as_deref(), Some("partition 2: boom"));
        assert!(
            flag.load(Ordering::SeqCst),
            "the other partitions are skipped"
        );
        assert_eq!(
            jobs.record(&id, 0, &phases(1.0), Ok(proof(0))),
            Recorded::Dropped
        );
        assert_eq!(jobs.status(&id, "cpu").expect("status").partitions_done, 0);
        assert!(!jobs.start(&id));
    }

    #[test]
    fn cancel_and_drain_end_only_what_they_should() {
        let mut jobs = Jobs::default();
        let (running, _) = job(&mut jobs, 1);
        let (queued, queued_flag) = job(&mut jobs, 1);
        let (other, _) = job(&mut jobs, 1);
        jobs.start(&running);
        assert_eq!(jobs.cancel("nope", "x"), None);
        assert_eq!(jobs.cancel(&other, "by request"), Some(true));
        assert_eq!(jobs.cancel(&other, "again"), Some(false));
        assert_eq!(
            jobs.status(&other, "cpu").and_then(|s| s.error).as_deref(),
            Some("by request")
        );
        // Draining cancels the queued job none of whose partitions started.
        assert_eq!(jobs.cancel_unstarted("draining"), 1);
        assert!(queued_flag.load(Ordering::SeqCst));
        assert_eq!(
            jobs.status(&queued, "cpu").map(|s| s.state),
            Some(JobState::Cancelled)
        );
        assert_eq!(
            jobs.status(&running, "cpu").map(|s| s.state),
            Some(JobState::Running)
        );
        assert_eq!(
            jobs.record(&queued, 0, &phases(1.0), Ok(proof(0))),
            Recorded::Dropped
        );
    }

    #[test]
    fn only_the_newest_finished_jobs_are_remembered() {
        let mut jobs = Jobs::with_keep(2);
        let ids: Vec<String> = (0..3).map(|_| job(&mut jobs, 1).0).collect();
        for id in &ids {
            jobs.start(id);
            jobs.record(id, 0, &phases(1.0), Ok(proof(0)));
        }
        assert!(jobs.status(&ids[0], "cpu").is_none());
        assert!(jobs.status(&ids[1], "cpu").is_some());
        assert!(jobs.status(&ids[2], "cpu").is_some());
    }
}
