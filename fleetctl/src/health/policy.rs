//! The health policy: DCGM-like rules over a probe document, with defaults
//! that an inventory group can override (`health:` in its vars).
//!
//! FAIL means "do not prove on this host/GPU"; WARN means "look at it soon".
//! Every finding names the GPU, the reading and the threshold it crossed.

use crate::inventory::Host;
use fleet_wire::health::{Gpu, Probe, CRITICAL_XIDS};
use serde::{Deserialize, Serialize};

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
    /// FAIL when no daemon runs, whatever the host's record says (without
    /// it, only a host whose last start left `state/daemon` = `running`).
    pub require_daemon: bool,
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
            require_daemon: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("host {host}: invalid `health` policy override: {source} (known keys: max_uncorrected_ecc, fail_on_remap, fail_on_pcie_degraded, critical_xids, warn_gpu_temp_c, warn_memory_temp_c, warn_pcie_replays, warn_on_throttle, warn_corrected_ecc, require_daemon_ready, require_daemon)")]
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
    Evaluation {
        host,
        probe,
        previous,
        policy,
        daemon_expected: false,
    }
    .verdict()
}

/// [`evaluate`] for a host whose record says a daemon should run there
/// (`state/daemon` = `running`): one that does not is a FAIL.
pub fn evaluate_expecting_daemon(
    host: &Host,
    probe: &Probe,
    previous: Option<&Probe>,
    policy: &Policy,
) -> Verdict {
    Evaluation {
        host,
        probe,
        previous,
        policy,
        daemon_expected: true,
    }
    .verdict()
}

/// One probe of one host under its policy: the host rules, then every
/// GPU's rules, each a function of the tables below.
pub struct Evaluation<'a> {
    pub host: &'a Host,
    pub probe: &'a Probe,
    /// The host's previous probe, for the "rising" rules.
    pub previous: Option<&'a Probe>,
    pub policy: &'a Policy,
    /// The host's last start said the daemon should run (`state/daemon`).
    pub daemon_expected: bool,
}

/// One GPU as the per-GPU rules see it.
struct GpuCheck<'a> {
    g: &'a Gpu,
    /// The same GPU (by UUID) in the previous probe.
    prev: Option<&'a Gpu>,
    name: String,
    policy: &'a Policy,
}

type HostRule = fn(&Evaluation<'_>, &mut Vec<Finding>);
type GpuRule = fn(&GpuCheck<'_>, &mut Vec<Finding>);

/// Host-level rules, in the order their findings are listed.
const HOST_RULES: &[HostRule] = &[
    gpu_presence,
    daemon_ready,
    daemon_down,
    device_rotation,
    daemon_on_cpu,
    daemon_devices,
];
/// Per-GPU rules, in the order their findings are listed.
const GPU_RULES: &[GpuRule] = &[
    ecc_uncorrected,
    remap,
    pcie_degraded,
    critical_xid,
    gpu_temp,
    memory_temp,
    pcie_replays,
    throttle,
    ecc_corrected,
];

impl Evaluation<'_> {
    pub fn verdict(&self) -> Verdict {
        let mut findings = Vec::new();
        for rule in HOST_RULES {
            rule(self, &mut findings);
        }
        for g in &self.probe.gpus.devices {
            let check = GpuCheck {
                g,
                prev: self.previous.and_then(|p| {
                    p.gpus
                        .devices
                        .iter()
                        .find(|d| d.uuid.is_some() && d.uuid == g.uuid)
                }),
                name: gpu_name(g),
                policy: self.policy,
            };
            for rule in GPU_RULES {
                rule(&check, &mut findings);
            }
        }
        let severity = findings
            .iter()
            .map(|x| x.severity)
            .max()
            .unwrap_or(Severity::Ok);
        Verdict {
            host: self.host.name.clone(),
            severity,
            gpus_expected: self.host.gpus,
            gpus_found: self.probe.gpus.devices.len(),
            findings,
        }
    }
}

impl Finding {
    pub fn new(severity: Severity, gpu: Option<u32>, rule: &str) -> Self {
        Finding {
            severity,
            gpu,
            rule: rule.into(),
            reading: String::new(),
            threshold: String::new(),
            message: String::new(),
        }
    }

    /// What was read, against which threshold, and what it means.
    pub fn saw(mut self, reading: String, threshold: String, message: String) -> Self {
        self.reading = reading;
        self.threshold = threshold;
        self.message = message;
        self
    }

    /// A finding that is only a message: nothing was measured against a threshold.
    pub fn said(mut self, message: String) -> Self {
        self.message = message;
        self
    }

    /// One line: the message, then the rule, reading and threshold when the
    /// finding has them (what a rollout step's failure shows).
    pub fn summary(&self) -> String {
        if self.reading.is_empty() && self.threshold.is_empty() {
            return self.message.clone();
        }
        format!(
            "{} ({}: {}, threshold {})",
            self.message, self.rule, self.reading, self.threshold
        )
    }
}

impl GpuCheck<'_> {
    fn finding(&self, severity: Severity, rule: &str) -> Finding {
        Finding::new(severity, Some(self.g.index), rule)
    }
}

use Severity::{Fail, Warn};

fn gpu_presence(e: &Evaluation<'_>, out: &mut Vec<Finding>) {
    let (host, nvml, devices) = (e.host, &e.probe.gpus.nvml, &e.probe.gpus.devices);
    if host.gpus > 0 && !nvml.available {
        out.push(
            Finding::new(Fail, None, "nvml_absent").saw(
                nvml.reason
                    .clone()
                    .unwrap_or_else(|| "NVML not available".into()),
                format!("{} GPUs expected", host.gpus),
                format!(
                "the inventory says {} GPUs but NVML is not usable: check the driver (nvidia-smi)",
                host.gpus
            ),
            ),
        );
    } else if (devices.len() as u32) < host.gpus {
        out.push(Finding::new(Fail, None, "gpu_count").saw(
            format!("{} GPUs", devices.len()),
            format!(">= {}", host.gpus),
            format!(
                "{} of {} GPUs visible: a GPU fell off the bus or is hidden",
                devices.len(),
                host.gpus
            ),
        ));
    }
}

fn daemon_ready(e: &Evaluation<'_>, out: &mut Vec<Finding>) {
    if !e.policy.require_daemon_ready {
        return;
    }
    if let Some(d) = &e.probe.daemon {
        if d.ready != Some(true) {
            out.push(Finding::new(Fail, None, "daemon_ready").saw(
                format!(
                    "ready={:?} alive={} {}",
                    d.ready,
                    d.alive,
                    d.ready_reason.clone().unwrap_or_default()
                ),
                "ready".into(),
                "the prover daemon is not ready".into(),
            ));
        }
    }
}

/// A host that should run a daemon (the inventory's `require_daemon`, or the
/// last start's record) and runs none proves nothing.
fn daemon_down(e: &Evaluation<'_>, out: &mut Vec<Finding>) {
    if !(e.policy.require_daemon || e.daemon_expected) {
        return;
    }
    let d = e.probe.daemon.as_ref();
    if d.is_some_and(|d| d.alive) {
        return;
    }
    let why = if e.policy.require_daemon {
        "the policy requires one (require_daemon)"
    } else {
        "the last start left state/daemon = running and no stop since"
    };
    let reading = match d {
        Some(d) => match (d.pid, d.state.as_deref()) {
            (Some(pid), Some(state)) => format!("pid {pid} {state}"),
            (Some(pid), None) => format!("pid {pid} gone"),
            (None, _) => format!("no pid file ({})", d.pid_file),
        },
        None => "no daemon section in the probe".into(),
    };
    out.push(Finding::new(Fail, None, "daemon_down").saw(
        reading,
        "a running daemon".into(),
        format!(
            "no prover daemon runs on this host, but {why}: see its log, then start it again with the `restart` playbook, or record a stop on purpose with the `stop` playbook"
        ),
    ));
}

/// The daemon's CUDA devices as it runs them (in rotation or not), or `None`
/// when it proves on the CPU backend only; `None` too before `/status`
/// answered (no devices listed).
fn cuda_devices(d: &fleet_wire::health::Daemon) -> Option<usize> {
    let cuda = d.devices.iter().filter(|x| x.backend == "cuda").count();
    (cuda > 0 || d.devices.is_empty()).then_some(cuda)
}

/// GPUs the daemon was asked to prove on: the config's list, or under
/// `"all"` the GPUs NVML sees (at least the inventory's `gpus`). `None` when
/// the probe does not say (an older prober).
fn devices_asked(e: &Evaluation<'_>, d: &fleet_wire::health::Daemon) -> Option<usize> {
    use fleet_wire::health::GpuDevices;
    match d.gpu_devices.as_ref()? {
        GpuDevices::List(l) => Some(l.len()),
        GpuDevices::All => Some(e.probe.gpus.devices.len().max(e.host.gpus as usize)),
    }
}

/// A daemon that fell back to the CPU backend on a GPU host (under
/// `gpu.devices = "all"` a CUDA failure at start, e.g. a broken NVRTC, does
/// that) answers ready and proves, orders of magnitude slower.
fn daemon_on_cpu(e: &Evaluation<'_>, out: &mut Vec<Finding>) {
    let Some(d) = e
        .probe
        .daemon
        .as_ref()
        .filter(|d| d.alive && !d.devices.is_empty())
    else {
        return;
    };
    if cuda_devices(d).is_some() {
        return;
    }
    let gpus = e.probe.gpus.devices.len().max(e.host.gpus as usize);
    let asked = devices_asked(e, d);
    if gpus == 0 || asked == Some(0) {
        return;
    }
    out.push(Finding::new(Fail, None, "daemon_on_cpu").saw(
        "backend cpu".into(),
        format!("cuda on {} GPU(s)", asked.unwrap_or(gpus)),
        format!(
            "the daemon proves on the CPU backend although this host has {gpus} GPU(s): CUDA did not initialise at start (driver, NVRTC); see the daemon's log, then restart it"
        ),
    ));
}

/// A daemon running fewer CUDA devices than its config asks for (a device
/// it could not open counts: it is listed out of rotation).
fn daemon_devices(e: &Evaluation<'_>, out: &mut Vec<Finding>) {
    let Some(d) = e
        .probe
        .daemon
        .as_ref()
        .filter(|d| d.alive && !d.devices.is_empty())
    else {
        return;
    };
    let (Some(runs), Some(asked)) = (cuda_devices(d), devices_asked(e, d)) else {
        return;
    };
    if runs == 0 || runs >= asked {
        return;
    }
    out.push(Finding::new(Fail, None, "daemon_devices").saw(
        format!("{runs} CUDA device(s)"),
        format!(">= {asked}"),
        format!(
            "the daemon runs {runs} of the {asked} GPU(s) its config asks for (gpu.devices): a GPU was hidden from it at start (CUDA_VISIBLE_DEVICES, driver); restart it once all are visible"
        ),
    ));
}

/// A device the daemon took out of rotation (its driver failed, or it did
/// not initialise) proves nothing until the daemon restarts.
fn device_rotation(e: &Evaluation<'_>, out: &mut Vec<Finding>) {
    let Some(d) = &e.probe.daemon else {
        return;
    };
    for dev in d.devices.iter().filter(|dev| !dev.in_rotation) {
        let name = dev
            .ordinal
            .map_or_else(|| dev.backend.clone(), |o| format!("GPU {o}"));
        out.push(
            Finding::new(Fail, dev.ordinal, "device_out_of_rotation").saw(
                dev.error
                    .clone()
                    .unwrap_or_else(|| "out of rotation".into()),
                "in rotation".into(),
                format!(
                    "the daemon took {name} out of rotation; the other devices keep proving: \
                 check the GPU (Xid, nvidia-smi), then restart the daemon"
                ),
            ),
        );
    }
}

fn ecc_uncorrected(c: &GpuCheck<'_>, out: &mut Vec<Finding>) {
    if let Some(u) = c.g.ecc.volatile_uncorrected {
        if u > c.policy.max_uncorrected_ecc {
            out.push(c.finding(Fail, "ecc_uncorrected").saw(
                u.to_string(),
                format!("<= {}", c.policy.max_uncorrected_ecc),
                format!("{}: {u} uncorrected ECC errors since driver load", c.name),
            ));
        }
    }
}

fn remap(c: &GpuCheck<'_>, out: &mut Vec<Finding>) {
    if !c.policy.fail_on_remap {
        return;
    }
    let name = &c.name;
    if c.g.remapped_rows.failure == Some(true) {
        out.push(c.finding(Fail, "row_remap_failure").saw(
            "failure".into(),
            "no failure".into(),
            format!("{name}: row remapping failed; the GPU needs service"),
        ));
    }
    if c.g.remapped_rows.pending == Some(true) {
        out.push(c.finding(Fail, "row_remap_pending").saw(
            "pending".into(),
            "none pending".into(),
            format!("{name}: a row remap is pending; reset the GPU to apply it"),
        ));
    }
    if c.g.retired_pages.pending == Some(true) {
        out.push(c.finding(Fail, "page_retirement_pending").saw(
            "pending".into(),
            "none pending".into(),
            format!("{name}: a page retirement is pending; reset the GPU to apply it"),
        ));
    }
}

fn pcie_degraded(c: &GpuCheck<'_>, out: &mut Vec<Finding>) {
    if !c.policy.fail_on_pcie_degraded {
        return;
    }
    let (p, name) = (&c.g.pcie, &c.name);
    if let (Some(now), Some(max)) = (p.gen_current, p.gen_max) {
        if now < max {
            out.push(c.finding(Fail, "pcie_gen").saw(
                format!("Gen{now}"),
                format!("Gen{max}"),
                format!("{name}: PCIe link at Gen{now}, below its maximum Gen{max}"),
            ));
        }
    }
    if let (Some(now), Some(max)) = (p.width_current, p.width_max) {
        if now < max {
            out.push(c.finding(Fail, "pcie_width").saw(
                format!("x{now}"),
                format!("x{max}"),
                format!("{name}: PCIe link at x{now}, below its maximum x{max}"),
            ));
        }
    }
}

fn critical_xid(c: &GpuCheck<'_>, out: &mut Vec<Finding>) {
    for x in c.g.xid_events.iter().flatten() {
        if c.policy.critical_xids.contains(x) {
            out.push(c.finding(Fail, "xid").saw(
                format!("XID {x}"),
                format!("none of {:?}", c.policy.critical_xids),
                format!("{}: critical XID {x}", c.name),
            ));
        }
    }
}

fn gpu_temp(c: &GpuCheck<'_>, out: &mut Vec<Finding>) {
    if let Some(t) = c.g.temperature_gpu_c {
        if t >= c.policy.warn_gpu_temp_c {
            out.push(c.finding(Warn, "gpu_temp").saw(
                format!("{t} C"),
                format!("< {} C", c.policy.warn_gpu_temp_c),
                format!("{}: GPU at {t} C", c.name),
            ));
        }
    }
}

fn memory_temp(c: &GpuCheck<'_>, out: &mut Vec<Finding>) {
    if let Some(t) = c.g.temperature_memory_c {
        if t >= c.policy.warn_memory_temp_c {
            out.push(c.finding(Warn, "memory_temp").saw(
                format!("{t} C"),
                format!("< {} C", c.policy.warn_memory_temp_c),
                format!("{}: memory at {t} C", c.name),
            ));
        }
    }
}

fn pcie_replays(c: &GpuCheck<'_>, out: &mut Vec<Finding>) {
    let before = c.prev.and_then(|p| p.pcie.replay_counter);
    if let (Some(now), Some(before)) = (c.g.pcie.replay_counter, before) {
        let rise = now.saturating_sub(before);
        if rise > c.policy.warn_pcie_replays {
            out.push(c.finding(Warn, "pcie_replays").saw(
                format!("+{rise} (now {now})"),
                format!("<= +{}", c.policy.warn_pcie_replays),
                format!(
                    "{}: PCIe replay counter rose by {rise} since the last probe",
                    c.name
                ),
            ));
        }
    }
}

fn throttle(c: &GpuCheck<'_>, out: &mut Vec<Finding>) {
    if !c.policy.warn_on_throttle {
        return;
    }
    for r in c.g.throttle_reasons.iter().flatten() {
        let u = r.to_ascii_uppercase();
        if u.contains("THERMAL") || u.contains("POWER") {
            out.push(c.finding(Warn, "throttle").saw(
                r.clone(),
                "no thermal or power throttling".into(),
                format!("{}: clocks throttled ({r})", c.name),
            ));
        }
    }
}

fn ecc_corrected(c: &GpuCheck<'_>, out: &mut Vec<Finding>) {
    if let Some(now) = c.g.ecc.volatile_corrected {
        let (rise, how) = match c.prev.and_then(|p| p.ecc.volatile_corrected) {
            Some(before) => (now.saturating_sub(before), "since the last probe"),
            None => (now, "since driver load"),
        };
        if rise > c.policy.warn_corrected_ecc {
            out.push(c.finding(Warn, "ecc_corrected").saw(
                format!("+{rise}"),
                format!("<= +{}", c.policy.warn_corrected_ecc),
                format!("{}: {rise} corrected ECC errors {how}", c.name),
            ));
        }
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
    fn a_device_out_of_rotation_fails_the_host_and_names_the_gpu() {
        let device = |ordinal: u32, error: Option<&str>| fleet_wire::api::DeviceState {
            backend: "cuda".into(),
            ordinal: Some(ordinal),
            name: None,
            workers: 1,
            busy: 0,
            partitions_done: 3,
            in_rotation: error.is_none(),
            error: error.map(String::from),
            proving: Vec::new(),
        };
        let f = only_finding(
            |p| {
                let d = p.daemon.get_or_insert_with(Default::default);
                d.ready = Some(true);
                d.devices = vec![device(0, None), device(3, Some("cuLaunchKernel failed"))];
            },
            None,
        );
        assert_eq!(
            (f.severity, f.gpu, f.rule.as_str(), f.reading.as_str()),
            (
                Severity::Fail,
                Some(3),
                "device_out_of_rotation",
                "cuLaunchKernel failed"
            )
        );
        assert!(f.message.contains("GPU 3 out of rotation"), "{}", f.message);
    }

    fn dev(backend: &str, ordinal: Option<u32>) -> fleet_wire::api::DeviceState {
        fleet_wire::api::DeviceState {
            backend: backend.into(),
            ordinal,
            name: None,
            workers: 1,
            busy: 0,
            partitions_done: 0,
            in_rotation: true,
            error: None,
            proving: Vec::new(),
        }
    }

    /// Issue 29: under `gpu.devices = "all"` a broken NVRTC makes the daemon
    /// fall back to the CPU; it answers ready and passed every rule.
    #[test]
    fn a_gpu_host_proving_on_the_cpu_or_on_fewer_gpus_than_asked_fails_by_name() {
        use fleet_wire::health::GpuDevices;
        let with = |asked: Option<GpuDevices>, devices: Vec<fleet_wire::api::DeviceState>| {
            move |p: &mut Probe| {
                let d = p.daemon.get_or_insert_with(Default::default);
                d.alive = true;
                d.ready = Some(true);
                d.gpu_devices = asked;
                d.devices = devices;
            }
        };
        let f = only_finding(with(Some(GpuDevices::All), vec![dev("cpu", None)]), None);
        assert_eq!(
            (f.severity, f.rule.as_str()),
            (Severity::Fail, "daemon_on_cpu")
        );
        assert!(f.message.contains("8 GPU(s)"), "{}", f.message);
        // An older prober that does not say what was asked: still caught.
        let f = only_finding(with(None, vec![dev("cpu", None)]), None);
        assert_eq!(f.rule, "daemon_on_cpu");
        // Asked for 8 ("all"), runs 6.
        let six: Vec<_> = (0..6).map(|o| dev("cuda", Some(o))).collect();
        let f = only_finding(with(Some(GpuDevices::All), six.clone()), None);
        assert_eq!(
            (f.rule.as_str(), f.reading.as_str(), f.threshold.as_str()),
            ("daemon_devices", "6 CUDA device(s)", ">= 8")
        );
        // Asked for exactly those 6: fine; asked for the CPU: fine on a GPU host.
        let mut p = probe();
        with(Some(GpuDevices::List((0..6).collect())), six)(&mut p);
        assert_eq!(
            evaluate(&host(8), &p, None, &Policy::default()).severity,
            Severity::Ok
        );
        let mut p = probe();
        with(Some(GpuDevices::List(vec![])), vec![dev("cpu", None)])(&mut p);
        assert_eq!(
            evaluate(&host(8), &p, None, &Policy::default()).severity,
            Severity::Ok
        );
        // A CPU host (no NVML GPUs, gpus: 0) on the CPU backend is fine.
        let mut p = probe();
        p.gpus.devices.clear();
        with(Some(GpuDevices::All), vec![dev("cpu", None)])(&mut p);
        assert_eq!(
            evaluate(&host(0), &p, None, &Policy::default()).severity,
            Severity::Ok
        );
        // Before /status answered nothing is claimed.
        let mut p = probe();
        with(Some(GpuDevices::All), vec![])(&mut p);
        assert_eq!(
            evaluate(&host(8), &p, None, &Policy::default()).severity,
            Severity::Ok
        );
    }

    #[test]
    fn a_host_that_should_run_a_daemon_and_does_not_fails_daemon_down() {
        let mut p = probe();
        let d = p.daemon.get_or_insert_with(Default::default);
        d.alive = false;
        d.pid = None;
        d.pid_file = "run/prover.pid".into();
        // Nothing says a daemon should be there: no finding.
        assert_eq!(
            evaluate(&host(8), &p, None, &Policy::default()).severity,
            Severity::Ok
        );
        let v = evaluate_expecting_daemon(&host(8), &p, None, &Policy::default());
        assert_eq!(v.severity, Severity::Fail);
        assert_eq!(v.findings[0].rule, "daemon_down");
        assert_eq!(v.findings[0].reading, "no pid file (run/prover.pid)");
        assert!(
            v.findings[0].message.contains("state/daemon = running"),
            "{}",
            v.findings[0].message
        );
        let required = Policy {
            require_daemon: true,
            ..Policy::default()
        };
        let v = evaluate(&host(8), &p, None, &required);
        assert_eq!(v.findings[0].rule, "daemon_down");
        assert!(v.findings[0].message.contains("require_daemon"));
        // Running: no finding either way.
        p.daemon.as_mut().unwrap().alive = true;
        assert_eq!(
            evaluate_expecting_daemon(&host(8), &p, None, &required).severity,
            Severity::Ok
        );
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
