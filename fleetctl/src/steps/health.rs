//! `health`: run the deployed binary's probe and gate on it. The gate is one
//! function over (host, probe) so a richer policy can take its place.

use super::ctx::StepCtx;
use super::outcome::{kept, Cause, Failed, StepOutcome};
use super::params::{self as bounds, Check};
use super::params::{duration, ByteSize};
use super::remote;
use crate::health::policy::{evaluate, Finding, Policy, Severity};
use crate::inventory::Host;
use fleet_wire::health::Probe;
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthParams {
    #[serde(with = "duration")]
    pub timeout: Duration,
}

impl Default for HealthParams {
    fn default() -> Self {
        HealthParams {
            timeout: Duration::from_secs(30),
        }
    }
}

impl Check for HealthParams {
    fn check(&self) -> Result<(), String> {
        bounds::duration_in("timeout", self.timeout, &bounds::TIMEOUTS)
    }
}

/// The rollout gate: the daemon is alive and ready, and the fleet-wide
/// health policy (the same rules and findings as `fleetctl health`, with the
/// host's group overrides, which also check the GPU count) passes.
pub fn gate(host: &Host, probe: &Probe) -> Vec<Finding> {
    let mut out = Vec::new();
    let daemon =
        |rule: &str, message: String| Finding::new(Severity::Fail, None, rule).said(message);
    match &probe.daemon {
        None => out.push(daemon(
            "probe_daemon",
            "the probe has no daemon section".to_owned(),
        )),
        Some(d) => {
            if !d.alive {
                out.push(daemon(
                    "daemon_alive",
                    format!(
                        "daemon not running (pid {:?}, state {:?})",
                        d.pid,
                        d.state.as_deref().unwrap_or("gone")
                    ),
                ));
            } else if d.ready != Some(true) {
                out.push(daemon(
                    "daemon_ready",
                    format!(
                        "daemon pid {:?} not ready: {}",
                        d.pid,
                        d.ready_reason.as_deref().unwrap_or("no reason given")
                    ),
                ));
            }
        }
    }
    match Policy::for_host(host) {
        Ok(policy) => out.extend(evaluate(host, probe, None, &policy).findings),
        Err(e) => out.push(daemon("policy", e.to_string())),
    }
    out
}

pub fn describe(_p: &HealthParams, ctx: &StepCtx<'_>) -> String {
    format!(
        "run `prover health` and require a ready daemon and {} GPU(s)",
        ctx.host.gpus
    )
}

const KEPT: &str = "everything: the health step changes nothing";

pub(super) async fn run(p: &HealthParams, ctx: &mut StepCtx<'_>) -> Result<StepOutcome, Failed> {
    let probe = kept(remote::probe(ctx, p.timeout).await, KEPT)?;
    let findings = gate(ctx.host, &probe);
    let fails: Vec<String> = findings
        .iter()
        .filter(|f| f.severity == Severity::Fail)
        .map(Finding::summary)
        .collect();
    if !fails.is_empty() {
        return Err((Cause::Check(fails.join("; ")), KEPT.to_owned()));
    }
    Ok(StepOutcome::done(format!(
        "ready, {} GPU(s), MemAvailable {}",
        probe.gpus.devices.len(),
        probe
            .memory
            .available_bytes
            .map_or("?".to_owned(), |b| ByteSize(b).to_string())
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_wire::health::{Daemon, Gpu, Gpus, Memory, PROBE_VERSION};

    fn host(gpus: u32) -> Host {
        Host {
            gpus,
            ..Host::local("g1", "/opt/prover")
        }
    }

    fn probe(ready: Option<bool>, gpus: u32) -> Probe {
        Probe {
            probe_version: PROBE_VERSION,
            host: "g1".into(),
            ts_ms: 0,
            prober_version: "0.1.0".into(),
            prober_build: "abc".into(),
            memory: Memory::default(),
            daemon: Some(Daemon {
                alive: true,
                pid: Some(7),
                ready,
                ready_reason: Some("loading parameters".into()),
                ..Default::default()
            }),
            gpus: Gpus {
                devices: (0..gpus)
                    .map(|i| Gpu {
                        index: i,
                        ..Default::default()
                    })
                    .collect(),
                nvml: fleet_wire::health::Nvml {
                    available: true,
                    ..Default::default()
                },
            },
        }
    }

    #[test]
    fn ready_daemon_with_every_gpu_passes() {
        assert!(gate(&host(2), &probe(Some(true), 2)).is_empty());
    }

    #[test]
    fn not_ready_and_missing_gpus_both_fail() {
        let f = gate(&host(8), &probe(Some(false), 7));
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f[0].message.contains("not ready: loading parameters"));
        assert!(f[1].message.contains("7 of 8 GPUs visible"), "{f:?}");
        assert!(
            f[1].summary().contains("gpu_count: 7 GPUs, threshold >= 8"),
            "{f:?}"
        );
    }
}
