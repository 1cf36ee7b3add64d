//! Live progress on stderr: one spinner per host on a terminal, plain lines
//! otherwise (CI logs, pipes).

use super::event::{Event, EventKind, Reporter};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

/// Shows the run as it goes.
pub enum Progress {
    Spinners {
        multi: MultiProgress,
        bars: HashMap<String, ProgressBar>,
    },
    Plain,
}

impl Progress {
    /// Spinners when `tty` (stderr is a terminal), plain lines otherwise.
    pub fn new(tty: bool) -> Progress {
        if tty {
            Progress::Spinners {
                multi: MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
                bars: HashMap::new(),
            }
        } else {
            Progress::Plain
        }
    }

    fn line(&self, text: &str) {
        match self {
            Progress::Spinners { multi, .. } => {
                // Printed above the spinners; ignore a closed terminal.
                let _ = multi.println(text);
            }
            Progress::Plain => {
                let _ = writeln!(std::io::stderr(), "{text}");
            }
        }
    }
}

fn secs(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

impl Reporter for Progress {
    fn on_event(&mut self, e: &Event) {
        let host = e.host.as_deref().unwrap_or("");
        match (&e.kind, &mut *self) {
            (
                EventKind::RunStarted {
                    playbook,
                    hosts,
                    batches,
                    check,
                    resumed,
                    ..
                },
                _,
            ) => {
                self.line(&format!(
                    "run {} : playbook {playbook} on {} host(s) in {batches} batch(es){}{}",
                    e.run_id,
                    hosts.len(),
                    if *check {
                        ", check mode (nothing changes)"
                    } else {
                        ""
                    },
                    if *resumed { ", resumed" } else { "" },
                ));
            }
            (
                EventKind::BatchStarted {
                    batch,
                    of,
                    canary,
                    hosts,
                },
                _,
            ) => {
                self.line(&format!(
                    "batch {batch}/{of}{}: {}",
                    if *canary { " (canary)" } else { "" },
                    hosts.join(", ")
                ));
            }
            (EventKind::HostStarted, Progress::Spinners { multi, bars }) => {
                let bar = multi.add(ProgressBar::new_spinner());
                bar.set_style(
                    ProgressStyle::with_template("{spinner} {prefix:>12} {elapsed:>4} {wide_msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                bar.set_prefix(host.to_string());
                bar.enable_steady_tick(Duration::from_millis(120));
                bars.insert(host.to_string(), bar);
            }
            (EventKind::StepStarted { step }, Progress::Spinners { bars, .. }) => {
                if let Some(bar) = bars.get(host) {
                    bar.set_message(format!("{step}…"));
                }
            }
            (EventKind::StepStarted { step }, Progress::Plain) => {
                self.line(&format!("[{host}] {step} …"));
            }
            (
                EventKind::StepFinished {
                    step,
                    duration_ms,
                    skipped,
                    detail,
                    flag,
                },
                _,
            ) => {
                let how = match (skipped, flag) {
                    (true, _) => "skipped".to_owned(),
                    (false, Some(flag)) => format!("done by {flag}"),
                    (false, None) => "done".to_owned(),
                };
                self.line(&format!(
                    "[{host}] {step} {how} {}: {detail}",
                    secs(*duration_ms)
                ));
            }
            (
                EventKind::StepFailed {
                    step,
                    duration_ms,
                    error,
                    kept,
                },
                _,
            ) => {
                self.line(&format!(
                    "[{host}] {step} FAILED {}: {error} (kept intact: {kept})",
                    secs(*duration_ms)
                ));
            }
            (EventKind::HostFinished { status, error, .. }, Progress::Spinners { bars, .. }) => {
                if let Some(bar) = bars.remove(host) {
                    bar.finish_with_message(match error {
                        Some(e) => format!("{}: {e}", status.label()),
                        None => status.label().to_string(),
                    });
                }
            }
            (EventKind::HostFinished { status, error, .. }, Progress::Plain) => {
                self.line(&format!(
                    "[{host}] {}{}",
                    status.label(),
                    error
                        .as_deref()
                        .map(|e| format!(": {e}"))
                        .unwrap_or_default()
                ));
            }
            (
                EventKind::Halted {
                    failed,
                    max_fail,
                    not_started,
                },
                _,
            ) => {
                self.line(&format!(
                    "HALTED: {failed} failed host(s) > max_fail {max_fail}; not started: {}",
                    not_started.join(", ")
                ));
            }
            (EventKind::Interrupt { abort }, _) => {
                self.line(if *abort {
                    "second Ctrl-C: aborting the running steps"
                } else {
                    "Ctrl-C: finishing the current step on each host, then stopping (Ctrl-C again aborts)"
                });
            }
            _ => {}
        }
    }

    fn finish(&mut self) {
        if let Progress::Spinners { bars, .. } = self {
            for (_, bar) in bars.drain() {
                bar.finish();
            }
        }
    }
}
