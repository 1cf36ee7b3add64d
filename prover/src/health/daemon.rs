//! The daemon section of the probe: the process the config's pid file names
//! (from `/proc`) and what its API says (`/status`, `/readyz`).

use crate::daemon::client::ApiClient;
use crate::daemon::config::{Config, Devices};
use crate::daemon::pidfile::{read_pid, stat_state};
use crate::health::meminfo::process_memory;
use fleet_wire::health::{Daemon, GpuDevices};
use std::path::Path;
use std::time::Duration;

/// How long the probe waits for each API call: a hung daemon must not hang fleetctl.
const API_TIMEOUT: Duration = Duration::from_secs(2);

pub fn probe(config_path: &Path, config: &Config) -> Daemon {
    let mut d = Daemon {
        config: config_path.display().to_string(),
        pid_file: config.paths.pid_file.display().to_string(),
        listen: crate::daemon::client::listen_addr(config)
            .unwrap_or(config.listen)
            .to_string(),
        gpu_devices: Some(match &config.gpu.devices {
            Devices::All => GpuDevices::All,
            Devices::List(l) => GpuDevices::List(l.clone()),
        }),
        ..Default::default()
    };
    match read_pid(&config.paths.pid_file) {
        Ok(pid) => {
            d.pid = Some(pid);
            process_facts(pid, &mut d);
        }
        Err(e) => d
            .errors
            .push(format!("pid file {}: {e}", config.paths.pid_file.display())),
    }
    match ApiClient::new(config, API_TIMEOUT) {
        Ok(client) => {
            match client.status() {
                Ok(s) => {
                    d.version = Some(s.version);
                    d.build = Some(s.build);
                    d.devices = s.devices;
                }
                Err(e) => d.errors.push(format!("status: {e}")),
            }
            match client.ready() {
                Ok(r) => {
                    d.ready = Some(r.ready);
                    d.ready_reason = r.reason;
                }
                Err(e) => {
                    d.ready = Some(false);
                    d.ready_reason = Some(e.to_string());
                }
            }
        }
        Err(e) => d.errors.push(e.to_string()),
    }
    d
}

fn process_facts(pid: u32, d: &mut Daemon) {
    let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s,
        Err(_) => {
            d.errors.push(format!("pid {pid} is not running"));
            return;
        }
    };
    let state = stat_state(&stat);
    d.state = state.map(describe_state);
    d.alive = state.is_some_and(|s| s != 'Z' && s != 'X');
    d.uptime_s = uptime_of(&stat);
    d.exe = std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .map(|p| p.display().to_string());
    match process_memory(pid) {
        Ok(m) => {
            d.rss_bytes = m.rss;
            d.vm_lck_bytes = m.locked;
            d.vm_pin_bytes = m.pinned;
        }
        Err(e) => d.errors.push(e),
    }
}

fn describe_state(c: char) -> String {
    let what = match c {
        'R' => "running",
        'S' => "sleeping",
        'D' => "disk sleep",
        'Z' => "zombie",
        'T' => "stopped",
        't' => "tracing stop",
        'X' => "dead",
        'I' => "idle",
        _ => "unknown",
    };
    format!("{c} ({what})")
}

/// Seconds since the process started: field 22 of `stat` (clock ticks after
/// boot) against `/proc/uptime`.
fn uptime_of(stat: &str) -> Option<f64> {
    let after = &stat[stat.rfind(')')? + 1..];
    // Fields after `comm` start at field 3 (state); starttime is field 22.
    let start_ticks: f64 = after.split_whitespace().nth(19)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz <= 0 {
        return None;
    }
    let boot_uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    // Clock ticks are 10 ms: more digits would be noise.
    Some(((boot_uptime - start_ticks / hz as f64).max(0.0) * 100.0).round() / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_facts() {
        let mut d = Daemon::default();
        process_facts(std::process::id(), &mut d);
        assert!(d.alive, "{d:?}");
        assert!(d.state.as_deref().is_some_and(|s| !s.starts_with('Z')));
        assert!(d.rss_bytes.unwrap_or(0) > 0);
        let up = d.uptime_s.unwrap();
        assert!((0.0..3600.0).contains(&up), "{up}");
        assert!(d.exe.is_some());
    }

    #[test]
    fn config_naming_no_daemon_reports_why() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::default();
        config.paths.pid_file = dir.path().join("prover.pid");
        let refusing = fleet_testkit::RefusingAddr::new().unwrap();
        config.listen = refusing.addr();
        let d = probe(Path::new("prover.toml"), &config);
        assert!(!d.alive);
        assert_eq!(d.pid, None);
        assert_eq!(d.ready, Some(false));
        assert!(
            d.errors.iter().any(|e| e.contains("prover.pid")),
            "{:?}",
            d.errors
        );
        // What the daemon was asked to prove on, for fleetctl to hold
        // against what it runs (issue 29).
        assert_eq!(d.gpu_devices, Some(GpuDevices::All));
        config.gpu.devices = Devices::List(vec![0, 2]);
        let d = probe(Path::new("prover.toml"), &config);
        assert_eq!(d.gpu_devices, Some(GpuDevices::List(vec![0, 2])));
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["gpu_devices"], serde_json::json!({"list": [0, 2]}));
    }
}
