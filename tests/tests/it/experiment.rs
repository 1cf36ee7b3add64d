//! End to end: `fleetctl experiment` on a lab fleet of real sshd hosts with
//! the real prover (root only; skipped with a message otherwise). One lab
//! of four hosts on one baseline build, then three experiments on it:
//! an identical candidate passes and is promoted; a candidate whose daemon
//! cannot start is restored without ever being measured; a candidate whose
//! config gives it one CPU prover worker where the baseline has two fails
//! and is restored: with two jobs in flight per host, its partitions wait
//! for the worker (`gpu_lock_wait`), a slowdown that no load on this
//! two-core machine can hide (fewer threads per MSM would be hidden: the
//! cores are shared by every lab host). A candidate whose canary daemon is
//! killed mid-measurement fails and is restored, serving. Last, Ctrl-C
//! while the workload runs restores the canaries and exits 130.
//!
//! Needs `target/debug/{fleetctl,prover}` (`cargo build --workspace --bins`).

use fleet_tests::{bin_dir, binary, pixels_of, prover, screenshot, Run, LAB_DAEMON_CONFIG};
use fleetctl::lab::Lab;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn fleetctl(cwd: &Path, args: &[&str]) -> Run {
    let out = fleet_testkit::output_within(
        Command::new(binary("fleetctl"))
            .args(args)
            .arg("--plain")
            .current_dir(cwd)
            .env_remove("FLEETCTL_STATE_DIR"),
        fleet_tests::FLEETCTL_LIMIT,
    );
    Run::from(out)
}

/// The prover with bytes appended: the same program as a release of its own.
fn variant(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let mut bytes = std::fs::read(prover()).expect("read prover");
    bytes.extend_from_slice(format!("\n{name}\n").as_bytes());
    std::fs::write(&path, bytes).expect("write build");
    let mut perm = std::fs::metadata(&path).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&path, perm).expect("chmod");
    path
}

fn sha(path: &Path) -> String {
    fleetctl::steps::sha256_file(path).expect("hash")
}

/// The definition of each experiment: two canaries (h01 is tagged), two
/// baselines, 12 jobs of a small chain statement per host, two in flight,
/// on every host at once.
fn definition(name: &str, config: Option<&str>, metrics: &str, tolerance: &str) -> String {
    let candidate = config.map_or(String::new(), |c| format!("candidate: {{ config: {c} }}\n"));
    format!(
        "name: {name}\n{candidate}hosts: {{ canary: 2, baseline: 2 }}\nworkload:\n  submit: {{ circuit: chain, size: 4096, jobs: 12, concurrency: 2, timeout: 60s }}\nanalysis:\n  confidence: 98%\n  tolerance: {tolerance}\n  max_regression: 30%\n  min_samples: 10\n  metrics:\n{metrics}verdict: {{ pass: promote, fail: restore }}\n"
    )
}

fn current_release(lab: &Lab, i: usize) -> String {
    let out = lab
        .ssh(i, "readlink /data/prover/current")
        .expect("ssh readlink");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("report json")).expect("json")
}

#[test]
fn experiments_on_a_lab_of_four_pass_and_promote_or_fail_and_restore() {
    if !fleet_testkit::have_lab() {
        return;
    }
    let _turn = crate::lab_turn();
    let begin = Instant::now();
    let lab = Lab::start(4).expect("lab of 4 hosts");
    let dir = tempfile::tempdir().expect("temp dir");
    let cwd = dir.path();
    // The baseline proves two partitions at once (two CPU workers) ...
    assert!(LAB_DAEMON_CONFIG.trim_end().ends_with("devices = []"));
    let baseline = format!("{}\nworkers_per_device = 2\n", LAB_DAEMON_CONFIG.trim_end());
    std::fs::write(cwd.join("prover.toml"), &baseline).expect("config");
    // ... the slow candidate one at a time.
    std::fs::write(cwd.join("slow.toml"), LAB_DAEMON_CONFIG).expect("config");
    // A config the daemon refuses at start: that candidate never comes up.
    std::fs::write(
        cwd.join("broken.toml"),
        baseline.replace("127.0.0.1:7878", "not-an-address"),
    )
    .expect("config");
    let inv = lab.inventory_path();
    let inv = inv.to_str().expect("utf-8 path");
    let a = prover();
    let a_str = a.to_str().expect("utf-8 path");
    let a_sha = crate::release_id(&a, &cwd.join("prover.toml"));
    let base = ["-i", inv, "-e", "config_file=prover.toml"];

    let r = fleetctl(cwd, &[&["rollout", "--binary", a_str][..], &base].concat());
    assert_eq!(r.code, Some(0), "baseline rollout\n{}", r.show());
    eprintln!("baseline on 4 hosts: {:.1}s", begin.elapsed().as_secs_f64());

    // 1. The same build as the baseline: no difference, promoted to the rest.
    let t = Instant::now();
    std::fs::write(
        cwd.join("same.yaml"),
        definition(
            "same",
            None,
            "    - { metric: total, critical: true }\n    - { metric: failures, critical: true }\n",
            "10%",
        ),
    )
    .expect("definition");
    let r = fleetctl(
        cwd,
        &[
            &["experiment", "-f", "same.yaml", "--binary", a_str][..],
            &base,
            &["--json", "same.json", "--html", "same.html"],
        ]
        .concat(),
    );
    assert_eq!(r.code, Some(0), "identical candidate\n{}", r.show());
    let j = json(&cwd.join("same.json"));
    assert_eq!(j["verdict"], "pass", "{}", r.show());
    assert_eq!(j["action"], "promote", "{}", r.show());
    assert_eq!(
        j["analysis"]["canary"]["hosts"],
        serde_json::json!(["h01", "h02"])
    );
    assert_eq!(
        j["analysis"]["baseline"]["hosts"],
        serde_json::json!(["h03", "h04"])
    );
    assert!(
        j["analysis"]["canary"]["counts"]["partitions"].as_u64() >= Some(20),
        "{j}"
    );
    assert!(
        j["action_result"]
            .as_str()
            .unwrap_or("")
            .contains("2 of 2 host(s)"),
        "{j}"
    );
    assert!(r.stdout.contains("verdict: pass"), "{}", r.show());
    let html = std::fs::read_to_string(cwd.join("same.html")).expect("html");
    assert!(html.contains("<svg") && html.contains("verdict: pass"));
    eprintln!("identical candidate: {:.1}s", t.elapsed().as_secs_f64());

    // 2. A candidate whose daemon cannot start: restored, never measured.
    let t = Instant::now();
    let b = variant(cwd, "prover-crash");
    std::fs::write(
        cwd.join("crash.yaml"),
        definition(
            "crash",
            Some("broken.toml"),
            "    - { metric: total, critical: true }\n",
            "3%",
        ),
    )
    .expect("definition");
    let r = fleetctl(
        cwd,
        &[
            &["experiment", "-f", "crash.yaml", "--binary"][..],
            &[b.to_str().expect("utf-8")],
            &base,
            &["--json", "crash.json"],
        ]
        .concat(),
    );
    assert_eq!(r.code, Some(4), "crashing candidate\n{}", r.show());
    let j = json(&cwd.join("crash.json"));
    assert_eq!(j["verdict"], "fail", "{j}");
    assert!(
        j["deploy_error"]
            .as_str()
            .unwrap_or("")
            .contains("did not deploy"),
        "{j}"
    );
    assert!(j["analysis"].is_null(), "never measured: {j}");
    assert_eq!(j["loads"], serde_json::json!([]), "no workload ran: {j}");
    assert_eq!(j["action"], "restore", "{j}");
    for i in 0..4 {
        assert!(
            current_release(&lab, i).ends_with(&a_sha),
            "h0{} on the baseline release after the crash",
            i + 1
        );
    }
    eprintln!("crashing candidate: {:.1}s", t.elapsed().as_secs_f64());

    // 3. A candidate with one prover worker: its partitions wait, it fails, restored.
    let t = Instant::now();
    let c = variant(cwd, "prover-slow");
    std::fs::write(
        cwd.join("slow.yaml"),
        definition(
            "slow",
            Some("slow.toml"),
            "    - { metric: gpu_lock_wait, critical: true }\n    - { metric: failures, critical: true }\n",
            "3%",
        ),
    )
    .expect("definition");
    let r = fleetctl(
        cwd,
        &[
            &["experiment", "-f", "slow.yaml", "--binary"][..],
            &[c.to_str().expect("utf-8")],
            &base,
            &["--json", "slow.json", "--html", "slow.html"],
        ]
        .concat(),
    );
    assert_eq!(r.code, Some(4), "slower candidate\n{}", r.show());
    let j = json(&cwd.join("slow.json"));
    assert_eq!(j["verdict"], "fail", "{}", r.show());
    let wait = &j["analysis"]["judgements"][0];
    assert_eq!(
        (wait["metric"].as_str(), wait["verdict"].as_str()),
        (Some("gpu_lock_wait"), Some("fail")),
        "{wait}"
    );
    // Waiting for the one worker takes most of a proof; the baseline hardly waits.
    let (c, b) = (
        wait["canary"]["median"].as_f64().unwrap_or(0.0),
        wait["baseline"]["median"].as_f64().unwrap_or(0.0),
    );
    assert!(c > 2.0 * b + 50.0, "canary {c} ms, baseline {b} ms: {wait}");
    assert_eq!(j["action"], "restore", "{j}");
    for i in 0..4 {
        assert!(
            current_release(&lab, i).ends_with(&a_sha),
            "h0{} on the baseline release after the slow candidate",
            i + 1
        );
    }
    eprintln!("slower candidate: {:.1}s", t.elapsed().as_secs_f64());
    // The last report stays beside the build for the docs: terminal, page, screenshot.
    let keep = bin_dir().join("..").join("experiment-report");
    std::fs::create_dir_all(&keep).expect("report dir");
    std::fs::write(keep.join("report.txt"), &r.stdout).expect("keep report");
    std::fs::copy(cwd.join("slow.html"), keep.join("report.html")).expect("keep page");
    if let Some(shot) = screenshot(&cwd.join("slow.html"), &keep, "report") {
        // The canaries' samples are drawn in orange, the baselines' in blue.
        let canary = pixels_of(&shot, [0xdd, 0x6b, 0x20], 40);
        let baseline = pixels_of(&shot, [0x31, 0x82, 0xce], 40);
        // A group whose samples all coincide (the baseline hardly waits) is
        // one column of dots, about 60 pixels: each group must show at least that.
        assert!(
            canary > 40 && baseline > 40,
            "the distributions drew: {canary} canary and {baseline} baseline pixels"
        );
    }

    // 4. A canary whose daemon is killed during the measurement: its jobs
    //    fail (and leave no records), the daemon is gone at the end. The
    //    verdict is `fail` whatever the statistics say, and the canaries are
    //    restored and serving (it was `marginal`, `keep`, no daemon left).
    let t = Instant::now();
    let e = variant(cwd, "prover-dies");
    std::fs::write(
        cwd.join("dies.yaml"),
        definition(
            "dies",
            None,
            "    - { metric: total, critical: true }\n    - { metric: failures, critical: true }\n",
            "10%",
        )
        .replace("jobs: 12", "jobs: 20")
        .replace(
            "{ pass: promote, fail: restore }",
            "{ pass: promote, fail: restore, marginal: keep }",
        ),
    )
    .expect("definition");
    let child = Command::new(binary("fleetctl"))
        .args(
            [
                &[
                    "experiment",
                    "-f",
                    "dies.yaml",
                    "--plain",
                    "--json",
                    "dies.json",
                    "--binary",
                ][..],
                &[e.to_str().expect("utf-8")],
                &base,
            ]
            .concat(),
        )
        .current_dir(cwd)
        .env_remove("FLEETCTL_STATE_DIR")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn fleetctl");
    let e_sha = sha(&e);
    let deadline = Instant::now() + std::time::Duration::from_secs(120);
    let deployed = || {
        std::fs::read_dir(cwd.join(".fleetctl/experiments"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .any(|t| t.contains(&e_sha) && t.contains("\"progress\": \"deployed\""))
    };
    while !deployed() && Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    std::thread::sleep(std::time::Duration::from_secs(2));
    let killed = lab
        .ssh(0, "kill -9 $(cat /data/prover/run/prover.pid)")
        .expect("ssh kill");
    assert!(killed.status.success(), "kill the canary's daemon");
    let r = Run::from(child.wait_with_output().expect("fleetctl ends"));
    assert_eq!(r.code, Some(4), "a canary that crashed\n{}", r.show());
    let j = json(&cwd.join("dies.json"));
    assert_eq!(j["verdict"], "fail", "{}", r.show());
    assert_eq!(j["action"], "restore", "{}", r.show());
    assert!(
        j["reason"]
            .as_str()
            .unwrap_or("")
            .contains("daemon of canary h01"),
        "{j}"
    );
    assert!(
        j["analysis"]["canary"]["counts"]["unrecorded_failures"].as_u64() >= Some(1),
        "failed jobs without records count: {j}"
    );
    for i in 0..4 {
        assert!(
            current_release(&lab, i).ends_with(&a_sha),
            "h0{} on the baseline release after the crashed canary",
            i + 1
        );
    }
    let serving = lab
        .ssh(
            0,
            "cd /data/prover && current/prover client status --config current/prover.toml",
        )
        .expect("ssh status");
    assert!(
        serving.status.success(),
        "h01 serves again: {}",
        String::from_utf8_lossy(&serving.stderr)
    );
    eprintln!("crashed canary: {:.1}s", t.elapsed().as_secs_f64());

    // 5. Ctrl-C while the workload runs: the canaries are restored, exit 130.
    let t = Instant::now();
    let d = variant(cwd, "prover-interrupted");
    std::fs::write(
        cwd.join("long.yaml"),
        definition(
            "long",
            None,
            "    - { metric: total, critical: true }\n",
            "3%",
        )
        .replace("jobs: 12", "duration: 5m"),
    )
    .expect("definition");
    let child = Command::new(binary("fleetctl"))
        .args(
            [
                &["experiment", "-f", "long.yaml", "--plain", "--binary"][..],
                &[d.to_str().expect("utf-8")],
                &base,
            ]
            .concat(),
        )
        .current_dir(cwd)
        .env_remove("FLEETCTL_STATE_DIR")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn fleetctl");
    // Wait (bounded) until the canaries run the candidate and the load is on.
    let deadline = Instant::now() + std::time::Duration::from_secs(120);
    let measuring = || {
        std::fs::read_dir(cwd.join(".fleetctl/experiments"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .any(|t| t.contains("\"progress\": \"deployed\""))
    };
    while !measuring() && Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    std::thread::sleep(std::time::Duration::from_secs(3));
    // SAFETY: kill has no memory preconditions; the pid is our own child's.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let r = Run::from(child.wait_with_output().expect("fleetctl ends"));
    assert_eq!(r.code, Some(130), "interrupted experiment\n{}", r.show());
    assert!(
        r.stdout
            .contains("resume with: fleetctl experiment --resume exp-"),
        "{}",
        r.show()
    );
    for i in 0..4 {
        assert!(
            current_release(&lab, i).ends_with(&a_sha),
            "h0{} on the baseline release after Ctrl-C",
            i + 1
        );
    }
    eprintln!("interrupted experiment: {:.1}s", t.elapsed().as_secs_f64());

    lab.teardown().expect("lab teardown");
    eprintln!("lab experiment test: {:.1}s", begin.elapsed().as_secs_f64());
}
