//! `fleetctl timing export --prometheus DIR`: node_exporter textfile-collector
//! files, one per host, with the phase histograms per build. Metric names and
//! bucket bounds come from `fleet_wire::metrics`, the same the daemon's
//! `/metrics` uses, so dashboards work on either source.

use super::scan::Scan;
use fleet_wire::metrics::{PHASE_BUCKETS_SECONDS, PHASE_DURATION_SECONDS, PHASE_LABEL};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

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

/// The exposition text for one host.
pub fn host_text(host: &str, scan: &Scan) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP {PHASE_DURATION_SECONDS} Duration of each proving phase, from collected timing logs."
    );
    let _ = writeln!(out, "# TYPE {PHASE_DURATION_SECONDS} histogram");
    for ((h, build), acc) in &scan.accs {
        if h != host {
            continue;
        }
        for (phase, hist) in &acc.phases {
            let labels = format!(
                r#"host="{}",build="{}",{PHASE_LABEL}="{}""#,
                label(host),
                label(build),
                phase.as_str()
            );
            for le in PHASE_BUCKETS_SECONDS {
                let le_us = (le * 1e6) as u64;
                let n = hist.count_between(0, le_us);
                let _ = writeln!(
                    out,
                    r#"{PHASE_DURATION_SECONDS}_bucket{{{labels},le="{le}"}} {n}"#
                );
            }
            let _ = writeln!(
                out,
                r#"{PHASE_DURATION_SECONDS}_bucket{{{labels},le="+Inf"}} {}"#,
                hist.len()
            );
            // The sum is reconstructed from the histogram's mean (0.1% precision).
            let sum_s = hist.mean() * hist.len() as f64 / 1e6;
            let _ = writeln!(out, "{PHASE_DURATION_SECONDS}_sum{{{labels}}} {sum_s}");
            let _ = writeln!(
                out,
                "{PHASE_DURATION_SECONDS}_count{{{labels}}} {}",
                hist.len()
            );
        }
    }
    out
}

/// Writes `<dir>/prover_timing_<host>.prom` for every host in the scan, each
/// atomically (temp name without the `.prom` suffix, then rename), so the
/// collector never reads half a file. Returns the files written.
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
        let tmp = dir.join(format!(".prover_timing_{safe}.tmp"));
        let err = |source| ExportError {
            path: path.clone(),
            source,
        };
        fs::write(&tmp, host_text(host, scan)).map_err(err)?;
        fs::rename(&tmp, &path).map_err(err)?;
        written.push(path);
    }
    Ok(written)
}
