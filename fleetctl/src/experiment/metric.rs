//! The metrics an experiment can judge, each defined once: its name in a
//! definition, which way is better, and how its samples are read from the
//! timing records of one host.

use fleet_wire::timing::{PartitionRecord, Phase, ProofRecord};
use serde::{Deserialize, Serialize};
use std::fmt;

/// One judged quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Metric {
    /// Milliseconds of one phase of a successful partition.
    Phase(Phase),
    /// The device's own milliseconds of one phase (`<phase>.device`), from
    /// the records that measured it.
    PhaseDevice(Phase),
    /// Milliseconds from submission to result of a successful proof.
    ProofMs,
    /// Host-to-device GB/s of a partition that copied anything.
    H2dGbps,
    /// Fraction of a partition's time outside the queue that the device
    /// itself computed (`device_busy_ms`, timed on the device).
    KernelBusy,
    /// Throughput: 60 000 over the milliseconds between consecutive
    /// finished proofs on a host.
    ProofsPerMinute,
    /// 1 for a failed proof, 0 for a successful one; judged on the rate.
    Failures,
}

/// Names of the metrics that are not phases, as written in a definition.
pub const OTHER_METRICS: [&str; 5] = [
    "proof_ms",
    "h2d_gbps",
    "kernel_busy",
    "proofs_per_minute",
    "failures",
];

/// How the canary's change against the baseline is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Relative change of the medians (a duration, a rate).
    MedianRatio,
    /// Absolute change of the means (a failure rate in 0..=1, whose
    /// median is 0 in any healthy run).
    MeanDifference,
}

impl Metric {
    pub fn name(self) -> String {
        match self {
            Metric::Phase(p) => p.as_str().to_owned(),
            Metric::PhaseDevice(p) => format!("{p}.device"),
            Metric::ProofMs => "proof_ms".into(),
            Metric::H2dGbps => "h2d_gbps".into(),
            Metric::KernelBusy => "kernel_busy".into(),
            Metric::ProofsPerMinute => "proofs_per_minute".into(),
            Metric::Failures => "failures".into(),
        }
    }

    /// Parses a metric name: a phase (`msm`, `total`, ...) or one of
    /// [`OTHER_METRICS`].
    pub fn parse(name: &str) -> Result<Metric, String> {
        let m = match name {
            "proof_ms" => Metric::ProofMs,
            "h2d_gbps" => Metric::H2dGbps,
            "kernel_busy" => Metric::KernelBusy,
            "proofs_per_minute" => Metric::ProofsPerMinute,
            "failures" => Metric::Failures,
            other => {
                if let Some(p) = Phase::from_name(other) {
                    Metric::Phase(p)
                } else if let Some(p) = other.strip_suffix(".device").and_then(Phase::from_name) {
                    Metric::PhaseDevice(p)
                } else {
                    let phases: Vec<&str> = Phase::ALL.iter().map(|p| p.as_str()).collect();
                    return Err(format!(
                        "unknown metric `{other}`: expected a phase ({}), a phase's device time (`<phase>.device`) or one of {}",
                        phases.join(", "),
                        OTHER_METRICS.join(", ")
                    ));
                }
            }
        };
        Ok(m)
    }

    /// Whether a larger value is better (rates), else a smaller one is.
    pub fn higher_is_better(self) -> bool {
        matches!(
            self,
            Metric::H2dGbps | Metric::KernelBusy | Metric::ProofsPerMinute
        )
    }

    pub fn effect(self) -> Effect {
        match self {
            Metric::Failures => Effect::MeanDifference,
            _ => Effect::MedianRatio,
        }
    }

    /// The unit shown beside values.
    pub fn unit(self) -> &'static str {
        match self {
            Metric::Phase(p) | Metric::PhaseDevice(p) => p.spec().map_or("ms", |s| s.unit.as_str()),
            Metric::ProofMs => "ms",
            Metric::H2dGbps => "GB/s",
            Metric::KernelBusy | Metric::Failures => "",
            Metric::ProofsPerMinute => "/min",
        }
    }

    /// Appends this metric's samples from one host's records (those of the
    /// experiment window, already filtered).
    pub fn samples(self, parts: &[&PartitionRecord], proofs: &[&ProofRecord], out: &mut Vec<f64>) {
        match self {
            Metric::Phase(p) => out.extend(
                parts
                    .iter()
                    .filter(|r| r.error.is_none())
                    .filter_map(|r| r.phases_ms.get(&p).copied()),
            ),
            Metric::PhaseDevice(p) => out.extend(
                parts
                    .iter()
                    .filter(|r| r.error.is_none())
                    .filter_map(|r| r.device_ms(p)),
            ),
            Metric::ProofMs => out.extend(
                proofs
                    .iter()
                    .filter(|r| r.error.is_none())
                    .map(|r| r.total_ms),
            ),
            Metric::H2dGbps => out.extend(
                parts
                    .iter()
                    .filter(|r| r.error.is_none() && r.h2d_bytes > 0)
                    .filter_map(|r| r.h2d_gbps),
            ),
            Metric::KernelBusy => {
                out.extend(parts.iter().filter(|r| r.error.is_none()).filter_map(|r| {
                    let busy = r.device_busy_ms?;
                    let total = r.phases_ms.get(&Phase::Total)?;
                    let queued = r.phases_ms.get(&Phase::QueueWait).copied().unwrap_or(0.0);
                    let span = total - queued;
                    (span > 0.0).then(|| (busy / span).clamp(0.0, 1.0))
                }))
            }
            Metric::ProofsPerMinute => {
                let mut ts: Vec<u64> = proofs
                    .iter()
                    .filter(|r| r.error.is_none())
                    .map(|r| r.ts_ms)
                    .collect();
                ts.sort_unstable();
                out.extend(
                    ts.windows(2)
                        .filter(|w| w[1] > w[0])
                        .map(|w| 60_000.0 / (w[1] - w[0]) as f64),
                );
            }
            Metric::Failures => {
                out.extend(
                    proofs
                        .iter()
                        .map(|r| if r.error.is_some() { 1.0 } else { 0.0 }),
                )
            }
        }
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl Serialize for Metric {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.name())
    }
}

impl<'de> Deserialize<'de> for Metric {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Metric, D::Error> {
        let name = String::deserialize(d)?;
        Metric::parse(&name).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_wire::timing::JobTag;
    use std::collections::BTreeMap;

    fn tag() -> JobTag {
        JobTag {
            host: "h".into(),
            build: "b".into(),
            job_id: "j".into(),
            circuit: "chain".into(),
            size: 1024,
        }
    }

    fn proof(ts_ms: u64, error: bool) -> ProofRecord {
        ProofRecord {
            v: 1,
            ts_ms,
            tag: tag(),
            partitions: 1,
            backend: "cpu".into(),
            verified: Some(!error),
            total_ms: 10.0,
            error: error.then(|| "boom".to_owned()),
        }
    }

    #[test]
    fn names_round_trip_and_unknown_names_list_the_choices() {
        for name in OTHER_METRICS
            .iter()
            .chain(["msm", "total", "synthesis", "msm_l.device"].iter())
        {
            assert_eq!(Metric::parse(name).unwrap().name(), *name);
        }
        assert_eq!(
            Metric::parse("msm_l.device"),
            Ok(Metric::PhaseDevice(Phase::MsmL))
        );
        assert!(Metric::parse("synthesys.device").is_err());
        let e = Metric::parse("msn").unwrap_err();
        assert!(
            e.contains("unknown metric `msn`") && e.contains("msm_h"),
            "{e}"
        );
        assert!(Metric::H2dGbps.higher_is_better());
        assert!(!Metric::Phase(Phase::Msm).higher_is_better());
    }

    #[test]
    fn samples_skip_failed_work_and_absent_measurements() {
        let mut phases = BTreeMap::new();
        phases.insert(Phase::Total, 10.0);
        phases.insert(Phase::QueueWait, 2.0);
        phases.insert(Phase::Msm, 4.0);
        let ok = PartitionRecord {
            v: 1,
            ts_ms: 1,
            tag: tag(),
            partition: 0,
            partitions: 1,
            domain: 1024,
            backend: "cuda".into(),
            device: Some(0),
            pinned: true,
            h2d_bytes: 100,
            h2d_ms: None,
            h2d_gbps: Some(20.0),
            phases_ms: phases,
            phase_split_ms: Default::default(),
            device_busy_ms: Some(4.0),
            error: None,
        };
        let failed = PartitionRecord {
            error: Some("x".into()),
            ..ok.clone()
        };
        let cpu = PartitionRecord {
            h2d_bytes: 0,
            h2d_ms: None,
            h2d_gbps: None,
            device_busy_ms: None,
            ..ok.clone()
        };
        let parts = [&ok, &failed, &cpu];
        let mut v = Vec::new();
        Metric::Phase(Phase::Msm).samples(&parts, &[], &mut v);
        assert_eq!(v, [4.0, 4.0]);
        v.clear();
        Metric::H2dGbps.samples(&parts, &[], &mut v);
        assert_eq!(v, [20.0]);
        v.clear();
        Metric::KernelBusy.samples(&parts, &[], &mut v);
        assert_eq!(v, [0.5]);

        let (a, b, c) = (proof(1_000, false), proof(4_000, true), proof(7_000, false));
        let proofs = [&c, &a, &b];
        v.clear();
        Metric::Failures.samples(&[], &proofs, &mut v);
        v.sort_by(f64::total_cmp);
        assert_eq!(v, [0.0, 0.0, 1.0]);
        v.clear();
        Metric::ProofsPerMinute.samples(&[], &proofs, &mut v);
        assert_eq!(v, [10.0]);
    }
}
