//! Tests of the report through its renderings: in a file of their own, as
//! they use both [`super::report`] and [`super::render`], which imports the
//! report's types (a `mod tests` inside `report.rs` would close a circle).

use super::report::*;
use crate::timing::scan::{scan, Source};
use fleet_wire::timing::{
    Clock, JobTag, PartitionRecord, Phase, TimelineEvent, TimelineKind, TimingLine,
    TIMING_SCHEMA_VERSION,
};
use std::collections::BTreeMap;
use std::io::Write;

fn record(build: &str, i: u64, synth_ms: f64, h2d_ms: f64, bytes: u64, pinned: bool) -> TimingLine {
    let mut phases = BTreeMap::new();
    phases.insert(Phase::Synthesis, synth_ms);
    phases.insert(Phase::H2d, h2d_ms);
    phases.insert(Phase::NttKernels, 5.0);
    phases.insert(Phase::Msm, 20.0);
    TimingLine::Partition(PartitionRecord {
        v: TIMING_SCHEMA_VERSION,
        ts_ms: i,
        tag: JobTag {
            host: "machine".into(),
            build: build.into(),
            job_id: format!("j{i}"),
            circuit: "chain".into(),
            size: 1024,
        },
        partition: 0,
        partitions: 1,
        domain: 1024,
        backend: "cuda".into(),
        device: Some(0),
        pinned,
        h2d_bytes: bytes,
        h2d_ms: Some(h2d_ms),
        h2d_gbps: None,
        phases_ms: phases,
        phase_split_ms: Default::default(),
        device_busy_ms: None,
        error: None,
    })
}

fn event(i: u64, kind: TimelineKind, ts: u64) -> TimingLine {
    TimingLine::Timeline(TimelineEvent {
        priority: None,
        v: 1,
        ts_us: ts,
        host: "machine".into(),
        build: "b1".into(),
        job_id: format!("j{i}"),
        partition: 0,
        event: kind,
        device: Some(0),
    })
}

/// Chain 2^22 on the daemon as the H200 run wrote it, with the split:
/// the four G1 MSMs of one size take the same device time, while the
/// host's clock around msm_l also holds its wait for the device (the
/// G2 MSM's thread holding it). The report shows host, device and wait
/// apart, in the terminal, JSON and HTML forms.
#[test]
fn msms_of_one_size_show_equal_device_time_and_their_waits_apart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("timing.jsonl");
    let mut f = std::fs::File::create(&path).unwrap();
    // (phase, host ms, device ms, wait ms) of one partition.
    let msms = [
        (Phase::MsmH, 75.0, 70.2, 0.1),
        (Phase::MsmL, 196.0, 71.0, 121.0),
        (Phase::MsmA, 73.0, 70.4, 0.0),
        (Phase::MsmBG1, 74.0, 70.8, 0.2),
    ];
    for i in 0..20u64 {
        let TimingLine::Partition(mut p) = record("b1", i, 300.0, 7.3, 1 << 30, true) else {
            unreachable!()
        };
        let jitter = (i % 5) as f64 * 0.1;
        for (phase, host, device, wait) in msms {
            p.phases_ms.insert(phase, host + jitter);
            p.phase_split_ms.insert(
                phase,
                fleet_wire::timing::PhaseSplit {
                    device: Some(device + jitter),
                    wait: Some(wait),
                },
            );
        }
        writeln!(f, "{}", TimingLine::Partition(p).to_line()).unwrap();
    }
    drop(f);
    let scan = scan(&[Source {
        host: "gpu-01".into(),
        path,
    }])
    .unwrap();
    let r = build(&scan, &Thresholds::default(), None);
    let b = &r.builds[0];
    let stat = |p: Phase| b.phases.iter().find(|s| s.phase == p).unwrap();
    let device: Vec<f64> = msms
        .iter()
        .map(|m| stat(m.0).device.as_ref().unwrap().p50_ms)
        .collect();
    let (lo, hi) = device
        .iter()
        .fold((f64::MAX, 0.0_f64), |(lo, hi), d| (lo.min(*d), hi.max(*d)));
    assert!(hi / lo < 1.03, "device p50s differ: {device:?}");
    // The host's figures do not agree: msm_l holds its wait.
    assert!(stat(Phase::MsmL).p50_ms > 2.5 * stat(Phase::MsmA).p50_ms);
    let wait = stat(Phase::MsmL).wait.as_ref().unwrap().p50_ms;
    assert!((wait - 121.0).abs() < 0.2, "{wait}");
    // h2d is timed by device events: its device time is itself.
    let h2d = stat(Phase::H2d);
    assert_eq!(h2d.clock, Clock::Device);
    assert_eq!(h2d.device.as_ref().unwrap().p50_ms, h2d.p50_ms);
    // Synthesis ran on the host: no device time, no wait.
    assert!(stat(Phase::Synthesis).device.is_none());

    let text = crate::timing::render::table(&r);
    assert!(
        text.contains("device p50 ms") && text.contains("wait p50 ms"),
        "{text}"
    );
    let row = text.lines().find(|l| l.contains(" msm_l ")).unwrap();
    assert!(row.contains("121.0"), "{row}");
    let json = serde_json::to_value(&r).unwrap();
    let l = json["builds"][0]["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["phase"] == "msm_l")
        .unwrap()
        .clone();
    assert_eq!(l["clock"], "host");
    assert!(l["device"]["p50_ms"].as_f64().unwrap() < 72.0, "{l}");
    let html = crate::timing::render::html(&r, 20.0);
    assert!(html.contains("data-table=\"phases\""));
    assert!(html.contains("<th>wait p50 ms</th>"));
}

/// Nearest-rank quantile of exact values, computed without hdrhistogram.
fn exact_quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[test]
fn report_figures_match_an_independent_computation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h01.jsonl");
    let mut f = std::fs::File::create(&path).unwrap();
    let mut synth = Vec::new();
    let (mut bytes, mut h2d_s) = (0u64, 0.0f64);
    for i in 0..1000u64 {
        // A skewed distribution: most partitions fast, a tail of slow ones.
        let s = 10.0 + (i % 97) as f64 * 0.37 + if i % 50 == 0 { 400.0 } else { 0.0 };
        let h2d = 2.0 + (i % 7) as f64 * 0.5;
        let b = 96 << 20;
        synth.push(s);
        bytes += b;
        h2d_s += h2d / 1000.0;
        writeln!(f, "{}", record("b1", i, s, h2d, b, true).to_line()).unwrap();
    }
    // Timeline: busy [0,100], [100,150], idle until 250, busy [250,300] -> 200/300.
    for (i, (s, e)) in [(0u64, 100u64), (100, 150), (250, 300)].iter().enumerate() {
        writeln!(
            f,
            "{}",
            event(i as u64, TimelineKind::GpuStart, *s).to_line()
        )
        .unwrap();
        writeln!(f, "{}", event(i as u64, TimelineKind::GpuEnd, *e).to_line()).unwrap();
    }
    writeln!(f, "{{\"kind\":\"partition\",\"truncated").unwrap();
    writeln!(f, "not json at all").unwrap();
    drop(f);

    let s = scan(&[Source {
        host: "h01".into(),
        path: path.clone(),
    }])
    .unwrap();
    assert_eq!(s.malformed_count, 2);
    assert_eq!(
        s.malformed[0].line, 1007,
        "malformed lines keep their line number"
    );
    assert_eq!(s.malformed[0].file, path);

    let r = build(&s, &Thresholds::default(), None);
    assert_eq!(r.sections.len(), 1);
    let sec = &r.sections[0];
    assert_eq!(sec.partitions, 1000);
    synth.sort_by(f64::total_cmp);
    let ps = sec
        .phases
        .iter()
        .find(|p| p.phase == Phase::Synthesis)
        .unwrap();
    assert_eq!(ps.count, 1000);
    for (got, q) in [(ps.p50_ms, 0.5), (ps.p95_ms, 0.95), (ps.p99_ms, 0.99)] {
        let want = exact_quantile(&synth, q);
        assert!(
            (got - want).abs() <= want * 0.002 + 0.002,
            "q{q}: got {got}, want {want}"
        );
    }
    let max = *synth.last().unwrap();
    assert!((ps.max_ms - max).abs() <= max * 0.002);
    let want_gbps = bytes as f64 / h2d_s / 1e9;
    let got = sec.h2d.gbps.unwrap();
    assert!(
        (got - want_gbps).abs() < want_gbps * 1e-9,
        "{got} vs {want_gbps}"
    );
    assert_eq!(sec.h2d.pinned_fraction, Some(1.0));
    let busy = sec.busy_fraction.unwrap();
    assert!((busy - 200.0 / 300.0).abs() < 1e-9, "{busy}");
    // 66% busy is under the 70% default: flagged with the reason.
    assert!(
        r.flags
            .iter()
            .any(|f| f.host == "h01" && f.reason.contains("GPU occupied 67%")),
        "{:?}",
        r.flags
    );
    // Synthesis (~36 ms per partition on average) against device work
    // (h2d 2-5 ms + NTT 5 ms + MSM 20 ms): the GPU waits for synthesis.
    let synth_sum: f64 = synth.iter().sum();
    assert!((sec.synthesis_ms - synth_sum).abs() < 1e-6);
    assert_eq!(sec.bottleneck, Bottleneck::Synthesis);
    assert!(r
        .flags
        .iter()
        .any(|f| f.reason.contains("synthesis is slower than the device")));
}

/// Writes a CUDA daemon's log: per partition gpu_start, gpu_end and the
/// record, as the daemon orders them. `parts` is (device, start µs, end
/// µs, device_busy_ms).
fn cuda_log(path: &std::path::Path, parts: &[(u32, u64, u64, Option<f64>)]) {
    cuda_log_with(path, parts, 40.0)
}

/// As [`cuda_log`], each partition's synthesis taking `synthesis_ms`.
fn cuda_log_with(
    path: &std::path::Path,
    parts: &[(u32, u64, u64, Option<f64>)],
    synthesis_ms: f64,
) {
    let mut f = std::fs::File::create(path).unwrap();
    for (i, (dev, start, end, busy)) in parts.iter().enumerate() {
        let ev = |kind, ts| {
            TimingLine::Timeline(TimelineEvent {
                priority: None,
                v: 1,
                ts_us: ts,
                host: "machine".into(),
                build: "b1".into(),
                job_id: format!("job{i}"),
                partition: 0,
                event: kind,
                device: Some(*dev),
            })
        };
        writeln!(f, "{}", ev(TimelineKind::GpuStart, *start).to_line()).unwrap();
        writeln!(f, "{}", ev(TimelineKind::GpuEnd, *end).to_line()).unwrap();
        let mut phases = BTreeMap::new();
        phases.insert(Phase::Synthesis, synthesis_ms);
        phases.insert(Phase::NttKernels, 3.0);
        phases.insert(Phase::MsmBG2, (end - start) as f64 / 1000.0 - 5.0);
        phases.insert(Phase::Msm, (end - start) as f64 / 1000.0 - 4.0);
        let rec = TimingLine::Partition(PartitionRecord {
            v: TIMING_SCHEMA_VERSION,
            ts_ms: end / 1000,
            tag: JobTag {
                host: "machine".into(),
                build: "b1".into(),
                job_id: format!("job{i}"),
                circuit: "chain".into(),
                size: 1 << 18,
            },
            partition: 0,
            partitions: 1,
            domain: 1 << 18,
            backend: "cuda".into(),
            device: Some(*dev),
            pinned: true,
            h2d_bytes: 0,
            h2d_ms: None,
            h2d_gbps: None,
            phases_ms: phases,
            phase_split_ms: Default::default(),
            device_busy_ms: *busy,
            error: None,
        });
        writeln!(f, "{}", rec.to_line()).unwrap();
    }
}

/// Kernel busy per device computed straight from the input: summed
/// device time over first start to last end.
fn expected_kernel_busy(parts: &[(u32, u64, u64, Option<f64>)], dev: u32) -> f64 {
    let mine: Vec<_> = parts.iter().filter(|p| p.0 == dev).collect();
    let first = mine.iter().map(|p| p.1).min().unwrap();
    let last = mine.iter().map(|p| p.2).max().unwrap();
    let busy_ms: f64 = mine.iter().map(|p| p.3.unwrap()).sum();
    busy_ms / ((last - first) as f64 / 1000.0)
}

fn report_of(dir: &std::path::Path, parts: &[(u32, u64, u64, Option<f64>)]) -> Report {
    let path = dir.join("h01.jsonl");
    cuda_log(&path, parts);
    let s = scan(&[Source {
        host: "h01".into(),
        path,
    }])
    .unwrap();
    build(&s, &Thresholds::default(), None)
}

#[test]
fn cpu_bound_run_reads_fully_occupied_but_kernel_idle_and_is_flagged() {
    // 16 partitions back to back on one device, each holding the worker
    // ~1.9 s (the G2 MSM on the CPU) while the device works ~1.5 ms.
    let parts: Vec<_> = (0..16u64)
        .map(|i| {
            let start = 1_000_000 + i * 1_902_000;
            (
                0,
                start,
                start + 1_900_000,
                Some(1.2 + (i % 3) as f64 * 0.3),
            )
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let r = report_of(dir.path(), &parts);
    let sec = &r.sections[0];
    let want = expected_kernel_busy(&parts, 0);
    assert!(want < 0.001, "the fixture is CPU-bound: {want}");
    let dev = &sec.devices[0];
    assert_eq!(dev.device, "0");
    let got = dev.kernel_busy_fraction.unwrap();
    assert!((got - want).abs() < 1e-12, "kernel busy {got} vs {want}");
    assert_eq!(sec.kernel_busy_fraction, Some(got));
    // Occupancy: 16 x 1.9 s of the 16 x 1.902 s - 2 ms window.
    let occupied = 16.0 * 1.9 / (16.0 * 1.902 - 0.002);
    assert!((dev.occupied_fraction.unwrap() - occupied).abs() < 1e-9);
    assert_eq!(
        (dev.measured_partitions, dev.unmeasured_partitions),
        (16, 0)
    );
    let flag = r
        .flags
        .iter()
        .find(|f| f.reason.contains("kernel busy"))
        .unwrap_or_else(|| panic!("kernel busy flagged: {:?}", r.flags));
    assert!(
        flag.reason.starts_with(&format!(
            "gpu 0: kernel busy {} is under 50%",
            fine_pct(want)
        )),
        "{}",
        flag.reason
    );
    assert!(flag.reason.contains("occupied 100%"), "{}", flag.reason);
    // The occupied figure alone would have said nothing was wrong.
    assert!(!r.flags.iter().any(|f| f.reason.contains("GPU occupied")));
    let table = crate::timing::render::table(&r);
    assert!(table.contains(&fine_pct(want)), "{table}");
    let html = crate::timing::render::html(&r, 20.0);
    assert!(html.contains("data-chart=\"breakdown\"") && html.contains("data-chart=\"timeline\""));
    assert!(html.contains(&format!("gpu 0 kernel {}", fine_pct(want))));
}

#[test]
fn a_device_held_all_the_time_is_the_bottleneck_whatever_synthesis_sums_to() {
    // One device held back to back for 300 ms per partition while
    // twelve synthesis threads each spent 3.6 s on a partition: the
    // summed synthesis (12 x 3.6 s) dwarfs the device's (12 x 0.3 s),
    // yet the device is what limits the run.
    let parts: Vec<_> = (0..12u64)
        .map(|i| {
            (
                0,
                10_000 + i * 300_500,
                10_000 + i * 300_500 + 300_000,
                Some(280.0),
            )
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h01.jsonl");
    cuda_log_with(&path, &parts, 3600.0);
    let s = scan(&[Source {
        host: "h01".into(),
        path,
    }])
    .unwrap();
    let sec = &build(&s, &Thresholds::default(), None).sections[0];
    assert!(sec.synthesis_ms > 10.0 * sec.device_ms);
    assert!(sec.busy_fraction.unwrap() > 0.99);
    assert_eq!(sec.bottleneck, Bottleneck::Device);
    // 3.6 s of synthesis for each ~0.3 s on the device: twelve cores keep
    // the one device busy, as the twelve threads of this run did.
    let cores = sec.synthesis_cores_per_device.expect("both measured");
    assert!((11.5..12.5).contains(&cores), "{cores}");
    let text = crate::timing::render::table(&build(&s, &Thresholds::default(), None));
    assert!(text.contains("cores/device"), "{text}");
}

#[test]
fn device_bound_run_shows_the_measured_fraction_per_device() {
    // Two devices, overlapping partitions on each, the device measured
    // busy for most of each interval.
    let mut parts = Vec::new();
    for i in 0..12u64 {
        let dev = (i % 2) as u32;
        let start = 5_000 + (i / 2) * 310_000 + u64::from(dev) * 7_000;
        let end = start + 300_000;
        parts.push((dev, start, end, Some(220.0 + (i % 5) as f64 * 11.0)));
    }
    let dir = tempfile::tempdir().unwrap();
    let r = report_of(dir.path(), &parts);
    let sec = &r.sections[0];
    assert_eq!(sec.devices.len(), 2);
    let mut fractions = Vec::new();
    for dev in 0..2u32 {
        let d = sec
            .devices
            .iter()
            .find(|d| d.device == dev.to_string())
            .unwrap();
        let want = expected_kernel_busy(&parts, dev);
        let got = d.kernel_busy_fraction.unwrap();
        assert!((got - want).abs() < 1e-12, "gpu {dev}: {got} vs {want}");
        assert!(got > 0.5, "above the default threshold: {got}");
        fractions.push(want);
    }
    assert_eq!(sec.bottleneck, Bottleneck::Device);
    let mean = (fractions[0] + fractions[1]) / 2.0;
    assert!((sec.kernel_busy_fraction.unwrap() - mean).abs() < 1e-12);
    assert!((r.builds[0].kernel_busy_fraction.unwrap() - mean).abs() < 1e-12);
    assert!(
        !r.flags.iter().any(|f| f.reason.contains("kernel busy")),
        "{:?}",
        r.flags
    );
    // The same log against a stricter threshold is flagged per device.
    let s = scan(&[Source {
        host: "h01".into(),
        path: dir.path().join("h01.jsonl"),
    }])
    .unwrap();
    let strict = Thresholds {
        min_busy: 0.99,
        ..Thresholds::default()
    };
    let r = build(&s, &strict, None);
    let n = r
        .flags
        .iter()
        .filter(|f| f.reason.contains("kernel busy"))
        .count();
    assert_eq!(n, 2, "{:?}", r.flags);
}

#[test]
fn a_gpu_the_daemon_opened_but_never_used_shows_at_zero_and_is_flagged() {
    // Devices 0 and 1 prove, 2 never gets a partition: before the
    // devices record it was left out and the mean read as if the host
    // had two GPUs.
    let mut parts = Vec::new();
    for i in 0..8u64 {
        let dev = (i % 2) as u32;
        let start = 5_000 + (i / 2) * 310_000;
        parts.push((dev, start, start + 300_000, Some(280.0)));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h01.jsonl");
    cuda_log(&path, &parts);
    let opened = TimingLine::Devices(fleet_wire::timing::DevicesRecord {
        v: TIMING_SCHEMA_VERSION,
        ts_ms: 1,
        host: "machine".into(),
        build: "b1".into(),
        backend: "cuda".into(),
        devices: vec![0, 1, 2],
    });
    let log = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{}\n{log}", opened.to_line())).unwrap();
    let s = scan(&[Source {
        host: "h01".into(),
        path,
    }])
    .unwrap();
    let r = build(&s, &Thresholds::default(), None);
    let sec = &r.sections[0];
    assert_eq!(sec.devices.len(), 3, "{:?}", sec.devices);
    let idle = sec.devices.iter().find(|d| d.device == "2").unwrap();
    assert_eq!(idle.kernel_busy_fraction, Some(0.0));
    assert_eq!(idle.occupied_fraction, Some(0.0));
    assert_eq!(idle.measured_partitions, 0);
    let busy: Vec<f64> = (0..2u32).map(|d| expected_kernel_busy(&parts, d)).collect();
    let mean = (busy[0] + busy[1] + 0.0) / 3.0;
    assert!((sec.kernel_busy_fraction.unwrap() - mean).abs() < 1e-12);
    let flag = r
        .flags
        .iter()
        .find(|f| f.reason.starts_with("gpu 2: kernel busy 0"))
        .unwrap_or_else(|| panic!("{:?}", r.flags));
    assert!(
        flag.reason.contains("gave it no partition"),
        "{}",
        flag.reason
    );
    assert!(
        !r.flags
            .iter()
            .any(|f| f.reason.starts_with("gpu 0") || f.reason.starts_with("gpu 1")),
        "{:?}",
        r.flags
    );
}

#[test]
fn records_without_device_busy_show_na_not_zero() {
    // A log from a prover that predates device_busy_ms.
    let parts: Vec<_> = (0..4u64)
        .map(|i| (0, i * 100_000, i * 100_000 + 90_000, None))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let r = report_of(dir.path(), &parts);
    let sec = &r.sections[0];
    assert_eq!(sec.kernel_busy_fraction, None);
    assert_eq!(sec.devices[0].kernel_busy_fraction, None);
    assert_eq!(sec.devices[0].unmeasured_partitions, 4);
    assert!(sec.devices[0].occupied_fraction.is_some());
    assert!(!r.flags.iter().any(|f| f.reason.contains("kernel busy")));
    let table = crate::timing::render::table(&r);
    assert!(table.contains("n/a"), "{table}");
    let json = serde_json::to_value(&r).unwrap();
    assert!(json["sections"][0]["kernel_busy_fraction"].is_null());
}

#[test]
fn slow_pageable_host_is_flagged_and_builds_compare() {
    let dir = tempfile::tempdir().unwrap();
    let mut sources = Vec::new();
    for (host, build, h2d_ms, pinned) in [("h1", "old", 40.0, false), ("h2", "new", 2.0, true)] {
        let path = dir.path().join(format!("{host}.jsonl"));
        let mut f = std::fs::File::create(&path).unwrap();
        for i in 0..10 {
            writeln!(
                f,
                "{}",
                record(build, i, 10.0, h2d_ms, 100_000_000, pinned).to_line()
            )
            .unwrap();
        }
        sources.push(Source {
            host: host.into(),
            path,
        });
    }
    let s = scan(&sources).unwrap();
    let r = build(&s, &Thresholds::default(), Some("old"));
    // 100 MB in 40 ms = 2.5 GB/s.
    assert!(r
        .flags
        .iter()
        .any(|f| f.host == "h1" && f.reason.contains("h2d 2.5 GB/s is under 20.0")));
    assert!(r
        .flags
        .iter()
        .any(|f| f.host == "h1" && f.reason.contains("pageable")));
    assert!(!r.flags.iter().any(|f| f.host == "h2"));
    let c = &r.comparisons[0];
    assert_eq!((c.baseline.as_str(), c.build.as_str()), ("old", "new"));
    let h2d = c.phases.iter().find(|p| p.phase == Phase::H2d).unwrap();
    assert!((h2d.change_pct - (-95.0)).abs() < 0.5, "{}", h2d.change_pct);
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["report_version"], 1);
    let html = crate::timing::render::html(&r, 20.0);
    assert!(html.contains("data-chart=\"phases\"") && html.contains("data-chart=\"h2d\""));
    let table = crate::timing::render::table(&r);
    assert!(table.contains("h1") && table.contains("against baseline old"));
}

#[test]
fn prometheus_export_is_cumulative_and_atomic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.jsonl");
    let mut f = std::fs::File::create(&path).unwrap();
    for (i, ms) in [0.5, 3.0, 3.0, 700.0].iter().enumerate() {
        writeln!(f, "{}", record("b", i as u64, *ms, 1.0, 1, true).to_line()).unwrap();
    }
    drop(f);
    let s = scan(&[Source {
        host: "gpu-01".into(),
        path,
    }])
    .unwrap();
    let out = dir.path().join("prom");
    let files = crate::timing::export::write_dir(&out, &s).unwrap();
    assert_eq!(files.len(), 1);
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let bucket = |le: &str| -> u64 {
        let needle = format!("phase=\"synthesis\",le=\"{le}\"}} ");
        let line = text.lines().find(|l| l.contains(&needle)).unwrap();
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(bucket("0.0008"), 1);
    assert_eq!(bucket("0.0032"), 3);
    assert_eq!(bucket("0.4096"), 3);
    assert_eq!(bucket("0.8192"), 4);
    assert_eq!(bucket("+Inf"), 4);
    assert!(text.contains("# TYPE prover_phase_duration_seconds histogram"));
    assert!(std::fs::read_dir(&out).unwrap().all(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with(".prom")));
}
