//! End to end on a lab of 8 real sshd hosts running the real prover daemon:
//! `fleetctl status`, `fleetctl health` (policy gate, forced failure, a host
//! down) and `fleetctl timing collect|report|export` (incremental, rotation,
//! interrupted and resumed, figures checked against the hosts' own files,
//! the HTML report rendered in headless Chromium).

use fleet_tests::{fleetctl, prover, Run};
use fleet_wire::timing::TimingLine;
use fleetctl::lab::Lab;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The lab daemon config with a rotation every few KiB, so a handful of
/// proofs rotate the timing log, and enough rotations kept to lose nothing.
fn config() -> String {
    fleet_tests::LAB_DAEMON_CONFIG.replace(
        "params_dir = \"params\"",
        "params_dir = \"params\"\ntiming_rotate_bytes = \"6KiB\"\ntiming_keep = 100",
    )
}

/// Every timing line on a host (all files), as a multiset.
fn remote_lines(lab: &Lab, i: usize) -> BTreeMap<String, usize> {
    let out = lab
        .exec(
            i,
            &[
                "sh",
                "-c",
                "cat /data/prover/logs/timing.jsonl* 2>/dev/null; true",
            ],
        )
        .expect("read host files");
    multiset(&String::from_utf8_lossy(&out.stdout))
}

/// Every line fetched into the store for a host, as a multiset.
fn store_lines(store: &Path, host: &str) -> BTreeMap<String, usize> {
    let mut text = String::new();
    for e in std::fs::read_dir(store.join(host)).expect("host folder") {
        let e = e.expect("entry");
        if !e.file_name().to_string_lossy().starts_with('.') {
            text.push_str(&std::fs::read_to_string(e.path()).expect("read"));
        }
    }
    multiset(&text)
}

fn multiset(text: &str) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for l in text.lines().filter(|l| !l.trim().is_empty()) {
        *m.entry(l.to_string()).or_insert(0) += 1;
    }
    m
}

fn json(run: &Run) -> serde_json::Value {
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("not JSON ({e})\n{}", run.show()))
}

fn prove_on(lab: &Lab, i: usize) {
    let out = lab
        .ssh(
            i,
            "cd /data/prover && current/prover client submit --config current/prover.toml --circuit chain --size 1024 --wait --timeout 120s",
        )
        .expect("ssh");
    assert!(
        out.status.success(),
        "proof on host {i}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn status_health_and_timing_on_a_lab_of_eight() {
    if !fleet_testkit::have_lab() {
        return;
    }
    let _turn = crate::lab_turn();
    let lab = Lab::start(8).expect("lab starts");
    let work = tempfile::tempdir().expect("tempdir");
    let cwd = work.path();
    std::fs::write(cwd.join("prover.toml"), config()).expect("config");
    let inv = lab.inventory_path();
    let inv = inv.to_str().expect("utf-8 path");
    let prover = prover();
    let prover = prover.to_str().expect("utf-8 path");

    // Deploy the real daemon everywhere (the rollout itself is tested in rollout.rs).
    let r = fleetctl(
        cwd,
        &[
            "run",
            "-p",
            "rollout",
            "-i",
            inv,
            "-e",
            "config_file=prover.toml",
            "--binary",
            prover,
            "--plain",
        ],
    );
    assert_eq!(r.code, Some(0), "rollout\n{}", r.show());

    // --- status: one row per host, every host reachable with a live daemon.
    let r = fleetctl(cwd, &["status", "-i", inv, "--json"]);
    assert_eq!(r.code, Some(0), "{}", r.show());
    let rows = json(&r);
    let rows = rows.as_array().expect("array");
    assert_eq!(rows.len(), 8);
    let builds: Vec<&str> = rows
        .iter()
        .map(|h| {
            assert_eq!(h["reachable"], true, "{h}");
            assert_eq!(h["probe"]["daemon"]["alive"], true, "{h}");
            assert_eq!(h["status"]["queue"]["depth"], 0, "{h}");
            h["probe"]["daemon"]["build"].as_str().expect("build")
        })
        .collect();
    assert!(
        builds.windows(2).all(|w| w[0] == w[1]),
        "one build everywhere: {builds:?}"
    );
    let table = fleetctl(cwd, &["status", "-i", inv]);
    assert!(
        table.stdout.contains("│ h08 ") && table.stdout.contains(builds[0]),
        "{}",
        table.show()
    );
    // The release the rollout table names, under the same name, beside
    // the daemon's git build.
    let release = crate::release_id(Path::new(prover), &cwd.join("prover.toml"));
    assert!(
        table.stdout.contains("release")
            && table.stdout.contains("git build")
            && table.stdout.matches(&release[..12]).count() == 8,
        "{}",
        table.show()
    );
    assert!(
        rows.iter().all(|h| h["release"] == release.as_str()),
        "{rows:?}"
    );

    // --- health: CPU hosts pass the default policy.
    let r = fleetctl(cwd, &["health", "-i", inv, "--json", "--history", "hist"]);
    assert_eq!(r.code, Some(0), "{}", r.show());
    for v in json(&r).as_array().expect("array") {
        assert_eq!(v["severity"], "OK", "{v}");
    }

    // --- timing collect: every host's lines arrive once.
    let store = cwd.join("store");
    let store_s = store.to_str().expect("utf-8");
    let r = fleetctl(cwd, &["timing", "collect", "-i", inv, "--store", store_s]);
    assert_eq!(r.code, Some(0), "{}", r.show());
    for (i, h) in lab.hosts().iter().enumerate() {
        let remote = remote_lines(&lab, i);
        assert!(
            !remote.is_empty(),
            "{}: the smoke proof wrote timing records",
            h.name
        );
        assert_eq!(
            store_lines(&store, &h.name),
            remote,
            "{}: store equals host",
            h.name
        );
    }
    // Again: nothing new, nothing re-fetched.
    let r = fleetctl(cwd, &["timing", "collect", "-i", inv, "--store", store_s]);
    assert!(
        r.stdout.contains("collected 0 new bytes from 8 hosts"),
        "{}",
        r.show()
    );

    // Rotation on h01: more proofs roll timing.jsonl over several times.
    for _ in 0..4 {
        prove_on(&lab, 0);
    }
    let files = lab
        .exec(0, &["sh", "-c", "ls /data/prover/logs/"])
        .expect("ls");
    let files = String::from_utf8_lossy(&files.stdout).to_string();
    assert!(files.contains("timing.jsonl.1"), "the log rotated: {files}");
    let r = fleetctl(cwd, &["timing", "collect", "-i", inv, "--store", store_s]);
    assert_eq!(r.code, Some(0), "{}", r.show());
    assert_eq!(
        store_lines(&store, "h01"),
        remote_lines(&lab, 0),
        "nothing lost, nothing doubled across rotation"
    );

    // --- report: figures against the hosts' own records, counted here.
    let r = fleetctl(
        cwd,
        &["timing", "report", "--store", store_s, "--format", "json"],
    );
    assert_eq!(r.code, Some(0), "{}", r.show());
    let report = json(&r);
    for (i, h) in lab.hosts().iter().enumerate() {
        let remote = remote_lines(&lab, i);
        let (mut partitions, mut synthesis) = (0u64, Vec::new());
        for (line, n) in &remote {
            if let Ok(TimingLine::Partition(p)) = TimingLine::parse(line) {
                partitions += *n as u64;
                for _ in 0..*n {
                    synthesis.push(p.phases_ms[&fleet_wire::timing::Phase::Synthesis]);
                }
            }
        }
        let sec = report["hosts"]
            .as_array()
            .expect("hosts")
            .iter()
            .find(|s| s["host"] == h.name.as_str())
            .unwrap_or_else(|| panic!("{} in report", h.name));
        assert_eq!(sec["partitions"], partitions, "{}", h.name);
        let max = synthesis.iter().cloned().fold(0.0, f64::max);
        let got = sec["phases"]
            .as_array()
            .expect("phases")
            .iter()
            .find(|p| p["phase"] == "synthesis")
            .expect("synthesis phase")["max_ms"]
            .as_f64()
            .expect("max");
        assert!(
            (got - max).abs() <= max * 0.002 + 0.002,
            "{}: max {got} vs {max}",
            h.name
        );
    }

    // --- export: one textfile per host.
    let prom = cwd.join("prom");
    let r = fleetctl(
        cwd,
        &[
            "timing",
            "export",
            "--store",
            store_s,
            "--prometheus",
            prom.to_str().expect("utf-8"),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.show());
    let n = std::fs::read_dir(&prom).expect("prom dir").count();
    assert_eq!(n, 8);

    // --- HTML rendered by headless Chromium: the charts drew.
    let html = cwd.join("report.html");
    let r = fleetctl(
        cwd,
        &[
            "timing",
            "report",
            "--store",
            store_s,
            "--format",
            "html",
            "--out",
            html.to_str().expect("utf-8"),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.show());
    screenshot_shows_charts(&html, cwd);

    // --- interrupted collect: killed once it has fetched a part, then resumed.
    // 256 KiB of h01's own records in one more rotated file (after the
    // report, whose figures it would change) make 64 chunks of 4 KiB, one
    // command each: the collect is still fetching when the first chunk's
    // state lands.
    let pad = "cd /data/prover/logs && cat timing.jsonl* > ../records && : > ../pad && \
               while [ $(wc -c < ../pad) -lt 262144 ]; do cat ../records >> ../pad; done && \
               mv ../pad timing.jsonl.99 && rm ../records";
    let out = lab.exec(0, &["sh", "-c", pad]).expect("pad h01's log");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let store2 = cwd.join("store2");
    let store2_s = store2.to_str().expect("utf-8");
    let mut child = fleet_testkit::spawn_within(
        Command::new(fleet_tests::binary("fleetctl"))
            .args([
                "timing",
                "collect",
                "-i",
                inv,
                "--limit",
                "h01",
                "--store",
                store2_s,
                "--chunk-bytes",
                "4096",
            ])
            .current_dir(cwd),
        Duration::from_secs(120),
    );
    let state = store2.join("h01/.collect.json");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !state.exists() {
        assert!(!child.has_exited(), "collect ended before fetching a chunk");
        assert!(Instant::now() < deadline, "collect fetched nothing in 60 s");
        std::thread::sleep(Duration::from_millis(1));
    }
    // SAFETY: kill(2) has no memory preconditions.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
    let killed = child.output();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&killed.status),
        Some(libc::SIGKILL),
        "the collect had ended by itself ({}): nothing was interrupted",
        killed.status
    );
    assert!(
        !String::from_utf8_lossy(&killed.stdout).contains("collected"),
        "a killed collect prints no summary"
    );
    let partial: usize = store_lines(&store2, "h01").values().sum();
    let total: usize = remote_lines(&lab, 0).values().sum();
    assert!(
        0 < partial && partial < total,
        "the interrupted collect had fetched {partial} of {total} lines"
    );
    let r = fleetctl(
        cwd,
        &[
            "timing", "collect", "-i", inv, "--limit", "h01", "--store", store2_s,
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.show());
    assert_eq!(
        store_lines(&store2, "h01"),
        remote_lines(&lab, 0),
        "resumed collect is complete and not doubled"
    );

    // --- health with a forced policy: a dead daemon fails its host only.
    lab.kill_processes(2).expect("kill h03's processes");
    let r = fleetctl(
        cwd,
        &[
            "health",
            "-i",
            inv,
            "--json",
            "--history",
            "hist",
            "--policy",
            "require_daemon_ready=true",
        ],
    );
    assert_eq!(r.code, Some(2), "{}", r.show());
    for v in json(&r).as_array().expect("array") {
        if v["host"] == "h03" {
            assert_eq!(v["severity"], "FAIL", "{v}");
            assert_eq!(v["findings"][0]["rule"], "daemon_ready", "{v}");
        } else {
            assert_eq!(v["severity"], "OK", "{v}");
        }
    }

    // The default policy fails it too: its rollout left it running, and
    // nothing stopped it on purpose (it was OK, exit 0).
    let r = fleetctl(cwd, &["health", "-i", inv, "--json", "--history", "hist"]);
    assert_eq!(r.code, Some(2), "{}", r.show());
    for v in json(&r).as_array().expect("array") {
        if v["host"] == "h03" {
            assert_eq!(v["severity"], "FAIL", "{v}");
            assert_eq!(v["findings"][0]["rule"], "daemon_down", "{v}");
        } else {
            assert_eq!(v["severity"], "OK", "{v}");
        }
    }

    // --- a host that is down: reported unreachable within the deadline, others answer.
    lab.stop_sshd(7).expect("stop h08's sshd");
    let started = Instant::now();
    let r = fleetctl(cwd, &["status", "-i", inv, "--json", "--deadline", "3s"]);
    let took = started.elapsed();
    assert_eq!(r.code, Some(2), "{}", r.show());
    assert!(took < Duration::from_secs(20), "bounded: {took:?}");
    let rows = json(&r);
    for h in rows.as_array().expect("array") {
        let down = h["host"] == "h08";
        assert_eq!(h["reachable"], !down, "{h}");
        if down {
            assert!(h["error"].as_str().is_some_and(|e| !e.is_empty()), "{h}");
        }
    }
    lab.teardown().expect("teardown");
}

/// Renders the report in headless Chromium and checks that the chart colour
/// (the bars' blue) is on the screenshot. Without Chromium it fails, or
/// records its skip when the run leaves Chromium out.
fn screenshot_shows_charts(html: &Path, cwd: &Path) {
    let Some(shot) = fleet_tests::screenshot(html, cwd, "report") else {
        return;
    };
    let bar_pixels = fleet_tests::pixels_of(&shot, [0x2b, 0x6c, 0xb0], 6);
    assert!(
        bar_pixels > 500,
        "the charts drew ({bar_pixels} bar-coloured pixels)"
    );
}
