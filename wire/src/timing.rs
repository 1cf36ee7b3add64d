//! The timing log: one JSON object per line, appended by the prover, collected
//! and analysed by `fleetctl timing`.
//!
//! A line is one of four kinds (the `kind` tag): a [`DevicesRecord`] when the
//! daemon starts proving and at the head of every file the log rotates to, a
//! [`PartitionRecord`] when a partition finishes, a [`ProofRecord`] when a
//! whole proof finishes, and a [`TimelineEvent`] at each hand-over in the
//! pipeline, from which a reader
//! computes how much of the time each device worker was occupied
//! ([`busy_fraction`]). How much of it the device actually computed is the
//! records' `device_busy_ms` over the same window, not the timeline.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

pub use crate::phase::{Clock, Phase, PhaseSpec, Stage, Unit};

/// Bumped whenever a field changes meaning; readers skip lines with a newer major.
pub const TIMING_SCHEMA_VERSION: u32 = 1;

/// One line of the timing log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TimingLine {
    Devices(DevicesRecord),
    Partition(PartitionRecord),
    Proof(ProofRecord),
    Timeline(TimelineEvent),
}

/// The devices a daemon opened to prove on. A device that never gets work
/// writes no other line; this one lets a reader show it at 0% instead of not
/// at all.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DevicesRecord {
    pub v: u32,
    pub ts_ms: u64,
    pub host: String,
    pub build: String,
    /// `cpu` or `cuda`.
    pub backend: String,
    /// CUDA ordinals opened and in rotation at start (empty on the CPU backend).
    pub devices: Vec<u32>,
}

impl TimingLine {
    /// Parses one line of a timing log.
    pub fn parse(line: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(line)
    }

    /// The line's schema version.
    pub fn v(&self) -> u32 {
        match self {
            TimingLine::Devices(d) => d.v,
            TimingLine::Partition(p) => p.v,
            TimingLine::Proof(p) => p.v,
            TimingLine::Timeline(e) => e.v,
        }
    }

    /// The build of the prover that wrote it.
    pub fn build(&self) -> &str {
        match self {
            TimingLine::Devices(d) => &d.build,
            TimingLine::Partition(p) => &p.tag.build,
            TimingLine::Proof(p) => &p.tag.build,
            TimingLine::Timeline(e) => &e.build,
        }
    }

    /// When it was written, Unix milliseconds.
    pub fn ts_ms(&self) -> u64 {
        match self {
            TimingLine::Devices(d) => d.ts_ms,
            TimingLine::Partition(p) => p.ts_ms,
            TimingLine::Proof(p) => p.ts_ms,
            TimingLine::Timeline(e) => e.ts_us / 1000,
        }
    }

    /// Serialises to one line (no trailing newline).
    pub fn to_line(&self) -> String {
        // Serialising plain data with string keys cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Identifies the work a record belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobTag {
    /// Host name as the prover sees it (`gethostname`), so merged fleet logs stay attributable.
    pub host: String,
    /// Build hash of the prover binary (git hash, `-dirty` when modified).
    pub build: String,
    pub job_id: String,
    /// Bundled circuit name (`chain`, `sha256`) or the caller's label.
    pub circuit: String,
    /// Constraint count the circuit was sized for.
    pub size: u64,
}

/// Emitted once per finished partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionRecord {
    /// Schema version ([`TIMING_SCHEMA_VERSION`]).
    pub v: u32,
    /// Wall-clock end of the partition, Unix milliseconds.
    pub ts_ms: u64,
    #[serde(flatten)]
    pub tag: JobTag,
    pub partition: u32,
    pub partitions: u32,
    /// Evaluation domain size (a power of two).
    pub domain: u64,
    /// `cpu` or `cuda`.
    pub backend: String,
    /// GPU ordinal for the cuda backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    /// Whether a, b, c were in page-locked memory when they were uploaded/used.
    pub pinned: bool,
    /// Bytes of every host-to-device copy of the partition: a, b, c and the
    /// MSM scalars (0 on the CPU backend).
    #[serde(default)]
    pub h2d_bytes: u64,
    /// The device's milliseconds (CUDA events) for those same copies. Absent
    /// in records written before it existed, whose `h2d_bytes` counted the
    /// MSM scalars while the `h2d` phase and `h2d_gbps` covered only a, b, c:
    /// read both through [`PartitionRecord::h2d_copies`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub h2d_ms: Option<f64>,
    /// `h2d_bytes` over `h2d_ms`, GB/s (10^9 bytes per second); in older
    /// records, the a, b, c copy's own rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub h2d_gbps: Option<f64>,
    /// Milliseconds per phase; phases that did not run are absent.
    pub phases_ms: BTreeMap<Phase, f64>,
    /// For host-timed phases whose work ran on a device: the device's own
    /// time (CUDA events) and the time spent waiting for the device, apart
    /// from the host's wall time in `phases_ms`. Absent for phases that ran
    /// on the CPU and in records written before it existed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub phase_split_ms: BTreeMap<Phase, PhaseSplit>,
    /// Milliseconds the device itself spent on this partition's copies and
    /// kernels, timed on the device (CUDA events), not by the host around the
    /// call. The phase times and `gpu_start..gpu_end` include CPU work done
    /// while the device worker was held; this does not. Absent on the CPU
    /// backend and in records written before it existed: a reader must treat
    /// absent as "not measured", never as zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_busy_ms: Option<f64>,
    /// Set when the partition failed; phases then hold what ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What of a host-timed phase the device did and how long the host waited
/// for the device; the rest of the phase's wall time is CPU work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseSplit {
    /// Milliseconds the device spent on the phase's copies and kernels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<f64>,
    /// Milliseconds waiting for the device (its lock held by other work of
    /// the same partition, such as the G2 MSM's thread).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<f64>,
}

impl PhaseSplit {
    /// Adds another measurement of the same phase (a phase can run more
    /// than once per partition); absent stays absent.
    pub fn add(&mut self, other: &PhaseSplit) {
        for (mine, theirs) in [
            (&mut self.device, other.device),
            (&mut self.wait, other.wait),
        ] {
            if let Some(t) = theirs {
                *mine.get_or_insert(0.0) += t;
            }
        }
    }
}

/// A rate in GB/s (10^9 bytes per second): the one definition writers and
/// readers share. None when nothing was copied or no time was measured.
pub fn gbps(bytes: u64, seconds: f64) -> Option<f64> {
    (bytes > 0 && seconds.is_finite() && seconds > 0.0).then(|| bytes as f64 / seconds / 1e9)
}

impl PartitionRecord {
    /// The device's milliseconds for `phase`: its split's device time, or,
    /// for a phase the device's events time ([`Clock::Device`]), the phase
    /// itself on a device backend. None where the device did not measure it.
    pub fn device_ms(&self, phase: Phase) -> Option<f64> {
        if let Some(d) = self.phase_split_ms.get(&phase).and_then(|s| s.device) {
            return Some(d);
        }
        (phase.clock() == Clock::Device && self.backend != "cpu")
            .then(|| self.phases_ms.get(&phase).copied())
            .flatten()
    }

    /// The milliseconds `phase` waited for the device, where measured.
    pub fn wait_ms(&self, phase: Phase) -> Option<f64> {
        self.phase_split_ms.get(&phase).and_then(|s| s.wait)
    }

    /// The bytes and seconds of the same host-to-device copies, so that
    /// summing both over records and dividing gives a rate the link can
    /// carry. Records with `h2d_ms` give their whole upload; older ones only
    /// their a, b, c copy (its rate times the `h2d` phase: the MSM scalars
    /// they counted in `h2d_bytes` had no time recorded).
    pub fn h2d_copies(&self) -> Option<(u64, f64)> {
        if self.h2d_bytes == 0 {
            return None;
        }
        if let Some(ms) = self.h2d_ms.filter(|ms| ms.is_finite() && *ms > 0.0) {
            return Some((self.h2d_bytes, ms / 1e3));
        }
        let ms = self
            .phases_ms
            .get(&Phase::H2d)
            .copied()
            .filter(|ms| ms.is_finite() && *ms > 0.0)?;
        let rate = self.h2d_gbps.filter(|g| g.is_finite() && *g > 0.0)?;
        let bytes = (rate * 1e6 * ms).round().min(self.h2d_bytes as f64) as u64;
        Some((bytes, ms / 1e3))
    }
}

/// Emitted once per finished proof (all partitions assembled).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProofRecord {
    pub v: u32,
    pub ts_ms: u64,
    #[serde(flatten)]
    pub tag: JobTag,
    pub partitions: u32,
    pub backend: String,
    /// Whether the prover verified the proof before returning it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified: Option<bool>,
    /// From submission to result.
    pub total_ms: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A hand-over point in the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimelineKind {
    SynthesisStart,
    SynthesisEnd,
    /// Synthesised partition queued for a device.
    GpuQueue,
    /// A device worker took it off the queue.
    GpuPickup,
    /// Device work began (after the lock).
    GpuStart,
    /// Device work ended.
    GpuEnd,
}

/// One TIMELINE event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelineEvent {
    pub v: u32,
    /// Unix microseconds.
    pub ts_us: u64,
    pub host: String,
    pub build: String,
    pub job_id: String,
    pub partition: u32,
    pub event: TimelineKind,
    /// Device ordinal (cuda) or worker index (cpu) for the gpu_* events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    /// The job's place in the queues (`critical`, `high`; absent: normal),
    /// so a TIMELINE shows which partitions jumped the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
}

impl fmt::Display for PartitionRecord {
    /// The human-readable `GPU_TIMING` line for the main log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "GPU_TIMING job={} circuit={} size={} partition={}/{} backend={} pinned={}",
            self.tag.job_id,
            self.tag.circuit,
            self.tag.size,
            self.partition,
            self.partitions,
            self.backend,
            self.pinned
        )?;
        if let Some(d) = self.device {
            write!(f, " device={d}")?;
        }
        for (phase, ms) in &self.phases_ms {
            write!(f, " {phase}={ms:.3}ms")?;
            let split = self.phase_split_ms.get(phase).copied().unwrap_or_default();
            if let Some(d) = split.device {
                write!(f, " {phase}.device={d:.3}ms")?;
            }
            if let Some(w) = split.wait {
                write!(f, " {phase}.wait={w:.3}ms")?;
            }
        }
        if self.h2d_bytes > 0 {
            write!(f, " h2d_bytes={}", self.h2d_bytes)?;
        }
        if let Some(ms) = self.h2d_ms {
            write!(f, " h2d_ms={ms:.3}")?;
        }
        if let Some(g) = self.h2d_gbps {
            write!(f, " h2d_gbps={g:.2}")?;
        }
        if let Some(b) = self.device_busy_ms {
            write!(f, " device_busy={b:.3}ms")?;
        }
        if let Some(e) = &self.error {
            write!(f, " error={e:?}")?;
        }
        Ok(())
    }
}

impl fmt::Display for ProofRecord {
    /// The human-readable `FIN_TIMING` line for the main log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "FIN_TIMING job={} circuit={} size={} partitions={} backend={} total={:.3}ms",
            self.tag.job_id,
            self.tag.circuit,
            self.tag.size,
            self.partitions,
            self.backend,
            self.total_ms
        )?;
        if let Some(v) = self.verified {
            write!(f, " verified={v}")?;
        }
        if let Some(e) = &self.error {
            write!(f, " error={e:?}")?;
        }
        Ok(())
    }
}

/// Fraction of the window `[first gpu_start, last gpu_end]` during which at
/// least one partition was on the given device, from TIMELINE events: the
/// *occupied* figure. The interval wraps the device worker's whole call, CPU
/// work inside it included, so this is an upper bound on the GPU's busy time.
/// `None` when there is no complete start/end pair.
pub fn busy_fraction<'a>(events: impl IntoIterator<Item = &'a TimelineEvent>) -> Option<f64> {
    use std::collections::HashMap;
    let mut open: HashMap<(&str, u32), u64> = HashMap::new();
    let mut intervals: Vec<(u64, u64)> = Vec::new();
    for e in events {
        let key = (e.job_id.as_str(), e.partition);
        match e.event {
            TimelineKind::GpuStart => {
                open.insert(key, e.ts_us);
            }
            TimelineKind::GpuEnd => {
                if let Some(start) = open.remove(&key) {
                    if e.ts_us >= start {
                        intervals.push((start, e.ts_us));
                    }
                }
            }
            _ => {}
        }
    }
    if intervals.is_empty() {
        return None;
    }
    intervals.sort_unstable();
    let window_start = intervals[0].0;
    let window_end = intervals.iter().map(|i| i.1).max()?;
    let mut busy = 0u64;
    let (mut cur_s, mut cur_e) = intervals[0];
    for &(s, e) in &intervals[1..] {
        if s > cur_e {
            busy += cur_e - cur_s;
            (cur_s, cur_e) = (s, e);
        } else {
            cur_e = cur_e.max(e);
        }
    }
    busy += cur_e - cur_s;
    let window = window_end - window_start;
    if window == 0 {
        return Some(1.0);
    }
    Some(busy as f64 / window as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag() -> JobTag {
        JobTag {
            host: "h1".into(),
            build: "abc123".into(),
            job_id: "j1".into(),
            circuit: "chain".into(),
            size: 1024,
        }
    }

    #[test]
    fn partition_record_round_trips_through_one_line() {
        let mut phases = BTreeMap::new();
        phases.insert(Phase::Synthesis, 1.5);
        phases.insert(Phase::H2d, 0.25);
        let rec = TimingLine::Partition(PartitionRecord {
            v: TIMING_SCHEMA_VERSION,
            ts_ms: 1,
            tag: tag(),
            partition: 0,
            partitions: 2,
            domain: 1024,
            backend: "cpu".into(),
            device: None,
            pinned: true,
            h2d_bytes: 0,
            h2d_ms: None,
            h2d_gbps: None,
            phases_ms: phases,
            phase_split_ms: BTreeMap::new(),
            device_busy_ms: Some(0.75),
            error: None,
        });
        let line = rec.to_line();
        assert!(!line.contains('\n'));
        assert!(line.contains("\"kind\":\"partition\""));
        assert!(line.contains("\"synthesis\":1.5"));
        assert!(line.contains("\"device_busy_ms\":0.75"));
        assert_eq!(TimingLine::parse(&line).unwrap(), rec);
    }

    #[test]
    fn record_without_device_busy_reads_as_not_measured() {
        // A line as written before device_busy_ms existed.
        let line = r#"{"kind":"partition","v":1,"ts_ms":1,"host":"h","build":"b","job_id":"j","circuit":"c","size":1,"partition":0,"partitions":1,"domain":2,"backend":"cuda","device":0,"pinned":true,"phases_ms":{"total":4.0}}"#;
        let TimingLine::Partition(p) = TimingLine::parse(line).unwrap() else {
            panic!("wrong kind")
        };
        assert_eq!(p.device_busy_ms, None);
        // And a record that does not carry it writes no key at all, so an
        // older reader sees the line it always did.
        let out = TimingLine::Partition(p).to_line();
        assert!(!out.contains("device_busy_ms"), "{out}");
        // A measured zero stays a zero, distinct from absent.
        let zero = line.replace("\"phases_ms\"", "\"device_busy_ms\":0.0,\"phases_ms\"");
        let TimingLine::Partition(p) = TimingLine::parse(&zero).unwrap() else {
            panic!("wrong kind")
        };
        assert_eq!(p.device_busy_ms, Some(0.0));
    }

    #[test]
    fn unknown_phase_from_newer_writer_is_kept_as_unknown() {
        let line = r#"{"kind":"partition","v":1,"ts_ms":1,"host":"h","build":"b","job_id":"j","circuit":"c","size":1,"partition":0,"partitions":1,"domain":2,"backend":"cpu","pinned":false,"phases_ms":{"warp_drive":3.0,"total":4.0}}"#;
        let TimingLine::Partition(p) = TimingLine::parse(line).unwrap() else {
            panic!("wrong kind")
        };
        assert_eq!(p.phases_ms.get(&Phase::Total), Some(&4.0));
        assert_eq!(p.phases_ms.get(&Phase::Unknown), Some(&3.0));
    }

    #[test]
    fn gpu_timing_line_names_every_phase() {
        // Every phase, each with its own value, so a phase left out of the
        // line or printed under another's name shows.
        let phases: BTreeMap<Phase, f64> = Phase::ALL
            .iter()
            .enumerate()
            .map(|(i, &p)| (p, i as f64 + 0.25))
            .collect();
        let rec = PartitionRecord {
            v: 1,
            ts_ms: 1,
            tag: tag(),
            partition: 1,
            partitions: 2,
            domain: 8,
            backend: "cuda".into(),
            device: Some(0),
            pinned: true,
            h2d_bytes: 96,
            h2d_ms: None,
            h2d_gbps: Some(51.234),
            phases_ms: phases,
            phase_split_ms: BTreeMap::new(),
            device_busy_ms: Some(1.5),
            error: None,
        };
        let s = rec.to_string();
        assert!(s.starts_with("GPU_TIMING job=j1"));
        for (i, p) in Phase::ALL.iter().enumerate() {
            let field = format!(" {p}={}.250ms", i);
            assert_eq!(s.matches(&field).count(), 1, "{field:?} in {s}");
        }
        assert!(s.contains("h2d_gbps=51.23"));
        assert!(s.contains("device=0"));
        assert!(s.contains("device_busy=1.500ms"));
    }

    #[test]
    fn h2d_copies_pair_bytes_with_the_time_of_the_same_copies() {
        // A partition of chain 2^22 as the prover wrote it before `h2d_ms`
        // existed (figures of the H200 daemon run): h2d_bytes counted a, b, c
        // and the MSM scalars, the h2d phase and h2d_gbps only a, b, c.
        // Bytes over the phase's time read 147 GB/s on a 55 GB/s link.
        let old = r#"{"kind":"partition","v":1,"ts_ms":1,"host":"h","build":"b","job_id":"j","circuit":"chain","size":4194304,"partition":0,"partitions":1,"domain":4194304,"backend":"cuda","device":0,"pinned":true,"h2d_bytes":1073741536,"h2d_gbps":55.08,"phases_ms":{"h2d":7.3}}"#;
        let TimingLine::Partition(old) = TimingLine::parse(old).unwrap() else {
            panic!("a partition record")
        };
        let naive = old.h2d_bytes as f64 / 0.0073 / 1e9;
        assert!((naive - 147.09).abs() < 0.01, "{naive}");
        let (bytes, seconds) = old.h2d_copies().unwrap();
        // By hand: 55.08e9 B/s x 7.3e-3 s = 402,084,000 B of a, b, c.
        assert_eq!(bytes, 402_084_000);
        assert_eq!(seconds, 0.0073);
        let rate = gbps(bytes, seconds).unwrap();
        assert!((rate - 55.08).abs() < 1e-9, "{rate}");

        // A record with the device time of all its copies: 1,073,741,536 B
        // in 19.5 ms is 55.06 GB/s.
        let mut new = old.clone();
        new.h2d_ms = Some(19.5);
        new.h2d_gbps = gbps(new.h2d_bytes, 19.5e-3);
        assert_eq!(new.h2d_copies(), Some((1_073_741_536, 0.0195)));
        let rate = new.h2d_gbps.unwrap();
        assert!((rate - 55.063_668_5).abs() < 1e-6, "{rate}");
        assert!(new.to_string().contains(" h2d_ms=19.500 h2d_gbps=55.06"));

        // Nothing copied, or no time for it: no rate at all, never infinity.
        let mut none = old.clone();
        none.h2d_bytes = 0;
        assert_eq!(none.h2d_copies(), None);
        let mut untimed = old;
        untimed.h2d_gbps = None;
        assert_eq!(untimed.h2d_copies(), None);
        assert_eq!(gbps(10, 0.0), None);
        assert_eq!(gbps(0, 1.0), None);
    }

    #[test]
    fn device_and_wait_time_of_a_phase_are_kept_apart_and_old_lines_still_read() {
        // A line as written before the split existed: no device time for
        // msm_l, the h2d phase (device events) is the device's own.
        let old = r#"{"kind":"partition","v":1,"ts_ms":1,"host":"h","build":"b","job_id":"j","circuit":"c","size":1,"partition":0,"partitions":1,"domain":2,"backend":"cuda","device":0,"pinned":true,"phases_ms":{"h2d":2.0,"msm_l":196.0}}"#;
        let TimingLine::Partition(mut p) = TimingLine::parse(old).unwrap() else {
            panic!("a partition record")
        };
        assert!(p.phase_split_ms.is_empty());
        assert_eq!(p.device_ms(Phase::MsmL), None);
        assert_eq!(p.device_ms(Phase::H2d), Some(2.0));
        assert_eq!(p.wait_ms(Phase::MsmL), None);
        assert!(!TimingLine::Partition(p.clone())
            .to_line()
            .contains("phase_split_ms"));
        // On the CPU backend the device-clock phases are host times.
        let mut cpu = p.clone();
        cpu.backend = "cpu".into();
        assert_eq!(cpu.device_ms(Phase::H2d), None);

        p.phase_split_ms.insert(
            Phase::MsmL,
            PhaseSplit {
                device: Some(71.5),
                wait: Some(120.25),
            },
        );
        let line = TimingLine::Partition(p.clone()).to_line();
        assert!(
            line.contains(r#""phase_split_ms":{"msm_l":{"device":71.5,"wait":120.25}}"#),
            "{line}"
        );
        assert_eq!(
            TimingLine::parse(&line).unwrap(),
            TimingLine::Partition(p.clone())
        );
        assert_eq!(p.device_ms(Phase::MsmL), Some(71.5));
        assert_eq!(p.wait_ms(Phase::MsmL), Some(120.25));
        let human = p.to_string();
        assert!(
            human.contains(" msm_l=196.000ms msm_l.device=71.500ms msm_l.wait=120.250ms"),
            "{human}"
        );
    }

    fn ev(p: u32, kind: TimelineKind, ts: u64) -> TimelineEvent {
        TimelineEvent {
            priority: None,
            v: 1,
            ts_us: ts,
            host: "h".into(),
            build: "b".into(),
            job_id: "j".into(),
            partition: p,
            event: kind,
            device: Some(0),
        }
    }

    #[test]
    fn busy_fraction_merges_overlaps_and_counts_gaps() {
        use TimelineKind::*;
        // [0,10] and [5,20] overlap -> 20 busy; gap 20..30; [30,40] -> 10 busy; window 40.
        let evs = [
            ev(0, GpuStart, 0),
            ev(1, GpuStart, 5),
            ev(0, GpuEnd, 10),
            ev(1, GpuEnd, 20),
            ev(2, GpuStart, 30),
            ev(2, GpuEnd, 40),
        ];
        let f = busy_fraction(&evs).unwrap();
        assert!((f - 0.75).abs() < 1e-12, "{f}");
        assert_eq!(busy_fraction(&[ev(0, GpuStart, 1)]), None);
    }
}
