//! Benchmark (ignored by default; `scripts/bench-staging.sh` runs it, as
//! root): a lab of 32 hosts with netem delay, the stand-in prover whose
//! `kernels warm` takes 20 s (`prepare_sleep_ms`), rolled out in batches
//! of 8 without and with staging. Prints the whole rollout's time and the
//! serving gap per host (max and sum), and checks the targets: every gap
//! under 3 s, staging at least 3x faster.

use fleetctl::lab::{Lab, LabConfig};
use std::path::Path;
use std::process::Command;
use std::time::Instant;

const HOSTS: usize = 32;
const BATCH: usize = 8;
const PREPARE_MS: u64 = 20_000;
const DELAY_MS: u32 = 20;

fn playbook(stage: Option<usize>) -> String {
    format!(
        "name: bench\nstrategy:\n  batch: {BATCH}\n  max_fail: 0\n{}steps:\n  - upload: {{}}\n  - prepare: {{}}\n  - drain: {{timeout: 10s}}\n  - start: {{}}\n  - verify: {{settle: 1s, poll: 100ms}}\n",
        stage.map_or(String::new(), |n| format!("  stage: {n}\n"))
    )
}

/// A distinct release of the stand-in (its own sha256).
fn build(dir: &Path, name: &str) -> std::path::PathBuf {
    let mut bytes = std::fs::read(crate::steps::stand_in()).expect("stand-in");
    bytes.extend(format!("\nFIXTURE_BUILD={name}\n").as_bytes());
    let path = dir.join(format!("prover-{name}"));
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
            "pb.yaml",
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

#[test]
#[ignore = "benchmark: scripts/bench-staging.sh"]
fn staging_benchmark() {
    let _alone = crate::labs_alone();
    let lab = Lab::start_with(LabConfig::new(HOSTS)).expect("lab");
    for i in 0..HOSTS {
        if let Err(e) = lab.netem(i, DELAY_MS, 0.0) {
            eprintln!("no netem ({e}): running without delay");
            break;
        }
    }
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
        &playbook(Some(HOSTS)),
        &build(dir.path(), "old"),
    );
    let mut rows = Vec::new();
    for (name, stage) in [("without staging", None), ("with staging", Some(HOSTS))] {
        let (secs, s) = rollout(dir.path(), &inv, &playbook(stage), &build(dir.path(), name));
        let gap = &s["serving_gap"];
        println!(
            "{name:<16} {secs:>7.1} s  serving gap max {:.2} s ({}), sum {:.1} s over {} hosts",
            gap["max_ms"].as_u64().unwrap_or(0) as f64 / 1e3,
            gap["max_host"],
            gap["sum_ms"].as_u64().unwrap_or(0) as f64 / 1e3,
            gap["hosts"]
        );
        rows.push((secs, gap["max_ms"].as_u64().unwrap_or(u64::MAX)));
    }
    let (plain, staged) = (rows[0], rows[1]);
    println!("speedup {:.1}x", plain.0 / staged.0);
    assert!(
        staged.1 < 3000,
        "a serving gap of {} ms with staging",
        staged.1
    );
    assert!(
        plain.0 / staged.0 >= 3.0,
        "staging only {:.1}x faster",
        plain.0 / staged.0
    );
    lab.teardown().expect("teardown");
}
