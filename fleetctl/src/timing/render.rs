//! Renders a [`Report`]: a terminal table and a self-contained HTML page with
//! inline SVG charts (no scripts, no external assets, opens offline).

use super::report::{fine_pct, Bottleneck, PhaseStats, Report, Section};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, Table};
use fleet_wire::phase::{summable, Stage};
use fleet_wire::timing::Phase;
use std::fmt::Write as _;

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.digits$}"))
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{:.0}%", v * 100.0))
}

/// Kernel busy: "n/a" where the records do not carry device time, which is
/// not the same as a measured zero.
fn kpct(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".into(), fine_pct)
}

fn bottleneck(b: Bottleneck) -> &'static str {
    match b {
        Bottleneck::Synthesis => "synthesis",
        Bottleneck::Device => "device",
        Bottleneck::Balanced => "balanced",
        Bottleneck::Unknown => "-",
    }
}

/// The terminal form: a summary per (host, build), the phase distributions
/// per build, flags and comparisons.
pub fn table(report: &Report) -> String {
    let mut out = String::new();
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "host",
        "build",
        "partitions",
        "failed",
        "proofs",
        "h2d GB/s",
        "pinned",
        "occupied",
        "kernel busy",
        "synth s",
        "device s",
        "cores/device",
        "bottleneck",
    ]);
    for s in &report.sections {
        t.add_row(vec![
            Cell::new(&s.host),
            Cell::new(&s.build),
            Cell::new(s.partitions),
            Cell::new(s.failed_partitions),
            Cell::new(s.proofs),
            Cell::new(opt(s.h2d.gbps, 1)),
            Cell::new(pct(s.h2d.pinned_fraction)),
            Cell::new(pct(s.busy_fraction)),
            Cell::new(kpct(s.kernel_busy_fraction)),
            Cell::new(format!("{:.1}", s.synthesis_ms / 1000.0)),
            Cell::new(format!("{:.1}", s.device_ms / 1000.0)),
            Cell::new(opt(s.synthesis_cores_per_device, 1)),
            Cell::new(bottleneck(s.bottleneck)),
        ]);
    }
    let _ = writeln!(out, "{t}");
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "host",
        "build",
        "device",
        "occupied",
        "kernel busy",
        "window s",
        "kernel s",
        "measured",
        "unmeasured",
    ]);
    let mut rows = 0;
    for s in &report.sections {
        for d in &s.devices {
            rows += 1;
            t.add_row(vec![
                Cell::new(&s.host),
                Cell::new(&s.build),
                Cell::new(&d.device),
                Cell::new(pct(d.occupied_fraction)),
                Cell::new(kpct(d.kernel_busy_fraction)),
                Cell::new(opt(d.window_ms.map(|w| w / 1000.0), 2)),
                Cell::new(format!("{:.3}", d.kernel_busy_ms / 1000.0)),
                Cell::new(d.measured_partitions),
                Cell::new(d.unmeasured_partitions),
            ]);
        }
    }
    if rows > 0 {
        let _ = writeln!(out, "\nper device\n{t}");
    }
    for b in &report.builds {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED)
            .set_header(PHASE_COLUMNS.to_vec());
        for p in &b.phases {
            t.add_row(phase_row(p).into_iter().map(Cell::new).collect::<Vec<_>>());
        }
        let _ = writeln!(out, "\nbuild {} (all hosts)\n{t}", b.build);
    }
    for c in &report.comparisons {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
            "phase",
            "baseline p50 ms",
            "p50 ms",
            "change",
        ]);
        for p in &c.phases {
            t.add_row(vec![
                Cell::new(p.phase),
                Cell::new(format!("{:.3}", p.baseline_p50_ms)),
                Cell::new(format!("{:.3}", p.p50_ms)),
                Cell::new(format!("{:+.1}%", p.change_pct)),
            ]);
        }
        let _ = writeln!(out, "\n{} against baseline {}\n{t}", c.build, c.baseline);
    }
    if report.flags.is_empty() {
        let _ = writeln!(out, "\nno outliers");
    } else {
        let _ = writeln!(out, "\noutliers:");
        for f in &report.flags {
            let _ = writeln!(out, "  {} [{}]: {}", f.host, f.build, f.reason);
        }
    }
    if report.malformed_count > 0 {
        let _ = writeln!(out, "\n{} malformed lines skipped:", report.malformed_count);
        for m in &report.malformed {
            let _ = writeln!(out, "  {}:{}: {}", m.file.display(), m.line, m.reason);
        }
    }
    if report.collect_skipped_count > 0 {
        let _ = writeln!(
            out,
            "\n{} lines left out at collect (too long, or not a timing record):",
            report.collect_skipped_count
        );
        for m in &report.collect_skipped {
            let _ = writeln!(
                out,
                "  {}: {} line {}: {}",
                m.host, m.file, m.line, m.reason
            );
        }
        let more = report.collect_skipped_count - report.collect_skipped.len() as u64;
        if more > 0 {
            let _ = writeln!(out, "  and {more} more");
        }
    }
    out
}

/// The columns of a per-phase table, terminal and HTML alike.
const PHASE_COLUMNS: [&str; 10] = [
    "phase",
    "clock",
    "count",
    "p50 ms",
    "p95 ms",
    "p99 ms",
    "max ms",
    "device p50 ms",
    "device mean ms",
    "wait p50 ms",
];

/// One phase's cells under [`PHASE_COLUMNS`]: the host's (or the device
/// events') distribution, then the device's own time and the wait for the
/// device where the records carry them (`-` where not measured).
fn phase_row(p: &PhaseStats) -> Vec<String> {
    let ms = |v: f64| format!("{v:.3}");
    vec![
        p.phase.to_string(),
        p.clock.as_str().to_string(),
        p.count.to_string(),
        ms(p.p50_ms),
        ms(p.p95_ms),
        ms(p.p99_ms),
        ms(p.max_ms),
        opt(p.device.as_ref().map(|d| d.p50_ms), 3),
        opt(p.device.as_ref().map(|d| d.mean_ms), 3),
        opt(p.wait.as_ref().map(|d| d.p50_ms), 3),
    ]
}

fn phase_table_html(s: &Section) -> String {
    let mut out = String::from("<table><tr>");
    for c in PHASE_COLUMNS {
        let _ = write!(out, "<th>{}</th>", esc(c));
    }
    out.push_str("</tr>");
    for p in &s.phases {
        out.push_str("<tr>");
        for c in phase_row(p) {
            let _ = write!(out, "<td>{}</td>", esc(&c));
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
    out
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const PALETTE: [&str; 4] = ["#2b6cb0", "#dd6b20", "#c53030", "#718096"];

/// Horizontal bars of p50/p95/p99 per phase, on a log scale so NTT
/// milliseconds and MSM seconds fit one chart.
fn phase_chart(s: &Section) -> String {
    let phases: Vec<_> = s
        .phases
        .iter()
        .filter(|p| p.phase != Phase::Unknown)
        .collect();
    let (w, row, left) = (760.0, 26.0, 150.0);
    let h = 30.0 + row * phases.len() as f64;
    let max = phases.iter().map(|p| p.max_ms).fold(1e-3_f64, f64::max);
    let min = phases
        .iter()
        .map(|p| p.p50_ms)
        .fold(max, f64::min)
        .max(1e-3);
    let (lmin, lmax) = ((min / 2.0).log10(), (max * 1.2).log10());
    let x = |ms: f64| {
        left + (ms.max(1e-3).log10() - lmin) / (lmax - lmin).max(1e-9) * (w - left - 20.0)
    };
    let mut svg = format!(
        r#"<svg class="chart" data-chart="phases" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}">"#
    );
    for (i, p) in phases.iter().enumerate() {
        let y = 20.0 + row * i as f64;
        let _ = write!(
            svg,
            r#"<text x="4" y="{:.1}" font-size="12">{}</text>"#,
            y + 14.0,
            esc(p.phase.as_str())
        );
        for (j, (v, label)) in [(p.p99_ms, "p99"), (p.p95_ms, "p95"), (p.p50_ms, "p50")]
            .iter()
            .enumerate()
        {
            let _ = write!(
                svg,
                r#"<rect x="{left}" y="{:.1}" width="{:.1}" height="18" fill="{}"><title>{} {label} {v:.3} ms</title></rect>"#,
                y + 1.0,
                (x(*v) - left).max(1.0),
                PALETTE[2 - j],
                esc(p.phase.as_str())
            );
        }
        let _ = write!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" font-size="11">{:.2} ms</text>"#,
            (x(p.p99_ms) + 4.0).min(w - 70.0),
            y + 14.0,
            p.p50_ms
        );
    }
    svg.push_str("</svg>");
    svg
}

/// One bar per host: h2d GB/s, with the outlier threshold as a line.
fn h2d_chart(hosts: &[Section], threshold: f64) -> String {
    let rows: Vec<_> = hosts
        .iter()
        .filter_map(|s| s.h2d.gbps.map(|g| (s, g)))
        .collect();
    if rows.is_empty() {
        return "<p>No host uploaded to a GPU (CPU backend only).</p>".into();
    }
    let (w, row, left) = (760.0, 24.0, 150.0);
    let h = 30.0 + row * rows.len() as f64;
    let max = rows.iter().map(|r| r.1).fold(threshold * 1.2, f64::max);
    let x = |g: f64| left + g / max * (w - left - 60.0);
    let mut svg = format!(
        r#"<svg class="chart" data-chart="h2d" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}">"#
    );
    for (i, (s, g)) in rows.iter().enumerate() {
        let y = 10.0 + row * i as f64;
        let color = if *g < threshold {
            PALETTE[2]
        } else {
            PALETTE[0]
        };
        let _ = write!(
            svg,
            r#"<text x="4" y="{:.1}" font-size="12">{}</text><rect x="{left}" y="{y:.1}" width="{:.1}" height="18" fill="{color}"><title>{} {g:.1} GB/s</title></rect><text x="{:.1}" y="{:.1}" font-size="11">{g:.1}</text>"#,
            y + 14.0,
            esc(&s.host),
            (x(*g) - left).max(1.0),
            esc(&s.host),
            x(*g) + 4.0,
            y + 14.0
        );
    }
    let tx = x(threshold);
    let _ = write!(
        svg,
        r##"<line x1="{tx:.1}" y1="0" x2="{tx:.1}" y2="{h}" stroke="#c53030" stroke-dasharray="4 3"/></svg>"##
    );
    svg
}

/// A tick step of 1, 2 or 5 times a power of ten giving about six ticks.
fn tick_step(span: f64) -> f64 {
    let raw = (span / 6.0).max(1e-9);
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

/// A linear time axis under a chart: ticks from 0 to `span_ms`, labelled in
/// ms or s (whichever keeps the labels short), between `x0` and `x1`.
fn time_axis(svg: &mut String, y: f64, x0: f64, x1: f64, span_ms: f64) {
    let (unit, scale) = if span_ms >= 2000.0 {
        ("s", 1000.0)
    } else {
        ("ms", 1.0)
    };
    let span = (span_ms / scale).max(1e-9);
    let step = tick_step(span);
    let _ = write!(
        svg,
        r##"<line x1="{x0:.1}" y1="{y:.1}" x2="{x1:.1}" y2="{y:.1}" stroke="#4a5568"/>"##
    );
    let mut i = 0u32;
    loop {
        let v = step * f64::from(i);
        if v > span * 1.0001 {
            break;
        }
        let x = x0 + v / span * (x1 - x0);
        let digits = if step < 1.0 {
            (-step.log10().floor()) as usize
        } else {
            0
        };
        let _ = write!(
            svg,
            r##"<line x1="{x:.1}" y1="{y:.1}" x2="{x:.1}" y2="{:.1}" stroke="#4a5568"/><text x="{x:.1}" y="{:.1}" font-size="10" text-anchor="middle">{v:.digits$} {unit}</text>"##,
            y + 4.0,
            y + 15.0
        );
        i += 1;
    }
}

/// Two lanes per device of one host on one linear time axis: "occupied"
/// (each gpu_start..gpu_end a rectangle) and "kernel" (the device time the
/// record measured inside each interval).
fn timeline_chart(s: &Section) -> Option<String> {
    let start = s.timeline.values().flatten().map(|i| i.0).min()?;
    let end = s.timeline.values().flatten().map(|i| i.1).max()?;
    let span = (end - start).max(1) as f64;
    let (w, lane, left) = (760.0, 24.0, 170.0);
    let lanes = s.timeline.len() * 2;
    let h = 40.0 + lane * lanes as f64;
    let plot = w - left - 20.0;
    let x = |us: u64| left + us.saturating_sub(start) as f64 / span * plot;
    let mut svg = format!(
        r#"<svg class="chart" data-chart="timeline" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}">"#
    );
    for (i, (dev, iv)) in s.timeline.iter().enumerate() {
        let figures = s.devices.iter().find(|d| &d.device == dev);
        let occupied = pct(figures.and_then(|d| d.occupied_fraction));
        let kernel = kpct(figures.and_then(|d| d.kernel_busy_fraction));
        let y = 8.0 + lane * (2 * i) as f64;
        let yk = y + lane;
        let _ = write!(
            svg,
            r##"<text x="4" y="{:.1}" font-size="12">gpu {} occupied {occupied}</text><rect x="{left}" y="{y:.1}" width="{plot:.1}" height="18" fill="#edf2f7"/><text x="4" y="{:.1}" font-size="12">gpu {} kernel {kernel}</text><rect x="{left}" y="{yk:.1}" width="{plot:.1}" height="18" fill="#edf2f7"/>"##,
            y + 13.0,
            esc(dev),
            yk + 13.0,
            esc(dev),
        );
        for (a, b) in iv {
            let (x0, x1) = (x(*a), x(*b));
            let _ = write!(
                svg,
                r#"<rect x="{x0:.2}" y="{y:.1}" width="{:.2}" height="18" fill="{}"><title>occupied {:.3} ms</title></rect>"#,
                (x1 - x0).max(0.5),
                PALETTE[0],
                (b - a) as f64 / 1000.0
            );
        }
        for (a, b, busy_ms) in s.kernel_timeline.get(dev).map(Vec::as_slice).unwrap_or(&[]) {
            // Where inside the interval the device ran is not recorded, only
            // how long: the bar starts with the interval and keeps its length.
            let len_us = (busy_ms * 1000.0).min((b - a) as f64);
            let x0 = x(*a);
            let _ = write!(
                svg,
                r#"<rect x="{x0:.2}" y="{yk:.1}" width="{:.2}" height="18" fill="{}"><title>kernel {busy_ms:.3} ms of {:.3} ms occupied</title></rect>"#,
                (len_us / span * plot).max(0.5),
                PALETTE[1],
                (b - a) as f64 / 1000.0
            );
        }
    }
    time_axis(&mut svg, h - 26.0, left, left + plot, span / 1000.0);
    svg.push_str("</svg>");
    Some(svg)
}

/// The phases of `stage` a section carries, each counted once, with their means.
fn stage_phases(means: &[(Phase, f64)], stage: Stage) -> Vec<(Phase, f64)> {
    summable(stage, |p| means.iter().any(|(q, _)| *q == p))
        .into_iter()
        .filter_map(|p| means.iter().find(|(q, _)| *q == p).copied())
        .collect()
}

/// One colour per phase of the breakdown (at most five host and eleven
/// worker phases, so twelve repeat only on an unusual record).
const STACK: [&str; 12] = [
    "#2b6cb0", "#dd6b20", "#38a169", "#805ad5", "#d69e2e", "#319795", "#e53e3e", "#718096",
    "#97266d", "#2c7a7b", "#b7791f", "#4c51bf",
];
/// The measured device time's bar: unlike any phase's colour.
const MEASURED: &str = "#1a202c";

/// Where a partition's time goes, on a linear scale: stacked bars of the mean
/// milliseconds per phase for the host side and the device worker, and the
/// device time measured on the device, on one axis.
fn breakdown_chart(s: &Section) -> String {
    let host = stage_phases(&s.mean_phase_ms, Stage::Host);
    let worker = stage_phases(&s.mean_phase_ms, Stage::Device);
    let sum = |v: &[(Phase, f64)]| v.iter().map(|x| x.1).sum::<f64>();
    let kernel = s.mean_device_busy_ms;
    let max = sum(&host)
        .max(sum(&worker))
        .max(kernel.unwrap_or(0.0))
        .max(1e-3);
    let (w, lane, left) = (760.0, 30.0, 170.0);
    let plot = w - left - 20.0;
    let h = 3.0 * lane + 40.0 + 18.0 * ((host.len() + worker.len()) as f64 / 4.0).ceil();
    let mut svg = format!(
        r#"<svg class="chart" data-chart="breakdown" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}">"#
    );
    let mut legend = Vec::new();
    let mut color_of = |p: Phase| {
        let i = legend.iter().position(|q| *q == p).unwrap_or_else(|| {
            legend.push(p);
            legend.len() - 1
        });
        STACK[i % STACK.len()]
    };
    for (row, (name, parts)) in [("host", &host), ("device worker", &worker)]
        .into_iter()
        .enumerate()
    {
        let y = 8.0 + lane * row as f64;
        let _ = write!(
            svg,
            r#"<text x="4" y="{:.1}" font-size="12">{name} {:.1} ms</text>"#,
            y + 14.0,
            sum(parts)
        );
        let mut x0 = left;
        for (p, ms) in parts.iter() {
            let width = ms / max * plot;
            let _ = write!(
                svg,
                r#"<rect x="{x0:.2}" y="{y:.1}" width="{:.2}" height="20" fill="{}"><title>{} {ms:.3} ms</title></rect>"#,
                width.max(0.5),
                color_of(*p),
                esc(p.as_str())
            );
            x0 += width;
        }
    }
    let y = 8.0 + lane * 2.0;
    let _ = write!(
        svg,
        r#"<text x="4" y="{:.1}" font-size="12">device (measured) {}</text>"#,
        y + 14.0,
        kernel.map_or_else(|| "n/a".to_string(), |k| format!("{k:.1} ms"))
    );
    if let Some(k) = kernel {
        let _ = write!(
            svg,
            r#"<rect x="{left}" y="{y:.1}" width="{:.2}" height="20" fill="{}"><title>device_busy {k:.3} ms</title></rect>"#,
            (k / max * plot).max(0.5),
            MEASURED
        );
    }
    time_axis(&mut svg, 8.0 + lane * 3.0, left, left + plot, max);
    let ly = 8.0 + lane * 3.0 + 34.0;
    for (i, p) in legend.iter().enumerate() {
        let (lx, lyy) = (4.0 + 185.0 * (i % 4) as f64, ly + 18.0 * (i / 4) as f64);
        let _ = write!(
            svg,
            r#"<rect x="{lx:.1}" y="{:.1}" width="10" height="10" fill="{}"/><text x="{:.1}" y="{lyy:.1}" font-size="11">{}</text>"#,
            lyy - 9.0,
            STACK[i % STACK.len()],
            lx + 14.0,
            esc(p.as_str())
        );
    }
    svg.push_str("</svg>");
    svg
}

/// A self-contained HTML page.
pub fn html(report: &Report, min_h2d_gbps: f64) -> String {
    let mut page = String::from(
        r#"<!doctype html><html><head><meta charset="utf-8"><title>Prover timing report</title><style>
body{font-family:system-ui,sans-serif;margin:24px;color:#1a202c}table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #cbd5e0;padding:3px 8px;font-size:13px;text-align:right}th{background:#edf2f7}
td:first-child,th:first-child{text-align:left}.flag{color:#c53030}svg.chart{display:block;margin:8px 0 20px}
</style></head><body><h1>Prover timing report</h1>"#,
    );
    let _ = write!(
        page,
        "<p>{} lines ({:.1} MB), {} malformed skipped, {} left out at collect.</p>",
        report.lines,
        report.bytes as f64 / 1e6,
        report.malformed_count,
        report.collect_skipped_count
    );
    page.push_str("<h2>Hosts</h2><table><tr><th>host</th><th>build</th><th>partitions</th><th>failed</th><th>h2d GB/s</th><th>pinned</th><th>occupied</th><th>kernel busy</th><th title=\"synthesis cores that keep one device busy\">cores/device</th><th>bottleneck</th></tr>");
    for s in &report.sections {
        let _ = write!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&s.host),
            esc(&s.build),
            s.partitions,
            s.failed_partitions,
            opt(s.h2d.gbps, 1),
            pct(s.h2d.pinned_fraction),
            pct(s.busy_fraction),
            kpct(s.kernel_busy_fraction),
            opt(s.synthesis_cores_per_device, 1),
            bottleneck(s.bottleneck)
        );
    }
    page.push_str("</table>");
    if !report.flags.is_empty() {
        page.push_str("<h2>Outliers</h2><ul>");
        for f in &report.flags {
            let _ = write!(
                page,
                r#"<li class="flag">{} [{}]: {}</li>"#,
                esc(&f.host),
                esc(&f.build),
                esc(&f.reason)
            );
        }
        page.push_str("</ul>");
    }
    page.push_str("<h2>Per-phase distributions (p50, p95, p99; log scale)</h2>");
    for b in &report.builds {
        let _ = write!(page, "<h3>build {}</h3>{}", esc(&b.build), phase_chart(b));
    }
    page.push_str("<h2>Per-phase times: host wall, device, wait for the device</h2><p>A host-timed phase whose work ran on a device also shows the device's own time (CUDA events) and the time it waited for the device; the rest of its wall time is CPU work.</p>");
    for b in &report.builds {
        let _ = write!(
            page,
            r#"<h3>build {}</h3><div data-table="phases">{}</div>"#,
            esc(&b.build),
            phase_table_html(b)
        );
    }
    page.push_str("<h2>Where a partition's time goes (mean per partition, linear scale)</h2>");
    for b in &report.builds {
        let _ = write!(
            page,
            "<h3>build {}</h3>{}",
            esc(&b.build),
            breakdown_chart(b)
        );
    }
    page.push_str("<h2>Host-to-device rate per host</h2>");
    page.push_str(&h2d_chart(&report.hosts, min_h2d_gbps));
    page.push_str("<h2>GPU timeline (latest intervals)</h2><p>Occupied: a partition held the device worker (gpu_start..gpu_end, CPU work inside the call included). Kernel: the device time the record measured on the device inside that interval; where in the interval it ran is not recorded, so each bar starts with its interval.</p>");
    let mut any = false;
    for s in &report.hosts {
        if let Some(svg) = timeline_chart(s) {
            let _ = write!(page, "<h3>{}</h3>{svg}", esc(&s.host));
            any = true;
        }
    }
    if !any {
        page.push_str("<p>No TIMELINE events collected.</p>");
    }
    for c in &report.comparisons {
        let _ = write!(
            page,
            "<h2>{} against {}</h2><table><tr><th>phase</th><th>baseline p50 ms</th><th>p50 ms</th><th>change</th></tr>",
            esc(&c.build),
            esc(&c.baseline)
        );
        for p in &c.phases {
            let _ = write!(
                page,
                "<tr><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{:+.1}%</td></tr>",
                p.phase, p.baseline_p50_ms, p.p50_ms, p.change_pct
            );
        }
        page.push_str("</table>");
    }
    page.push_str("</body></html>\n");
    page
}
