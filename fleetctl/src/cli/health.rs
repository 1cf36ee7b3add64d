//! `fleetctl status` and `fleetctl health`: clap types and their run functions.

use super::args::{deadline_arg, TargetArgs};
use super::exit;
use anyhow::Context;
use clap::Args;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
use fleet_wire::health::Probe;
use fleetctl::health::policy::{
    evaluate, evaluate_expecting_daemon, Finding, Policy, Severity, Verdict,
};
use fleetctl::health::status::{read_all, HostReading};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Per-host deadline.
    #[arg(long, default_value = "5s", value_parser = deadline_arg)]
    pub deadline: Duration,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Args)]
pub struct HealthArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Per-host deadline.
    #[arg(long, default_value = "10s", value_parser = deadline_arg)]
    pub deadline: Duration,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Treat warnings as failures (exit non-zero).
    #[arg(long)]
    pub strict: bool,
    /// Override a policy threshold for this run, `key=value` (repeatable),
    /// e.g. `--policy warn_gpu_temp_c=60`.
    #[arg(long = "policy", value_name = "KEY=VALUE")]
    pub policy: Vec<String>,
    /// Where the last probe of each host is kept, for the "rising" rules.
    #[arg(long, default_value = ".fleetctl/health")]
    pub history: PathBuf,
}

fn gib(b: Option<u64>) -> String {
    b.map_or_else(
        || "-".into(),
        |b| format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
    )
}

fn age(ms: Option<u64>) -> String {
    let Some(ms) = ms else { return "-".into() };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(ms);
    format!("{}s ago", now.saturating_sub(ms) / 1000)
}

/// `busy/in rotation` from the daemon's own devices (a worker holds a
/// partition on it now), and how many are out of rotation; `None` for a CPU
/// daemon, where NVML's view is all there is.
fn devices_busy(s: &fleet_wire::api::Status) -> Option<String> {
    let gpus: Vec<_> = s.devices.iter().filter(|d| d.backend != "cpu").collect();
    if gpus.is_empty() {
        return None;
    }
    let live: Vec<_> = gpus.iter().filter(|d| d.in_rotation).collect();
    let busy = live.iter().filter(|d| d.busy > 0).count();
    let out = gpus.len() - live.len();
    Some(match out {
        0 => format!("{busy}/{}", live.len()),
        n => format!("{busy}/{} ({n} out of rotation)", live.len()),
    })
}

/// One status row per host.
pub fn status_table(readings: &[HostReading]) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "host",
        "reachable",
        // The sha256 id of the shipped binary, as the rollout table shows
        // it, and the git build the daemon reports: two names, two things.
        "release",
        "git build",
        "pid",
        "uptime",
        "RSS",
        "pinned (pool)",
        "GPUs busy",
        "queue",
        "last proof",
        "note",
    ]);
    for r in readings {
        let d = r.probe.as_ref().and_then(|p| p.daemon.as_ref());
        let gpus = r.status.as_ref().and_then(devices_busy).or_else(|| {
            r.probe.as_ref().map(|p| {
                let total = p.gpus.devices.len();
                let busy = p
                    .gpus
                    .devices
                    .iter()
                    .filter(|g| {
                        g.utilization_gpu_pct.unwrap_or(0) > 0
                            || g.processes.as_ref().is_some_and(|v| !v.is_empty())
                    })
                    .count();
                format!("{busy}/{total}")
            })
        });
        let note = match (&r.error, r.installed, d, r.daemon_down_note()) {
            (Some(e), ..) => e.clone(),
            (None, false, ..) if r.reachable => "no release installed".into(),
            (None, _, _, Some(down)) => down,
            (None, _, Some(d), None) if d.ready != Some(true) => {
                format!("not ready: {}", d.ready_reason.clone().unwrap_or_default())
            }
            _ => String::new(),
        };
        t.add_row(vec![
            r.host.clone(),
            if r.reachable {
                "yes".into()
            } else {
                "NO".into()
            },
            r.release
                .as_deref()
                .map_or("-".into(), |s| s.chars().take(12).collect()),
            d.and_then(|d| d.build.clone())
                .unwrap_or_else(|| "-".into()),
            d.and_then(|d| d.pid)
                .filter(|_| d.is_some_and(|d| d.alive))
                .map_or("-".into(), |p| p.to_string()),
            d.and_then(|d| d.uptime_s).map_or("-".into(), |s| {
                humantime::format_duration(Duration::from_secs(s as u64)).to_string()
            }),
            gib(d.and_then(|d| d.rss_bytes)),
            gib(r.pinned_bytes()),
            gpus.unwrap_or_else(|| "-".into()),
            r.status.as_ref().map_or("-".into(), |s| {
                format!("{}/{}", s.queue.depth, s.queue.max_jobs)
            }),
            age(r.status.as_ref().and_then(|s| s.last_proof_ms)),
            note,
        ]);
    }
    t.to_string()
}

/// `fleetctl status` fails unless every host was read without error.
fn status_exit(readings: &[HostReading]) -> u8 {
    exit::hosts(readings.iter().all(|r| r.reachable && r.error.is_none()))
}

/// `fleetctl status`.
pub async fn run_status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let (_, hosts) = fleetctl::inventory::load_selected(&args.target.clone().into())?;
    let readings = read_all(&hosts, args.deadline).await;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&readings)?);
    } else {
        println!("{}", status_table(&readings));
    }
    Ok(exit::code(status_exit(&readings)))
}

fn history_path(dir: &Path, host: &str) -> PathBuf {
    dir.join(format!("{host}.json"))
}

/// Applies `--policy k=v` overrides on top of a host's policy.
fn override_policy(policy: Policy, sets: &[String]) -> anyhow::Result<Policy> {
    let mut v = serde_json::to_value(&policy)?;
    for set in sets {
        let (k, val) = set
            .split_once('=')
            .with_context(|| format!("--policy {set:?}: expected KEY=VALUE"))?;
        let parsed: serde_json::Value =
            serde_json::from_str(val).unwrap_or_else(|_| serde_json::Value::String(val.into()));
        v[k] = parsed;
    }
    serde_json::from_value(v).with_context(|| format!("--policy {sets:?}: not a valid policy"))
}

/// The verdicts for a set of readings (unreachable hosts fail).
pub fn verdicts(
    hosts: &[fleetctl::inventory::Host],
    readings: &[HostReading],
    history: &Path,
    sets: &[String],
) -> anyhow::Result<Vec<Verdict>> {
    let mut out = Vec::new();
    for (h, r) in hosts.iter().zip(readings) {
        let policy = override_policy(Policy::for_host(h)?, sets)?;
        let Some(probe) = &r.probe else {
            let reason = r
                .error
                .clone()
                .unwrap_or_else(|| "no release installed: nothing to probe with".into());
            out.push(Verdict {
                host: h.name.clone(),
                severity: Severity::Fail,
                gpus_expected: h.gpus,
                gpus_found: 0,
                findings: vec![Finding {
                    severity: Severity::Fail,
                    gpu: None,
                    rule: if r.reachable { "probe" } else { "unreachable" }.into(),
                    reading: reason.clone(),
                    threshold: "a probe document".into(),
                    message: reason,
                }],
            });
            continue;
        };
        let path = history_path(history, &h.name);
        let previous = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| Probe::parse(&t).ok());
        out.push(if r.daemon_expected() {
            evaluate_expecting_daemon(h, probe, previous.as_ref(), &policy)
        } else {
            evaluate(h, probe, previous.as_ref(), &policy)
        });
        if std::fs::create_dir_all(history).is_ok() {
            let _ = std::fs::write(&path, serde_json::to_vec(probe)?);
        }
    }
    Ok(out)
}

/// `fleetctl health`.
pub async fn run_health(args: HealthArgs) -> anyhow::Result<ExitCode> {
    let (_, hosts) = fleetctl::inventory::load_selected(&args.target.clone().into())?;
    let readings = read_all(&hosts, args.deadline).await;
    let verdicts = verdicts(&hosts, &readings, &args.history, &args.policy)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&verdicts)?);
    } else {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
            "host",
            "verdict",
            "GPUs",
            "gpu",
            "rule",
            "reading",
            "threshold",
            "finding",
        ]);
        for v in &verdicts {
            let gpus = format!("{}/{}", v.gpus_found, v.gpus_expected);
            if v.findings.is_empty() {
                t.add_row(vec![
                    v.host.clone(),
                    "OK".into(),
                    gpus.clone(),
                    "".into(),
                    "".into(),
                    "".into(),
                    "".into(),
                    "".into(),
                ]);
            }
            for f in &v.findings {
                t.add_row(vec![
                    v.host.clone(),
                    format!("{:?}", f.severity).to_uppercase(),
                    gpus.clone(),
                    f.gpu.map_or("-".into(), |g| g.to_string()),
                    f.rule.clone(),
                    f.reading.clone(),
                    f.threshold.clone(),
                    f.message.clone(),
                ]);
            }
        }
        println!("{t}");
    }
    let worst = verdicts
        .iter()
        .map(|v| v.severity)
        .max()
        .unwrap_or(Severity::Ok);
    let failed = worst == Severity::Fail || (args.strict && worst == Severity::Warn);
    Ok(exit::code(exit::hosts(!failed)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetctl::health::status::read_all_with;
    use fleetctl::inventory::Host;

    #[tokio::test]
    async fn status_with_a_panicking_host_task_exits_non_zero_and_names_the_host() {
        let hosts: Vec<Host> = (1..=3)
            .map(|i| Host::local(format!("h{i}"), "/tmp/x"))
            .collect();
        let readings = read_all_with(&hosts, |h| async move {
            if h.name == "h2" {
                panic!("probe parser bug");
            }
            HostReading {
                host: h.name,
                reachable: true,
                installed: true,
                release: None,
                daemon_intent: None,
                probe: None,
                status: None,
                error: None,
                elapsed_ms: 1,
            }
        })
        .await;
        let names: Vec<&str> = readings.iter().map(|r| r.host.as_str()).collect();
        assert_eq!(names, ["h1", "h2", "h3"]);
        let e = readings[1].error.as_deref().unwrap_or_default();
        assert!(
            e.starts_with("h2: ") && e.contains("probe parser bug"),
            "{e}"
        );
        assert!(!readings[1].reachable);
        assert!(status_table(&readings).contains("probe parser bug"));
        assert_eq!(status_exit(&readings), exit::EXIT_HOSTS_FAILED);
        assert_eq!(status_exit(&[readings[0].clone()]), exit::EXIT_OK);
    }

    #[test]
    fn gpus_busy_counts_the_daemons_own_devices_in_rotation() {
        let device = |busy: u32, error: Option<&str>| fleet_wire::api::DeviceState {
            backend: "cuda".into(),
            ordinal: Some(0),
            name: None,
            workers: 2,
            busy,
            partitions_done: 0,
            in_rotation: error.is_none(),
            error: error.map(String::from),
            proving: Vec::new(),
        };
        let status = |devices| fleet_wire::api::Status {
            api_version: 1,
            version: "v".into(),
            build: "b".into(),
            pid: 1,
            state: fleet_wire::api::DaemonState::Ready,
            listen: "127.0.0.1:1".into(),
            uptime_s: 1.0,
            queue: Default::default(),
            budget: Default::default(),
            pool: Default::default(),
            backend: "cuda".into(),
            devices,
            proofs_completed: 0,
            proofs_failed: 0,
            last_proof_ms: None,
        };
        let s = status(vec![
            device(2, None),
            device(0, None),
            device(0, Some("Xid 79")),
        ]);
        assert_eq!(devices_busy(&s).as_deref(), Some("1/2 (1 out of rotation)"));
        let s = status(vec![device(1, None)]);
        assert_eq!(devices_busy(&s).as_deref(), Some("1/1"));
        // A CPU daemon has no GPUs of its own to count.
        let mut cpu = device(1, None);
        cpu.backend = "cpu".into();
        assert_eq!(devices_busy(&status(vec![cpu])), None);
    }

    /// The release id and the git build are two columns with two names
    /// (the rollout table's `release` is the first), and the pinned column
    /// says whose count it is.
    #[test]
    fn status_names_release_and_git_build_apart_and_pinned_by_its_source() {
        let reading = HostReading {
            host: "h1".into(),
            reachable: true,
            installed: true,
            release: Some("ab".repeat(32)),
            daemon_intent: None,
            probe: Some(
                Probe::parse(
                    r#"{"probe_version":1,"host":"h1","ts_ms":0,"prober_version":"0.1.0","prober_build":"g1t5ha",
                        "memory":{"shmem_bytes":5368709120},
                        "daemon":{"config":"c","pid_file":"p","listen":"l","pid":7,"alive":true,"build":"g1t5ha","ready":true},
                        "gpus":{"nvml":{"available":false},"devices":[]}}"#,
                )
                .unwrap(),
            ),
            status: None,
            error: None,
            elapsed_ms: 1,
        };
        let table = status_table(&[reading]);
        let header = table.lines().nth(1).unwrap();
        assert!(
            header.contains("release")
                && header.contains("git build")
                && header.contains("pinned (pool)")
                && !header.contains("│ build"),
            "{table}"
        );
        let row = table.lines().find(|l| l.contains("h1")).unwrap();
        assert!(
            row.contains("abababababab") && row.contains("g1t5ha"),
            "{table}"
        );
        assert!(
            !row.contains("5.0 GiB"),
            "host Shmem is not the daemon's pinned memory: {table}"
        );
    }
}
