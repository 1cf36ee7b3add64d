//! The health policy: DCGM-like rules over a probe document, with defaults
//! that an inventory group can override (`health:` in its vars).
//!
//! FAIL means "do not prove on this host/GPU"; WARN means "look at it soon".
//! Every finding names the GPU, the reading and the threshold it crossed.

use crate::inventory::Host;
use fleet_wire::health::{Gpu, Probe};
use serde::{Deserialize, Serialize};

/// XIDs that mean the GPU or its memory can no longer be trusted
/// (48 double-bit ECC, 63/64 row-remap events, 74 NVLink, 79 fell off the bus,
/// 92 high single-bit rate, 94/95 contained/uncontained ECC).
pub const CRITICAL_XIDS: [u64; 8] = [48, 63, 64, 74, 79, 92, 94, 95];

/// Thresholds; every field can be overridden per group or host under `health:`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Policy {
    /// FAIL when a GPU has uncorrected (volatile) ECC errors above this.
    pub max_uncorrected_ecc: u64,
    /// FAIL on a row-remap failure or a pending remap.
    pub fail_on_remap: bool,
    /// FAIL when the PCIe link runs below its maximum generation or width.
    pub fail_on_pcie_degraded: bool,
    /// FAIL on any of these XIDs.
    pub critical_xids: Vec<u64>,
    /// WARN at or above these temperatures (°C).
    pub warn_gpu_temp_c: u32,
    pub warn_memory_temp_c: u32,
    /// WARN when the PCIe replay counter rose by more than this since the last probe.
    pub warn_pcie_replays: u64,
    /// WARN on thermal or power throttling.
    pub warn_on_throttle: bool,
    /// WARN when corrected ECC errors rose by more than this since the last probe
    /// (or, with no earlier probe, when the volatile count exceeds it).
    pub warn_corrected_ecc: u64,
    /// FAIL when the daemon is configured but not ready.
    pub require_daemon_ready: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_uncorrected_ecc: 0,
            fail_on_remap: true,
            fail_on_pcie_degraded: true,
            critical_xids: CRITICAL_XIDS.to_vec(),
            warn_gpu_temp_c: 85,
            warn_memory_temp_c: 85,
            warn_pcie_replays: 0,
            warn_on_throttle: true,
            warn_corrected_ecc: 100,
            require_daemon_ready: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("host {host}: invalid `health` policy override: {source} (known keys: max_uncorrected_ecc, fail_on_remap, fail_on_pcie_degraded, critical_xids, warn_gpu_temp_c, warn_memory_temp_c, warn_pcie_replays, warn_on_throttle, warn_corrected_ecc, require_daemon_ready)")]
pub struct PolicyError {
    pub host: String,
    pub source: serde_json::Error,
}

impl Policy {
    /// The policy for a host: defaults overlaid with the merged `health` variable.
    pub fn for_host(host: &Host) -> Result<Policy, PolicyError> {
        match host.vars.get("health") {
            None | Some(serde_json::Value::Null) => Ok(Policy::default()),
            Some(v) => serde_json::from_value(v.clone()).map_err(|source| PolicyError {
                host: host.name.clone(),
                source,
            }),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Severity {
    Ok,
    Warn,
    Fail,
}

/// One rule that fired.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub severity: Severity,
    /// GPU index, `None` for host-level findings.
    pub gpu: Option<u32>,
    /// Rule name, stable for scripts (`ecc_uncorrected`, `gpu_temp`, ...).
    pub rule: String,
    pub reading: String,
    pub threshold: String,
    pub message: String,
}

/// The verdict for one host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub host: String,
    pub severity: Severity,
    pub gpus_expected: u32,
    pub gpus_found: usize,
    pub findings: Vec<Finding>,
}

fn gpu_name(g: &Gpu) -> String {
    match (&g.name, &g.bus_id) {
        (Some(n), Some(b)) => format!("GPU {} ({n}, {b})", g.index),
        (Some(n), None) => format!("GPU {} ({n})", g.index),
        _ => format!("GPU {}", g.index),
    }
}

/// Applies the policy to a probe. `previous` is the last probe of the same
/// host, for the "rising" rules.
pub fn evaluate(host: &Host, probe: &Probe, previous: Option<&Probe>, policy: &Policy) -> Verdict {
    let mut f = Vec::new();
    let mut add = |severity,
                   gpu: Option<u32>,
                   rule: &str,
                   reading: String,
                   threshold: String,
                   message: String| {
        f.push(Finding {
            severity,
            gpu,
            rule: rule.into(),
            reading,
            threshold,
            message,
        })
    };
    use Severity::{Fail, Warn};
    let devices = &probe.gpus.devices;
    if host.gpus > 0 && !probe.gpus.nvml.available {
        add(
            Fail,
            None,
            "nvml_absent",
            probe
                .gpus
                .nvml
                .reason
                .clone()
                .unwrap_or_else(|| "NVML not available".into()),
            format!("{} GPUs expected", host.gpus),
            format!(
                "the inventory says {} GPUs but NVML is not usable: check the driver (nvidia-smi)",
                host.gpus
            ),
        );
    } else if (devices.len() as u32) < host.gpus {
        add(
            Fail,
            None,
            "gpu_count",
            format!("{} GPUs", devices.len()),
            format!(">= {}", host.gpus),
            format!(
                "{} of {} GPUs visible: a GPU fell off the bus or is hidden",
                devices.len(),
                host.gpus
            ),
        );
    }
    if policy.require_daemon_ready {
        if let Some(d) = &probe.daemon {
            if d.ready != Some(true) {
                add(
                    Fail,
                    None,
                    "daemon_ready",
                    format!(
                        "ready={:?} alive={} {}",
                        d.ready,
                        d.alive,
                        d.ready_reason.clone().unwrap_or_default()
                    ),
                    "ready".into(),
                    "the prover daemon is not ready".into(),
                );
            }
        }
    }
    for g in devices {
        let name = gpu_name(g);
        let prev = previous.and_then(|p| {
            p.gpus
                .devices
                .iter()
                .find(|d| d.uuid.is_some() && d.uuid == g.uuid)
        });
        let idx = Some(g.index);
        if let Some(u) = g.ecc.volatile_uncorrected {
            if u > policy.max_uncorrected_ecc {
                add(
                    Fail,
                    idx,
                    "ecc_uncorrected",
                    u.to_string(),
                    format!("<= {}", policy.max_uncorrected_ecc),
                    format!("{name}: {u} uncorrected ECC errors since driver load"),
                );
            }
        }
        if policy.fail_on_remap {
            if g.remapped_rows.failure == Some(true) {
                add(
                    Fail,
                    idx,
                    "row_remap_failure",
                    "failure".into(),
                    "no failure".into(),
                    format!("{name}: row remapping failed; the GPU needs service"),
                );
            }
            if g.remapped_rows.pending == Some(true) {
                add(
                    Fail,
                    idx,
                    "row_remap_pending",
                    "pending".into(),
                    "none pending".into(),
                    format!("{name}: a row remap is pending; reset the GPU to apply it"),
                );
            }
            if g.retired_pages.pending == Some(true) {
                add(
                    Fail,
                    idx,
                    "page_retirement_pending",
                    "pending".into(),
                    "none pending".into(),
                    format!("{name}: a page retirement is pending; reset the GPU to apply it"),
                );
            }
        }
        if policy.fail_on_pcie_degraded {
            let p = &g.pcie;
            if let (Some(c), Some(m)) = (p.gen_current, p.gen_max) {
                if c < m {
                    add(
                        Fail,
                        idx,
                        "pcie_gen",
                        format!("Gen{c}"),
                        format!("Gen{m}"),
                        format!("{name}: PCIe link at Gen{c}, below its maximum Gen{m}"),
                    );
                }
            }
            if let (Some(c), Some(m)) = (p.width_current, p.width_max) {
                if c < m {
                    add(
                        Fail,
                        idx,
                        "pcie_width",
                        format!("x{c}"),
                        format!("x{m}"),
                        format!("{name}: PCIe link at x{c}, below its maximum x{m}"),
                    );
                }
            }
        }
        for x in g.xid_events.iter().flatten() {
            if policy.critical_xids.contains(x) {
                add(
                    Fail,
                    idx,
                    "xid",
                    format!("XID {x}"),
                    format!("none of {:?}", policy.critical_xids),
                    format!("{name}: critical XID {x}"),
                );
            }
        }
        if let Some(t) = g.temperature_gpu_c {
            if t >= policy.warn_gpu_temp_c {
                add(
                    Warn,
                    idx,
                    "gpu_temp",
                    format!("{t} C"),
                    format!("< {} C", policy.warn_gpu_temp_c),
                    format!("{name}: GPU at {t} C"),
                );
            }
        }
        if let Some(t) = g.temperature_memory_c {
            if t >= policy.warn_memory_temp_c {
                add(
                    Warn,
                    idx,
                    "memory_temp",
                    format!("{t} C"),
                    format!("< {} C", policy.warn_memory_temp_c),
                    format!("{name}: memory at {t} C"),
                );
            }
        }
        if let (Some(now), Some(before)) = (
            g.pcie.replay_counter,
            prev.and_then(|p| p.pcie.replay_counter),
        ) {
            let rise = now.saturating_sub(before);
            if rise > policy.warn_pcie_replays {
                add(
                    Warn,
                    idx,
                    "pcie_replays",
                    format!("+{rise} (now {now})"),
                    format!("<= +{}", policy.warn_pcie_replays),
                    format!("{name}: PCIe replay counter rose by {rise} since the last probe"),
                );
            }
        }
        if policy.warn_on_throttle {
            for r in g.throttle_reasons.iter().flatten() {
                let u = r.to_ascii_uppercase();
                if u.contains("THERMAL") || u.contains("POWER") {
                    add(
                        Warn,
                        idx,
                        "throttle",
                        r.clone(),
                        "no thermal or power throttling".into(),
                        format!("{name}: clocks throttled ({r})"),
                    );
                }
            }
        }
        if let Some(now) = g.ecc.volatile_corrected {
            let (rise, how) = match prev.and_then(|p| p.ecc.volatile_corrected) {
                Some(before) => (now.saturating_sub(before), "since the last probe"),
                None => (now, "since driver load"),
            };
            if rise > policy.warn_corrected_ecc {
                add(
                    Warn,
                    idx,
                    "ecc_corrected",
                    format!("+{rise}"),
                    format!("<= +{}", policy.warn_corrected_ecc),
                    format!("{name}: {rise} corrected ECC errors {how}"),
                );
            }
        }
    }
    let severity = f.iter().map(|x| x.severity).max().unwrap_or(Severity::Ok);
    Verdict {
        host: host.name.clone(),
        severity,
        gpus_expected: host.gpus,
        gpus_found: devices.len(),
        findings: f,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEALTHY: &str = include_str!("../../tests/fixtures/probe-8gpu-healthy.json");

    fn host(gpus: u32) -> Host {
        Host {
            gpus,
            ..Host::local("gpu-01", "/data/prover")
        }
    }

    /// Recorded with `prover health` on an H200 host (docs/examples).
    const H200: &str = include_str!("../../../docs/examples/health-h200.json");

    #[test]
    fn recorded_h200_probe_passes_and_a_forced_threshold_names_the_finding() {
        let p = Probe::parse(H200).expect("recorded probe parses");
        let v = evaluate(&host(1), &p, None, &Policy::default());
        assert_eq!(v.severity, Severity::Ok, "{:#?}", v.findings);
        let t = p.gpus.devices[0]
            .temperature_gpu_c
            .expect("NVML gave a temperature");
        let forced = Policy {
            warn_gpu_temp_c: t - 1,
            ..Policy::default()
        };
        let v = evaluate(&host(1), &p, None, &forced);
        assert_eq!(v.severity, Severity::Warn);
        let f = &v.findings[0];
        assert_eq!((f.gpu, f.rule.as_str()), (Some(0), "gpu_temp"));
        assert_eq!(f.reading, format!("{t} C"));
        assert_eq!(f.threshold, format!("< {} C", t - 1));
        assert!(f.message.contains("NVIDIA H200"), "{}", f.message);
        // An 8-GPU inventory entry on this 1-GPU host fails on the count.
        let v = evaluate(&host(8), &p, None, &Policy::default());
        assert_eq!(v.severity, Severity::Fail);
        assert_eq!(v.findings[0].rule, "gpu_count");
    }

    fn probe() -> Probe {
        Probe::parse(HEALTHY).expect("fixture parses")
    }

    /// Evaluates a mutated probe and returns the single finding it must produce.
    fn only_finding(mutate: impl FnOnce(&mut Probe), prev: Option<&Probe>) -> Finding {
        let mut p = probe();
        mutate(&mut p);
        let v = evaluate(&host(8), &p, prev, &Policy::default());
        assert_eq!(v.findings.len(), 1, "{:#?}", v.findings);
        v.findings.into_iter().next().unwrap()
    }

    #[test]
    fn recorded_healthy_probe_passes() {
        let v = evaluate(&host(8), &probe(), None, &Policy::default());
        assert_eq!(v.severity, Severity::Ok, "{:#?}", v.findings);
        assert_eq!(v.gpus_found, 8);
    }

    #[test]
    fn fail_rules_name_gpu_reading_and_threshold() {
        let f = only_finding(
            |p| p.gpus.devices[3].ecc.volatile_uncorrected = Some(2),
            None,
        );
        assert_eq!(
            (f.severity, f.gpu, f.rule.as_str()),
            (Severity::Fail, Some(3), "ecc_uncorrected")
        );
        assert_eq!((f.reading.as_str(), f.threshold.as_str()), ("2", "<= 0"));
        assert!(f.message.contains("GPU 3 (NVIDIA H200"), "{}", f.message);

        let f = only_finding(
            |p| p.gpus.devices[1].remapped_rows.failure = Some(true),
            None,
        );
        assert_eq!(
            (f.severity, f.rule.as_str()),
            (Severity::Fail, "row_remap_failure")
        );
        let f = only_finding(
            |p| p.gpus.devices[1].remapped_rows.pending = Some(true),
            None,
        );
        assert_eq!(
            (f.severity, f.rule.as_str()),
            (Severity::Fail, "row_remap_pending")
        );

        let f = only_finding(|p| p.gpus.devices[2].pcie.gen_current = Some(4), None);
        assert_eq!(
            (f.rule.as_str(), f.reading.as_str(), f.threshold.as_str()),
            ("pcie_gen", "Gen4", "Gen5")
        );
        let f = only_finding(|p| p.gpus.devices[2].pcie.width_current = Some(8), None);
        assert_eq!(
            (f.rule.as_str(), f.reading.as_str(), f.threshold.as_str()),
            ("pcie_width", "x8", "x16")
        );

        for xid in CRITICAL_XIDS {
            let f = only_finding(|p| p.gpus.devices[5].xid_events = Some(vec![13, xid]), None);
            assert_eq!(
                (f.severity, f.gpu, f.rule.as_str()),
                (Severity::Fail, Some(5), "xid")
            );
            assert_eq!(f.reading, format!("XID {xid}"));
        }
        // XID 13 (a graphics engine exception from a bad kernel) is not critical.
        let mut p = probe();
        p.gpus.devices[0].xid_events = Some(vec![13]);
        assert_eq!(
            evaluate(&host(8), &p, None, &Policy::default()).severity,
            Severity::Ok
        );

        let f = only_finding(|p| p.gpus.devices.truncate(7), None);
        assert_eq!(
            (f.rule.as_str(), f.reading.as_str(), f.threshold.as_str()),
            ("gpu_count", "7 GPUs", ">= 8")
        );

        let f = only_finding(
            |p| {
                p.gpus.nvml.available = false;
                p.gpus.nvml.reason = Some("libnvidia-ml.so.1: cannot open".into());
                p.gpus.devices.clear();
            },
            None,
        );
        assert_eq!(
            (f.severity, f.rule.as_str()),
            (Severity::Fail, "nvml_absent")
        );
    }

    #[test]
    fn no_nvml_on_a_cpu_host_is_fine() {
        let mut p = probe();
        p.gpus.nvml.available = false;
        p.gpus.devices.clear();
        assert_eq!(
            evaluate(&host(0), &p, None, &Policy::default()).severity,
            Severity::Ok
        );
    }

    #[test]
    fn warn_rules() {
        let f = only_finding(|p| p.gpus.devices[0].temperature_gpu_c = Some(85), None);
        assert_eq!(
            (
                f.severity,
                f.rule.as_str(),
                f.reading.as_str(),
                f.threshold.as_str()
            ),
            (Severity::Warn, "gpu_temp", "85 C", "< 85 C")
        );
        let f = only_finding(|p| p.gpus.devices[0].temperature_memory_c = Some(90), None);
        assert_eq!(
            (f.severity, f.rule.as_str()),
            (Severity::Warn, "memory_temp")
        );
        let f = only_finding(
            |p| p.gpus.devices[4].throttle_reasons = Some(vec!["HW_THERMAL_SLOWDOWN".into()]),
            None,
        );
        assert_eq!(
            (f.severity, f.gpu, f.rule.as_str()),
            (Severity::Warn, Some(4), "throttle")
        );
        let f = only_finding(
            |p| p.gpus.devices[4].throttle_reasons = Some(vec!["SW_POWER_CAP".into()]),
            None,
        );
        assert_eq!(f.rule, "throttle");

        let before = probe();
        let f = only_finding(
            |p| p.gpus.devices[6].pcie.replay_counter = Some(12),
            Some(&before),
        );
        assert_eq!(
            (f.severity, f.rule.as_str(), f.reading.as_str()),
            (Severity::Warn, "pcie_replays", "+12 (now 12)")
        );
        // A high but steady counter does not warn: only a rise does.
        let mut steady = probe();
        steady.gpus.devices[6].pcie.replay_counter = Some(12);
        let mut now = probe();
        now.gpus.devices[6].pcie.replay_counter = Some(12);
        assert_eq!(
            evaluate(&host(8), &now, Some(&steady), &Policy::default()).severity,
            Severity::Ok
        );

        let f = only_finding(
            |p| p.gpus.devices[7].ecc.volatile_corrected = Some(500),
            Some(&before),
        );
        assert_eq!(
            (f.severity, f.rule.as_str(), f.reading.as_str()),
            (Severity::Warn, "ecc_corrected", "+500")
        );
    }

    #[test]
    fn group_override_changes_thresholds_and_rejects_unknown_keys() {
        let mut h = host(8);
        h.vars
            .insert("health".into(), serde_json::json!({"warn_gpu_temp_c": 30}));
        let policy = Policy::for_host(&h).unwrap();
        assert_eq!(policy.warn_gpu_temp_c, 30);
        assert_eq!(
            policy.max_uncorrected_ecc, 0,
            "other keys keep their defaults"
        );
        let v = evaluate(&h, &probe(), None, &policy);
        assert_eq!(v.severity, Severity::Warn);
        assert_eq!(v.findings.len(), 8, "one finding per GPU at 31 C");
        h.vars
            .insert("health".into(), serde_json::json!({"warn_gpu_tmp": 30}));
        let err = Policy::for_host(&h).unwrap_err().to_string();
        assert!(
            err.contains("gpu-01") && err.contains("warn_gpu_tmp") && err.contains("known keys"),
            "{err}"
        );
    }
}
