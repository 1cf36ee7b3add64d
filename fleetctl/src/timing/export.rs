//! `fleetctl timing export --prometheus DIR`: node_exporter textfile-collector
//! files, one per host, with the phase histograms per build. Metric names and
//! bucket bounds come from `fleet_wire::metrics`, the same the daemon's
//! `/metrics` uses, so dashboards work on either source.

use super::scan::{Acc, Scan};
use fleet_wire::metrics::{
    PHASE_BUCKETS_SECONDS, PHASE_DEVICE_SECONDS, PHASE_DEVICE_WAIT_SECONDS, PHASE_DURATION_SECONDS,
    PHASE_LABEL,
};
use fleet_wire::timing::Phase;
use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

type PhaseHists = BTreeMap<Phase, Histogram<u64>>;
/// A metric family of the export: name, help, and its histograms in an accumulator.
type Family = (&'static str, &'static str, fn(&Acc) -> &PhaseHists);

#[derive(Debug, thiserror::Error)]
#[error("writing Prometheus textfile {path}: {source}")]
pub struct ExportError {
    pub path: PathBuf,
    pub source: io::Error,
}

/// Label values are quoted strings in the exposition format.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The exposition text for one host: the phases' wall times, and their
/// device times and waits for the device where the records carry them.
pub fn host_text(host: &str, scan: &Scan) -> String {
    let mut out = String::new();
    let families: [Family; 3] = [
        (
            PHASE_DURATION_SECONDS,
            "Duration of each proving phase, from collected timing logs.",
            |a| &a.phases,
        ),
        (
            PHASE_DEVICE_SECONDS,
            "Device time (CUDA events) of each proving phase, where measured, from collected timing logs.",
            |a| &a.phase_device,
        ),
        (
            PHASE_DEVICE_WAIT_SECONDS,
            "Time each proving phase waited for the device, where measured, from collected timing logs.",
            |a| &a.phase_wait,
        ),
    ];
    for (name, help, hists) in families {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        for ((h, build), acc) in &scan.accs {
            if h != host {
                continue;
            }
            for (phase, hist) in hists(acc) {
                let labels = format!(
                    r#"host="{}",build="{}",{PHASE_LABEL}="{}""#,
                    label(host),
                    label(build),
                    phase.as_str()
                );
                histogram(&mut out, name, &labels, hist);
            }
        }
    }
    out
}

/// One histogram's buckets, sum and count; the scan keeps microseconds.
fn histogram(out: &mut String, name: &str, labels: &str, hist: &Histogram<u64>) {
    for le in PHASE_BUCKETS_SECONDS {
        let le_us = (le * 1e6) as u64;
        let n = hist.count_between(0, le_us);
        let _ = writeln!(out, r#"{name}_bucket{{{labels},le="{le}"}} {n}"#);
    }
    let _ = writeln!(out, r#"{name}_bucket{{{labels},le="+Inf"}} {}"#, hist.len());
    // The sum is reconstructed from the histogram's mean (0.1% precision).
    let sum_s = hist.mean() * hist.len() as f64 / 1e6;
    let _ = writeln!(out, "{name}_sum{{{labels}}} {sum_s}");
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", hist.len());
}

/// Writes `<dir>/prover_timing_<host>.prom` for every host in the scan, each
/// replaced whole (through `<name>.prom.tmp`, which the collector's `*.prom`
/// does not match), so it never reads half a file. Returns the files written.
pub fn write_dir(dir: &Path, scan: &Scan) -> Result<Vec<PathBuf>, ExportError> {
    fs::create_dir_all(dir).map_err(|source| ExportError {
        path: dir.to_path_buf(),
        source,
    })?;
    let hosts: BTreeMap<&str, ()> = scan.accs.keys().map(|(h, _)| (h.as_str(), ())).collect();
    let mut written = Vec::new();
    for host in hosts.keys() {
        let safe: String = host
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = dir.join(format!("prover_timing_{safe}.prom"));
        crate::persist::replace(&path, host_text(host, scan).as_bytes()).map_err(|source| {
            ExportError {
                path: path.clone(),
                source,
            }
        })?;
        written.push(path);
    }
    Ok(written)
}
