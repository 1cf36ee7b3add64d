//! The experiment's report: what ran where, each metric's judgement and
//! the verdict, and what was done about it. Rendered as a terminal table,
//! as JSON for scripts, and as a self-contained HTML page (inline SVG, no
//! scripts or external assets) with both groups' distributions side by side.

use super::analysis::Analysis;
use super::judge::{Judgement, Verdict};
use super::raw::Action;
use super::workload::HostLoad;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use serde::Serialize;
use std::fmt::Write as _;

/// Everything the report shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub experiment: String,
    pub name: String,
    pub definition: String,
    pub candidate: Candidate,
    /// Canary -> the release it ran before (and is restored to).
    pub canary: Vec<(String, String)>,
    pub baseline: Vec<String>,
    pub workload: String,
    pub loads: Vec<HostLoad>,
    /// Why the candidate never got measured, when it did not deploy.
    pub deploy_error: Option<String>,
    pub analysis: Option<Analysis>,
    pub verdict: Verdict,
    pub reason: String,
    pub action: Option<Action>,
    pub action_result: Option<String>,
    /// (stage, run id) of every rollout and restore run it started.
    pub runs: Vec<(String, String)>,
    pub audit: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    pub binary: String,
    pub sha256: String,
    pub config: Option<String>,
}

/// The first 12 characters of a release id, as the rollout prints them
/// (all of it when shorter: a state file may have been edited by hand).
pub fn short(s: &str) -> &str {
    &s[..12.min(s.len())]
}

fn num(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v.abs() >= 100.0 => format!("{v:.0}"),
        Some(v) if v.abs() >= 1.0 => format!("{v:.2}"),
        Some(v) => format!("{v:.4}"),
    }
}

fn ratio(j: &Judgement) -> String {
    match j.effect {
        super::metric::Effect::MedianRatio => j
            .median_ratio
            .map_or_else(|| "-".into(), |r| format!("{r:.3}x")),
        super::metric::Effect::MeanDifference => j
            .change
            .map_or_else(|| "-".into(), |c| format!("{:+.1} pts", c * 100.0)),
    }
}

fn p(j: &Judgement) -> String {
    j.p.map_or_else(|| "-".into(), |p| format!("{p:.2e}"))
}

/// The terminal form.
pub fn table(r: &Report) -> String {
    let mut out = format!(
        "experiment {} ({}): candidate {} ({})\n",
        r.name,
        r.experiment,
        short(&r.candidate.sha256),
        r.candidate.binary
    );
    let canaries: Vec<String> = r
        .canary
        .iter()
        .map(|(h, rel)| format!("{h} (was {})", short(rel)))
        .collect();
    let _ = writeln!(out, "canary:   {}", canaries.join(", "));
    let _ = writeln!(out, "baseline: {}", r.baseline.join(", "));
    let _ = writeln!(out, "workload: {}", r.workload);
    if !r.loads.is_empty() {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED)
            .set_header(vec!["host", "group", "jobs ok", "failed", "window", "note"]);
        for l in &r.loads {
            let group = if r.canary.iter().any(|(h, _)| *h == l.window.host) {
                "canary"
            } else {
                "baseline"
            };
            let secs = l.window.end_ms.saturating_sub(l.window.start_ms) as f64 / 1000.0;
            let mut note = l.errors.first().cloned().unwrap_or_default();
            if l.interrupted {
                note = format!("interrupted {note}");
            }
            t.add_row(vec![
                l.window.host.clone(),
                group.into(),
                l.ok.to_string(),
                l.failed.to_string(),
                format!("{secs:.1} s"),
                note,
            ]);
        }
        let _ = writeln!(out, "{t}");
    }
    if let Some(e) = &r.deploy_error {
        let _ = writeln!(out, "not measured: {e}");
    }
    if let Some(a) = &r.analysis {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
            "metric",
            "canary median",
            "n",
            "baseline median",
            "n",
            "ratio",
            "p",
            "verdict",
            "reason",
        ]);
        for j in &a.judgements {
            let name = if j.critical {
                format!("{} (critical)", j.metric)
            } else {
                j.metric.clone()
            };
            t.add_row(vec![
                name,
                format!("{} {}", num(j.canary.median), j.unit),
                j.canary.n.to_string(),
                format!("{} {}", num(j.baseline.median), j.unit),
                j.baseline.n.to_string(),
                ratio(j),
                p(j),
                j.verdict.label().into(),
                j.reason.clone(),
            ]);
        }
        let _ = writeln!(
            out,
            "analysis: Mann-Whitney U, confidence {:.0}%, at least {} samples per group\n{t}",
            a.confidence * 100.0,
            a.min_samples
        );
    }
    let _ = writeln!(out, "verdict: {} ({})", r.verdict.label(), r.reason);
    if let Some(action) = r.action {
        let _ = writeln!(
            out,
            "action: {}{}",
            action_name(action),
            r.action_result
                .as_ref()
                .map(|x| format!(": {x}"))
                .unwrap_or_default()
        );
    }
    let _ = writeln!(out, "audit log: {}", r.audit);
    out
}

pub fn action_name(a: Action) -> &'static str {
    match a {
        Action::Promote => "promote",
        Action::Restore => "restore",
        Action::Keep => "keep",
    }
}

/// JSON for scripts (the same fields as [`Report`]).
pub fn json(r: &Report) -> String {
    serde_json::to_string_pretty(r).unwrap_or_default()
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn verdict_class(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "pass",
        Verdict::Marginal => "marginal",
        Verdict::Fail => "fail",
        Verdict::Nodata => "nodata",
    }
}

const W: f64 = 640.0;
const LABEL: f64 = 130.0;
const ROW: f64 = 44.0;

/// Both groups of one metric on one axis: every sample as a dot, the
/// 10th-90th percentile as a bar, the median as a tick.
fn distribution_svg(j: &Judgement, canary: &[f64], baseline: &[f64]) -> String {
    let all = canary.iter().chain(baseline).copied();
    let (lo, hi) = all.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    let h = 2.0 * ROW + 28.0;
    let mut s = format!(
        r#"<svg class="chart" width="{W}" height="{h}" viewBox="0 0 {W} {h}" xmlns="http://www.w3.org/2000/svg">"#
    );
    if !lo.is_finite() || !hi.is_finite() {
        s.push_str(r##"<text x="8" y="30" font-size="12" fill="#718096">no samples</text></svg>"##);
        return s;
    }
    let span = if hi > lo { hi - lo } else { 1.0 };
    let x = |v: f64| LABEL + (v - lo) / span * (W - LABEL - 16.0);
    let groups = [
        ("canary", canary, &j.canary, "#dd6b20"),
        ("baseline", baseline, &j.baseline, "#3182ce"),
    ];
    for (row, (name, samples, st, color)) in groups.iter().enumerate() {
        let y = 18.0 + row as f64 * ROW;
        let _ = write!(
            s,
            r#"<text x="4" y="{}" font-size="12">{name} (n={})</text>"#,
            y + 4.0,
            st.n
        );
        if let (Some(a), Some(b)) = (st.p10, st.p90) {
            let _ = write!(
                s,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="12" fill="{color}" fill-opacity="0.25"/>"#,
                x(a),
                y - 6.0,
                (x(b) - x(a)).max(1.0)
            );
        }
        // The tick goes under the dots: a group whose samples are all equal
        // sits on its median, and the tick must not hide it.
        if let Some(m) = st.median {
            let _ = write!(
                s,
                r##"<line x1="{0:.1}" x2="{0:.1}" y1="{1:.1}" y2="{2:.1}" stroke="#1a202c" stroke-width="2"/>"##,
                x(m),
                y - 10.0,
                y + 10.0
            );
        }
        // Dots spread vertically by their index, so equal values stay visible.
        for (i, v) in samples.iter().enumerate() {
            let dy = ((i * 7) % 11) as f64 - 5.0;
            let _ = write!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="2" fill="{color}"/>"#,
                x(*v),
                y + dy
            );
        }
    }
    let axis_y = 2.0 * ROW + 8.0;
    let _ = write!(
        s,
        r##"<line x1="{LABEL}" x2="{:.1}" y1="{axis_y}" y2="{axis_y}" stroke="#a0aec0"/><text x="{LABEL}" y="{:.1}" font-size="11">{} {}</text><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{} {}</text></svg>"##,
        W - 16.0,
        axis_y + 14.0,
        num(Some(lo)),
        j.unit,
        W - 16.0,
        axis_y + 14.0,
        num(Some(hi)),
        j.unit
    );
    s
}

/// The self-contained HTML page.
pub fn html(r: &Report) -> String {
    let mut page = String::from(
        r#"<!doctype html><html><head><meta charset="utf-8"><title>Experiment report</title><style>
body{font-family:system-ui,sans-serif;margin:24px;color:#1a202c;max-width:1100px}table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #cbd5e0;padding:3px 8px;font-size:13px;text-align:right}th{background:#edf2f7}
td:first-child,th:first-child{text-align:left}td.reason{text-align:left}.verdict{font-size:20px;font-weight:600;padding:8px 12px;display:inline-block;border-radius:4px}
.pass{background:#c6f6d5}.marginal{background:#fefcbf}.fail{background:#fed7d7}.nodata{background:#e2e8f0}svg.chart{display:block;margin:4px 0 18px}
</style></head><body>"#,
    );
    let _ = write!(
        page,
        "<h1>Experiment {}</h1><p>{} &middot; definition {} &middot; candidate <code>{}</code> ({})</p>",
        esc(&r.name),
        esc(&r.experiment),
        esc(&r.definition),
        esc(short(&r.candidate.sha256)),
        esc(&r.candidate.binary)
    );
    let _ = write!(
        page,
        r#"<p class="verdict {}">verdict: {} &mdash; {}</p>"#,
        verdict_class(r.verdict),
        r.verdict.label(),
        esc(&r.reason)
    );
    if let Some(a) = r.action {
        let _ = write!(
            page,
            "<p>action: <b>{}</b>{}</p>",
            action_name(a),
            r.action_result
                .as_ref()
                .map(|x| format!(": {}", esc(x)))
                .unwrap_or_default()
        );
    }
    page.push_str("<h2>Hosts</h2><table><tr><th>host</th><th>group</th><th>release before</th><th>jobs ok</th><th>failed</th><th>window s</th></tr>");
    let load = |h: &str| r.loads.iter().find(|l| l.window.host == h);
    let rows = r
        .canary
        .iter()
        .map(|(h, rel)| (h.as_str(), "canary", short(rel).to_owned()))
        .chain(
            r.baseline
                .iter()
                .map(|h| (h.as_str(), "baseline", "-".into())),
        );
    for (h, group, rel) in rows {
        let (ok, failed, secs) = load(h).map_or(("-".into(), "-".into(), "-".into()), |l| {
            (
                l.ok.to_string(),
                l.failed.to_string(),
                format!(
                    "{:.1}",
                    l.window.end_ms.saturating_sub(l.window.start_ms) as f64 / 1000.0
                ),
            )
        });
        let _ = write!(
            page,
            "<tr><td>{}</td><td>{group}</td><td>{}</td><td>{ok}</td><td>{failed}</td><td>{secs}</td></tr>",
            esc(h),
            esc(&rel)
        );
    }
    page.push_str("</table>");
    let _ = write!(page, "<p>workload: {}</p>", esc(&r.workload));
    if let Some(e) = &r.deploy_error {
        let _ = write!(page, "<p class=\"fail\">not measured: {}</p>", esc(e));
    }
    if let Some(a) = &r.analysis {
        let _ = write!(
            page,
            "<h2>Metrics</h2><p>Mann-Whitney U (two-sided, normal approximation with tie and continuity correction), confidence {:.0}%, at least {} samples per group.</p>",
            a.confidence * 100.0,
            a.min_samples
        );
        page.push_str("<table><tr><th>metric</th><th>canary median</th><th>baseline median</th><th>ratio</th><th>U</th><th>z</th><th>p</th><th>verdict</th><th>reason</th></tr>");
        for j in &a.judgements {
            let _ = write!(
                page,
                r#"<tr><td>{}{}</td><td>{} {}</td><td>{} {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class="{}">{}</td><td class="reason">{}</td></tr>"#,
                esc(&j.metric),
                if j.critical { " (critical)" } else { "" },
                num(j.canary.median),
                j.unit,
                num(j.baseline.median),
                j.unit,
                ratio(j),
                num(j.u),
                j.z.map_or_else(|| "-".into(), |z| format!("{z:.2}")),
                p(j),
                verdict_class(j.verdict),
                j.verdict.label(),
                esc(&j.reason)
            );
        }
        page.push_str("</table><h2>Distributions</h2>");
        for j in &a.judgements {
            let (c, b) = a
                .samples
                .get(&j.metric)
                .map_or((&[][..], &[][..]), |(c, b)| (c.as_slice(), b.as_slice()));
            let _ = write!(
                page,
                "<h3>{} <span class=\"verdict {}\" style=\"font-size:13px\">{}</span></h3>",
                esc(&j.metric),
                verdict_class(j.verdict),
                j.verdict.label()
            );
            page.push_str(&distribution_svg(j, c, b));
        }
    }
    if !r.runs.is_empty() {
        page.push_str("<h2>Runs</h2><ul>");
        for (stage, id) in &r.runs {
            let _ = write!(page, "<li>{}: {}</li>", esc(stage), esc(id));
        }
        page.push_str("</ul>");
    }
    let _ = write!(page, "<p>audit log: {}</p></body></html>", esc(&r.audit));
    page
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::analysis::{analyse, HostRecords, HostWindow};
    use crate::experiment::definition::{AnalysisSpec, MetricSpec};
    use crate::experiment::metric::Metric;
    use fleet_wire::timing::{JobTag, ProofRecord};
    use std::collections::BTreeMap;

    fn proofs(host: &str, ms: f64) -> HostRecords {
        HostRecords {
            parts: Vec::new(),
            proofs: (0..12)
                .map(|i| ProofRecord {
                    v: 1,
                    ts_ms: 100 + i,
                    tag: JobTag {
                        host: host.into(),
                        build: "b".into(),
                        job_id: format!("j{i}"),
                        circuit: "chain".into(),
                        size: 1024,
                    },
                    partitions: 1,
                    backend: "cpu".into(),
                    verified: Some(true),
                    total_ms: ms + i as f64,
                    error: None,
                })
                .collect(),
        }
    }

    fn report() -> Report {
        let w = |h: &str| HostWindow {
            host: h.into(),
            start_ms: 0,
            end_ms: 1000,
            build: None,
            jobs: None,
            unsubmitted_failures: 0,
        };
        let recs: BTreeMap<String, HostRecords> = [
            ("h01".to_string(), proofs("h01", 200.0)),
            ("h02".to_string(), proofs("h02", 100.0)),
        ]
        .into();
        let spec = AnalysisSpec {
            confidence: 0.98,
            min_samples: 10,
            metrics: vec![MetricSpec {
                metric: Metric::ProofMs,
                max_regression: 0.05,
                tolerance: 0.02,
                must_improve: false,
                critical: true,
            }],
        };
        let a = analyse(&spec, &[w("h01")], &[w("h02")], &recs);
        Report {
            experiment: "exp-1".into(),
            name: "slow <candidate>".into(),
            definition: "x.yaml".into(),
            candidate: Candidate {
                binary: "prover".into(),
                sha256: "ab".repeat(32),
                config: None,
            },
            canary: vec![("h01".into(), "cd".repeat(32))],
            baseline: vec!["h02".into()],
            workload: "12 jobs".into(),
            loads: Vec::new(),
            deploy_error: None,
            verdict: a.verdict,
            reason: a.reason.clone(),
            analysis: Some(a),
            action: Some(Action::Restore),
            action_result: Some("restored".into()),
            runs: vec![("restore".into(), "r1".into())],
            audit: "a.jsonl".into(),
        }
    }

    #[test]
    fn the_table_shows_each_metric_and_the_verdict() {
        let t = table(&report());
        assert!(t.contains("h01 (was cdcdcdcdcdcd)"), "{t}");
        assert!(t.contains("proof_ms (critical)"), "{t}");
        assert!(t.contains("FAIL"), "{t}");
        assert!(
            t.contains("verdict: FAIL (critical metric(s) failed: proof_ms)"),
            "{t}"
        );
        assert!(t.contains("action: restore: restored"), "{t}");
    }

    #[test]
    fn the_page_is_self_contained_and_escaped() {
        let h = html(&report());
        assert!(h.starts_with("<!doctype html>") && h.ends_with("</html>"));
        assert!(h.contains("slow &lt;candidate&gt;") && !h.contains("<candidate>"));
        assert!(!h.contains("<script") && !h.contains("src=") && !h.contains("<link"));
        assert_eq!(h.matches("<svg").count(), 1);
        assert_eq!(h.matches("<circle").count(), 24, "every sample is drawn");
        let j: serde_json::Value = serde_json::from_str(&json(&report())).unwrap();
        assert_eq!(j["verdict"], "fail");
        assert_eq!(j["analysis"]["judgements"][0]["metric"], "proof_ms");
    }
}
