//! Final table of a run, built from the same events as the progress display
//! and the audit log: host, result, release, each step's time.

use crate::executor::event::{Event, EventKind, HostStatus, Reporter};
use crate::steps::upload::PLAIN;
use crate::steps::ByteSize;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, ContentArrangement, Table};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// How one step ended on one host.
#[derive(Debug, Clone, PartialEq)]
pub enum StepCell {
    Running,
    Done {
        ms: u64,
    },
    /// Done by force (`flag` is e.g. `SIGKILL`): shown in the cell.
    Forced {
        ms: u64,
        flag: String,
    },
    Skipped {
        ms: u64,
    },
    Failed {
        ms: u64,
    },
}

impl StepCell {
    /// The state word (as the JSON summary writes it), the time, and the
    /// mark the table puts before the time: the one reading of a cell that
    /// both the table and the JSON show.
    fn parts(&self) -> (&'static str, Option<u64>, &str) {
        match self {
            StepCell::Running => ("running", None, "…"),
            StepCell::Done { ms } => ("done", Some(*ms), ""),
            StepCell::Forced { ms, flag } => ("forced", Some(*ms), flag),
            StepCell::Skipped { ms } => ("skipped", Some(*ms), "skip"),
            StepCell::Failed { ms } => ("failed", Some(*ms), "FAIL"),
        }
    }

    /// The cell as the table prints it: `1.5s`, `skip 0.1s`, `SIGKILL 30.2s`.
    fn text(&self) -> String {
        match self.parts() {
            (_, None, mark) => mark.to_owned(),
            (_, Some(ms), "") => secs(ms),
            (_, Some(ms), mark) => format!("{mark} {}", secs(ms)),
        }
    }
}

/// One host's row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub host: String,
    pub status: Option<HostStatus>,
    pub build: Option<String>,
    pub error: Option<String>,
    pub steps: BTreeMap<String, StepCell>,
    /// Last `detail` of the `smoke` step (the verified proof).
    pub smoke: Option<String>,
    /// `(step, detail)` of each step done by force, printed under the table.
    pub forced: Vec<(String, String)>,
    /// Drain start to the new daemon ready, when the host got that far.
    pub serving_gap_ms: Option<u64>,
    /// What `upload` sent, when it sent anything.
    pub upload: Option<UploadBytes>,
}

/// One host's upload on the link.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UploadBytes {
    pub file_bytes: u64,
    pub sent_bytes: u64,
    pub encoding: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plain_because: Option<String>,
}

/// Collects rows from events; shared so the caller can render after the run.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    inner: Arc<Mutex<SummaryData>>,
}

#[derive(Debug, Default)]
struct SummaryData {
    run_id: String,
    playbook: String,
    hosts: Vec<String>,
    rows: BTreeMap<String, Row>,
    /// Step columns in first-seen order.
    columns: Vec<String>,
    halted: Option<String>,
    /// The command that resumes this run, without `--resume RUN_ID`.
    resume_with: Option<String>,
    /// A `--check` run: nothing was changed, so no host is "ok" on a build.
    check: bool,
    /// The whole run, once it finished.
    duration_ms: Option<u64>,
    /// Hosts staged at once, when the run staged up front.
    staged: Option<usize>,
}

/// The fleet's uploads: bytes of files landed and bytes sent for them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UploadTotals {
    pub hosts: usize,
    pub file_bytes: u64,
    pub sent_bytes: u64,
    /// Hosts whose upload went compressed.
    pub compressed_hosts: usize,
}

/// The fleet's serving gaps: their sum and the longest (with its host).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GapTotals {
    pub hosts: usize,
    pub sum_ms: u64,
    pub max_ms: u64,
    pub max_host: String,
}

impl Summary {
    pub fn new() -> Summary {
        Summary::default()
    }

    /// The command the HALTED line tells the operator to run (without
    /// `--resume RUN_ID`, which is added).
    pub fn set_resume_command(&self, cmd: &str) {
        self.lock().resume_with = Some(cmd.to_owned());
    }

    /// Rows in the order the run listed its hosts.
    pub fn rows(&self) -> Vec<Row> {
        self.lock().listed().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SummaryData> {
        // A poisoned lock only means a reporter panicked mid-update; the
        // rows are still worth printing.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The serving gaps of every host that reported one.
    pub fn gaps(&self) -> Option<GapTotals> {
        gaps(&self.lock())
    }

    /// The run as JSON: every host's result, release, step times and
    /// serving gap, and the fleet's totals.
    pub fn json(&self) -> serde_json::Value {
        let d = self.lock();
        let hosts: Vec<serde_json::Value> = d
            .listed()
            .map(|r| {
                let steps: serde_json::Map<String, serde_json::Value> = r
                    .steps
                    .iter()
                    .map(|(name, c)| {
                        let (state, ms, _) = c.parts();
                        (name.clone(), serde_json::json!({"state": state, "ms": ms}))
                    })
                    .collect();
                serde_json::json!({
                    "host": r.host,
                    "status": r.status,
                    "release": r.build,
                    "serving_gap_ms": r.serving_gap_ms,
                    "upload": r.upload,
                    "steps": steps,
                    "error": r.error,
                })
            })
            .collect();
        serde_json::json!({
            "run_id": d.run_id,
            "playbook": d.playbook,
            "duration_ms": d.duration_ms,
            "staged_concurrency": d.staged,
            "serving_gap": gaps(&d),
            "upload": uploads(&d),
            "hosts": hosts,
        })
    }

    /// The final table and, under it, each failed host's error.
    pub fn render(&self) -> String {
        let d = self.lock();
        let with_gap = d.rows.values().any(|r| r.serving_gap_ms.is_some());
        let mut table = Table::new();
        table
            .load_preset(UTF8_FULL_CONDENSED)
            .set_content_arrangement(ContentArrangement::Dynamic);
        // `release`: the sha256 id of the binary, as `status` names it too
        // (beside the daemon's git build there).
        let mut header = vec!["host".to_string(), "result".into(), "release".into()];
        if with_gap {
            header.push("serving gap".into());
        }
        header.extend(d.columns.iter().cloned());
        table.set_header(header);
        for row in d.listed() {
            let result = match row.status {
                Some(HostStatus::Ok) if d.check => "checked, unchanged",
                other => other.map_or("?", HostStatus::label),
            };
            let mut cells = vec![
                Cell::new(&row.host),
                Cell::new(result),
                Cell::new(row.build.as_deref().unwrap_or("-")),
            ];
            if with_gap {
                cells.push(Cell::new(row.serving_gap_ms.map_or("-".into(), secs)));
            }
            for c in &d.columns {
                cells.push(Cell::new(
                    row.steps.get(c).map_or("-".to_owned(), StepCell::text),
                ));
            }
            table.add_row(cells);
        }
        let mut out = format!("run {} ({})\n{table}\n", d.run_id, d.playbook);
        if let Some(g) = gaps(&d) {
            out.push_str(&format!(
                "serving gap over {} host(s): sum {}, max {} ({})\n",
                g.hosts,
                secs(g.sum_ms),
                secs(g.max_ms),
                g.max_host
            ));
        }
        if let Some(u) = uploads(&d) {
            out.push_str(&format!(
                "upload to {} host(s): sent {} for {} of files ({}%), compressed on {}\n",
                u.hosts,
                ByteSize(u.sent_bytes),
                ByteSize(u.file_bytes),
                u.sent_bytes.saturating_mul(100) / u.file_bytes.max(1),
                u.compressed_hosts
            ));
        }
        if let Some(n) = d.staged {
            out.push_str(&format!(
                "staged: every host uploaded and prepared first, {n} at a time; the batches only swapped\n"
            ));
        }
        for row in d.listed() {
            let host = &row.host;
            if let Some(proof) = &row.smoke {
                out.push_str(&format!("{host}: smoke: {proof}\n"));
            }
            for (step, detail) in &row.forced {
                out.push_str(&format!("{host}: {step}: {detail}\n"));
            }
            if let Some(why) = row.upload.as_ref().and_then(|u| u.plain_because.as_ref()) {
                out.push_str(&format!("{host}: upload: sent plain: {why}\n"));
            }
        }
        // The errors last, nearest the prompt.
        for row in d.listed() {
            if let Some(e) = &row.error {
                out.push_str(&format!(
                    "{}: {}: {e}\n",
                    row.host,
                    row.status.map_or("?", HostStatus::label)
                ));
            }
        }
        if let Some(h) = &d.halted {
            out.push_str(h);
            out.push('\n');
        }
        out
    }
}

impl SummaryData {
    /// Rows in the order the run listed its hosts: the order of the table,
    /// the lines under it and the JSON.
    fn listed(&self) -> impl Iterator<Item = &Row> {
        self.hosts.iter().filter_map(|h| self.rows.get(h))
    }

    /// The row of the host an event is about.
    fn row_mut(&mut self, e: &Event) -> Option<&mut Row> {
        self.rows.get_mut(e.host.as_deref()?)
    }

    /// A step's column, added the first time the step is seen.
    fn column(&mut self, step: &str) {
        if !self.columns.iter().any(|c| c == step) {
            self.columns.push(step.to_owned());
        }
    }
}

fn uploads(d: &SummaryData) -> Option<UploadTotals> {
    let mut out: Option<UploadTotals> = None;
    for u in d.listed().filter_map(|r| r.upload.as_ref()) {
        let t = out.get_or_insert(UploadTotals {
            hosts: 0,
            file_bytes: 0,
            sent_bytes: 0,
            compressed_hosts: 0,
        });
        t.hosts += 1;
        t.file_bytes = t.file_bytes.saturating_add(u.file_bytes);
        t.sent_bytes = t.sent_bytes.saturating_add(u.sent_bytes);
        t.compressed_hosts += usize::from(u.encoding != PLAIN);
    }
    out
}

fn gaps(d: &SummaryData) -> Option<GapTotals> {
    let mut out: Option<GapTotals> = None;
    for row in d.listed() {
        let Some(ms) = row.serving_gap_ms else {
            continue;
        };
        let g = out.get_or_insert(GapTotals {
            hosts: 0,
            sum_ms: 0,
            max_ms: 0,
            max_host: row.host.clone(),
        });
        g.hosts += 1;
        g.sum_ms = g.sum_ms.saturating_add(ms);
        if ms > g.max_ms {
            g.max_ms = ms;
            g.max_host = row.host.clone();
        }
    }
    out
}

fn secs(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

impl Reporter for Summary {
    fn on_event(&mut self, e: &Event) {
        let mut d = self.lock();
        match &e.kind {
            EventKind::RunStarted {
                playbook,
                hosts,
                check,
                ..
            } => {
                d.check = *check;
                d.run_id = e.run_id.clone();
                d.playbook = playbook.clone();
                d.hosts = hosts.clone();
                for h in hosts {
                    d.rows.insert(
                        h.clone(),
                        Row {
                            host: h.clone(),
                            status: None,
                            build: None,
                            error: None,
                            steps: BTreeMap::new(),
                            smoke: None,
                            forced: Vec::new(),
                            serving_gap_ms: None,
                            upload: None,
                        },
                    );
                }
            }
            EventKind::StepStarted { step } => {
                d.column(step);
                if let Some(row) = d.row_mut(e) {
                    row.steps.insert(step.clone(), StepCell::Running);
                }
            }
            EventKind::StepFinished {
                step,
                duration_ms,
                skipped,
                detail,
                flag,
            } => {
                if let Some(row) = d.row_mut(e) {
                    let ms = *duration_ms;
                    let cell = match (skipped, flag) {
                        (true, _) => StepCell::Skipped { ms },
                        (false, Some(flag)) => {
                            row.forced.push((step.clone(), detail.clone()));
                            StepCell::Forced {
                                ms,
                                flag: flag.clone(),
                            }
                        }
                        (false, None) => StepCell::Done { ms },
                    };
                    row.steps.insert(step.clone(), cell);
                    if step == "smoke" && !*skipped {
                        row.smoke = Some(detail.clone());
                    }
                }
            }
            EventKind::StepFailed {
                step, duration_ms, ..
            } => {
                d.column(step);
                if let Some(row) = d.row_mut(e) {
                    row.steps
                        .insert(step.clone(), StepCell::Failed { ms: *duration_ms });
                }
            }
            EventKind::HostFinished {
                status,
                build,
                error,
                ..
            } => {
                if let Some(row) = d.row_mut(e) {
                    row.status = Some(*status);
                    row.build = build.clone();
                    row.error = error.clone();
                }
            }
            EventKind::ServingGap { gap_ms, .. } => {
                if let Some(row) = d.row_mut(e) {
                    row.serving_gap_ms = Some(*gap_ms);
                }
            }
            EventKind::Uploaded {
                file_bytes,
                sent_bytes,
                encoding,
                plain_because,
            } => {
                if let Some(row) = d.row_mut(e) {
                    row.upload = Some(UploadBytes {
                        file_bytes: *file_bytes,
                        sent_bytes: *sent_bytes,
                        encoding: encoding.clone(),
                        plain_because: plain_because.clone(),
                    });
                }
            }
            EventKind::StagingStarted { concurrency, .. } => d.staged = Some(*concurrency),
            EventKind::RunFinished { duration_ms, .. } => d.duration_ms = Some(*duration_ms),
            EventKind::Halted {
                failed,
                max_fail,
                not_started,
            } => {
                let cmd = d
                    .resume_with
                    .clone()
                    .unwrap_or_else(|| format!("fleetctl run -p {}", d.playbook));
                d.halted = Some(format!(
                    "HALTED: {failed} host(s) failed, more than max_fail {max_fail}; not started: {}. Fix the cause, then: {cmd} --resume {}",
                    not_started.join(", "),
                    e.run_id
                ));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(host: Option<&str>, kind: EventKind) -> Event {
        Event::new("r1", host, kind)
    }

    #[test]
    fn table_shows_each_hosts_result_build_and_step_times() {
        let mut s = Summary::new();
        let events = vec![
            ev(
                None,
                EventKind::RunStarted {
                    playbook: "rollout".into(),
                    source: "x".into(),
                    inventory: "i".into(),
                    hosts: vec!["a".into(), "b".into()],
                    batches: 1,
                    check: false,
                    resumed: false,
                    release: None,
                },
            ),
            ev(
                Some("a"),
                EventKind::StepStarted {
                    step: "upload".into(),
                },
            ),
            ev(
                Some("a"),
                EventKind::StepFinished {
                    step: "upload".into(),
                    duration_ms: 1500,
                    skipped: false,
                    detail: String::new(),
                    flag: None,
                },
            ),
            ev(
                Some("a"),
                EventKind::StepStarted {
                    step: "smoke".into(),
                },
            ),
            ev(
                Some("a"),
                EventKind::StepFinished {
                    step: "smoke".into(),
                    duration_ms: 2000,
                    skipped: false,
                    detail: "proof verified".into(),
                    flag: None,
                },
            ),
            ev(
                Some("a"),
                EventKind::HostFinished {
                    status: HostStatus::Ok,
                    build: Some("abcdef123456".into()),
                    error: None,
                    duration_ms: 3600,
                },
            ),
            ev(
                Some("b"),
                EventKind::StepStarted {
                    step: "connect".into(),
                },
            ),
            ev(
                Some("b"),
                EventKind::StepFailed {
                    step: "connect".into(),
                    duration_ms: 100,
                    error: "refused".into(),
                    kept: "everything".into(),
                },
            ),
            ev(
                Some("b"),
                EventKind::HostFinished {
                    status: HostStatus::Unreachable,
                    build: None,
                    error: Some("connection refused".into()),
                    duration_ms: 100,
                },
            ),
        ];
        for e in &events {
            s.on_event(e);
        }
        let text = s.render();
        let header = text.lines().nth(2).unwrap();
        assert!(
            header.contains("release") && !header.contains("build"),
            "{text}"
        );
        let a = text.lines().find(|l| l.contains(" a ")).unwrap();
        assert!(
            a.contains("ok")
                && a.contains("abcdef123456")
                && a.contains("1.5s")
                && a.contains("2.0s"),
            "{text}"
        );
        let b = text.lines().find(|l| l.contains(" b ")).unwrap();
        assert!(
            b.contains("UNREACHABLE") && b.contains("FAIL 0.1s"),
            "{text}"
        );
        assert!(text.contains("a: smoke: proof verified"), "{text}");
        assert!(
            text.contains("b: UNREACHABLE: connection refused"),
            "{text}"
        );
        assert_eq!(s.rows().len(), 2);
    }

    /// A drain that had to SIGKILL the daemon says so in its own cell and
    /// under the table, not only on stderr and in the audit log.
    #[test]
    fn a_sigkill_during_drain_shows_in_the_drain_cell() {
        let mut s = Summary::new();
        s.on_event(&ev(
            None,
            EventKind::RunStarted {
                playbook: "rollout".into(),
                source: "x".into(),
                inventory: "i".into(),
                hosts: vec!["a".into(), "b".into()],
                batches: 1,
                check: false,
                resumed: false,
                release: None,
            },
        ));
        for (host, flag) in [("a", Some("SIGKILL")), ("b", None)] {
            s.on_event(&ev(
                Some(host),
                EventKind::StepStarted {
                    step: "drain".into(),
                },
            ));
            s.on_event(&ev(
                Some(host),
                EventKind::StepFinished {
                    step: "drain".into(),
                    duration_ms: 30_200,
                    skipped: false,
                    detail: format!("pid 7 on {host} exited"),
                    flag: flag.map(str::to_owned),
                },
            ));
        }
        let text = s.render();
        let a = text.lines().find(|l| l.contains(" a ")).unwrap();
        assert!(a.contains("SIGKILL 30.2s"), "{text}");
        let b = text.lines().find(|l| l.contains(" b ")).unwrap();
        assert!(b.contains("30.2s") && !b.contains("SIGKILL"), "{text}");
        assert!(text.contains("a: drain: pid 7 on a exited"), "{text}");
        assert!(!text.contains("b: drain:"), "{text}");
    }

    #[test]
    fn serving_gaps_show_per_host_with_the_fleet_sum_and_maximum() {
        let mut s = Summary::new();
        s.on_event(&ev(
            None,
            EventKind::RunStarted {
                playbook: "rollout".into(),
                source: "x".into(),
                inventory: "i".into(),
                hosts: vec!["a".into(), "b".into(), "c".into()],
                batches: 1,
                check: false,
                resumed: false,
                release: None,
            },
        ));
        for (h, ms) in [("a", 1200), ("b", 2500)] {
            s.on_event(&ev(
                Some(h),
                EventKind::ServingGap {
                    gap_ms: ms,
                    budget_ms: Some(3000),
                },
            ));
        }
        let g = s.gaps().expect("gaps");
        assert_eq!(
            (g.hosts, g.sum_ms, g.max_ms, g.max_host.as_str()),
            (2, 3700, 2500, "b")
        );
        let text = s.render();
        assert!(text.contains("serving gap"), "{text}");
        assert!(text.contains("sum 3.7s, max 2.5s (b)"), "{text}");
        let j = s.json();
        assert_eq!(j["serving_gap"]["sum_ms"], 3700);
        assert_eq!(j["hosts"][0]["serving_gap_ms"], 1200);
        assert!(j["hosts"][2]["serving_gap_ms"].is_null());
    }

    #[test]
    fn uploads_show_bytes_sent_against_file_bytes_and_why_one_went_plain() {
        let mut s = Summary::new();
        s.on_event(&ev(
            None,
            EventKind::RunStarted {
                playbook: "rollout".into(),
                source: "x".into(),
                inventory: "i".into(),
                hosts: vec!["a".into(), "b".into(), "c".into()],
                batches: 1,
                check: false,
                resumed: false,
                release: None,
            },
        ));
        for (h, sent, encoding, why) in [
            ("a", 40 << 20, "gzip", None),
            (
                "b",
                100 << 20,
                "plain",
                Some("the host has no `gzip` to inflate it"),
            ),
        ] {
            s.on_event(&ev(
                Some(h),
                EventKind::Uploaded {
                    file_bytes: 100 << 20,
                    sent_bytes: sent,
                    encoding: encoding.into(),
                    plain_because: why.map(str::to_owned),
                },
            ));
        }
        let text = s.render();
        assert!(
            text.contains(
                "upload to 2 host(s): sent 140MiB for 200MiB of files (70%), compressed on 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("b: upload: sent plain: the host has no `gzip` to inflate it"),
            "{text}"
        );
        assert!(!text.contains("a: upload:"), "{text}");
        let j = s.json();
        assert_eq!(j["upload"]["sent_bytes"], 140u64 << 20);
        assert_eq!(j["upload"]["compressed_hosts"], 1);
        assert_eq!(j["hosts"][0]["upload"]["encoding"], "gzip");
        assert!(j["hosts"][0]["upload"].get("plain_because").is_none());
        assert_eq!(j["hosts"][1]["upload"]["file_bytes"], 100u64 << 20);
        assert!(j["hosts"][2]["upload"].is_null());
    }
}
