//! Prometheus metric names exported by the prover daemon at `/metrics`, shared
//! with fleetctl's exporter so both sides spell them the same way.
//!
//! Names are given without the `_total` suffix the OpenMetrics text adds to
//! counters; phase histograms carry a `phase` label with `Phase::as_str()`.

/// Histogram of phase durations in seconds, label `phase`.
pub const PHASE_DURATION_SECONDS: &str = "prover_phase_duration_seconds";
/// Histogram of the device's own time per phase (CUDA events), label
/// `phase`, for the phases whose record carries it.
pub const PHASE_DEVICE_SECONDS: &str = "prover_phase_device_seconds";
/// Histogram of the time each phase waited for the device, label `phase`.
pub const PHASE_DEVICE_WAIT_SECONDS: &str = "prover_phase_device_wait_seconds";
/// Histogram of whole-job durations in seconds (submission to result).
pub const JOB_DURATION_SECONDS: &str = "prover_job_duration_seconds";
/// Gauge: jobs accepted and not finished.
pub const QUEUE_DEPTH: &str = "prover_queue_depth";
/// Gauge: partitions being synthesised, queued for a device or on a device.
pub const PARTITIONS_IN_FLIGHT: &str = "prover_partitions_in_flight";
/// Counter: proofs (jobs) completed and verified.
pub const PROOFS_COMPLETED: &str = "prover_proofs_completed";
/// Counter: proofs (jobs) failed.
pub const PROOFS_FAILED: &str = "prover_proofs_failed";
/// Counter: partitions proved.
pub const PARTITIONS_COMPLETED: &str = "prover_partitions_completed";
/// Counter: submissions refused because the queue was full.
pub const JOBS_REJECTED_QUEUE_FULL: &str = "prover_jobs_rejected_queue_full";
/// Gauge: bytes the pinned pool holds.
pub const POOL_HELD_BYTES: &str = "prover_pool_held_bytes";
/// Gauge: bytes of the pool checked out by partitions.
pub const POOL_IN_USE_BYTES: &str = "prover_pool_in_use_bytes";
/// Gauge: the memory budget's size.
pub const BUDGET_TOTAL_BYTES: &str = "prover_budget_total_bytes";
/// Gauge: bytes reserved against the budget.
pub const BUDGET_RESERVED_BYTES: &str = "prover_budget_reserved_bytes";
/// Gauge: requests blocked waiting for the budget.
pub const BUDGET_WAITERS: &str = "prover_budget_waiters";
/// Gauge: 1 when the daemon is ready (`/readyz` 200), else 0.
pub const READY: &str = "prover_ready";
/// Gauge: seconds since the daemon started.
pub const UPTIME_SECONDS: &str = "prover_uptime_seconds";
/// Gauge: always 1, labels `version` and `build`.
pub const BUILD_INFO: &str = "prover_build_info";

/// Counter: seconds the device spent executing this daemon's copies and
/// kernels, timed on the device (the sum of the partition records'
/// `device_busy_ms`), label `device`. Its rate is the kernel-busy fraction;
/// unlike `gpu_start..gpu_end` it excludes CPU work done while a partition
/// holds the device worker.
pub const KERNEL_BUSY_SECONDS: &str = "prover_kernel_busy_seconds";
/// Gauge: NVML's `utilization.gpu` (percent of the last sample period in
/// which any kernel ran, as `nvidia-smi` shows it), label `device` = the NVML
/// index, sampled at each scrape. Absent without NVML or a GPU.
pub const GPU_UTILIZATION_PERCENT: &str = "prover_gpu_utilization_percent";

/// Gauge: 1 while the device proves, 0 once it was taken out of rotation
/// (its driver failed, or it could not be opened), label `device`.
pub const DEVICE_IN_ROTATION: &str = "prover_device_in_rotation";
/// Counter: partitions finished per device (failed ones included), label
/// `device`: how the scheduler spread the work.
pub const DEVICE_PARTITIONS: &str = "prover_device_partitions";
/// Counter: XIDs NVML reported per device while the daemon watched, labels
/// `device` (CUDA ordinal) and `xid` (`unknown` when NVML could not name it).
pub const DEVICE_XIDS: &str = "prover_device_xids";
/// Counter: recoverable device errors (out of device memory) after which the
/// device freed what it held and stayed in rotation, label `device`.
pub const DEVICE_RECOVERED_ERRORS: &str = "prover_device_recovered_errors";

/// Label of the per-device series.
pub const DEVICE_LABEL: &str = "device";

/// Label of [`PHASE_DURATION_SECONDS`], [`PHASE_DEVICE_SECONDS`] and
/// [`PHASE_DEVICE_WAIT_SECONDS`].
pub const PHASE_LABEL: &str = "phase";

/// Every metric name, for exporters that want to check coverage.
pub const ALL: [&str; 24] = [
    PHASE_DURATION_SECONDS,
    PHASE_DEVICE_SECONDS,
    PHASE_DEVICE_WAIT_SECONDS,
    JOB_DURATION_SECONDS,
    QUEUE_DEPTH,
    PARTITIONS_IN_FLIGHT,
    PROOFS_COMPLETED,
    PROOFS_FAILED,
    PARTITIONS_COMPLETED,
    JOBS_REJECTED_QUEUE_FULL,
    POOL_HELD_BYTES,
    POOL_IN_USE_BYTES,
    BUDGET_TOTAL_BYTES,
    BUDGET_RESERVED_BYTES,
    BUDGET_WAITERS,
    READY,
    UPTIME_SECONDS,
    BUILD_INFO,
    KERNEL_BUSY_SECONDS,
    GPU_UTILIZATION_PERCENT,
    DEVICE_IN_ROTATION,
    DEVICE_PARTITIONS,
    DEVICE_XIDS,
    DEVICE_RECOVERED_ERRORS,
];

/// Upper bounds (seconds) of the [`PHASE_DURATION_SECONDS`] buckets: 100 µs
/// to about 14 minutes, doubling, so a 2^10 CPU phase and a 2^27 GPU job share
/// one histogram. The daemon's `/metrics` and `fleetctl timing export` use the
/// same bounds, so their histograms can be summed.
pub const PHASE_BUCKETS_SECONDS: [f64; 24] = [
    0.0001, 0.0002, 0.0004, 0.0008, 0.0016, 0.0032, 0.0064, 0.0128, 0.0256, 0.0512, 0.1024, 0.2048,
    0.4096, 0.8192, 1.6384, 3.2768, 6.5536, 13.1072, 26.2144, 52.4288, 104.8576, 209.7152,
    419.4304, 838.8608,
];
