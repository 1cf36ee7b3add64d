//! Benchmark (ignored by default; `scripts/bench-staging.sh` runs it, as
//! root): a lab of 32 hosts, each behind its own link limited to
//! `BENCH_MBIT` (default 100 Mbit/s; netem delay on top where the kernel
//! has netem), the stand-in prover whose `kernels warm` takes 20 s
//! (`prepare_sleep_ms`) padded to a real build's size with the bytes of a
//! real binary, rolled out in batches of 8 without and with staging, each
//! with the upload compressed and plain. Prints the whole rollout's time,
//! the serving gap per host (max and sum) and the bytes uploaded, and
//! checks the targets on the default (compressed) upload: every gap under
//! 3 s, staging at least 3x faster.
//!
//! `BENCH_PAYLOAD` names the padding's source, `BENCH_PAYLOAD_MIB` caps its
//! size (default 48, the prover release's). The default source is the cargo
//! that built this test: a Rust release binary of about the prover's size
//! on every build machine (this build's own binaries are debug builds,
//! mostly debug info, which compresses far better than a release does).
//! `BENCH_MBIT=0` leaves the links at loopback speed.

use fleetctl::lab::{Lab, LabConfig};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const HOSTS: usize = 32;
const BATCH: usize = 8;
const PREPARE_MS: u64 = 20_000;
const DELAY_MS: u32 = 20;

/// A bounded number from the environment, or its default.
fn env_number(name: &str, default: u32, max: u32) -> u32 {
    match std::env::var(name) {
        Err(_) => default,
        Ok(v) => match v.trim().parse::<u32>() {
            Ok(n) if n <= max => n,
            _ => panic!("{name}={v:?}: expected a whole number up to {max}"),
        },
    }
}

fn playbook(stage: Option<usize>, compress: bool) -> String {
    format!(
        "name: bench\nstrategy:\n  batch: {BATCH}\n  max_fail: 0\n{}steps:\n  - upload: {{keep_releases: 2, compress: {compress}}}\n  - prepare: {{}}\n  - drain: {{timeout: 10s}}\n  - start: {{}}\n  - verify: {{settle: 1s, poll: 100ms}}\n",
        stage.map_or(String::new(), |n| format!("  stage: {n}\n"))
    )
}

/// The bytes that pad every release to a real build's size.
fn payload() -> Vec<u8> {
    let source = std::env::var_os("BENCH_PAYLOAD")
        .map_or_else(|| PathBuf::from(env!("CARGO")), PathBuf::from);
    let mib = env_number("BENCH_PAYLOAD_MIB", 48, 1024) as usize;
    let mut bytes = std::fs::read(&source).expect("payload source");
    bytes.truncate(mib << 20);
    println!(
        "payload: {:.1} MiB of {}",
        bytes.len() as f64 / (1 << 20) as f64,
        source.display()
    );
    bytes
}

/// A distinct release of the stand-in (its own sha256), `payload` after
/// the ELF and before the build marker.
fn build(dir: &Path, name: &str, payload: &[u8]) -> PathBuf {
    let mut bytes = std::fs::read(crate::steps::stand_in()).expect("stand-in");
    bytes.extend_from_slice(payload);
    bytes.extend(format!("\nFIXTURE_BUILD={name}\n").as_bytes());
    let path = dir.join(format!("prover-{}", name.replace(' ', "-")));
    std::fs::write(&path, bytes).expect("write build");
    path
}

/// One rollout: (seconds, JSON summary).
fn rollout(dir: &Path, inv: &Path, pb: &str, binary: &Path) -> (f64, serde_json::Value) {
    std::fs::write(dir.join("pb.yaml"), pb).expect("write playbook");
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_fleetctl"))
        .current_dir(dir)
        .args([
            "run",
            "-p",
            "./pb.yaml",
            "--plain",
            "--summary-json",
            "s.json",
            "-e",
        ])
        .arg("config_file=prover.toml")
        .arg("-i")
        .arg(inv)
        .arg("--binary")
        .arg(binary)
        .output()
        .expect("run fleetctl");
    let secs = t.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let summary = serde_json::from_slice(&std::fs::read(dir.join("s.json")).expect("summary"))
        .expect("summary JSON");
    (secs, summary)
}

/// Mean time of one step over the hosts, in seconds.
fn mean_step_s(s: &serde_json::Value, step: &str) -> f64 {
    let ms: Vec<f64> = s["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| h["steps"][step]["ms"].as_u64())
        .map(|ms| ms as f64 / 1e3)
        .collect();
    ms.iter().sum::<f64>() / ms.len().max(1) as f64
}

struct Measured {
    secs: f64,
    gap_max_ms: u64,
    sent_bytes: u64,
}

#[test]
#[ignore = "benchmark: scripts/bench-staging.sh"]
fn staging_benchmark() {
    let _alone = crate::labs_alone();
    let mbit = env_number("BENCH_MBIT", 100, 100_000);
    let lab = Lab::start_with(LabConfig::new(HOSTS)).expect("lab");
    for i in 0..HOSTS {
        if let Err(e) = lab.netem(i, DELAY_MS, 0.0) {
            println!("no netem delay: {e}");
            break;
        }
    }
    if mbit > 0 {
        for i in 0..HOSTS {
            lab.limit_bandwidth(i, mbit).expect("bandwidth limit");
        }
        println!("every host's link limited to {mbit} Mbit/s (tbf)");
    }
    let payload = payload();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("prover.toml"),
        format!("mode = \"normal\"\nprepare_sleep_ms = {PREPARE_MS}\n"),
    )
    .expect("config");
    let inv = lab.inventory_path();
    // The old daemons the measured rollouts replace.
    rollout(
        dir.path(),
        &inv,
        &playbook(Some(HOSTS), true),
        &build(dir.path(), "old", &payload),
    );
    let mut rows = Vec::new();
    for (name, stage, compress) in [
        ("without staging, gzip", None, true),
        ("with staging, gzip", Some(HOSTS), true),
        ("without staging, plain", None, false),
        ("with staging, plain", Some(HOSTS), false),
    ] {
        let binary = build(dir.path(), name, &payload);
        let (secs, s) = rollout(dir.path(), &inv, &playbook(stage, compress), &binary);
        let gap = &s["serving_gap"];
        let up = &s["upload"];
        let sent_bytes = up["sent_bytes"].as_u64().unwrap_or(0);
        println!(
            "{name:<24} {secs:>7.1} s  serving gap max {:.2} s ({}), sum {:.1} s over {} hosts; \
             upload step {:.1} s mean, sent {:.1} of {:.1} MiB per host",
            gap["max_ms"].as_u64().unwrap_or(0) as f64 / 1e3,
            gap["max_host"],
            gap["sum_ms"].as_u64().unwrap_or(0) as f64 / 1e3,
            gap["hosts"],
            mean_step_s(&s, "upload"),
            sent_bytes as f64 / HOSTS as f64 / (1 << 20) as f64,
            up["file_bytes"].as_u64().unwrap_or(0) as f64 / HOSTS as f64 / (1 << 20) as f64,
        );
        let steps: Vec<String> = [
            "connect", "lock", "upload", "prepare", "drain", "start", "verify",
        ]
        .iter()
        .map(|step| format!("{step} {:.2}", mean_step_s(&s, step)))
        .collect();
        println!("{:<24} mean step times (s): {}", "", steps.join(", "));
        rows.push(Measured {
            secs,
            gap_max_ms: gap["max_ms"].as_u64().unwrap_or(u64::MAX),
            sent_bytes,
        });
    }
    let speedup = |plain: &Measured, staged: &Measured| plain.secs / staged.secs;
    println!(
        "staging speedup: {:.2}x with gzip, {:.2}x plain; gzip saves {:.1} s without staging, {:.1} s with",
        speedup(&rows[0], &rows[1]),
        speedup(&rows[2], &rows[3]),
        rows[2].secs - rows[0].secs,
        rows[3].secs - rows[1].secs
    );
    assert!(
        rows[0].sent_bytes < rows[2].sent_bytes,
        "gzip sent {} bytes, plain {}",
        rows[0].sent_bytes,
        rows[2].sent_bytes
    );
    assert!(
        rows[1].gap_max_ms < 3000,
        "a serving gap of {} ms with staging",
        rows[1].gap_max_ms
    );
    assert!(
        speedup(&rows[0], &rows[1]) >= 3.0,
        "staging only {:.2}x faster",
        speedup(&rows[0], &rows[1])
    );
    lab.teardown().expect("teardown");
}
