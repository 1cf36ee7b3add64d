//! Prometheus metrics at `/metrics`: phase histograms and the per-device
//! kernel-busy counter fed by every finished partition, counters fed by every
//! finished job, and gauges (queue, pool, budget, NVML utilisation) sampled
//! when the endpoint is scraped. Names come from
//! [`fleet_wire::metrics`] so fleetctl's exporter spells them the same way.

use fleet_wire::metrics as names;
use fleet_wire::timing::PartitionRecord;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

/// What `/metrics` samples right before encoding.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    pub queue_depth: u64,
    pub partitions_in_flight: u64,
    pub pool_held_bytes: u64,
    pub pool_in_use_bytes: u64,
    pub budget_total_bytes: u64,
    pub budget_reserved_bytes: u64,
    pub budget_waiters: u64,
    pub ready: bool,
    pub uptime_s: f64,
    /// NVML `utilization.gpu` per NVML device index; empty without NVML.
    pub gpu_utilization_pct: Vec<(u32, u32)>,
}

pub struct Metrics {
    registry: Registry,
    phases: Family<Labels, Histogram>,
    phase_device: Family<Labels, Histogram>,
    phase_wait: Family<Labels, Histogram>,
    job_duration: Histogram,
    proofs_completed: Counter,
    proofs_failed: Counter,
    partitions_completed: Counter,
    rejected_queue_full: Counter,
    queue_depth: Gauge,
    partitions_in_flight: Gauge,
    pool_held: Gauge,
    pool_in_use: Gauge,
    budget_total: Gauge,
    budget_reserved: Gauge,
    budget_waiters: Gauge,
    ready: Gauge,
    uptime: Gauge<f64, std::sync::atomic::AtomicU64>,
    kernel_busy: Family<Labels, Counter<f64, std::sync::atomic::AtomicU64>>,
    gpu_utilization: Family<Labels, Gauge>,
    in_rotation: Family<Labels, Gauge>,
    device_partitions: Family<Labels, Counter>,
    device_xids: Family<Labels, Counter>,
    device_recovered: Family<Labels, Counter>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

fn seconds_buckets() -> Histogram {
    // The bounds fleetctl's textfile export uses too (100 µs .. ~14 min).
    Histogram::new(fleet_wire::metrics::PHASE_BUCKETS_SECONDS.iter().copied())
}

impl Metrics {
    pub fn new(version: &str, build: &str) -> Self {
        let mut registry = Registry::default();
        let mut phase_family = |name: &str, help: &str| {
            let f = Family::<Labels, Histogram>::new_with_constructor(
                seconds_buckets as fn() -> Histogram,
            );
            registry.register(name, help, f.clone());
            f
        };
        let phases = phase_family(
            names::PHASE_DURATION_SECONDS,
            "Duration of each proving phase per partition",
        );
        let phase_device = phase_family(
            names::PHASE_DEVICE_SECONDS,
            "Device time (CUDA events) of each proving phase per partition, where measured",
        );
        let phase_wait = phase_family(
            names::PHASE_DEVICE_WAIT_SECONDS,
            "Time each proving phase waited for the device, where measured",
        );
        let job_duration = seconds_buckets();
        registry.register(
            names::JOB_DURATION_SECONDS,
            "Duration of whole jobs, submission to result",
            job_duration.clone(),
        );
        let counter = |registry: &mut Registry, name: &str, help: &str| {
            let c = Counter::default();
            registry.register(name, help, c.clone());
            c
        };
        let proofs_completed = counter(
            &mut registry,
            names::PROOFS_COMPLETED,
            "Jobs proved and verified",
        );
        let proofs_failed = counter(&mut registry, names::PROOFS_FAILED, "Jobs failed");
        let partitions_completed = counter(
            &mut registry,
            names::PARTITIONS_COMPLETED,
            "Partitions proved",
        );
        let rejected_queue_full = counter(
            &mut registry,
            names::JOBS_REJECTED_QUEUE_FULL,
            "Submissions refused because the queue was full",
        );
        let gauge = |registry: &mut Registry, name: &str, help: &str| {
            let g = Gauge::default();
            registry.register(name, help, g.clone());
            g
        };
        let queue_depth = gauge(
            &mut registry,
            names::QUEUE_DEPTH,
            "Jobs accepted and not finished",
        );
        let partitions_in_flight = gauge(
            &mut registry,
            names::PARTITIONS_IN_FLIGHT,
            "Partitions being synthesised, queued for a device or on a device",
        );
        let pool_held = gauge(
            &mut registry,
            names::POOL_HELD_BYTES,
            "Bytes the pinned pool holds",
        );
        let pool_in_use = gauge(
            &mut registry,
            names::POOL_IN_USE_BYTES,
            "Pool bytes checked out",
        );
        let budget_total = gauge(
            &mut registry,
            names::BUDGET_TOTAL_BYTES,
            "Memory budget size",
        );
        let budget_reserved = gauge(
            &mut registry,
            names::BUDGET_RESERVED_BYTES,
            "Bytes reserved against the budget",
        );
        let budget_waiters = gauge(
            &mut registry,
            names::BUDGET_WAITERS,
            "Requests waiting for the budget",
        );
        let ready = gauge(&mut registry, names::READY, "1 when /readyz answers 200");
        let uptime = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(names::UPTIME_SECONDS, "Seconds since start", uptime.clone());
        let kernel_busy = Family::<Labels, Counter<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            names::KERNEL_BUSY_SECONDS,
            "Seconds the device spent on copies and kernels, timed on the device",
            kernel_busy.clone(),
        );
        let gpu_utilization = Family::<Labels, Gauge>::default();
        registry.register(
            names::GPU_UTILIZATION_PERCENT,
            "NVML utilization.gpu per device, sampled at scrape",
            gpu_utilization.clone(),
        );
        let in_rotation = Family::<Labels, Gauge>::default();
        registry.register(
            names::DEVICE_IN_ROTATION,
            "1 while the device proves, 0 once taken out of rotation",
            in_rotation.clone(),
        );
        let device_partitions = Family::<Labels, Counter>::default();
        registry.register(
            names::DEVICE_PARTITIONS,
            "Partitions finished per device",
            device_partitions.clone(),
        );
        let device_xids = Family::<Labels, Counter>::default();
        registry.register(
            names::DEVICE_XIDS,
            "XIDs NVML reported per device while the daemon watched",
            device_xids.clone(),
        );
        let device_recovered = Family::<Labels, Counter>::default();
        registry.register(
            names::DEVICE_RECOVERED_ERRORS,
            "Recoverable device errors after which the device freed what it held and stayed in rotation",
            device_recovered.clone(),
        );
        let info = Family::<Labels, Gauge>::default();
        info.get_or_create(&vec![
            ("version", version.to_string()),
            ("build", build.to_string()),
        ])
        .set(1);
        registry.register(
            names::BUILD_INFO,
            "Version and build of the running binary",
            info,
        );
        Self {
            registry,
            phases,
            phase_device,
            phase_wait,
            job_duration,
            proofs_completed,
            proofs_failed,
            partitions_completed,
            rejected_queue_full,
            queue_depth,
            partitions_in_flight,
            pool_held,
            pool_in_use,
            budget_total,
            budget_reserved,
            budget_waiters,
            ready,
            uptime,
            kernel_busy,
            gpu_utilization,
            in_rotation,
            device_partitions,
            device_xids,
            device_recovered,
        }
    }

    /// A finished partition's device time (its record's `device_busy_ms`) on
    /// `device`; nothing when the backend did not measure it, so a CPU
    /// daemon exports no kernel-busy series rather than a zero one.
    pub fn device_busy(&self, device: Option<u32>, device_busy_ms: Option<f64>) {
        let Some(ms) = device_busy_ms.filter(|ms| ms.is_finite() && *ms >= 0.0) else {
            return;
        };
        let label = device.map_or_else(|| "-".to_string(), |d| d.to_string());
        self.kernel_busy
            .get_or_create(&vec![(names::DEVICE_LABEL, label)])
            .inc_by(ms / 1e3);
    }

    /// Whether `device` proves (set at start, cleared when it fails).
    pub fn device_in_rotation(&self, device: u32, yes: bool) {
        self.in_rotation
            .get_or_create(&vec![(names::DEVICE_LABEL, device.to_string())])
            .set(i64::from(yes));
    }

    /// `device` was taken out of rotation.
    pub fn device_failed(&self, device: u32) {
        self.device_in_rotation(device, false);
    }

    /// `device` hit a recoverable error and stays in rotation.
    pub fn device_recovered(&self, device: u32) {
        self.device_recovered
            .get_or_create(&vec![(names::DEVICE_LABEL, device.to_string())])
            .inc();
    }

    /// NVML reported an XID on `device` (`None`: one it could not name).
    pub fn device_xid(&self, device: u32, xid: Option<u64>) {
        let xid = xid.map_or_else(|| "unknown".to_string(), |x| x.to_string());
        self.device_xids
            .get_or_create(&vec![
                (names::DEVICE_LABEL, device.to_string()),
                ("xid", xid),
            ])
            .inc();
    }

    /// A partition ended on `device` (`None`: before reaching one).
    pub fn device_partition(&self, device: Option<u32>) {
        if let Some(d) = device {
            self.device_partitions
                .get_or_create(&vec![(names::DEVICE_LABEL, d.to_string())])
                .inc();
        }
    }

    /// A finished partition's phases, with their device time and wait where
    /// the record carries them.
    pub fn partition_done(&self, record: &PartitionRecord) {
        for (phase, ms) in &record.phases_ms {
            let labels = vec![(names::PHASE_LABEL, phase.as_str().to_string())];
            let seconds = phase.spec().map_or(1e-3, |s| s.unit.seconds());
            self.phases.get_or_create(&labels).observe(ms * seconds);
            if let Some(d) = record.device_ms(*phase) {
                self.phase_device
                    .get_or_create(&labels)
                    .observe(d * seconds);
            }
            if let Some(w) = record.wait_ms(*phase) {
                self.phase_wait.get_or_create(&labels).observe(w * seconds);
            }
        }
        self.partitions_completed.inc();
    }

    pub fn job_done(&self, ok: bool, total_ms: f64) {
        self.job_duration.observe(total_ms / 1e3);
        if ok {
            self.proofs_completed.inc();
        } else {
            self.proofs_failed.inc();
        }
    }

    pub fn rejected_queue_full(&self) {
        self.rejected_queue_full.inc();
    }

    /// The Prometheus text exposition, gauges set from `sample` first.
    pub fn render(&self, sample: &Sample) -> String {
        let g = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.queue_depth.set(g(sample.queue_depth));
        self.partitions_in_flight
            .set(g(sample.partitions_in_flight));
        self.pool_held.set(g(sample.pool_held_bytes));
        self.pool_in_use.set(g(sample.pool_in_use_bytes));
        self.budget_total.set(g(sample.budget_total_bytes));
        self.budget_reserved.set(g(sample.budget_reserved_bytes));
        self.budget_waiters.set(g(sample.budget_waiters));
        self.ready.set(i64::from(sample.ready));
        self.uptime.set(sample.uptime_s);
        // Rebuilt each scrape: a device NVML no longer reports drops out
        // instead of repeating its last value.
        self.gpu_utilization.clear();
        for (device, pct) in &sample.gpu_utilization_pct {
            self.gpu_utilization
                .get_or_create(&vec![(names::DEVICE_LABEL, device.to_string())])
                .set(i64::from(*pct));
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_wire::timing::{Phase, PhaseSplit, TimingLine};

    #[test]
    fn every_wire_name_is_exported_and_phases_are_labelled() {
        let m = Metrics::new("0.1.0", "abc");
        let line = r#"{"kind":"partition","v":1,"ts_ms":1,"host":"h","build":"b","job_id":"j","circuit":"c","size":1,"partition":0,"partitions":1,"domain":2,"backend":"cuda","device":1,"pinned":true,"phases_ms":{"synthesis":12.0,"msm_l":196.0}}"#;
        let TimingLine::Partition(mut record) = TimingLine::parse(line).unwrap() else {
            panic!("a partition record")
        };
        record.phase_split_ms.insert(
            Phase::MsmL,
            PhaseSplit {
                device: Some(70.0),
                wait: Some(120.0),
            },
        );
        m.partition_done(&record);
        m.job_done(true, 30.0);
        m.device_busy(Some(1), Some(250.0));
        m.device_busy(Some(1), Some(500.0));
        // A CPU backend's record carries no device time: no series for it.
        m.device_busy(Some(0), None);
        m.device_in_rotation(0, true);
        m.device_in_rotation(1, true);
        m.device_failed(1);
        m.device_partition(Some(1));
        m.device_partition(None);
        m.device_xid(1, Some(79));
        m.device_xid(1, None);
        let text = m.render(&Sample {
            queue_depth: 3,
            ready: true,
            gpu_utilization_pct: vec![(1, 37)],
            ..Default::default()
        });
        for name in names::ALL {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
        assert!(
            text.contains("prover_phase_duration_seconds_count{phase=\"synthesis\"} 1"),
            "{text}"
        );
        // The device time and wait of msm_l in their own histograms; no
        // device series for synthesis, which ran on the host.
        assert!(
            text.contains("prover_phase_device_seconds_sum{phase=\"msm_l\"} 0.07"),
            "{text}"
        );
        assert!(
            text.contains("prover_phase_device_wait_seconds_sum{phase=\"msm_l\"} 0.12"),
            "{text}"
        );
        assert!(
            !text.contains("prover_phase_device_seconds_count{phase=\"synthesis\"}"),
            "{text}"
        );
        assert!(text.contains("prover_queue_depth 3"), "{text}");
        assert!(text.contains("prover_proofs_completed_total 1"), "{text}");
        assert!(
            text.contains("prover_kernel_busy_seconds_total{device=\"1\"} 0.75"),
            "{text}"
        );
        assert!(
            !text.contains("prover_kernel_busy_seconds_total{device=\"0\"}"),
            "{text}"
        );
        assert!(
            text.contains("prover_gpu_utilization_percent{device=\"1\"} 37"),
            "{text}"
        );
        assert!(
            text.contains("prover_device_in_rotation{device=\"0\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("prover_device_in_rotation{device=\"1\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("prover_device_partitions_total{device=\"1\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("prover_device_xids_total{device=\"1\",xid=\"79\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("prover_device_xids_total{device=\"1\",xid=\"unknown\"} 1"),
            "{text}"
        );
        // Without NVML the next scrape has no samples: the series goes away.
        let text = m.render(&Sample::default());
        assert!(!text.contains("prover_gpu_utilization_percent{"), "{text}");
    }
}
