//! End to end: the `fleetctl` binary rolls the real `prover` out to a lab
//! fleet of real sshd hosts (root only; skipped with a message otherwise),
//! and the main job, `fleetctl rollout` on the local inventory.
//!
//! Needs `target/debug/{fleetctl,prover}` (`cargo build --workspace --bins`);
//! `FLEET_TESTS_PROVER` picks another prover binary (e.g. a release build).

use fleet_tests::{binary, prover, Run, FLEETCTL_LIMIT, LAB_DAEMON_CONFIG};
use fleetctl::audit;
use fleetctl::executor::{Event, EventKind, HostStatus};
use fleetctl::lab::Lab;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// What the rollout tests read from a finished fleetctl run.
trait RunExt {
    fn row(&self, host: &str) -> &str;
    fn audit(&self, cwd: &Path) -> Vec<Event>;
}

impl RunExt for Run {
    /// The table row of `host`.
    fn row(&self, host: &str) -> &str {
        let cell = format!("│ {host} ");
        self.stdout
            .lines()
            .find(|l| l.starts_with(&cell))
            .unwrap_or_else(|| panic!("no row for {host}\n{}", self.show()))
    }

    fn audit(&self, cwd: &Path) -> Vec<Event> {
        let line = self
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("audit log: "))
            .unwrap_or_else(|| panic!("no audit log path\n{}", self.show()));
        audit::read(&cwd.join(line)).expect("audit log reads back")
    }
}

fn fleetctl(cwd: &Path, args: &[&str]) -> Run {
    let out = fleet_testkit::output_within(
        Command::new(binary("fleetctl"))
            .args(args)
            .arg("--plain")
            .current_dir(cwd)
            .env_remove("FLEETCTL_STATE_DIR"),
        FLEETCTL_LIMIT,
    );
    Run::from(out)
}

fn steps_of<'a>(events: &'a [Event], host: &str) -> Vec<(&'a str, &'static str)> {
    events
        .iter()
        .filter(|e| e.host.as_deref() == Some(host))
        .filter_map(|e| match &e.kind {
            EventKind::StepFinished { step, skipped, .. } => {
                Some((step.as_str(), if *skipped { "skipped" } else { "done" }))
            }
            EventKind::StepFailed { step, .. } => Some((step.as_str(), "failed")),
            _ => None,
        })
        .collect()
}

/// The lab test's working directory: prover configs, a second build.
struct Workdir {
    dir: tempfile::TempDir,
}

impl Workdir {
    fn new() -> Workdir {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("prover.toml"), LAB_DAEMON_CONFIG).expect("write config");
        // A config the daemon refuses at start: the new build never comes up.
        let broken = LAB_DAEMON_CONFIG.replace("127.0.0.1:7878", "not-an-address");
        std::fs::write(dir.path().join("broken.toml"), broken).expect("write config");
        Workdir { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The same prover with bytes appended: a different release id.
    fn second_build(&self) -> PathBuf {
        let path = self.path().join("prover-b");
        let mut bytes = std::fs::read(prover()).expect("read prover");
        bytes.extend_from_slice(b"\nsecond build\n");
        std::fs::write(&path, bytes).expect("write build b");
        let mut perm = std::fs::metadata(&path).expect("stat").permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
        std::fs::set_permissions(&path, perm).expect("chmod");
        path
    }
}

/// The first 12 digits of the release id of `binary` shipped with `config`.
fn short_id(binary: &Path, config: &Path) -> String {
    crate::release_id(binary, config)[..12].to_string()
}

#[test]
fn rollout_on_a_lab_of_eight() {
    if !fleet_testkit::have_lab() {
        return;
    }
    let _turn = crate::lab_turn();
    let begin = Instant::now();
    let lab = Lab::start(8).expect("lab of 8 hosts");
    let work = Workdir::new();
    let cwd = work.path();
    let inv = lab.inventory_path();
    let inv = inv.to_str().expect("utf-8 path");
    let a = prover();
    let a_str = a.to_str().expect("utf-8 path");
    let a_sha = short_id(&a, &cwd.join("prover.toml"));
    let base = ["-i", inv, "-e", "config_file=prover.toml"];
    let with = |extra: &[&str]| -> Vec<String> {
        base.iter().chain(extra).map(|s| s.to_string()).collect()
    };
    let run = |args: Vec<String>| {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        fleetctl(cwd, &refs)
    };

    // 1. First rollout: canary alone, then batches of three; all healthy.
    let first = {
        let mut args = vec![
            "rollout".to_string(),
            "--binary".into(),
            a_str.into(),
            "--summary-json".into(),
            "first.json".into(),
        ];
        args.extend(with(&[]));
        run(args)
    };
    assert_eq!(first.code, Some(0), "{}", first.show());
    // Every host's serving gap, in the JSON summary and under the table.
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(cwd.join("first.json")).expect("summary"))
            .expect("summary JSON");
    assert_eq!(summary["serving_gap"]["hosts"], 8, "{summary}");
    for h in summary["hosts"].as_array().expect("hosts") {
        assert!(h["serving_gap_ms"].as_u64().is_some(), "{h}");
        assert_eq!(h["steps"]["prepare"]["state"], "done", "{h}");
    }
    assert!(
        first.stdout.contains("serving gap over 8 host(s): sum "),
        "{}",
        first.show()
    );
    for i in 1..=8 {
        let row = first.row(&format!("h{i:02}"));
        assert!(
            row.contains(" ok ") && row.contains(&a_sha),
            "{row}\n{}",
            first.show()
        );
    }
    let events = first.audit(cwd);
    let batches: Vec<Vec<String>> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::BatchStarted { hosts, .. } => Some(hosts.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        batches,
        vec![
            vec!["h01"],
            vec!["h02", "h03", "h04"],
            vec!["h05", "h06", "h07"],
            vec!["h08"]
        ],
        "{}",
        first.show()
    );
    assert!(
        steps_of(&events, "h05").contains(&("smoke", "done")),
        "{}",
        first.show()
    );
    assert!(
        first
            .stdout
            .contains("h01: smoke: chain proof of size 1024 verified"),
        "{}",
        first.show()
    );
    eprintln!(
        "first rollout of 8 hosts: {:.1}s",
        begin.elapsed().as_secs_f64()
    );

    // 2. The same build again: every upload is skipped.
    let t = Instant::now();
    let mut args = vec![
        "rollout".to_string(),
        "--binary".into(),
        a_str.into(),
        "--limit".into(),
        "h01,h02".into(),
    ];
    args.extend(with(&[]));
    let again = run(args);
    assert_eq!(again.code, Some(0), "{}", again.show());
    let events = again.audit(cwd);
    for h in ["h01", "h02"] {
        let steps = steps_of(&events, h);
        assert!(
            steps.contains(&("upload", "skipped")),
            "{h}\n{}",
            again.show()
        );
        // Over real ssh, with the real daemon: started beside the old one,
        // which handed over; nothing was left to start.
        for step in [
            ("handover", "done"),
            ("drain", "done"),
            ("start", "skipped"),
        ] {
            assert!(
                steps.contains(&step),
                "{h}: {step:?} in {steps:?}\n{}",
                again.show()
            );
        }
    }
    eprintln!(
        "second rollout of 2 hosts (upload skipped): {:.1}s",
        t.elapsed().as_secs_f64()
    );

    // 3. A new build whose daemon cannot start on h03: h03 is rolled back to
    //    the previous build and keeps serving it; exit code says a host failed.
    //    (`prepare` would refuse this config before the drain, see
    //    `prepare_failures_leave_the_old_daemon_serving`, and `handover`
    //    would catch the daemon that cannot start before it: a playbook
    //    without either exercises the rollback.)
    let b = work.second_build();
    let unprepared = fleetctl::playbook::builtin("rollout")
        .map(|pb| {
            pb.text
                .lines()
                .filter(|l| {
                    let l = l.trim_start();
                    !l.starts_with("- prepare") && !l.starts_with("- handover")
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .expect("built-in rollout");
    std::fs::write(cwd.join("unprepared.yaml"), unprepared).expect("write playbook");
    let mut args = vec![
        "run".to_string(),
        "-p".into(),
        "./unprepared.yaml".into(),
        "--binary".into(),
        b.to_string_lossy().into_owned(),
        "--limit".into(),
        "h03".into(),
        "-i".into(),
        inv.into(),
        "-e".into(),
        "config_file=broken.toml".into(),
    ];
    let broken = run(std::mem::take(&mut args));
    assert_eq!(broken.code, Some(2), "{}", broken.show());
    let row = broken.row("h03");
    assert!(
        row.contains("FAILED") && row.contains(&a_sha),
        "build column shows the old build: {row}\n{}",
        broken.show()
    );
    let events = broken.audit(cwd);
    let h03 = steps_of(&events, "h03");
    assert!(
        h03.contains(&("rollback", "done")),
        "{h03:?}\n{}",
        broken.show()
    );
    assert!(
        broken
            .stdout
            .contains("rolled back to the previous release"),
        "{}",
        broken.show()
    );
    let current = lab
        .ssh(2, "readlink /data/prover/current")
        .expect("ssh h03");
    let current = String::from_utf8_lossy(&current.stdout);
    assert!(
        current.contains(&a_sha),
        "h03 serves the previous build: {current}"
    );
    // ... and it is healthy on it.
    let mut args = vec![
        "run".to_string(),
        "-p".into(),
        "health".into(),
        "--limit".into(),
        "h03".into(),
    ];
    args.extend(with(&[]));
    let health = run(args);
    assert_eq!(health.code, Some(0), "{}", health.show());

    // 4. A host down before the rollout: reported unreachable, the others
    //    succeed, exit code non-zero.
    lab.stop_sshd(7).expect("stop sshd on h08");
    let mut args = vec![
        "rollout".to_string(),
        "--binary".into(),
        a_str.into(),
        "--limit".into(),
        "h06,h07,h08".into(),
    ];
    args.extend(with(&[]));
    let down = run(args);
    assert_eq!(down.code, Some(2), "{}", down.show());
    assert!(down.row("h08").contains("UNREACHABLE"), "{}", down.show());
    assert!(down.row("h06").contains(" ok "), "{}", down.show());
    assert!(down.row("h07").contains(" ok "), "{}", down.show());
    lab.start_sshd(7).expect("start sshd on h08");

    // 5. Two rollouts at once on one host: one holds the lock, the other is refused.
    let rollout = || {
        let mut cmd = Command::new(binary("fleetctl"));
        cmd.args(["rollout", "--plain", "--binary", a_str, "--limit", "h04"])
            .args(base)
            .current_dir(cwd);
        Run::from(fleet_testkit::output_within(&mut cmd, FLEETCTL_LIMIT))
    };
    let (r1, r2) = std::thread::scope(|s| {
        let first = s.spawn(rollout);
        let second = s.spawn(rollout);
        (
            first.join().expect("first rollout"),
            second.join().expect("second rollout"),
        )
    });
    let mut codes = [r1.code, r2.code];
    codes.sort();
    assert_eq!(codes, [Some(0), Some(2)], "{}\n{}", r1.show(), r2.show());
    let refused = if r1.code == Some(2) { &r1 } else { &r2 };
    assert!(refused.row("h04").contains("LOCKED"), "{}", refused.show());
    assert!(
        refused.stdout.contains("host is locked by"),
        "{}",
        refused.show()
    );

    // 6. Malformed inventory and playbook: exit 1, located, nothing run.
    let bad_inv = cwd.join("bad-inventory.yaml");
    let text = std::fs::read_to_string(lab.inventory_path()).expect("read inventory");
    std::fs::write(&bad_inv, text.replace("  port: 22", "  port: twenty-two")).expect("write");
    let r = fleetctl(
        cwd,
        &["rollout", "-i", "bad-inventory.yaml", "--binary", a_str],
    );
    assert_eq!(r.code, Some(1), "{}", r.show());
    assert!(
        r.stderr.contains("bad-inventory.yaml:") && r.stderr.contains("expected form:"),
        "{}",
        r.show()
    );
    std::fs::write(
        cwd.join("bad.yaml"),
        "name: x\nsteps:\n  - drain: { timeout: soon }\n",
    )
    .expect("write");
    let mut args = vec!["run".to_string(), "-p".into(), "./bad.yaml".into()];
    args.extend(with(&[]));
    let r = run(args);
    assert_eq!(r.code, Some(1), "{}", r.show());
    assert!(r.stderr.contains("bad.yaml:3:"), "{}", r.show());
    assert!(!r.stdout.contains("│ h0"), "nothing ran: {}", r.show());

    lab.teardown().expect("lab teardown");
    eprintln!("lab rollout test: {:.1}s", begin.elapsed().as_secs_f64());
}

/// The daemon's pid on lab host `i` (0-based), from its pid file.
fn lab_daemon_pid(lab: &Lab, i: usize) -> String {
    let out = lab.ssh(i, "cat /data/prover/run/prover.pid").expect("ssh");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// An upload with no space left, and a prepare failure (a config the new binary refuses, a parameter file
/// the config preloads that is missing, kernels that do not compile) on
/// a real host: the old daemon serves on (same pid, `current` unchanged),
/// nothing was drained, the table names the cause, and the new release is
/// not marked prepared. Then a serving-gap budget no host can meet: the
/// host fails after its swap and is rolled back.
#[test]
fn prepare_failures_leave_the_old_daemon_serving() {
    if !fleet_testkit::have_lab() {
        return;
    }
    let _turn = crate::lab_turn();
    let lab = Lab::start(1).expect("lab of 1 host");
    let work = Workdir::new();
    let cwd = work.path();
    let inv = lab.inventory_path();
    let inv = inv.to_str().expect("utf-8 path");
    let a = prover();
    let a_str = a.to_str().expect("utf-8 path");
    let a_sha = short_id(&a, &cwd.join("prover.toml"));
    let b = work.second_build();
    let b_str = b.to_str().expect("utf-8 path");
    let b_sha = crate::release_id(&b, &cwd.join("prover.toml"));
    let rollout = |binary: &str, config: &str, playbook: &str| {
        let cfg = format!("config_file={config}");
        fleetctl(
            cwd,
            &[
                "run", "-p", playbook, "--binary", binary, "-i", inv, "-e", &cfg,
            ],
        )
    };
    let first = rollout(a_str, "prover.toml", "rollout");
    assert_eq!(first.code, Some(0), "{}", first.show());
    let pid = lab_daemon_pid(&lab, 0);

    // No space for the upload: /data just above what it holds now.
    let used = lab.data_used(0).expect("data used");
    lab.set_data_size(0, used + (4 << 20))
        .expect("shrink /data");
    let full = rollout(b_str, "prover.toml", "rollout");
    lab.set_data_size(0, fleetctl::lab::DEFAULT_DATA_SIZE)
        .expect("grow /data again");
    assert_eq!(full.code, Some(2), "{}", full.show());
    assert!(full.row("h01").contains(&a_sha), "{}", full.show());
    assert!(full.stdout.contains("disk is full"), "{}", full.show());
    let events = full.audit(cwd);
    let steps = steps_of(&events, "h01");
    assert!(steps.contains(&("upload", "failed")), "{steps:?}");
    assert!(!steps.iter().any(|(s, _)| *s == "drain"), "{steps:?}");
    assert_eq!(lab_daemon_pid(&lab, 0), pid, "the old daemon serves on");
    let left = lab
        .ssh(
            0,
            &format!("ls -A /data/prover/releases/{b_sha} 2>/dev/null"),
        )
        .expect("ssh");
    assert_eq!(
        String::from_utf8_lossy(&left.stdout).trim(),
        "",
        "nothing half-written"
    );

    std::fs::write(
        cwd.join("no-params.toml"),
        LAB_DAEMON_CONFIG
            .replace("test_params = true", "test_params = false")
            .replace("size = 1024", "size = 2048"),
    )
    .expect("write config");
    let rollout_yaml = fleetctl::playbook::builtin("rollout")
        .expect("built-in rollout")
        .text;
    std::fs::write(
        cwd.join("bad-arch.yaml"),
        rollout_yaml.replace("- prepare: { timeout: 10m }", "- prepare: { arch: sm_11 }"),
    )
    .expect("write playbook");
    let cases = [
        (
            "broken.toml",
            "rollout",
            "the new binary refuses the config",
        ),
        ("no-params.toml", "rollout", "preload[0] chain/2048"),
        (
            "prover.toml",
            "./bad-arch.yaml",
            "kernel compilation failed",
        ),
    ];
    for (config, playbook, cause) in cases {
        let r = rollout(b_str, config, playbook);
        assert_eq!(r.code, Some(2), "{config}: {}", r.show());
        let row = r.row("h01");
        assert!(
            row.contains("FAILED") && row.contains(&a_sha),
            "{row}\n{}",
            r.show()
        );
        assert!(r.stdout.contains(cause), "{config}: {}", r.show());
        let events = r.audit(cwd);
        let steps = steps_of(&events, "h01");
        assert!(steps.contains(&("prepare", "failed")), "{steps:?}");
        assert!(
            !steps.iter().any(|(s, _)| *s == "drain" || *s == "rollback"),
            "nothing was drained: {steps:?}"
        );
        assert_eq!(lab_daemon_pid(&lab, 0), pid, "the old daemon serves on");
        let current = lab.ssh(0, "readlink /data/prover/current").expect("ssh");
        assert!(String::from_utf8_lossy(&current.stdout).contains(&a_sha));
        let marker = lab
            .ssh(
                0,
                &format!(
                    "test -e /data/prover/releases/{}/.prepared && echo marked",
                    crate::release_id(&b, &cwd.join(config))
                ),
            )
            .expect("ssh");
        assert!(!String::from_utf8_lossy(&marker.stdout).contains("marked"));
    }

    // A serving-gap budget of 1 ms: a swap without the handover (drain,
    // then start) exceeds it as clients see it. (A handover's own outage is
    // the successor's takeover poll, 20 ms, under the probe's 50 ms.)
    let without_handover: String = rollout_yaml
        .lines()
        .filter(|l| !l.trim_start().starts_with("- handover:"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(
        cwd.join("tight.yaml"),
        without_handover.replace(
            "  rollback_on_failure: true\n",
            "  rollback_on_failure: true\n  max_serving_gap: 1ms\n",
        ),
    )
    .expect("write playbook");
    // The new daemon generates its preload's TEST-ONLY parameters before it
    // is ready (a fraction of a second): an outage the 50 ms probe cannot
    // miss, however fast the drain and the start are on an idle host.
    std::fs::write(
        cwd.join("slow-start.toml"),
        LAB_DAEMON_CONFIG.replace("size = 1024", "size = 32768"),
    )
    .expect("write config");
    let r = rollout(b_str, "slow-start.toml", "./tight.yaml");
    assert_eq!(r.code, Some(2), "{}", r.show());
    assert!(
        r.stdout.contains("more than max_serving_gap 1ms"),
        "{}",
        r.show()
    );
    let events = r.audit(cwd);
    let steps = steps_of(&events, "h01");
    assert!(steps.contains(&("serving_gap", "failed")), "{steps:?}");
    assert!(steps.contains(&("rollback", "done")), "{steps:?}");
    let current = lab.ssh(0, "readlink /data/prover/current").expect("ssh");
    assert!(String::from_utf8_lossy(&current.stdout).contains(&a_sha));
    lab.teardown().expect("lab teardown");
}

/// Stops the daemon the main-job test started, by its pid file.
struct LocalDaemon {
    pid_file: PathBuf,
}

impl Drop for LocalDaemon {
    fn drop(&mut self) {
        let Some(pid) = std::fs::read_to_string(&self.pid_file)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
        else {
            return;
        };
        let _ = Command::new("kill").arg(pid.to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        if Path::new(&format!("/proc/{pid}")).exists() {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

/// The shipped local config on port 0, with `extra` TOML after it, written
/// to `cwd/name`: a developer's own local rollout may be serving on the
/// shipped port. The daemon records the port it bound beside its pid file,
/// where the smoke and health steps' `prover client` and `prover health`
/// find it.
fn local_config(cwd: &Path, name: &str, extra: &str) -> PathBuf {
    let shipped = std::fs::read_to_string(repo().join("inventories/files/prover-local.toml"))
        .expect("read the shipped local config");
    assert!(
        shipped.contains("127.0.0.1:17878"),
        "shipped config changed its listen address"
    );
    let config = cwd.join(name);
    std::fs::write(
        &config,
        shipped.replace("127.0.0.1:17878", "127.0.0.1:0") + extra,
    )
    .expect("write config");
    config
}

/// `fleetctl ARGS` on the shipped local inventory with `config` and the
/// prover binary `binary`.
fn fleetctl_local(cwd: &Path, args: &[&str], config: &Path, binary: &Path) -> Run {
    let inv = repo().join("inventories/local.yaml");
    let config_var = format!("config_file={}", config.display());
    let mut all = args.to_vec();
    all.extend([
        "-i",
        inv.to_str().expect("utf-8"),
        "-e",
        &config_var,
        "--binary",
        binary.to_str().expect("utf-8"),
    ]);
    fleetctl(cwd, &all)
}

#[test]
fn main_job_rollout_on_the_local_inventory() {
    let work = tempfile::tempdir().expect("temp dir");
    let cwd = work.path();
    let _daemon = LocalDaemon {
        pid_file: cwd.join(".deploy/local/run/prover.pid"),
    };
    let config = local_config(cwd, "prover-local.toml", "");
    let p = prover();
    let t = Instant::now();
    let r = fleetctl_local(cwd, &["rollout"], &config, &p);
    assert_eq!(r.code, Some(0), "{}", r.show());
    let row = r.row("local");
    assert!(
        row.contains(" ok ") && row.contains(&short_id(&p, &config)),
        "{}",
        r.show()
    );
    assert!(
        r.stdout
            .contains("local: smoke: chain proof of size 1024 verified"),
        "{}",
        r.show()
    );
    let events = r.audit(cwd);
    let statuses: Vec<HostStatus> = events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::HostFinished { status, .. } => Some(status),
            _ => None,
        })
        .collect();
    assert_eq!(statuses, vec![HostStatus::Ok]);
    assert!(
        steps_of(&events, "local").contains(&("health", "done")),
        "{}",
        r.show()
    );
    assert!(cwd.join(".deploy/local/current/prover").is_file());
    eprintln!(
        "main job (local rollout): {:.1}s",
        t.elapsed().as_secs_f64()
    );
}

/// fleetctl's smoke sends the built-in 2 KiB C2 as Curio does: one gRPC
/// `Prove` to the daemon's unix socket (`prover client c2 --grpc` on the
/// host), proved by the real daemon on TEST-ONLY parameters and verified
/// before the answer; a playbook run on the local inventory.
#[test]
fn a_grpc_smoke_proves_the_built_in_c2_over_the_daemons_socket() {
    let work = tempfile::tempdir().expect("temp dir");
    let cwd = work.path();
    let _daemon = LocalDaemon {
        pid_file: cwd.join(".deploy/local/run/prover.pid"),
    };
    let p = prover();
    let t = Instant::now();
    let cache = cwd.join("fil-params");
    let setup = Command::new(&p)
        .args(["setup", "--filecoin", "StackedDrg2KiBV1_1", "--param-cache"])
        .arg(&cache)
        .output()
        .expect("prover setup runs");
    assert!(
        setup.status.success(),
        "{}",
        String::from_utf8_lossy(&setup.stderr)
    );
    let config = local_config(
        cwd,
        "prover-grpc.toml",
        &format!(
            "\n[filecoin]\nparam_cache = {:?}\nallow_test_params = true\n\n[grpc]\nsocket = \"run/cuzk.sock\"\n",
            cache.display().to_string()
        ),
    );
    eprintln!("TEST-ONLY 2 KiB setup: {:.1}s", t.elapsed().as_secs_f64());
    let playbook = cwd.join("grpc-smoke.yaml");
    std::fs::write(
        &playbook,
        "name: grpc-smoke\nsteps:\n  - upload: {}\n  - start: {}\n  - verify: {}\n  - smoke: {kind: porep-c2, grpc: true, timeout: 5m}\n  - drain: {timeout: 60s, stop: true}\n",
    )
    .expect("write playbook");
    let r = fleetctl_local(
        cwd,
        &["run", "-p", playbook.to_str().expect("utf-8")],
        &config,
        &p,
    );
    assert_eq!(r.code, Some(0), "{}", r.show());
    assert!(
        r.stdout.contains(
            "local: smoke: porep-c2 of built-in porep-c2-2KiB.json (StackedDrg2KiBV1_1 sector "
        ) && r.stdout.contains("1 partition(s) verified"),
        "{}",
        r.show()
    );
    let log =
        std::fs::read_to_string(cwd.join(".deploy/local/logs/prover.log")).unwrap_or_default();
    assert!(log.contains("gRPC listening"), "{log}");
    eprintln!(
        "gRPC smoke run: {:.1}s\n{}",
        t.elapsed().as_secs_f64(),
        r.stdout
    );
}
