//! The host probe document printed by `prover health` and read by fleetctl:
//! host memory, the daemon process, and per-GPU facts from NVML.
//!
//! Every measured field is an `Option`: a query that fails on one host (no
//! permission, an older driver, a field the GPU does not have) leaves the field
//! empty instead of failing the whole probe.

use serde::{Deserialize, Serialize};

/// Bumped when a field changes meaning.
pub const PROBE_VERSION: u32 = 1;

/// XIDs that mean the GPU or its memory can no longer be trusted
/// (48 double-bit ECC, 63/64 row-remap events, 74 NVLink, 79 fell off the bus,
/// 92 high single-bit rate, 94/95 contained/uncontained ECC): the health
/// policy's default FAIL list, and what takes a GPU out of the daemon's
/// rotation.
pub const CRITICAL_XIDS: [u64; 8] = [48, 63, 64, 74, 79, 92, 94, 95];

/// The whole probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    pub probe_version: u32,
    pub host: String,
    /// When the probe ran, Unix milliseconds.
    pub ts_ms: u64,
    /// Version and build of the binary that ran the probe.
    pub prober_version: String,
    pub prober_build: String,
    pub memory: Memory,
    /// Absent when no config was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon: Option<Daemon>,
    pub gpus: Gpus,
}

/// Host memory from `/proc/meminfo` (bytes), with sysinfo's view alongside.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    pub total_bytes: Option<u64>,
    pub available_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
    /// Shared memory, where `cuMemHostAlloc` pinned buffers show up.
    pub shmem_bytes: Option<u64>,
    /// Page-locked memory (mlock), where the `mlock` pool shows up.
    pub mlocked_bytes: Option<u64>,
    pub hugepages_total: Option<u64>,
    pub hugepages_free: Option<u64>,
    pub hugepage_size_bytes: Option<u64>,
    /// sysinfo's total, as a cross-check of `total_bytes`.
    pub sysinfo_total_bytes: Option<u64>,
    pub sysinfo_available_bytes: Option<u64>,
    /// Why `/proc/meminfo` could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The daemon named by the config's pid file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Daemon {
    pub config: String,
    pub pid_file: String,
    pub listen: String,
    /// The pid in the pid file; `None` when the file is absent or unreadable.
    pub pid: Option<u32>,
    /// The pid names a live process (not a zombie).
    pub alive: bool,
    /// `/proc/<pid>/stat` state letter with its meaning (`S (sleeping)`, `Z (zombie)`).
    pub state: Option<String>,
    pub rss_bytes: Option<u64>,
    /// Locked memory (`VmLck`).
    pub vm_lck_bytes: Option<u64>,
    /// Pinned memory (`VmPin`).
    pub vm_pin_bytes: Option<u64>,
    pub uptime_s: Option<f64>,
    /// `/proc/<pid>/exe`.
    pub exe: Option<String>,
    /// From the daemon's `/status`.
    pub version: Option<String>,
    pub build: Option<String>,
    /// From `/status`: the daemon's devices, with whether each is still
    /// in rotation and why not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<crate::api::DeviceState>,
    /// The config's `gpu.devices`: what the daemon was asked to prove on,
    /// to hold against the `devices` it runs (a CUDA failure at start falls
    /// back to the CPU backend under `"all"`). Absent from older probers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_devices: Option<GpuDevices>,
    /// From `/readyz`.
    pub ready: Option<bool>,
    pub ready_reason: Option<String>,
    /// What went wrong while probing (pid file unreadable, API not answering, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// A config's `gpu.devices` as the probe reports it: `"all"`, or
/// `{"list": [0, 1]}` (`[]` is the CPU backend).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuDevices {
    All,
    List(Vec<u32>),
}

/// The GPU section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Gpus {
    pub nvml: Nvml,
    pub devices: Vec<Gpu>,
}

/// Whether NVML could be used.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Nvml {
    pub available: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub driver_version: Option<String>,
    /// CUDA driver API version, `major.minor`.
    pub cuda_version: Option<String>,
    pub nvml_version: Option<String>,
}

/// One GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    pub index: u32,
    pub name: Option<String>,
    pub uuid: Option<String>,
    pub bus_id: Option<String>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    /// Percent of time a kernel ran over the last sample period.
    pub utilization_gpu_pct: Option<u32>,
    pub utilization_memory_pct: Option<u32>,
    pub temperature_gpu_c: Option<u32>,
    /// HBM temperature (not offered by every GPU/driver).
    pub temperature_memory_c: Option<u32>,
    pub power_draw_w: Option<f64>,
    pub power_limit_w: Option<f64>,
    pub clock_sm_mhz: Option<u32>,
    pub clock_memory_mhz: Option<u32>,
    pub clock_sm_max_mhz: Option<u32>,
    pub clock_memory_max_mhz: Option<u32>,
    /// Active clock throttle reasons by name; empty means none.
    pub throttle_reasons: Option<Vec<String>>,
    pub pcie: Pcie,
    pub ecc: Ecc,
    pub retired_pages: RetiredPages,
    pub remapped_rows: RemappedRows,
    /// XID errors seen since the probe registered for them (the driver only
    /// offers an event stream, so a one-shot probe usually reports none).
    pub xid_events: Option<Vec<u64>>,
    pub processes: Option<Vec<GpuProcess>>,
    /// Queries that failed, `field: reason`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Pcie {
    pub gen_current: Option<u32>,
    pub gen_max: Option<u32>,
    pub width_current: Option<u32>,
    pub width_max: Option<u32>,
    /// Link replays since driver load; a rising count means a marginal link.
    pub replay_counter: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ecc {
    pub enabled: Option<bool>,
    pub pending_enabled: Option<bool>,
    pub volatile_corrected: Option<u64>,
    pub volatile_uncorrected: Option<u64>,
    pub aggregate_corrected: Option<u64>,
    pub aggregate_uncorrected: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RetiredPages {
    pub single_bit: Option<u64>,
    pub double_bit: Option<u64>,
    pub pending: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RemappedRows {
    pub correctable: Option<u64>,
    pub uncorrectable: Option<u64>,
    pub pending: Option<bool>,
    pub failure: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    pub used_memory_bytes: Option<u64>,
}

impl Probe {
    /// Parses a probe document, refusing newer versions this reader does not know.
    pub fn parse(text: &str) -> Result<Self, ProbeParseError> {
        #[derive(Deserialize)]
        struct Head {
            probe_version: u32,
        }
        let head: Head = serde_json::from_str(text).map_err(ProbeParseError::Json)?;
        if head.probe_version > PROBE_VERSION {
            return Err(ProbeParseError::Version(head.probe_version));
        }
        serde_json::from_str(text).map_err(ProbeParseError::Json)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProbeParseError {
    #[error("probe document is not valid: {0}")]
    Json(serde_json::Error),
    #[error("probe_version {0} is newer than this reader ({PROBE_VERSION})")]
    Version(u32),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_round_trips_and_rejects_newer_versions() {
        let p = Probe {
            probe_version: PROBE_VERSION,
            host: "h".into(),
            ts_ms: 1,
            prober_version: "0.1.0".into(),
            prober_build: "abc".into(),
            memory: Memory {
                total_bytes: Some(1 << 30),
                ..Default::default()
            },
            daemon: None,
            gpus: Gpus {
                nvml: Nvml {
                    available: false,
                    reason: Some("libnvidia-ml.so not found".into()),
                    ..Default::default()
                },
                devices: vec![],
            },
        };
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(Probe::parse(&text).unwrap(), p);
        let newer = text.replace("\"probe_version\":1", "\"probe_version\":9");
        assert!(matches!(
            Probe::parse(&newer),
            Err(ProbeParseError::Version(9))
        ));
    }
}
