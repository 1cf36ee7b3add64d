//! The analysis of an experiment window: plain timing records in, the
//! per-metric judgements and the verdict out. Only records that the right
//! host wrote, inside that host's window, by the build it was meant to
//! run (and, for a driven workload, for the jobs the experiment submitted)
//! count; the rest is counted as excluded, so the report says what was
//! left out and why.

use super::definition::AnalysisSpec;
use super::judge::{self, Judgement, Verdict};
use super::metric::Metric;
use fleet_wire::timing::{PartitionRecord, ProofRecord, TimingLine};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Which records of one host belong to the experiment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostWindow {
    pub host: String,
    /// The host's own clock, Unix milliseconds, both ends included.
    pub start_ms: u64,
    pub end_ms: u64,
    /// The build the host's daemon reported (`None`: not checked).
    pub build: Option<String>,
    /// For a driven workload: the job ids submitted there.
    pub jobs: Option<BTreeSet<String>>,
    /// Jobs that failed before the daemon gave them an id (the submission
    /// itself failed: a daemon that died, a refused connection). They leave
    /// no timing record and count as failures.
    #[serde(default)]
    pub unsubmitted_failures: u32,
}

impl HostWindow {
    /// Failed jobs that left no timing record: those never accepted, and
    /// accepted ones without a proof record (a daemon that died writes
    /// none). The `failures` metric counts each as a failure.
    pub fn unrecorded_failures(&self, proofs: &[&ProofRecord]) -> usize {
        let missing = self.jobs.as_ref().map_or(0, |jobs| {
            jobs.iter()
                .filter(|id| !proofs.iter().any(|p| &p.tag.job_id == *id))
                .count()
        });
        self.unsubmitted_failures as usize + missing
    }
}

impl HostWindow {
    /// Whether a record with these fields counts, else why not.
    fn admits(&self, ts_ms: u64, build: &str, job: &str) -> Result<(), Excluded> {
        if ts_ms < self.start_ms || ts_ms > self.end_ms {
            return Err(Excluded::OutsideWindow);
        }
        if self.build.as_deref().is_some_and(|b| b != build) {
            return Err(Excluded::OtherBuild);
        }
        if self.jobs.as_ref().is_some_and(|j| !j.contains(job)) {
            return Err(Excluded::OtherJob);
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy)]
enum Excluded {
    OutsideWindow,
    OtherBuild,
    OtherJob,
}

/// Records of one host as read from its timing files.
#[derive(Debug, Clone, Default)]
pub struct HostRecords {
    pub parts: Vec<PartitionRecord>,
    pub proofs: Vec<ProofRecord>,
}

/// Counts of what was read and what of it counted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub partitions: usize,
    pub proofs: usize,
    pub outside_window: usize,
    pub other_build: usize,
    pub other_job: usize,
    /// Failed jobs with no timing record (see [`HostWindow::unrecorded_failures`]).
    #[serde(default)]
    pub unrecorded_failures: usize,
}

/// One group's hosts and what they contributed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupSummary {
    pub hosts: Vec<String>,
    pub counts: Counts,
}

/// The outcome of the analysis.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    pub confidence: f64,
    pub min_samples: usize,
    pub canary: GroupSummary,
    pub baseline: GroupSummary,
    pub judgements: Vec<Judgement>,
    /// Every metric's samples per group, for the report's distributions.
    pub samples: BTreeMap<String, (Vec<f64>, Vec<f64>)>,
    pub verdict: Verdict,
    pub reason: String,
}

/// Keeps the records of `records` that `window` admits, counting the rest.
fn admitted<'a>(
    window: &HostWindow,
    records: &'a HostRecords,
    counts: &mut Counts,
) -> (Vec<&'a PartitionRecord>, Vec<&'a ProofRecord>) {
    let mut note = |e: Excluded| match e {
        Excluded::OutsideWindow => counts.outside_window += 1,
        Excluded::OtherBuild => counts.other_build += 1,
        Excluded::OtherJob => counts.other_job += 1,
    };
    let mut parts = Vec::new();
    for r in &records.parts {
        match window.admits(r.ts_ms, &r.tag.build, &r.tag.job_id) {
            Ok(()) => parts.push(r),
            Err(e) => note(e),
        }
    }
    let mut proofs = Vec::new();
    for r in &records.proofs {
        match window.admits(r.ts_ms, &r.tag.build, &r.tag.job_id) {
            Ok(()) => proofs.push(r),
            Err(e) => note(e),
        }
    }
    counts.partitions += parts.len();
    counts.proofs += proofs.len();
    (parts, proofs)
}

/// Splits timing lines into the record kinds the analysis reads.
pub fn host_records(lines: impl IntoIterator<Item = TimingLine>) -> HostRecords {
    let mut out = HostRecords::default();
    for line in lines {
        match line {
            TimingLine::Partition(p) => out.parts.push(p),
            TimingLine::Proof(p) => out.proofs.push(p),
            TimingLine::Timeline(_) | TimingLine::Devices(_) => {}
        }
    }
    out
}

/// Judges the canaries against the baselines. `records` is keyed by host
/// name; a host without an entry contributed nothing.
pub fn analyse(
    spec: &AnalysisSpec,
    canary: &[HostWindow],
    baseline: &[HostWindow],
    records: &BTreeMap<String, HostRecords>,
) -> Analysis {
    let empty = HostRecords::default();
    let group = |windows: &[HostWindow]| {
        let mut counts = Counts::default();
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); spec.metrics.len()];
        for w in windows {
            let recs = records.get(&w.host).unwrap_or(&empty);
            let (parts, proofs) = admitted(w, recs, &mut counts);
            for (m, out) in spec.metrics.iter().zip(samples.iter_mut()) {
                m.metric.samples(&parts, &proofs, out);
                if m.metric == Metric::Failures {
                    out.extend(std::iter::repeat_n(1.0, w.unrecorded_failures(&proofs)));
                }
            }
            counts.unrecorded_failures += w.unrecorded_failures(&proofs);
        }
        let summary = GroupSummary {
            hosts: windows.iter().map(|w| w.host.clone()).collect(),
            counts,
        };
        (summary, samples)
    };
    let (canary_summary, canary_samples) = group(canary);
    let (baseline_summary, baseline_samples) = group(baseline);
    let mut judgements = Vec::new();
    let mut samples = BTreeMap::new();
    for ((m, c), b) in spec
        .metrics
        .iter()
        .zip(canary_samples)
        .zip(baseline_samples)
    {
        judgements.push(judge::judge(m, &c, &b, spec.confidence, spec.min_samples));
        samples.insert(m.metric.name(), (c, b));
    }
    let (verdict, reason) = judge::overall(&judgements);
    Analysis {
        confidence: spec.confidence,
        min_samples: spec.min_samples,
        canary: canary_summary,
        baseline: baseline_summary,
        judgements,
        samples,
        verdict,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::definition::MetricSpec;
    use fleet_wire::timing::{JobTag, Phase};

    fn part(host: &str, build: &str, job: &str, ts_ms: u64, total: f64) -> PartitionRecord {
        PartitionRecord {
            v: 1,
            ts_ms,
            tag: JobTag {
                host: host.into(),
                build: build.into(),
                job_id: job.into(),
                circuit: "chain".into(),
                size: 1024,
            },
            partition: 0,
            partitions: 1,
            domain: 1024,
            backend: "cpu".into(),
            device: None,
            pinned: false,
            h2d_bytes: 0,
            h2d_ms: None,
            h2d_gbps: None,
            phases_ms: [(Phase::Total, total)].into_iter().collect(),
            phase_split_ms: Default::default(),
            device_busy_ms: None,
            error: None,
        }
    }

    fn window(host: &str, jobs: Option<&[&str]>) -> HostWindow {
        HostWindow {
            host: host.into(),
            start_ms: 1_000,
            end_ms: 2_000,
            build: Some("b1".into()),
            jobs: jobs.map(|j| j.iter().map(|s| s.to_string()).collect()),
            unsubmitted_failures: 0,
        }
    }

    fn spec() -> AnalysisSpec {
        AnalysisSpec {
            confidence: 0.98,
            min_samples: 5,
            metrics: vec![MetricSpec {
                metric: Metric::Phase(Phase::Total),
                max_regression: 0.05,
                tolerance: 0.02,
                must_improve: false,
                critical: true,
            }],
        }
    }

    /// 20 in-window records of `host` around `center` ms, plus records that
    /// must not count: before the window, another build, another job.
    fn records(host: &str, center: f64) -> HostRecords {
        let mut parts: Vec<PartitionRecord> = (0..20)
            .map(|i| {
                let ms = center + (i % 7) as f64 * center / 100.0;
                part(host, "b1", &format!("j{i}"), 1_000 + i * 10, ms)
            })
            .collect();
        parts.push(part(host, "b1", "j0", 999, 1e6));
        parts.push(part(host, "b0", "j1", 1_500, 1e6));
        parts.push(part(host, "b1", "other", 1_500, 1e6));
        HostRecords {
            parts,
            proofs: Vec::new(),
        }
    }

    fn jobs() -> Vec<String> {
        (0..20).map(|i| format!("j{i}")).collect()
    }

    #[test]
    fn only_the_window_the_build_and_the_jobs_count() {
        let jobs = jobs();
        let ids: Vec<&str> = jobs.iter().map(String::as_str).collect();
        let recs: BTreeMap<String, HostRecords> = [
            ("c1".to_string(), records("c1", 100.0)),
            ("b1".to_string(), records("b1", 100.0)),
        ]
        .into_iter()
        .collect();
        let a = analyse(
            &spec(),
            &[window("c1", Some(&ids))],
            &[window("b1", Some(&ids))],
            &recs,
        );
        assert_eq!(a.verdict, Verdict::Pass, "{a:#?}");
        let c = &a.canary.counts;
        assert_eq!(
            (c.partitions, c.outside_window, c.other_build, c.other_job),
            (20, 1, 1, 1)
        );
        // Observing (no job filter), the foreign job counts too.
        let a = analyse(&spec(), &[window("c1", None)], &[window("b1", None)], &recs);
        assert_eq!(a.canary.counts.partitions, 21);
    }

    /// Issue 30: a canary whose daemon died mid-measurement wrote records
    /// for 7 of its 20 jobs; the other 13 failed with no record at all. They
    /// are failures (the metric read 0.0000 and passed).
    #[test]
    fn failed_jobs_without_records_count_as_failures() {
        let proof = |host: &str, job: &str| ProofRecord {
            v: 1,
            ts_ms: 1_500,
            tag: JobTag {
                host: host.into(),
                build: "b1".into(),
                job_id: job.into(),
                circuit: "chain".into(),
                size: 1024,
            },
            partitions: 1,
            backend: "cpu".into(),
            verified: Some(true),
            total_ms: 10.0,
            error: None,
        };
        let ids = jobs();
        let recs: BTreeMap<String, HostRecords> = [
            (
                "c1".to_string(),
                HostRecords {
                    parts: Vec::new(),
                    proofs: ids[..7].iter().map(|j| proof("c1", j)).collect(),
                },
            ),
            (
                "b1".to_string(),
                HostRecords {
                    parts: Vec::new(),
                    proofs: ids.iter().map(|j| proof("b1", j)).collect(),
                },
            ),
        ]
        .into_iter()
        .collect();
        let failures = AnalysisSpec {
            metrics: vec![MetricSpec {
                metric: Metric::Failures,
                max_regression: 0.05,
                tolerance: 0.02,
                must_improve: false,
                critical: true,
            }],
            ..spec()
        };
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        // 3 accepted jobs without a record, 10 never accepted.
        let mut canary = window("c1", Some(&refs[..10]));
        canary.unsubmitted_failures = 10;
        let a = analyse(&failures, &[canary], &[window("b1", Some(&refs))], &recs);
        assert_eq!(a.samples["failures"].0.len(), 7 + 3 + 10);
        assert_eq!(a.canary.counts.unrecorded_failures, 13);
        assert_eq!(a.verdict, Verdict::Fail, "{a:#?}");
    }

    #[test]
    fn a_slower_canary_fails_and_a_silent_host_is_nodata() {
        let recs: BTreeMap<String, HostRecords> = [
            ("c1".to_string(), records("c1", 150.0)),
            ("b1".to_string(), records("b1", 100.0)),
        ]
        .into_iter()
        .collect();
        let a = analyse(&spec(), &[window("c1", None)], &[window("b1", None)], &recs);
        assert_eq!(a.verdict, Verdict::Fail, "{a:#?}");
        assert!(a.reason.contains("total"), "{}", a.reason);
        let a = analyse(&spec(), &[window("c9", None)], &[window("b1", None)], &recs);
        assert_eq!(a.verdict, Verdict::Nodata, "{a:#?}");
        assert_eq!(a.samples["total"].0.len(), 0);
    }
}
