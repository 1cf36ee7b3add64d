//! The host probe printed by `prover health`: one JSON document
//! ([`fleet_wire::health::Probe`]) with the host's memory, the daemon named by
//! the config's pid file, and per-GPU facts from NVML.
//!
//! A probe never fails as a whole: every query that fails leaves its field
//! empty and, where useful, a reason beside it, so fleetctl always gets a
//! document from a host that can run the binary at all.
//!
//! - [`meminfo`] reads `/proc/meminfo` and `/proc/<pid>/status`.
//! - [`daemon`] describes the daemon process and what its API says.
//! - [`gpu`] asks NVML about every GPU.

pub mod daemon;
pub mod gpu;
pub mod meminfo;

use crate::daemon::config::Config;
use fleet_wire::health::{Probe, PROBE_VERSION};
use std::path::Path;

/// Runs the probe. With a config, the daemon section describes the daemon
/// that config starts; a config that cannot be loaded is reported there.
pub fn probe(config_path: Option<&Path>) -> Probe {
    let daemon = config_path.map(|path| match Config::load(path) {
        Ok(config) => daemon::probe(path, &config),
        Err(e) => fleet_wire::health::Daemon {
            config: path.display().to_string(),
            errors: vec![e.to_string()],
            ..Default::default()
        },
    });
    Probe {
        probe_version: PROBE_VERSION,
        host: crate::sys::hostname(),
        ts_ms: crate::sys::clock::unix_millis(),
        prober_version: crate::VERSION.to_string(),
        prober_build: crate::BUILD_HASH.to_string(),
        memory: meminfo::host_memory(),
        daemon,
        gpus: gpu::probe(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_without_config_reports_memory_and_no_daemon() {
        let p = probe(None);
        assert_eq!(p.probe_version, PROBE_VERSION);
        assert!(p.daemon.is_none());
        assert!(p.memory.total_bytes.unwrap_or(0) > 0);
        // Either NVML answered or the section says why not.
        assert!(p.gpus.nvml.available || p.gpus.nvml.reason.is_some());
    }

    #[test]
    fn hostname_identical_in_timing_records_and_probe() {
        // Fleet reports join timing records to probes on this name; it used
        // to come from gethostname in one and /proc in the other.
        let tag = crate::timing::job_tag("j".into(), "chain".into(), 1024);
        assert_eq!(probe(None).host, tag.host);
        assert_ne!(tag.host, "unknown");
    }

    #[test]
    fn unreadable_config_is_reported_in_the_daemon_section() {
        let p = probe(Some(Path::new("/nonexistent/prover.toml")));
        let d = p.daemon.unwrap();
        assert!(
            d.errors[0].contains("/nonexistent/prover.toml"),
            "{:?}",
            d.errors
        );
        assert!(!d.alive);
    }
}
