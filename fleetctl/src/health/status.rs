//! Runs the probe on every selected host in parallel, each under a deadline:
//! one SSH command per host that prints the release `current` points at,
//! `prover health` and the daemon's `/status` (through `prover client
//! status`), split by marker lines.

use crate::fanout;
use crate::inventory::Host;
use crate::transport::{quote::quote, Transport};
use fleet_wire::api::Status;
use fleet_wire::health::Probe;
use serde::Serialize;
use std::future::Future;
use std::time::{Duration, Instant};

const STATUS_MARK: &str = "@@fleetctl-status@@";
const NO_RELEASE: &str = "@@fleetctl-no-release@@";
const RELEASE_MARK: &str = "@@fleetctl-release@@";
const INTENT_MARK: &str = "@@fleetctl-intent@@";

/// What one host answered.
#[derive(Debug, Clone, Serialize)]
pub struct HostReading {
    pub host: String,
    pub reachable: bool,
    /// A release is installed (`current/prover` exists).
    pub installed: bool,
    /// The release `current` points at: the sha256 of the shipped binary,
    /// the id the rollout table shows (not the git build the daemon reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// `state/daemon` on the host: `running` after a start, `stopped` after
    /// the `stop` playbook; `None` when never written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon_intent: Option<String>,
    pub probe: Option<Probe>,
    /// The daemon's `/status`, when it answered.
    pub status: Option<Status>,
    /// Why the host could not be read (unreachable, deadline, bad output).
    pub error: Option<String>,
    pub elapsed_ms: u64,
}

fn script(host: &Host) -> Result<String, String> {
    let install = quote(&host.install_dir).map_err(|e| e.to_string())?;
    let cfg = quote(&host.config_path).map_err(|e| e.to_string())?;
    Ok(format!(
        "cd {install} 2>/dev/null || {{ echo {NO_RELEASE}; exit 0; }}; \
         [ -x current/prover ] || {{ echo {NO_RELEASE}; exit 0; }}; \
         echo {RELEASE_MARK} \"$(readlink current)\"; \
         echo {INTENT_MARK} \"$(cat state/{intent} 2>/dev/null)\"; \
         current/prover health --config {cfg}; echo; echo {STATUS_MARK}; \
         current/prover client status --config {cfg} 2>/dev/null; exit 0",
        intent = super::INTENT_FILE,
    ))
}

/// What one host's command printed, taken apart.
#[derive(Debug, Default)]
struct Parsed {
    installed: bool,
    release: Option<String>,
    daemon_intent: Option<String>,
    probe: Option<Probe>,
    status: Option<Status>,
    error: Option<String>,
}

/// Parses the release line and the two documents out of the command's output.
fn parse(host: &str, text: &str) -> Parsed {
    if text.contains(NO_RELEASE) {
        return Parsed::default();
    }
    // `releases/<sha256>`: the last component is the release id. Shown as
    // found (a link edited by hand shows what it points at).
    let (release, text) = match text.split_once('\n') {
        Some((first, rest)) if first.starts_with(RELEASE_MARK) => {
            let target = first[RELEASE_MARK.len()..].trim();
            let id = target
                .trim_end_matches('/')
                .rsplit('/')
                .next()
                .unwrap_or("");
            ((!id.is_empty()).then(|| id.to_owned()), rest)
        }
        _ => (None, text),
    };
    let (daemon_intent, text) = match text.split_once('\n') {
        Some((first, rest)) if first.starts_with(INTENT_MARK) => {
            let intent = first[INTENT_MARK.len()..].trim();
            ((!intent.is_empty()).then(|| intent.to_owned()), rest)
        }
        _ => (None, text),
    };
    let (probe_text, status_text) = text.split_once(STATUS_MARK).unwrap_or((text, ""));
    let (probe, error) = match Probe::parse(probe_text.trim()) {
        Ok(p) => (Some(p), None),
        Err(e) => (
            None,
            Some(format!(
                "{host}: `prover health` printed no valid probe: {e}"
            )),
        ),
    };
    let status = serde_json::from_str::<Status>(status_text.trim()).ok();
    Parsed {
        installed: true,
        release,
        daemon_intent,
        probe,
        status,
        error,
    }
}

impl HostReading {
    /// The host's last start said its daemon should run, and no stop since.
    pub fn daemon_expected(&self) -> bool {
        self.daemon_intent.as_deref() == Some(super::INTENT_RUNNING)
    }

    /// Why no daemon runs, as the recorded intent tells it: stopped on
    /// purpose, down although it should run (a crash, a kill), or not known
    /// (never started by fleetctl). `None` when it runs or nothing is known
    /// of it.
    pub fn daemon_down_note(&self) -> Option<String> {
        let d = self.probe.as_ref()?.daemon.as_ref()?;
        if d.alive {
            return None;
        }
        Some(match self.daemon_intent.as_deref() {
            Some(super::INTENT_STOPPED) => {
                "daemon stopped on purpose (state/daemon = stopped)".to_owned()
            }
            Some(super::INTENT_RUNNING) => {
                "daemon DOWN: should run (state/daemon = running) and does not: crashed or killed"
                    .to_owned()
            }
            _ => "daemon not running".to_owned(),
        })
    }

    /// Page-locked memory the daemon holds, by its own account: its pool's
    /// `held_bytes` from `/status` when the pool pins (`mlock`, `cuda`;
    /// 0 for a `heap` pool). Without an answer from `/status`, the
    /// process's `VmLck` when it has any (an `mlock` pool's pages; a CUDA
    /// pool's never show there, so 0 proves nothing: unknown). Never the host's
    /// `Shmem`: that counts every tmpfs (`/dev/shm`, `/run`), SysV and
    /// shared anonymous memory of every process, and subtracting the tmpfs
    /// mounts would not isolate the daemon either (other mount namespaces'
    /// tmpfs are invisible here, and `ShmemHugePages` is a part of `Shmem`,
    /// not the tmpfs share); `--json` keeps `Shmem` as `shmem_bytes`.
    pub fn pinned_bytes(&self) -> Option<u64> {
        if let Some(s) = &self.status {
            return Some(if s.pool.pinned { s.pool.held_bytes } else { 0 });
        }
        self.probe
            .as_ref()
            .and_then(|p| p.daemon.as_ref())
            .filter(|d| d.alive)
            .and_then(|d| d.vm_lck_bytes)
            .filter(|&b| b > 0)
    }
}

/// Reads one host.
pub async fn read_host(host: &Host, deadline: Duration) -> HostReading {
    let started = Instant::now();
    let name = host.name.clone();
    let work = async {
        let script = script(host)?;
        let t = Transport::connect(host).await.map_err(|e| e.to_string())?;
        let out = t.run_script(&script, deadline).await;
        let _ = t.close().await;
        let out = out.map_err(|e| e.to_string())?;
        Ok::<_, String>(out.stdout_text())
    };
    let result = match tokio::time::timeout(deadline, work).await {
        Ok(r) => r,
        Err(_) => Err(format!("{name}: no answer within {deadline:?}")),
    };
    let elapsed_ms = started.elapsed().as_millis() as u64;
    match result {
        Ok(text) => {
            let p = parse(&name, &text);
            HostReading {
                host: name,
                reachable: true,
                installed: p.installed,
                release: p.release,
                daemon_intent: p.daemon_intent,
                probe: p.probe,
                status: p.status,
                error: p.error,
                elapsed_ms,
            }
        }
        Err(e) => HostReading {
            host: name,
            reachable: false,
            installed: false,
            release: None,
            daemon_intent: None,
            probe: None,
            status: None,
            error: Some(e),
            elapsed_ms,
        },
    }
}

/// Reads every host in parallel, results in the order of `hosts`.
pub async fn read_all(hosts: &[Host], deadline: Duration) -> Vec<HostReading> {
    read_all_with(hosts, move |h| async move { read_host(&h, deadline).await }).await
}

/// Reads every host with `read` through the shared [`fanout`]: a task that
/// panics leaves an unreachable reading that names its host in its place,
/// so the table never loses a row and the command fails.
pub async fn read_all_with<F, Fut>(hosts: &[Host], read: F) -> Vec<HostReading>
where
    F: Fn(Host) -> Fut,
    Fut: Future<Output = HostReading> + Send + 'static,
{
    fanout::for_each_host(hosts, |h| h.name.as_str(), fanout::DEFAULT_PARALLEL, read)
        .await
        .into_iter()
        .map(|r| {
            r.unwrap_or_else(|e| HostReading {
                host: e.host.clone(),
                reachable: false,
                installed: false,
                release: None,
                daemon_intent: None,
                probe: None,
                status: None,
                error: Some(e.to_string()),
                elapsed_ms: 0,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_without_release_is_reachable_but_not_installed() {
        let p = parse("h", "@@fleetctl-no-release@@\n");
        assert!(!p.installed && p.probe.is_none() && p.status.is_none() && p.error.is_none());
    }

    #[test]
    fn garbage_probe_is_an_error_naming_the_host() {
        let p = parse("h7", "Segmentation fault\n@@fleetctl-status@@\n");
        assert!(p.installed && p.probe.is_none());
        assert!(p
            .error
            .unwrap()
            .starts_with("h7: `prover health` printed no valid probe"));
    }

    #[test]
    fn the_release_line_names_the_sha_current_points_at() {
        let sha = "ab".repeat(32);
        let p = parse(
            "h",
            &format!("@@fleetctl-release@@ releases/{sha}\nnot a probe\n@@fleetctl-status@@\n"),
        );
        assert_eq!(p.release.as_deref(), Some(sha.as_str()));
        assert!(
            p.error.unwrap().contains("no valid probe"),
            "the probe text follows"
        );
        let p = parse("h", "@@fleetctl-release@@ \nx\n");
        assert_eq!(p.release, None, "no link, no release");
        let p = parse(
            "h",
            &format!(
                "@@fleetctl-release@@ releases/{sha}\n@@fleetctl-intent@@ running\nnot a probe\n"
            ),
        );
        assert_eq!(p.daemon_intent.as_deref(), Some("running"));
        assert!(p.error.unwrap().contains("no valid probe"));
        let p = parse("h", "@@fleetctl-release@@ x\n@@fleetctl-intent@@ \nx\n");
        assert_eq!(p.daemon_intent, None, "never written");
    }

    /// A reading whose host `Shmem` is mostly tmpfs (5 GiB) while the
    /// daemon's pool pins 2 GiB.
    fn reading(pool_pinned: bool, with_status: bool, vm_lck: u64) -> HostReading {
        let gib = 1u64 << 30;
        let probe = Probe {
            probe_version: 1,
            host: "h".into(),
            ts_ms: 0,
            prober_version: "0.1.0".into(),
            prober_build: "abc".into(),
            memory: fleet_wire::health::Memory {
                shmem_bytes: Some(5 * gib),
                ..Default::default()
            },
            daemon: Some(fleet_wire::health::Daemon {
                alive: true,
                vm_lck_bytes: Some(vm_lck),
                ..Default::default()
            }),
            gpus: Default::default(),
        };
        let status: Status = serde_json::from_value(serde_json::json!({
            "api_version": 1, "version": "0.1.0", "build": "abc", "pid": 7,
            "state": "ready", "listen": "127.0.0.1:7878", "uptime_s": 1.0,
            "queue": {"depth": 0, "max_jobs": 8, "jobs_in_flight": 0, "partitions_in_flight": 0},
            "budget": {"total_bytes": 0, "reserved_bytes": 0, "available_bytes": 0, "waiters": 0},
            "pool": {"allocator": if pool_pinned { "cuda" } else { "heap" }, "pinned": pool_pinned,
                     "held_bytes": 2 * gib, "in_use_bytes": 0, "max_bytes": 4 * gib},
            "backend": "cuda", "devices": [], "proofs_completed": 0, "proofs_failed": 0,
        }))
        .unwrap();
        HostReading {
            host: "h".into(),
            reachable: true,
            installed: true,
            release: None,
            daemon_intent: None,
            probe: Some(probe),
            status: with_status.then_some(status),
            error: None,
            elapsed_ms: 1,
        }
    }

    #[test]
    fn pinned_memory_is_the_pools_own_count_never_host_shmem_with_its_tmpfs() {
        let gib = 1u64 << 30;
        assert_eq!(reading(true, true, 0).pinned_bytes(), Some(2 * gib));
        assert_eq!(
            reading(false, true, 0).pinned_bytes(),
            Some(0),
            "a heap pool pins nothing"
        );
        // /status did not answer: the process's own locked pages, not Shmem.
        assert_eq!(reading(true, false, gib).pinned_bytes(), Some(gib));
        assert_eq!(
            reading(true, false, 0).pinned_bytes(),
            None,
            "unknown, not 0"
        );
    }
}
