//! Writes timing records and TIMELINE events: JSON lines log (appended, rotated) plus GPU_TIMING / FIN_TIMING lines.
//!
//! [`TimingLog`] appends one [`TimingLine`] per line, flushes each record so a
//! crash loses nothing already reported, and rotates by size by renaming
//! (`timing.jsonl` -> `timing.jsonl.1` -> ... -> `.N`); only files beyond the
//! N kept are removed, the live file is never truncated. [`PartitionTimer`]
//! measures one partition's phases and builds its [`PartitionRecord`].

use crate::backend::{BackendKind, BackendTimes};
use crate::sys::clock;
use fleet_wire::timing::{
    DevicesRecord, JobTag, PartitionRecord, Phase, PhaseSplit, ProofRecord, TimelineEvent,
    TimelineKind, TimingLine, TIMING_SCHEMA_VERSION,
};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Default size at which the log rotates.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// Default number of rotated files kept.
pub const DEFAULT_KEEP: usize = 5;

/// A timing log operation failed.
#[derive(Debug, thiserror::Error)]
#[error("timing log {path}: {action}: {source}")]
pub struct TimingError {
    pub path: PathBuf,
    pub action: &'static str,
    #[source]
    pub source: io::Error,
}

/// The append-only, size-rotated JSON-lines timing log. Thread-safe.
#[derive(Debug)]
pub struct TimingLog {
    inner: Mutex<LogFile>,
    /// Partition records kept for the caller (a one-shot command's report).
    kept: Option<Mutex<Vec<PartitionRecord>>>,
}

#[derive(Debug)]
struct LogFile {
    path: PathBuf,
    writer: Option<BufWriter<File>>,
    size: u64,
    max_bytes: u64,
    keep: usize,
    /// Written first into every file rotated to (the devices record).
    header: Option<String>,
    /// No file: lines are dropped (a one-shot command without a log).
    discard: bool,
}

fn open_append(path: &Path) -> Result<(BufWriter<File>, u64), TimingError> {
    let err = |action| {
        move |source| TimingError {
            path: path.to_path_buf(),
            action,
            source,
        }
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err("creating its directory"))?;
    }
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(err("opening for append"))?;
    let size = file.metadata().map_err(err("reading its size"))?.len();
    Ok((BufWriter::new(file), size))
}

fn rotated(path: &Path, i: usize) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{i}"));
    PathBuf::from(s)
}

impl LogFile {
    fn err(&self, action: &'static str) -> impl FnOnce(io::Error) -> TimingError + '_ {
        move |source| TimingError {
            path: self.path.clone(),
            action,
            source,
        }
    }

    fn close_current(&mut self) -> Result<(), TimingError> {
        if let Some(mut w) = self.writer.take() {
            w.flush().map_err(self.err("flushing"))?;
            w.get_ref().sync_all().map_err(self.err("syncing"))?;
        }
        Ok(())
    }

    /// `.N-1 -> .N`, ..., `.1 -> .2`, live -> `.1`, then a fresh live file.
    fn rotate(&mut self) -> Result<(), TimingError> {
        self.close_current()?;
        if self.keep == 0 {
            // Nothing kept means nothing rotated away: keep appending.
            let (w, size) = open_append(&self.path)?;
            self.writer = Some(w);
            self.size = size;
            return Ok(());
        }
        let oldest = rotated(&self.path, self.keep);
        if oldest.exists() {
            std::fs::remove_file(&oldest).map_err(self.err("removing the oldest rotated file"))?;
        }
        for i in (1..self.keep).rev() {
            let from = rotated(&self.path, i);
            if from.exists() {
                std::fs::rename(&from, rotated(&self.path, i + 1))
                    .map_err(self.err("renaming a rotated file"))?;
            }
        }
        std::fs::rename(&self.path, rotated(&self.path, 1)).map_err(self.err("rotating"))?;
        let (mut w, size) = open_append(&self.path)?;
        self.size = size;
        if let Some(h) = &self.header {
            w.write_all(h.as_bytes())
                .and_then(|()| w.write_all(b"\n"))
                .map_err(self.err("writing the header"))?;
            self.size += h.len() as u64 + 1;
        }
        self.writer = Some(w);
        Ok(())
    }

    fn append(&mut self, line: &str) -> Result<(), TimingError> {
        if self.discard {
            return Ok(());
        }
        let len = line.len() as u64 + 1;
        if self.size > 0 && self.size + len > self.max_bytes {
            self.rotate()?;
        }
        if self.writer.is_none() {
            let (w, size) = open_append(&self.path)?;
            self.writer = Some(w);
            self.size = size;
        }
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        let result = match self.writer.as_mut() {
            Some(w) => w.write_all(&buf).and_then(|()| w.flush()),
            None => Ok(()),
        };
        result.map_err(self.err("writing"))?;
        self.size += len;
        Ok(())
    }
}

impl TimingLog {
    /// Opens (creating it and its directory) `path` for append, rotating when
    /// it would grow past `max_bytes`, keeping `keep` rotated files.
    pub fn open(
        path: impl Into<PathBuf>,
        max_bytes: u64,
        keep: usize,
    ) -> Result<Self, TimingError> {
        let path = path.into();
        let (w, size) = open_append(&path)?;
        Ok(TimingLog {
            inner: Mutex::new(LogFile {
                path,
                writer: Some(w),
                size,
                max_bytes: max_bytes.max(1),
                keep,
                header: None,
                discard: false,
            }),
            kept: None,
        })
    }

    /// A log that writes nothing: for a command run without `--timing-log`.
    pub fn discarding() -> Self {
        TimingLog {
            inner: Mutex::new(LogFile {
                path: PathBuf::new(),
                writer: None,
                size: 0,
                max_bytes: u64::MAX,
                keep: 0,
                header: None,
                discard: true,
            }),
            kept: None,
        }
    }

    /// Also keeps every partition record written, for [`Self::take_partitions`].
    pub fn keeping_partitions(mut self) -> Self {
        self.kept = Some(Mutex::new(Vec::new()));
        self
    }

    /// The partition records kept so far (emptied).
    pub fn take_partitions(&self) -> Vec<PartitionRecord> {
        self.kept
            .as_ref()
            .map(|k| std::mem::take(&mut *k.lock()))
            .unwrap_or_default()
    }

    pub fn path(&self) -> PathBuf {
        self.inner.lock().path.clone()
    }

    /// Appends one line and flushes it.
    pub fn write(&self, line: &TimingLine) -> Result<(), TimingError> {
        self.inner.lock().append(&line.to_line())
    }

    /// Appends a partition record and logs its `GPU_TIMING` line.
    pub fn partition(&self, rec: &PartitionRecord) -> Result<(), TimingError> {
        tracing::info!("{rec}");
        if let Some(kept) = &self.kept {
            kept.lock().push(rec.clone());
        }
        self.write(&TimingLine::Partition(rec.clone()))
    }

    /// Appends a proof record and logs its `FIN_TIMING` line.
    pub fn proof(&self, rec: &ProofRecord) -> Result<(), TimingError> {
        tracing::info!("{rec}");
        self.write(&TimingLine::Proof(rec.clone()))
    }

    /// Appends the devices record and keeps it as the first line of every
    /// file the log rotates to, so each file says which devices it covers.
    pub fn devices(&self, rec: &DevicesRecord) -> Result<(), TimingError> {
        let line = TimingLine::Devices(rec.clone()).to_line();
        let mut f = self.inner.lock();
        f.header = Some(line.clone());
        f.append(&line)
    }

    /// Appends one TIMELINE event.
    pub fn event(&self, ev: &TimelineEvent) -> Result<(), TimingError> {
        self.write(&TimingLine::Timeline(ev.clone()))
    }

    /// Flushes and fsyncs the live file.
    pub fn sync(&self) -> Result<(), TimingError> {
        let mut f = self.inner.lock();
        let result = match f.writer.as_mut() {
            Some(w) => w.flush().and_then(|()| w.get_ref().sync_all()),
            None => Ok(()),
        };
        result.map_err(f.err("syncing"))
    }

    /// Flushes, fsyncs and closes.
    pub fn close(self) -> Result<(), TimingError> {
        self.inner.lock().close_current()
    }
}

impl Drop for LogFile {
    fn drop(&mut self) {
        // Every record was flushed when written; this only adds the fsync.
        if let Err(e) = self.close_current() {
            tracing::warn!("{e}");
        }
    }
}

/// The tag of a job proved on this host by this build: the host is
/// [`crate::sys::hostname`], the name the health probe carries too.
pub fn job_tag(job_id: String, circuit: String, size: u64) -> JobTag {
    JobTag {
        host: crate::sys::hostname(),
        build: crate::BUILD_HASH.to_string(),
        job_id,
        circuit,
        size,
    }
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Measures one partition: phase durations, TIMELINE events, and at the end
/// the [`PartitionRecord`]. `total` runs from submission (so it includes the
/// queue wait) to [`finish`](Self::finish).
#[derive(Debug)]
pub struct PartitionTimer {
    tag: JobTag,
    partition: u32,
    partitions: u32,
    submitted: Instant,
    phases: BTreeMap<Phase, f64>,
    /// Device time and device wait of host-timed phases.
    split: BTreeMap<Phase, PhaseSplit>,
    h2d_bytes: u64,
    h2d_ms: f64,
    device_busy_ms: f64,
    /// Whether a backend call was merged: a partition that failed before
    /// reaching a device has no device time, not a zero one.
    on_device: bool,
    /// Written into its TIMELINE events where it is not normal.
    priority: Option<&'static str>,
}

/// The record's `device_busy_ms` for what `kind` measured: the device time of
/// the call on a device backend, absent on the CPU backend. A CPU backend has
/// no device whose kernels could be busy, so writing its zero would make
/// every CPU run read as a starved GPU.
pub fn device_busy_ms(kind: BackendKind, device_ms: f64) -> Option<f64> {
    match kind {
        BackendKind::Cpu => None,
        BackendKind::Cuda => Some(device_ms),
    }
}

impl PartitionTimer {
    /// Starts timing a partition submitted at `submitted`.
    pub fn new(tag: JobTag, partition: u32, partitions: u32, submitted: Instant) -> Self {
        PartitionTimer {
            tag,
            partition,
            partitions,
            submitted,
            phases: BTreeMap::new(),
            split: BTreeMap::new(),
            h2d_bytes: 0,
            h2d_ms: 0.0,
            device_busy_ms: 0.0,
            on_device: false,
            priority: None,
        }
    }

    /// Marks its TIMELINE events with the job's priority (`high`, `critical`).
    pub fn with_priority(mut self, priority: Option<&'static str>) -> Self {
        self.priority = priority;
        self
    }

    /// Adds `ms` to `phase`.
    pub fn add(&mut self, phase: Phase, ms: f64) {
        *self.phases.entry(phase).or_insert(0.0) += ms;
    }

    /// Adds the time since `start` to `phase`.
    pub fn since(&mut self, phase: Phase, start: Instant) {
        self.add(phase, ms(start.elapsed()));
    }

    /// Runs `f`, adding its duration to `phase`.
    pub fn measure<R>(&mut self, phase: Phase, f: impl FnOnce() -> R) -> R {
        let t = Instant::now();
        let r = f();
        self.since(phase, t);
        r
    }

    /// Records the queue wait: from submission until now.
    pub fn picked_up(&mut self) {
        self.add(Phase::QueueWait, ms(self.submitted.elapsed()));
    }

    /// Adds what a backend measured.
    pub fn merge_backend(&mut self, times: &BackendTimes) {
        for (p, v) in &times.phases_ms {
            self.add(*p, *v);
        }
        for (p, v) in &times.split_ms {
            self.split.entry(*p).or_default().add(v);
        }
        self.h2d_bytes += times.h2d_bytes;
        self.h2d_ms += times.h2d_ms;
        self.device_busy_ms += times.device_ms;
        self.on_device = true;
    }

    /// A TIMELINE event for this partition, stamped now.
    pub fn event(&self, kind: TimelineKind, device: Option<u32>) -> TimelineEvent {
        TimelineEvent {
            v: TIMING_SCHEMA_VERSION,
            ts_us: clock::unix_micros(),
            host: self.tag.host.clone(),
            build: self.tag.build.clone(),
            job_id: self.tag.job_id.clone(),
            partition: self.partition,
            event: kind,
            device,
            priority: self.priority.map(str::to_owned),
        }
    }

    pub fn phases(&self) -> &BTreeMap<Phase, f64> {
        &self.phases
    }

    pub fn tag(&self) -> &JobTag {
        &self.tag
    }

    /// Closes the record: sets `total` and stamps the end time.
    pub fn finish(
        mut self,
        domain: u64,
        backend: BackendKind,
        device: Option<u32>,
        pinned: bool,
        error: Option<String>,
    ) -> PartitionRecord {
        self.phases
            .insert(Phase::Total, ms(self.submitted.elapsed()));
        PartitionRecord {
            v: TIMING_SCHEMA_VERSION,
            ts_ms: clock::unix_millis(),
            tag: self.tag,
            partition: self.partition,
            partitions: self.partitions,
            domain,
            backend: backend.as_str().to_string(),
            device,
            pinned,
            h2d_bytes: self.h2d_bytes,
            h2d_ms: (self.h2d_bytes > 0 && self.h2d_ms > 0.0).then_some(self.h2d_ms),
            h2d_gbps: fleet_wire::timing::gbps(self.h2d_bytes, self.h2d_ms / 1e3),
            phases_ms: self.phases,
            phase_split_ms: self.split,
            device_busy_ms: self
                .on_device
                .then(|| device_busy_ms(backend, self.device_busy_ms))
                .flatten(),
            error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag() -> JobTag {
        JobTag {
            host: crate::sys::hostname(),
            build: crate::BUILD_HASH.into(),
            job_id: "j".into(),
            circuit: "chain".into(),
            size: 1024,
        }
    }

    fn lines(p: &Path) -> Vec<TimingLine> {
        std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .map(|l| TimingLine::parse(l).unwrap())
            .collect()
    }

    #[test]
    fn records_are_appended_one_per_line_and_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs/timing.jsonl");
        let timer = PartitionTimer::new(tag(), 0, 1, Instant::now());
        let ev = timer.event(TimelineKind::SynthesisStart, None);
        let rec = timer.finish(1024, BackendKind::Cpu, None, false, None);
        {
            let log = TimingLog::open(&path, DEFAULT_MAX_BYTES, DEFAULT_KEEP).unwrap();
            log.event(&ev).unwrap();
            log.partition(&rec).unwrap();
            // Flushed per record: readable before close.
            assert_eq!(lines(&path).len(), 2);
            log.close().unwrap();
        }
        let log = TimingLog::open(&path, DEFAULT_MAX_BYTES, DEFAULT_KEEP).unwrap();
        log.partition(&rec).unwrap();
        drop(log);
        let got = lines(&path);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], TimingLine::Timeline(ev));
        assert_eq!(got[2], TimingLine::Partition(rec));
    }

    #[test]
    fn rotation_renames_and_keeps_the_newest_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("timing.jsonl");
        let timer = PartitionTimer::new(tag(), 0, 1, Instant::now());
        let ev = timer.event(TimelineKind::GpuStart, Some(0));
        let one = TimingLine::Timeline(ev).to_line().len() as u64 + 1;
        // Two lines per file, two rotated files kept.
        let log = TimingLog::open(&path, 2 * one, 2).unwrap();
        for i in 0..7u32 {
            let mut e = timer.event(TimelineKind::GpuStart, Some(0));
            e.partition = 0;
            e.ts_us = u64::from(i);
            log.event(&e).unwrap();
        }
        drop(log);
        let ts = |p: &Path| -> Vec<u64> {
            lines(p)
                .into_iter()
                .map(|l| match l {
                    TimingLine::Timeline(e) => e.ts_us,
                    _ => u64::MAX,
                })
                .collect()
        };
        assert_eq!(ts(&path), vec![6]);
        assert_eq!(ts(&rotated(&path, 1)), vec![4, 5]);
        assert_eq!(ts(&rotated(&path, 2)), vec![2, 3]);
        assert!(!rotated(&path, 3).exists());
    }

    #[test]
    fn every_rotated_file_starts_with_the_devices_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("timing.jsonl");
        let timer = PartitionTimer::new(tag(), 0, 1, Instant::now());
        let one = TimingLine::Timeline(timer.event(TimelineKind::GpuStart, Some(0)))
            .to_line()
            .len() as u64
            + 1;
        let log = TimingLog::open(&path, 3 * one, 3).unwrap();
        let devices = DevicesRecord {
            v: TIMING_SCHEMA_VERSION,
            ts_ms: 1,
            host: "h".into(),
            build: "b".into(),
            backend: "cuda".into(),
            devices: vec![0, 3],
        };
        log.devices(&devices).unwrap();
        for i in 0..5u64 {
            let mut e = timer.event(TimelineKind::GpuStart, Some(0));
            e.ts_us = i;
            log.event(&e).unwrap();
        }
        drop(log);
        for p in [path.clone(), rotated(&path, 1), rotated(&path, 2)] {
            let got = lines(&p);
            assert_eq!(
                got.first(),
                Some(&TimingLine::Devices(devices.clone())),
                "{}",
                p.display()
            );
        }
    }

    #[test]
    fn timer_adds_phases_backend_times_and_total() {
        // Started 50 ms ago: the total is wall time since then, not a sum of phases.
        let started = Instant::now()
            .checked_sub(std::time::Duration::from_millis(50))
            .expect("a clock 50 ms past its origin");
        let mut t = PartitionTimer::new(tag(), 1, 2, started);
        t.add(Phase::Synthesis, 2.0);
        t.add(Phase::Synthesis, 1.0);
        let mut bt = BackendTimes::default();
        bt.add(Phase::MsmH, 4.0);
        bt.h2d_bytes = 96;
        bt.h2d_ms = 0.5;
        t.merge_backend(&bt);
        t.merge_backend(&BackendTimes {
            h2d_bytes: 32,
            h2d_ms: 0.5,
            ..BackendTimes::default()
        });
        let v = t.measure(Phase::Assembly, || {
            std::thread::sleep(std::time::Duration::from_millis(5));
            5
        });
        assert_eq!(v, 5);
        let rec = t.finish(8, BackendKind::Cpu, None, true, None);
        assert_eq!(rec.phases_ms[&Phase::Synthesis], 3.0);
        assert_eq!(rec.phases_ms[&Phase::MsmH], 4.0);
        assert!(
            rec.phases_ms[&Phase::Assembly] >= 5.0,
            "{:?}",
            rec.phases_ms
        );
        let total = rec.phases_ms[&Phase::Total];
        assert!((55.0..60_000.0).contains(&total), "total {total} ms");
        // Bytes and time of the same copies, and their rate: 128 B in 1 ms.
        assert_eq!(rec.h2d_bytes, 128);
        assert_eq!(rec.h2d_ms, Some(1.0));
        assert_eq!(rec.h2d_gbps, Some(128e-6));
        assert_eq!(rec.partition, 1);
        assert!(rec.to_string().starts_with("GPU_TIMING job=j"));
        // The CPU backend has no device: not measured, not zero.
        assert_eq!(rec.device_busy_ms, None);
    }

    #[test]
    fn a_partition_that_never_reached_the_device_has_no_device_time() {
        let mut t = PartitionTimer::new(tag(), 0, 1, Instant::now());
        t.add(Phase::Synthesis, 3.0);
        let rec = t.finish(0, BackendKind::Cuda, None, true, Some("budget".into()));
        // Not a zero: a zero would read as a starved GPU in the report.
        assert_eq!(rec.device_busy_ms, None);
    }

    #[test]
    fn device_time_of_every_backend_call_is_summed_into_the_record() {
        let mut t = PartitionTimer::new(tag(), 0, 1, Instant::now());
        for device_ms in [1.25, 0.5] {
            let bt = BackendTimes {
                device_ms,
                ..Default::default()
            };
            t.merge_backend(&bt);
        }
        // Host time around the calls (here a long synthesis) does not count.
        t.add(Phase::Synthesis, 900.0);
        let rec = t.finish(8, BackendKind::Cuda, Some(0), true, None);
        assert_eq!(rec.device_busy_ms, Some(1.75));
        let line = TimingLine::Partition(rec.clone()).to_line();
        assert_eq!(
            TimingLine::parse(&line).unwrap(),
            TimingLine::Partition(rec)
        );
    }

    #[test]
    fn a_phase_gets_the_device_time_and_wait_of_the_device_calls_inside_it() {
        let mut bt = BackendTimes::default();
        // A CPU MSM: wall time only, no split (not a zero device time).
        bt.measure(Phase::MsmA, |_| ());
        // Two device MSMs inside one phase, as the G1 MSM of A runs its
        // inputs and its aux part: their device times and waits add up.
        bt.measure(Phase::MsmL, |t| {
            for (device, wait) in [(30.0, 100.0), (40.5, 20.0)] {
                t.device_calls += 1;
                t.device_ms += device;
                t.device_wait_ms += wait;
            }
        });
        // Device work before the phase is not the phase's.
        bt.measure(Phase::MsmH, |t| {
            t.device_calls += 1;
            t.device_ms += 2.0;
        });
        assert!(bt.phases_ms.contains_key(&Phase::MsmA));
        assert!(!bt.split_ms.contains_key(&Phase::MsmA));
        let l = bt.split_ms[&Phase::MsmL];
        assert_eq!((l.device, l.wait), (Some(70.5), Some(120.0)));
        let h = bt.split_ms[&Phase::MsmH];
        assert_eq!((h.device, h.wait), (Some(2.0), Some(0.0)));

        // The G2 thread's times merged in, then the record carries them.
        let mut g2 = BackendTimes::default();
        g2.measure(Phase::MsmBG2, |t| {
            t.device_calls += 1;
            t.device_ms += 200.0;
        });
        bt.merge(&g2);
        let mut timer = PartitionTimer::new(tag(), 0, 1, Instant::now());
        timer.merge_backend(&bt);
        let rec = timer.finish(8, BackendKind::Cuda, Some(0), true, None);
        assert_eq!(rec.device_ms(Phase::MsmL), Some(70.5));
        assert_eq!(rec.wait_ms(Phase::MsmL), Some(120.0));
        assert_eq!(rec.device_ms(Phase::MsmBG2), Some(200.0));
        assert_eq!(rec.device_ms(Phase::MsmA), None);
        assert_eq!(rec.device_busy_ms, Some(272.5));
        assert!(rec
            .to_string()
            .contains(" msm_l.device=70.500ms msm_l.wait=120.000ms"));
    }
}
