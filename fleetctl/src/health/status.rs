//! Runs the probe on every selected host in parallel, each under a deadline:
//! one SSH command per host that prints `prover health` and the daemon's
//! `/status` (through `prover client status`), split by a marker line.

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

/// What one host answered.
#[derive(Debug, Clone, Serialize)]
pub struct HostReading {
    pub host: String,
    pub reachable: bool,
    /// A release is installed (`current/prover` exists).
    pub installed: bool,
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
         current/prover health --config {cfg}; echo; echo {STATUS_MARK}; \
         current/prover client status --config {cfg} 2>/dev/null; exit 0"
    ))
}

/// Parses the two documents out of the command's output.
fn parse(host: &str, text: &str) -> (bool, Option<Probe>, Option<Status>, Option<String>) {
    if text.contains(NO_RELEASE) {
        return (false, None, None, None);
    }
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
    (true, probe, status, error)
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
            let (installed, probe, status, error) = parse(&name, &text);
            HostReading {
                host: name,
                reachable: true,
                installed,
                probe,
                status,
                error,
                elapsed_ms,
            }
        }
        Err(e) => HostReading {
            host: name,
            reachable: false,
            installed: false,
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
        let (installed, probe, status, err) = parse("h", "@@fleetctl-no-release@@\n");
        assert!(!installed && probe.is_none() && status.is_none() && err.is_none());
    }

    #[test]
    fn garbage_probe_is_an_error_naming_the_host() {
        let (installed, probe, _, err) = parse("h7", "Segmentation fault\n@@fleetctl-status@@\n");
        assert!(installed && probe.is_none());
        assert!(err
            .unwrap()
            .starts_with("h7: `prover health` printed no valid probe"));
    }
}
