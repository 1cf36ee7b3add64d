//! Reads timing files (JSON lines, one [`TimingLine`] each) into per
//! host/build accumulators. Files are scanned in parallel and the partial
//! results merged, so a fleet's worth of logs is read at disk speed.
//!
//! Malformed lines are counted and reported with their file and line, never
//! fatal: a log written by a crashing prover may end in half a line.

use super::line::{bounded_reason, too_long, SkippedLine};
use crate::input::{InputError, LineRead, Lines};
use fleet_wire::phase::{summable, Stage};
use fleet_wire::timing::{Phase, TimelineKind, TimingLine};
use hdrhistogram::Histogram;
use rayon::prelude::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// Phase durations are kept in microseconds, 3 significant digits (0.1% error).
const SIGFIG: u8 = 3;
/// Longest phase the histograms accept: one day in microseconds.
const MAX_US: u64 = 86_400_000_000;
/// How many occupied intervals per device are kept for the timeline chart.
pub const TIMELINE_SAMPLE: usize = 400;

/// A file to scan and the host it belongs to (the store folder name, which is
/// the inventory name; the record's own `host` is the machine's hostname).
#[derive(Debug, Clone)]
pub struct Source {
    pub host: String,
    pub path: PathBuf,
}

/// A line that could not be used.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Malformed {
    pub file: PathBuf,
    pub line: u64,
    pub reason: String,
}

/// Statistics gathered for one (host, build).
#[derive(Debug, Clone)]
pub struct Acc {
    pub partitions: u64,
    pub failed_partitions: u64,
    pub proofs: u64,
    pub failed_proofs: u64,
    pub phases: BTreeMap<Phase, Histogram<u64>>,
    /// The device's own time per phase, where the record has it
    /// ([`fleet_wire::timing::PartitionRecord::device_ms`]).
    pub phase_device: BTreeMap<Phase, Histogram<u64>>,
    /// The time each phase waited for the device, where measured.
    pub phase_wait: BTreeMap<Phase, Histogram<u64>>,
    pub h2d_bytes: u64,
    /// Seconds spent in h2d, for a byte-weighted GB/s.
    pub h2d_seconds: f64,
    pub h2d_partitions: u64,
    pub h2d_pinned_partitions: u64,
    pub synthesis_ms: f64,
    pub device_ms: f64,
    /// gpu_start per (job, partition, device) waiting for its gpu_end.
    open: HashMap<(String, u32, Option<u32>), u64>,
    /// Closed busy intervals per device, microseconds.
    pub intervals: BTreeMap<Option<u32>, Vec<(u64, u64)>>,
    pub timeline_events: u64,
    pub backends: BTreeMap<String, u64>,
    /// Device time the records report (`device_busy_ms`), per record device.
    pub kernel: BTreeMap<Option<u32>, KernelAcc>,
    /// A closed gpu_start..gpu_end per (job, partition) whose record has not
    /// been read yet; the daemon writes gpu_end just before the record, so
    /// this holds only the partitions in flight at the end of a file.
    closed: HashMap<(String, u32), (Option<u32>, u64, u64)>,
    /// Occupied interval and the device time measured inside it, per device,
    /// for drawing kernel busy next to occupancy.
    pub kernel_marks: BTreeMap<Option<u32>, Vec<KernelMark>>,
    /// CUDA ordinals the daemon's devices records say it opened: a device
    /// here with no partition proved nothing, and shows at 0%.
    pub opened: BTreeSet<u32>,
}

/// Device time of one device's partition records.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KernelAcc {
    /// Sum of `device_busy_ms` over the records that carry it.
    pub busy_ms: f64,
    /// Records that carry `device_busy_ms`.
    pub measured: u64,
    /// Records without it (older prover or CPU backend): their device time
    /// is unknown, so a fraction over their window would be an undercount.
    pub unmeasured: u64,
}

/// One partition's occupied interval (µs) and its measured device time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelMark {
    pub start_us: u64,
    pub end_us: u64,
    pub busy_ms: f64,
}

impl Default for Acc {
    fn default() -> Self {
        Acc {
            partitions: 0,
            failed_partitions: 0,
            proofs: 0,
            failed_proofs: 0,
            phases: BTreeMap::new(),
            phase_device: BTreeMap::new(),
            phase_wait: BTreeMap::new(),
            h2d_bytes: 0,
            h2d_seconds: 0.0,
            h2d_partitions: 0,
            h2d_pinned_partitions: 0,
            synthesis_ms: 0.0,
            device_ms: 0.0,
            open: HashMap::new(),
            intervals: BTreeMap::new(),
            timeline_events: 0,
            backends: BTreeMap::new(),
            kernel: BTreeMap::new(),
            closed: HashMap::new(),
            kernel_marks: BTreeMap::new(),
            opened: BTreeSet::new(),
        }
    }
}

fn new_hist() -> Histogram<u64> {
    // Bounds are constants that hdrhistogram accepts.
    Histogram::new_with_bounds(1, MAX_US, SIGFIG)
        .unwrap_or_else(|_| Histogram::new(SIGFIG).unwrap_or_else(|_| unreachable!()))
}

/// Milliseconds to the histogram's microsecond unit, clamped into its range.
pub fn ms_to_us(ms: f64) -> u64 {
    if !ms.is_finite() || ms <= 0.0 {
        return 1;
    }
    ((ms * 1000.0).round() as u64).clamp(1, MAX_US)
}

/// Time a partition spent in the device worker's call: its device-stage
/// phases, each counted once ([`summable`]).
pub fn device_ms(phases: &BTreeMap<Phase, f64>) -> f64 {
    summable(Stage::Device, |p| phases.contains_key(&p))
        .into_iter()
        .filter_map(|p| phases.get(&p))
        .sum()
}

/// Records `ms` into `phase`'s histogram of `map`.
fn record(map: &mut BTreeMap<Phase, Histogram<u64>>, phase: Phase, ms: f64) {
    // Recording a clamped value into a histogram sized for it cannot fail.
    let _ = map
        .entry(phase)
        .or_insert_with(new_hist)
        .record(ms_to_us(ms));
}

fn merge_hists(into: &mut BTreeMap<Phase, Histogram<u64>>, from: BTreeMap<Phase, Histogram<u64>>) {
    for (phase, h) in from {
        let _ = into.entry(phase).or_insert_with(new_hist).add(&h);
    }
}

impl Acc {
    fn add_line(&mut self, line: TimingLine) {
        match line {
            TimingLine::Partition(p) => {
                self.partitions += 1;
                if p.error.is_some() {
                    self.failed_partitions += 1;
                }
                *self.backends.entry(p.backend.clone()).or_insert(0) += 1;
                for (phase, ms) in &p.phases_ms {
                    record(&mut self.phases, *phase, *ms);
                    if let Some(d) = p.device_ms(*phase) {
                        record(&mut self.phase_device, *phase, d);
                    }
                    if let Some(w) = p.wait_ms(*phase) {
                        record(&mut self.phase_wait, *phase, w);
                    }
                }
                if p.h2d_bytes > 0 {
                    self.h2d_partitions += 1;
                    if p.pinned {
                        self.h2d_pinned_partitions += 1;
                    }
                }
                // Bytes and seconds of the same copies, or neither.
                if let Some((bytes, seconds)) = p.h2d_copies() {
                    self.h2d_bytes += bytes;
                    self.h2d_seconds += seconds;
                }
                self.synthesis_ms += p.phases_ms.get(&Phase::Synthesis).copied().unwrap_or(0.0);
                self.device_ms += device_ms(&p.phases_ms);
                let closed = self.closed.remove(&(p.tag.job_id.clone(), p.partition));
                // Failed-early partitions never reached a device: they carry
                // neither a device nor device time, and say nothing about one.
                if p.device.is_some() || p.device_busy_ms.is_some() {
                    let k = self.kernel.entry(p.device).or_default();
                    match p.device_busy_ms.filter(|b| b.is_finite() && *b >= 0.0) {
                        Some(b) => {
                            k.busy_ms += b;
                            k.measured += 1;
                            if let Some((dev, start_us, end_us)) = closed {
                                self.kernel_marks.entry(dev).or_default().push(KernelMark {
                                    start_us,
                                    end_us,
                                    busy_ms: b,
                                });
                            }
                        }
                        None => k.unmeasured += 1,
                    }
                }
            }
            TimingLine::Devices(d) => {
                if d.backend == "cuda" {
                    self.opened.extend(d.devices);
                }
            }
            TimingLine::Proof(p) => {
                self.proofs += 1;
                if p.error.is_some() {
                    self.failed_proofs += 1;
                }
            }
            TimingLine::Timeline(e) => {
                self.timeline_events += 1;
                let key = (e.job_id, e.partition, e.device);
                match e.event {
                    TimelineKind::GpuStart => {
                        self.open.insert(key, e.ts_us);
                    }
                    TimelineKind::GpuEnd => {
                        if let Some(start) = self.open.remove(&key) {
                            if e.ts_us >= start {
                                self.intervals
                                    .entry(key.2)
                                    .or_default()
                                    .push((start, e.ts_us));
                                self.closed.insert((key.0, key.1), (key.2, start, e.ts_us));
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// Folds another accumulator of the same (host, build) into this one.
    pub fn merge(&mut self, other: Acc) {
        self.partitions += other.partitions;
        self.failed_partitions += other.failed_partitions;
        self.proofs += other.proofs;
        self.failed_proofs += other.failed_proofs;
        merge_hists(&mut self.phases, other.phases);
        merge_hists(&mut self.phase_device, other.phase_device);
        merge_hists(&mut self.phase_wait, other.phase_wait);
        self.h2d_bytes += other.h2d_bytes;
        self.h2d_seconds += other.h2d_seconds;
        self.h2d_partitions += other.h2d_partitions;
        self.h2d_pinned_partitions += other.h2d_pinned_partitions;
        self.synthesis_ms += other.synthesis_ms;
        self.device_ms += other.device_ms;
        // A start and its end can sit in different files (rotation between them).
        for (key, start) in other.open {
            self.open.insert(key, start);
        }
        for (dev, mut iv) in other.intervals {
            self.intervals.entry(dev).or_default().append(&mut iv);
        }
        self.timeline_events += other.timeline_events;
        for (b, n) in other.backends {
            *self.backends.entry(b).or_insert(0) += n;
        }
        for (dev, k) in other.kernel {
            let mine = self.kernel.entry(dev).or_default();
            mine.busy_ms += k.busy_ms;
            mine.measured += k.measured;
            mine.unmeasured += k.unmeasured;
        }
        for (dev, mut m) in other.kernel_marks {
            self.kernel_marks.entry(dev).or_default().append(&mut m);
        }
        // An interval whose record sits in the other file (rotation between
        // gpu_end and the record) only loses its chart mark, not its sum.
        self.closed.extend(other.closed);
        self.opened.extend(other.opened);
    }

    /// Opened devices that proved nothing while another device of the same
    /// daemon did: idle for the whole window, so 0% busy, not unknown.
    pub fn idle_devices(&self) -> Vec<u32> {
        if self.intervals.values().all(Vec::is_empty) {
            return Vec::new();
        }
        self.opened
            .iter()
            .copied()
            .filter(|d| {
                !self.kernel.contains_key(&Some(*d)) && !self.intervals.contains_key(&Some(*d))
            })
            .collect()
    }

    /// Kernel busy per device: the records' summed device time over the
    /// device's occupied window [first gpu_start, last gpu_end]. `None` for a
    /// device with no window, no measured record, or any unmeasured record
    /// (an unknown share of its time would make the fraction an undercount).
    pub fn kernel_busy(&self) -> BTreeMap<Option<u32>, Option<f64>> {
        let mut busy: BTreeMap<Option<u32>, Option<f64>> = self
            .kernel
            .iter()
            .map(|(dev, k)| {
                let window_us = self.intervals.get(dev).and_then(|iv| window_us(iv));
                let f = window_us
                    .filter(|w| *w > 0 && k.measured > 0 && k.unmeasured == 0)
                    .map(|w| k.busy_ms * 1000.0 / w as f64);
                (*dev, f)
            })
            .collect();
        busy.extend(
            self.idle_devices()
                .into_iter()
                .map(|d| (Some(d), Some(0.0))),
        );
        busy
    }

    /// Kernel busy averaged over the devices that have one.
    pub fn kernel_busy_fraction(&self) -> Option<f64> {
        let f: Vec<f64> = self.kernel_busy().into_values().flatten().collect();
        (!f.is_empty()).then(|| f.iter().sum::<f64>() / f.len() as f64)
    }

    /// The kernel marks of the intervals [`timeline_sample`](Self::timeline_sample) keeps.
    pub fn kernel_sample(&self) -> BTreeMap<Option<u32>, Vec<KernelMark>> {
        self.kernel_marks
            .iter()
            .map(|(d, m)| {
                let mut m = m.clone();
                m.sort_unstable_by_key(|k| (k.start_us, k.end_us));
                let skip = m.len().saturating_sub(TIMELINE_SAMPLE);
                (*d, m.split_off(skip))
            })
            .collect()
    }

    /// Fraction of the window [first start, last end] during which each device
    /// was busy, averaged over devices. `None` without complete intervals.
    pub fn busy_fraction(&self) -> Option<f64> {
        let mut fractions = Vec::new();
        for iv in self.intervals.values() {
            if let Some(f) = merged_busy_fraction(iv) {
                fractions.push(f);
            }
        }
        // An opened device never occupied counts, at zero.
        fractions.extend(self.idle_devices().iter().map(|_| 0.0));
        if fractions.is_empty() {
            None
        } else {
            Some(fractions.iter().sum::<f64>() / fractions.len() as f64)
        }
    }

    /// The last [`TIMELINE_SAMPLE`] busy intervals per device, for the chart.
    pub fn timeline_sample(&self) -> BTreeMap<Option<u32>, Vec<(u64, u64)>> {
        self.intervals
            .iter()
            .map(|(d, iv)| {
                let mut iv = iv.clone();
                iv.sort_unstable();
                let skip = iv.len().saturating_sub(TIMELINE_SAMPLE);
                (*d, iv.split_off(skip))
            })
            .collect()
    }
}

/// Span in µs from the first start to the last end of `intervals`.
pub fn window_us(intervals: &[(u64, u64)]) -> Option<u64> {
    let start = intervals.iter().map(|i| i.0).min()?;
    let end = intervals.iter().map(|i| i.1).max()?;
    Some(end.saturating_sub(start))
}

/// Busy fraction of a set of possibly overlapping intervals over their span.
pub fn merged_busy_fraction(intervals: &[(u64, u64)]) -> Option<f64> {
    if intervals.is_empty() {
        return None;
    }
    let mut iv = intervals.to_vec();
    iv.sort_unstable();
    let start = iv[0].0;
    let end = iv.iter().map(|i| i.1).max().unwrap_or(start);
    let (mut busy, (mut cs, mut ce)) = (0u64, iv[0]);
    for &(s, e) in &iv[1..] {
        if s > ce {
            busy += ce - cs;
            (cs, ce) = (s, e);
        } else {
            ce = ce.max(e);
        }
    }
    busy += ce - cs;
    if end == start {
        return Some(1.0);
    }
    Some(busy as f64 / (end - start) as f64)
}

/// Everything read from a set of sources.
#[derive(Debug, Default)]
pub struct Scan {
    /// Keyed by (host, build).
    pub accs: BTreeMap<(String, String), Acc>,
    pub lines: u64,
    pub bytes: u64,
    pub malformed_count: u64,
    /// The first malformed lines (capped), with file and line number.
    pub malformed: Vec<Malformed>,
    /// Lines written by a newer schema than this reader knows.
    pub newer_schema: u64,
    /// Lines `timing collect` left out of the store ([`super::line`]).
    pub collect_skipped_count: u64,
    /// The first of them, with host, file and line.
    pub collect_skipped: Vec<SkippedLine>,
}

/// How many malformed lines are kept verbatim in a scan.
const MALFORMED_KEPT: usize = 100;

impl Scan {
    fn note_malformed(&mut self, m: Malformed) {
        self.malformed_count += 1;
        if self.malformed.len() < MALFORMED_KEPT {
            self.malformed.push(m);
        }
    }

    /// Adds what `timing collect` left out of the store (`count` lines, the
    /// first of them named), for the report to list.
    pub fn add_collect_skipped(&mut self, count: u64, lines: Vec<SkippedLine>) {
        self.collect_skipped_count += count;
        let room = MALFORMED_KEPT.saturating_sub(self.collect_skipped.len());
        self.collect_skipped.extend(lines.into_iter().take(room));
    }

    fn merge(&mut self, other: Scan) {
        for (k, acc) in other.accs {
            match self.accs.get_mut(&k) {
                Some(mine) => mine.merge(acc),
                None => {
                    self.accs.insert(k, acc);
                }
            }
        }
        self.lines += other.lines;
        self.bytes += other.bytes;
        self.malformed_count += other.malformed_count;
        self.newer_schema += other.newer_schema;
        self.add_collect_skipped(other.collect_skipped_count, other.collect_skipped);
        for m in other.malformed {
            if self.malformed.len() < MALFORMED_KEPT {
                self.malformed.push(m);
            }
        }
    }
}

/// Errors that stop a scan: a file that cannot be read or is not a regular
/// file. Lines that do not parse are not errors, nor is a line past
/// [`crate::input::MAX_LINE`]: no record is that long, so it is passed over
/// without being held (buffering it whole is what a hostile file would
/// want) and listed as malformed.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ScanError(#[from] pub InputError);

fn scan_file(src: &Source) -> Result<Scan, ScanError> {
    let mut reader = Lines::open("timing file", &src.path)?;
    let mut scan = Scan::default();
    let mut buf = Vec::with_capacity(1024);
    let mut current: Option<(String, Acc)> = None;
    loop {
        let n = match reader.read_line_or_skip(&mut buf)? {
            LineRead::End => break,
            LineRead::Line(n) => n,
            LineRead::TooLong { line, bytes } => {
                // Passed over without being held: the rest of the file counts.
                scan.bytes += bytes;
                scan.lines += 1;
                scan.note_malformed(Malformed {
                    file: src.path.clone(),
                    line,
                    reason: too_long(bytes),
                });
                continue;
            }
        };
        let lineno = reader.line_number();
        scan.bytes += n as u64;
        let text = trim_ascii(&buf);
        if text.is_empty() {
            continue;
        }
        scan.lines += 1;
        let parsed: Result<TimingLine, _> = serde_json::from_slice(text);
        let line = match parsed {
            Ok(l) => l,
            Err(e) => {
                scan.note_malformed(Malformed {
                    file: src.path.clone(),
                    line: lineno,
                    reason: bounded_reason(&e.to_string()),
                });
                continue;
            }
        };
        if line.v() > fleet_wire::timing::TIMING_SCHEMA_VERSION {
            scan.newer_schema += 1;
        }
        let build = line.build();
        // Consecutive lines almost always share a build: keep its accumulator at hand.
        if current.as_ref().map(|(b, _)| b.as_str()) != Some(build) {
            if let Some((b, acc)) = current.take() {
                merge_into(&mut scan.accs, (src.host.clone(), b), acc);
            }
            current = Some((build.to_string(), Acc::default()));
        }
        if let Some((_, acc)) = current.as_mut() {
            acc.add_line(line);
        }
    }
    if let Some((b, acc)) = current.take() {
        merge_into(&mut scan.accs, (src.host.clone(), b), acc);
    }
    Ok(scan)
}

fn merge_into(map: &mut BTreeMap<(String, String), Acc>, key: (String, String), acc: Acc) {
    match map.get_mut(&key) {
        Some(mine) => mine.merge(acc),
        None => {
            map.insert(key, acc);
        }
    }
}

fn trim_ascii(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &b[start..end]
}

/// Scans every source in parallel.
pub fn scan(sources: &[Source]) -> Result<Scan, ScanError> {
    let parts: Vec<Result<Scan, ScanError>> = sources.par_iter().map(scan_file).collect();
    let mut total = Scan::default();
    for part in parts {
        total.merge(part?);
    }
    Ok(total)
}

/// Sources for every file in a store.
pub fn store_sources(store: &super::store::Store) -> Result<Vec<Source>, super::store::StoreError> {
    let mut out = Vec::new();
    for host in store.hosts()? {
        for path in store.files(&host)? {
            out.push(Source {
                host: host.clone(),
                path,
            });
        }
    }
    Ok(out)
}

/// Sources from plain files given on the command line: host = parent folder name.
pub fn file_sources(paths: &[PathBuf]) -> Vec<Source> {
    paths
        .iter()
        .map(|p| Source {
            host: p
                .parent()
                .and_then(Path::file_name)
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "local".into()),
            path: p.clone(),
        })
        .collect()
}
