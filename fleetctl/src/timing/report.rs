//! Turns scanned accumulators into the report: per host, per build and per
//! phase count, p50, p95, p99, max; h2d GB/s and whether it was pinned; GPU
//! occupancy and kernel busy per device; which side (synthesis or device) is the bottleneck; outliers
//! with their reason; and a build-to-build comparison.
//!
//! The JSON form of [`Report`] is documented in `docs/timing.md`
//! (`report_version` 1).

use super::line::SkippedLine;
use super::scan::{merged_busy_fraction, window_us, Acc, Malformed, Scan};
use fleet_wire::timing::{Clock, Phase, Stage};
use hdrhistogram::Histogram;
use serde::Serialize;
use std::collections::BTreeMap;

pub const REPORT_VERSION: u32 = 1;

/// Thresholds for flagging outliers.
#[derive(Debug, Clone)]
pub struct Thresholds {
    /// Flag h2d below this many GB/s.
    pub min_h2d_gbps: f64,
    /// Flag a device whose kernel busy fraction (device time measured on the
    /// device over the wall window) is below this.
    pub min_busy: f64,
    /// Flag a device whose occupied fraction (a partition held the device
    /// worker) is below this.
    pub min_occupied: f64,
    /// Only judge the h2d rate where uploads average at least this many bytes
    /// per partition: small copies are latency-bound and say nothing about pinning.
    pub min_h2d_bytes: u64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            min_h2d_gbps: 20.0,
            min_busy: 0.50,
            min_occupied: 0.70,
            min_h2d_bytes: 16 << 20,
        }
    }
}

/// Distribution of one phase, in milliseconds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PhaseStats {
    pub phase: Phase,
    /// Which clock measured `p50_ms` and the rest (the phase's declaration).
    pub clock: Clock,
    /// Where the phase runs against the device timeline.
    pub stage: Option<Stage>,
    pub count: u64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
    /// The device's own time of the phase, over the records that carry it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<Dist>,
    /// The time the phase waited for the device, where measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait: Option<Dist>,
}

/// A short distribution (device time or wait of a phase), milliseconds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Dist {
    pub count: u64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub mean_ms: f64,
}

fn dist(h: &Histogram<u64>) -> Dist {
    Dist {
        count: h.len(),
        p50_ms: us_to_ms(h.value_at_quantile(0.50)),
        p95_ms: us_to_ms(h.value_at_quantile(0.95)),
        mean_ms: h.mean() / 1000.0,
    }
}

/// Host-to-device upload figures.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct H2dStats {
    pub bytes: u64,
    pub partitions: u64,
    /// Byte-weighted rate: total bytes over total upload time.
    pub gbps: Option<f64>,
    /// Share of uploading partitions whose buffers were pinned.
    pub pinned_fraction: Option<f64>,
}

/// Which side of the pipeline limits throughput.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Bottleneck {
    /// The device sat idle while each partition was handed to it as soon
    /// as synthesis finished: the GPU waits for the CPU.
    Synthesis,
    /// The device was held at least 90% of its window: synthesis is ahead.
    Device,
    /// Neither: the device idled although partitions waited for it (or,
    /// without a timeline, the summed times are within 10%).
    Balanced,
    Unknown,
}

/// Occupancy and kernel busy of one device of a host.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DeviceBusy {
    /// Device ordinal as the records and TIMELINE carry it (`-` for none).
    pub device: String,
    /// Share of the window during which a partition held the device worker
    /// (union of `gpu_start..gpu_end`); CPU work inside the call counts.
    pub occupied_fraction: Option<f64>,
    /// Summed `device_busy_ms` over the window: the share during which the
    /// device executed copies and kernels. `None` where records lack it.
    pub kernel_busy_fraction: Option<f64>,
    /// First `gpu_start` to last `gpu_end` on this device, milliseconds.
    pub window_ms: Option<f64>,
    pub kernel_busy_ms: f64,
    pub measured_partitions: u64,
    pub unmeasured_partitions: u64,
}

/// Statistics of one (host, build), or of a whole host when `build` is `*`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Section {
    pub host: String,
    pub build: String,
    pub partitions: u64,
    pub failed_partitions: u64,
    pub proofs: u64,
    pub failed_proofs: u64,
    pub backends: BTreeMap<String, u64>,
    pub phases: Vec<PhaseStats>,
    pub h2d: H2dStats,
    /// Occupied fraction (a partition held the device worker), averaged over
    /// devices. Kept under its old name: it is the figure reports called
    /// "GPU busy" before kernel busy was measured.
    pub busy_fraction: Option<f64>,
    /// Kernel busy fraction averaged over the devices that have one.
    pub kernel_busy_fraction: Option<f64>,
    /// Per device; empty for the per-build sections, where devices of
    /// different hosts share ordinals.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceBusy>,
    pub synthesis_ms: f64,
    pub device_ms: f64,
    /// Cores of synthesis one device needs to be kept busy: a partition's
    /// mean synthesis over its mean device time (each synthesis thread
    /// takes one partition at a time, on one core). None without both.
    pub synthesis_cores_per_device: Option<f64>,
    pub bottleneck: Bottleneck,
    /// Latest occupied (gpu_start..gpu_end) intervals per device, Unix µs, for charts.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub timeline: BTreeMap<String, Vec<(u64, u64)>>,
    /// For the same intervals, where the record carries it: (start µs,
    /// end µs, device ms measured inside).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub kernel_timeline: BTreeMap<String, Vec<(u64, u64, f64)>>,
    /// Mean milliseconds per partition of each phase, for the linear
    /// where-the-time-goes bar.
    #[serde(skip)]
    pub mean_phase_ms: Vec<(Phase, f64)>,
    /// Mean `device_busy_ms` per partition that carries it.
    pub mean_device_busy_ms: Option<f64>,
}

/// A host or build that needs a look, and why.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Flag {
    pub host: String,
    pub build: String,
    pub reason: String,
}

/// p50 of one phase in a build against the baseline build.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PhaseChange {
    pub phase: Phase,
    pub baseline_p50_ms: f64,
    pub p50_ms: f64,
    /// Positive is slower.
    pub change_pct: f64,
    /// The device's own p50 in the baseline and in this build, where both
    /// measured it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_p50_ms: Option<(f64, f64)>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BuildComparison {
    pub baseline: String,
    pub build: String,
    pub phases: Vec<PhaseChange>,
    pub h2d_gbps: (Option<f64>, Option<f64>),
    pub busy_fraction: (Option<f64>, Option<f64>),
    pub kernel_busy_fraction: (Option<f64>, Option<f64>),
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub report_version: u32,
    pub lines: u64,
    pub bytes: u64,
    pub malformed_count: u64,
    pub malformed: Vec<Malformed>,
    pub newer_schema_lines: u64,
    /// Lines `timing collect` left out of the store (too long, or not a
    /// record), and the first of them with host, file and line.
    pub collect_skipped_count: u64,
    pub collect_skipped: Vec<SkippedLine>,
    /// One section per (host, build).
    pub sections: Vec<Section>,
    /// One section per host, all builds together (`build` = `*`).
    pub hosts: Vec<Section>,
    /// One section per build, all hosts together (`host` = `*`).
    pub builds: Vec<Section>,
    pub flags: Vec<Flag>,
    pub comparisons: Vec<BuildComparison>,
}

fn us_to_ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

fn label(d: Option<u32>) -> String {
    d.map_or_else(|| "-".to_string(), |d| d.to_string())
}

fn devices(acc: &Acc) -> Vec<DeviceBusy> {
    let kernel = acc.kernel_busy();
    let idle = acc.idle_devices();
    let mut keys: Vec<Option<u32>> = acc.intervals.keys().copied().collect();
    keys.extend(acc.kernel.keys().copied());
    keys.extend(idle.iter().map(|d| Some(*d)));
    keys.sort_unstable();
    keys.dedup();
    keys.into_iter()
        .map(|d| {
            let iv = acc.intervals.get(&d).map(Vec::as_slice).unwrap_or(&[]);
            let k = acc.kernel.get(&d).cloned().unwrap_or_default();
            let never_used = d.is_some_and(|d| idle.contains(&d));
            DeviceBusy {
                device: label(d),
                occupied_fraction: match never_used {
                    true => Some(0.0),
                    false => merged_busy_fraction(iv),
                },
                kernel_busy_fraction: kernel.get(&d).copied().flatten(),
                window_ms: window_us(iv).map(us_to_ms),
                kernel_busy_ms: k.busy_ms,
                measured_partitions: k.measured,
                unmeasured_partitions: k.unmeasured,
            }
        })
        .collect()
}

/// Occupied at least this much of its window, the device is the limit.
const DEVICE_BOUND: f64 = 0.9;

/// Which side limits throughput. Summed phase times cannot say: twelve
/// synthesis threads run twelve partitions' synthesis at once beside one
/// device. The device's own timeline can: held nearly all the time, it is
/// the limit; idle while partitions were handed to it at once (a short
/// `gpu_lock_wait`), it waited for synthesis. Without a timeline, the sums
/// are all there is.
fn bottleneck(acc: &Acc) -> Bottleneck {
    if acc.partitions == 0 || acc.device_ms <= 0.0 {
        return Bottleneck::Unknown;
    }
    let device_per_partition = acc.device_ms / acc.partitions as f64;
    match acc.busy_fraction() {
        Some(occupied) if occupied >= DEVICE_BOUND => Bottleneck::Device,
        Some(_) => {
            let waited = acc
                .phases
                .get(&Phase::GpuLockWait)
                .map_or(0.0, |h| h.mean() / 1000.0);
            if waited < 0.1 * device_per_partition {
                Bottleneck::Synthesis
            } else {
                Bottleneck::Balanced
            }
        }
        None if acc.synthesis_ms <= 0.0 => Bottleneck::Unknown,
        None if acc.synthesis_ms > acc.device_ms * 1.1 => Bottleneck::Synthesis,
        None if acc.device_ms > acc.synthesis_ms * 1.1 => Bottleneck::Device,
        None => Bottleneck::Balanced,
    }
}

fn section(host: &str, build: &str, acc: &Acc) -> Section {
    let phases = acc
        .phases
        .iter()
        .map(|(phase, h)| PhaseStats {
            phase: *phase,
            clock: phase.clock(),
            stage: phase.stage(),
            device: acc.phase_device.get(phase).map(dist),
            wait: acc.phase_wait.get(phase).map(dist),
            count: h.len(),
            p50_ms: us_to_ms(h.value_at_quantile(0.50)),
            p95_ms: us_to_ms(h.value_at_quantile(0.95)),
            p99_ms: us_to_ms(h.value_at_quantile(0.99)),
            max_ms: us_to_ms(h.max()),
            mean_ms: h.mean() / 1000.0,
        })
        .collect();
    let h2d = H2dStats {
        bytes: acc.h2d_bytes,
        partitions: acc.h2d_partitions,
        gbps: (acc.h2d_seconds > 0.0).then(|| acc.h2d_bytes as f64 / acc.h2d_seconds / 1e9),
        pinned_fraction: (acc.h2d_partitions > 0)
            .then(|| acc.h2d_pinned_partitions as f64 / acc.h2d_partitions as f64),
    };
    let bottleneck = bottleneck(acc);
    let timeline = acc
        .timeline_sample()
        .into_iter()
        .map(|(d, iv)| (label(d), iv))
        .collect();
    let kernel_timeline = acc
        .kernel_sample()
        .into_iter()
        .map(|(d, m)| {
            let m = m
                .iter()
                .map(|k| (k.start_us, k.end_us, k.busy_ms))
                .collect();
            (label(d), m)
        })
        .collect();
    let mean_phase_ms = acc
        .phases
        .iter()
        .map(|(p, h)| (*p, h.mean() / 1000.0))
        .collect();
    Section {
        host: host.to_string(),
        build: build.to_string(),
        partitions: acc.partitions,
        failed_partitions: acc.failed_partitions,
        proofs: acc.proofs,
        failed_proofs: acc.failed_proofs,
        backends: acc.backends.clone(),
        phases,
        h2d,
        busy_fraction: acc.busy_fraction(),
        kernel_busy_fraction: acc.kernel_busy_fraction(),
        devices: devices(acc),
        synthesis_ms: acc.synthesis_ms,
        device_ms: acc.device_ms,
        synthesis_cores_per_device: (acc.synthesis_ms > 0.0 && acc.device_ms > 0.0)
            .then(|| acc.synthesis_ms / acc.device_ms),
        bottleneck,
        timeline,
        kernel_timeline,
        mean_phase_ms,
        mean_device_busy_ms: {
            let (ms, n) = acc
                .kernel
                .values()
                .fold((0.0, 0u64), |(ms, n), k| (ms + k.busy_ms, n + k.measured));
            (n > 0).then(|| ms / n as f64)
        },
    }
}

fn flags_for(s: &Section, t: &Thresholds, out: &mut Vec<Flag>) {
    let mut flag = |reason: String| {
        out.push(Flag {
            host: s.host.clone(),
            build: s.build.clone(),
            reason,
        })
    };
    let avg_upload = s.h2d.bytes / s.h2d.partitions.max(1);
    if let Some(g) = s.h2d.gbps.filter(|_| avg_upload >= t.min_h2d_bytes) {
        if g < t.min_h2d_gbps {
            flag(format!(
                "h2d {g:.1} GB/s is under {:.1} GB/s",
                t.min_h2d_gbps
            ));
        }
    }
    if let Some(p) = s.h2d.pinned_fraction {
        if p < 1.0 {
            flag(format!(
                "{:.0}% of uploads came from pageable memory (pinned pool off or exhausted)",
                (1.0 - p) * 100.0
            ));
        }
    }
    if let Some(b) = s.busy_fraction {
        if b < t.min_occupied {
            let why = match s.bottleneck {
                Bottleneck::Synthesis => {
                    "; synthesis is slower than the device, so the GPU waits for it"
                }
                _ => "",
            };
            flag(format!(
                "GPU occupied {:.0}% is under {:.0}%{why}",
                b * 100.0,
                t.min_occupied * 100.0
            ));
        }
    }
    for d in &s.devices {
        let Some(k) = d.kernel_busy_fraction else {
            continue;
        };
        if k < t.min_busy {
            // High occupancy with idle kernels is the case the occupied
            // figure hides: the worker holds the device while the CPU works.
            let why = match d.occupied_fraction {
                Some(o) if o >= t.min_occupied => format!(
                    "; occupied {}, so the device worker is held while the device idles (CPU work inside the device call)",
                    fine_pct(o)
                ),
                _ => String::new(),
            };
            let why = match d.occupied_fraction == Some(0.0) && d.measured_partitions == 0 {
                true => "; the daemon opened it but gave it no partition".to_string(),
                false => why,
            };
            flag(format!(
                "gpu {}: kernel busy {} is under {}{why}",
                d.device,
                fine_pct(k),
                fine_pct(t.min_busy)
            ));
        }
    }
    if s.failed_partitions > 0 {
        flag(format!("{} failed partitions", s.failed_partitions));
    }
}

/// A percentage with enough digits that a near-zero kernel busy does not
/// print as a bare "0%".
pub fn fine_pct(v: f64) -> String {
    let p = v * 100.0;
    if p != 0.0 && p.abs() < 1.0 {
        format!("{p:.2}%")
    } else if p.abs() < 10.0 {
        format!("{p:.1}%")
    } else {
        format!("{p:.0}%")
    }
}

/// Builds the report from a scan.
pub fn build(scan: &Scan, thresholds: &Thresholds, baseline: Option<&str>) -> Report {
    let mut sections = Vec::new();
    let mut by_host: BTreeMap<&str, Acc> = BTreeMap::new();
    let mut by_build: BTreeMap<&str, Acc> = BTreeMap::new();
    for ((host, build), acc) in &scan.accs {
        sections.push(section(host, build, acc));
        by_host.entry(host).or_default().merge(acc.clone());
        by_build.entry(build).or_default().merge(acc.clone());
    }
    let hosts: Vec<Section> = by_host.iter().map(|(h, a)| section(h, "*", a)).collect();
    let mut builds: Vec<Section> = by_build.iter().map(|(b, a)| section("*", b, a)).collect();
    // A fleet-wide busy fraction is the mean over hosts, not over one merged
    // timeline: two hosts' intervals overlapping says nothing about either GPU.
    for b in &mut builds {
        let per_host: Vec<f64> = scan
            .accs
            .iter()
            .filter(|((_, build), _)| *build == b.build)
            .filter_map(|(_, acc)| {
                acc.intervals
                    .values()
                    .filter_map(|iv| merged_busy_fraction(iv))
                    .reduce(f64::min)
            })
            .collect();
        b.busy_fraction =
            (!per_host.is_empty()).then(|| per_host.iter().sum::<f64>() / per_host.len() as f64);
        // Likewise kernel busy: each host's devices over their own windows.
        let per_device: Vec<f64> = scan
            .accs
            .iter()
            .filter(|((_, build), _)| *build == b.build)
            .flat_map(|(_, acc)| acc.kernel_busy().into_values().flatten())
            .collect();
        b.kernel_busy_fraction = (!per_device.is_empty())
            .then(|| per_device.iter().sum::<f64>() / per_device.len() as f64);
        b.devices.clear();
        b.timeline.clear();
        b.kernel_timeline.clear();
    }
    let mut flags = Vec::new();
    for s in &sections {
        flags_for(s, thresholds, &mut flags);
    }
    let comparisons = baseline
        .and_then(|base| builds.iter().find(|b| b.build == base))
        .map(|base| {
            builds
                .iter()
                .filter(|b| b.build != base.build)
                .map(|b| compare(base, b))
                .collect()
        })
        .unwrap_or_default();
    Report {
        report_version: REPORT_VERSION,
        lines: scan.lines,
        bytes: scan.bytes,
        malformed_count: scan.malformed_count,
        malformed: scan.malformed.clone(),
        newer_schema_lines: scan.newer_schema,
        collect_skipped_count: scan.collect_skipped_count,
        collect_skipped: scan.collect_skipped.clone(),
        sections,
        hosts,
        builds,
        flags,
        comparisons,
    }
}

fn compare(base: &Section, other: &Section) -> BuildComparison {
    let phases = other
        .phases
        .iter()
        .filter_map(|p| {
            let b = base.phases.iter().find(|bp| bp.phase == p.phase)?;
            let change_pct = if b.p50_ms > 0.0 {
                (p.p50_ms - b.p50_ms) / b.p50_ms * 100.0
            } else {
                0.0
            };
            Some(PhaseChange {
                phase: p.phase,
                baseline_p50_ms: b.p50_ms,
                p50_ms: p.p50_ms,
                change_pct,
                device_p50_ms: b
                    .device
                    .as_ref()
                    .zip(p.device.as_ref())
                    .map(|(b, p)| (b.p50_ms, p.p50_ms)),
            })
        })
        .collect();
    BuildComparison {
        baseline: base.build.clone(),
        build: other.build.clone(),
        phases,
        h2d_gbps: (base.h2d.gbps, other.h2d.gbps),
        busy_fraction: (base.busy_fraction, other.busy_fraction),
        kernel_busy_fraction: (base.kernel_busy_fraction, other.kernel_busy_fraction),
    }
}
