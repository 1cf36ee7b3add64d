//! Benchmark (ignored by default; `scripts/bench-rollout.sh` runs it, as
//! root): the built-in `rollout` playbook in batches of 16 on a lab of
//! `BENCH_HOSTS` hosts (default 64), against a plain bash loop that only
//! uploads and restarts, host after host, on the same lab. The stand-in
//! prover of the step tests, padded with `BENCH_PAYLOAD_MIB` MiB of a Rust
//! release binary (default 0: the stand-in alone; each MiB costs every host
//! three copies in its tmpfs `/data`).
//!
//! Prints each run's wall time, and per step the mean and the slowest host
//! (`--summary-json`), so the critical path of a batch can be read off.
//! `BENCH_BASELINE=PATH` names another fleetctl binary (an earlier commit's
//! build) whose rollouts run beside this one's in every round, on the same
//! lab under the same load.

use fleetctl::lab::{Lab, LabConfig};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const BATCH: usize = 16;

/// A bounded number from the environment, or its default.
fn env_number(name: &str, default: usize, max: usize) -> usize {
    match std::env::var(name) {
        Err(_) => default,
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n <= max => n,
            _ => panic!("{name}={v:?}: expected a whole number up to {max}"),
        },
    }
}

/// A distinct release of the stand-in: `payload` after the ELF, then the
/// build marker.
fn build(dir: &Path, name: &str, payload: &[u8]) -> PathBuf {
    let mut bytes = std::fs::read(crate::steps::stand_in()).expect("stand-in");
    bytes.extend_from_slice(payload);
    bytes.extend(format!("\nFIXTURE_BUILD={name}\n").as_bytes());
    let path = dir.join(format!("prover-{name}"));
    std::fs::write(&path, bytes).expect("write build");
    let mut perm = std::fs::metadata(&path).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&path, perm).expect("chmod");
    path
}

/// The built-in rollout with batches of [`BATCH`] (and `stage`, if given).
fn playbook(stage: Option<usize>) -> String {
    let text = fleetctl::playbook::builtin("rollout")
        .expect("built-in rollout")
        .text;
    let stage = stage.map_or(String::new(), |n| format!("  stage: {n}\n"));
    text.replace("  batch: 3 ", &format!("{stage}  batch: {BATCH} "))
}

/// One fleetctl run: (seconds, JSON summary).
fn fleetctl(dir: &Path, inv: &Path, pb: &str, binary: &Path) -> (f64, serde_json::Value) {
    fleetctl_with(
        Path::new(env!("CARGO_BIN_EXE_fleetctl")),
        dir,
        inv,
        pb,
        binary,
    )
}

/// One run of the fleetctl binary `exe`: (seconds, JSON summary).
fn fleetctl_with(
    exe: &Path,
    dir: &Path,
    inv: &Path,
    pb: &str,
    binary: &Path,
) -> (f64, serde_json::Value) {
    std::fs::write(dir.join("pb.yaml"), pb).expect("write playbook");
    let t = Instant::now();
    let out = fleet_testkit::output_within(
        Command::new(exe)
            .current_dir(dir)
            .args([
                "run",
                "-p",
                "./pb.yaml",
                "--plain",
                "--summary-json",
                "s.json",
            ])
            .args(["-e", "config_file=prover.toml", "-i"])
            .arg(inv)
            .arg("--binary")
            .arg(binary),
        Duration::from_secs(900),
    );
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

/// Per step: the mean over hosts and the slowest host, in seconds.
fn step_times(s: &serde_json::Value) -> String {
    let hosts = s["hosts"].as_array().cloned().unwrap_or_default();
    let mut names: Vec<String> = Vec::new();
    for h in &hosts {
        if let Some(steps) = h["steps"].as_object() {
            for k in steps.keys() {
                if !names.contains(k) {
                    names.push(k.clone());
                }
            }
        }
    }
    names
        .iter()
        .map(|step| {
            let ms: Vec<f64> = hosts
                .iter()
                .filter_map(|h| h["steps"][step]["ms"].as_u64())
                .map(|ms| ms as f64 / 1e3)
                .collect();
            let mean = ms.iter().sum::<f64>() / ms.len().max(1) as f64;
            let max = ms.iter().cloned().fold(0.0, f64::max);
            format!("{step} {mean:.2}/{max:.2}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The plain loop: per host, copy the build and its config into a new
/// release folder (`scp`), then stop the daemon, switch `current` and start
/// the new one (`ssh`). No checks at all. Host after host, or with
/// `parallel`, the hosts of each batch of [`BATCH`] at once.
fn bash_loop(lab: &Lab, dir: &Path, binary: &Path, parallel: bool) -> f64 {
    let config = dir.join("prover.toml");
    // Any folder under releases/ serves; the binary's own sum names it.
    let id = fleetctl::steps::sha256_file(binary).expect("hash");
    let hosts: Vec<String> = lab.hosts().iter().map(|h| h.name.clone()).collect();
    let script = format!(
        r#"set -e
cfg={cfg}
one() {{
  h=$1
  ssh -F "$cfg" "$h" 'mkdir -p /data/prover/releases/{id}'
  scp -q -F "$cfg" {bin} "$h:/data/prover/releases/{id}/prover"
  scp -q -F "$cfg" {config} "$h:/data/prover/releases/{id}/prover.toml"
  ssh -F "$cfg" "$h" 'cd /data/prover && chmod 0755 releases/{id}/prover && p=$(cat run/prover.pid) && kill $p; i=0; while kill -0 $p 2>/dev/null && [ $i -lt 600 ]; do i=$((i+1)); sleep 0.05; done; ln -sfn releases/{id} current && {{ setsid /data/prover/current/prover daemon --config /data/prover/current/prover.toml >> logs/prover.log 2>&1 < /dev/null & }}'
}}
n=0
for h in {hosts}; do
  if [ {parallel} = 1 ]; then
    one "$h" &
    n=$((n+1))
    if [ $n -ge {BATCH} ]; then wait; n=0; fi
  else
    one "$h"
  fi
done
wait
"#,
        cfg = lab.ssh_config_path().display(),
        hosts = hosts.join(" "),
        bin = binary.display(),
        config = config.display(),
        parallel = u8::from(parallel),
    );
    std::fs::write(dir.join("loop.sh"), &script).expect("write loop");
    let t = Instant::now();
    let out = fleet_testkit::output_within(
        Command::new("bash").arg(dir.join("loop.sh")),
        Duration::from_secs(900),
    );
    let secs = t.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    secs
}

#[test]
#[ignore = "benchmark: scripts/bench-rollout.sh"]
fn rollout_against_a_plain_loop() {
    let _alone = crate::labs_alone();
    let hosts = env_number("BENCH_HOSTS", 64, 128).max(1);
    let mib = env_number("BENCH_PAYLOAD_MIB", 0, 64);
    let mut config = LabConfig::new(hosts);
    config.data_size = 256 << 20;
    let lab = Lab::start_with(config).expect("lab");
    let payload = {
        let mut b = std::fs::read(env!("CARGO")).expect("payload source");
        b.truncate(mib << 20);
        b
    };
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("prover.toml"), "mode = \"normal\"\n").expect("config");
    let inv = lab.inventory_path();
    println!(
        "{hosts} lab hosts, batches of {BATCH}, stand-in of {:.1} MiB",
        std::fs::metadata(build(dir.path(), "size", &payload))
            .expect("stat")
            .len() as f64
            / (1 << 20) as f64
    );
    // The daemons the measured runs replace.
    fleetctl(
        dir.path(),
        &inv,
        &playbook(Some(hosts)).replace(&format!("batch: {BATCH} "), "batch: 100% "),
        &build(dir.path(), "old", &payload),
    );
    let mut n = 0;
    let mut next = |what: &str| {
        n += 1;
        build(dir.path(), &format!("{what}-{n}"), &payload)
    };
    let rounds = env_number("BENCH_ROUNDS", 1, 10);
    for round in 0..rounds {
        let secs = bash_loop(&lab, dir.path(), &next("loop"), false);
        println!("round {round}: bash loop (upload + restart, host after host): {secs:.1} s");
        let secs = bash_loop(&lab, dir.path(), &next("loop"), true);
        println!(
            "round {round}: bash loop (upload + restart, {BATCH} hosts at a time): {secs:.1} s"
        );
        let this = PathBuf::from(env!("CARGO_BIN_EXE_fleetctl"));
        let mut runs = vec![
            ("rollout, batch 16", None, this.clone()),
            ("rollout, batch 16, stage 16", Some(BATCH), this),
        ];
        if let Some(base) = std::env::var_os("BENCH_BASELINE").map(PathBuf::from) {
            runs.push(("baseline: rollout, batch 16", None, base.clone()));
            runs.push(("baseline: rollout, batch 16, stage 16", Some(BATCH), base));
        }
        for (name, stage, exe) in runs {
            let binary = next("fleet");
            let (secs, s) = fleetctl_with(&exe, dir.path(), &inv, &playbook(stage), &binary);
            let gap = &s["serving_gap"];
            println!(
                "round {round}: {name}: {secs:.1} s; serving gap max {:.2} s, sum {:.1} s",
                gap["max_ms"].as_u64().unwrap_or(0) as f64 / 1e3,
                gap["sum_ms"].as_u64().unwrap_or(0) as f64 / 1e3,
            );
            println!("    steps mean/slowest (s): {}", step_times(&s));
        }
    }
    lab.teardown().expect("teardown");
}
