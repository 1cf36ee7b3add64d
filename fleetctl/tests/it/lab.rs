//! The lab fleet end to end: real namespaces, real sshd, real ssh. Needs
//! root; without it every test fails, or with `TEST_LEAVE_OUT=lab` records
//! its skip (see `fleet-testkit`).

use fleet_testkit::{have, have_lab, output_within, Need};
use fleetctl::lab::{Lab, LabConfig, LabError, LabHost};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The most a one-shot command of these tests (ip, ssh, fleetctl status) may take.
const SHORT: Duration = Duration::from_secs(60);

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_string()
}

/// What a lab created, to prove afterwards that none of it is left.
#[derive(Debug, Clone)]
struct Footprint {
    id: String,
    dir: PathBuf,
    netns: Vec<String>,
    init_pids: Vec<u32>,
}

impl Footprint {
    fn of(lab: &Lab) -> Footprint {
        Footprint {
            id: lab.id().to_string(),
            dir: lab.dir().to_path_buf(),
            netns: lab.hosts().iter().map(|h| h.netns.clone()).collect(),
            init_pids: lab.hosts().iter().map(|h| h.init_pid).collect(),
        }
    }

    fn assert_gone(&self) {
        let netns = output_within(Command::new("ip").args(["netns", "list"]), SHORT);
        let netns = text(&netns.stdout);
        for ns in &self.netns {
            assert!(
                !netns
                    .lines()
                    .any(|l| l.split_whitespace().next() == Some(ns)),
                "{ns} left in:\n{netns}"
            );
        }
        let links = output_within(Command::new("ip").args(["-o", "link", "show"]), SHORT);
        let links = text(&links.stdout);
        assert!(
            !links.contains(&self.id),
            "links of lab {} left:\n{links}",
            self.id
        );
        for pid in &self.init_pids {
            assert!(
                !Path::new(&format!("/proc/{pid}")).exists(),
                "init pid {pid} still exists"
            );
        }
        assert!(!self.dir.exists(), "{} still exists", self.dir.display());
    }
}

fn ssh_ok(lab: &Lab, index: usize, command: &str) -> String {
    let out = lab.ssh(index, command).expect("ssh runs");
    assert!(
        out.status.success(),
        "ssh {} `{command}`: {}: {}",
        lab.hosts()[index].name,
        out.status,
        text(&out.stderr)
    );
    text(&out.stdout)
}

#[test]
fn eight_hosts_over_real_ssh_each_with_its_own_pid_1_and_data_then_nothing_left() {
    if !have_lab() {
        return;
    }
    let _shared = crate::labs_shared();
    let lab = Lab::start(8).expect("lab of 8 starts");
    let footprint = Footprint::of(&lab);
    assert_eq!(lab.hosts().len(), 8);
    let addresses: BTreeSet<_> = lab.hosts().iter().map(|h| h.address).collect();
    assert_eq!(addresses.len(), 8, "every host has its own address");

    // Real ssh with pinned host keys: each host answers with its own name,
    // its own PID namespace and the lab's init as PID 1.
    let mut pid_namespaces = BTreeSet::new();
    for (i, host) in lab.hosts().iter().enumerate() {
        let out = ssh_ok(
            &lab,
            i,
            "hostname; readlink /proc/self/ns/pid; tr '\\0' ' ' < /proc/1/cmdline",
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert_eq!(lines[0], host.name);
        pid_namespaces.insert(lines[1].to_string());
        assert!(
            lines[2].contains("init.sh"),
            "PID 1 of {} is `{}`",
            host.name,
            lines[2]
        );
    }
    let own = std::fs::read_link("/proc/self/ns/pid").expect("own pid ns");
    assert!(!pid_namespaces.contains(&own.to_string_lossy().to_string()));
    assert_eq!(
        pid_namespaces.len(),
        8,
        "one PID namespace per host: {pid_namespaces:?}"
    );

    // Private /data: a file written on h01 exists nowhere else.
    ssh_ok(&lab, 0, "echo only-here > /data/marker && cat /data/marker");
    let on_h01 = lab.exec(0, &["cat", "/data/marker"]).expect("exec h01");
    assert_eq!(text(&on_h01.stdout), "only-here");
    let on_h02 = lab
        .exec(1, &["test", "-e", "/data/marker"])
        .expect("exec h02");
    assert!(!on_h02.status.success(), "h02 sees h01's /data");
    assert!(
        !Path::new("/data/marker").exists(),
        "the machine sees h01's /data"
    );

    // Host down: a bounded, clear error for that host only.
    lab.stop_sshd(2).expect("stop sshd on h03");
    let started = Instant::now();
    let down = lab.ssh(2, "true").expect("ssh runs");
    let waited = started.elapsed();
    assert_eq!(down.status.code(), Some(255), "ssh's own failure code");
    let stderr = text(&down.stderr);
    assert!(stderr.contains("Connection refused"), "{stderr}");
    assert!(waited < Duration::from_secs(15), "took {waited:?}");
    assert_eq!(
        ssh_ok(&lab, 3, "hostname"),
        "h04",
        "other hosts still answer"
    );
    // Processes on the downed host keep running; exec does not need sshd.
    assert!(lab.exec(2, &["true"]).expect("exec h03").status.success());
    lab.start_sshd(2).expect("start sshd on h03");
    assert_eq!(ssh_ok(&lab, 2, "hostname"), "h03");

    // The human's way in: ssh -F <lab>/ssh_config h05.
    let out = output_within(
        Command::new("ssh")
            .arg("-F")
            .arg(lab.ssh_config_path())
            .args(["h05", "hostname"]),
        SHORT,
    );
    assert_eq!(text(&out.stdout), "h05", "{}", text(&out.stderr));

    lab.teardown().expect("clean teardown");
    footprint.assert_gone();
}

#[test]
fn kill_processes_crashes_what_runs_but_keeps_init_and_sshd() {
    if !have_lab() {
        return;
    }
    let _shared = crate::labs_shared();
    let lab = Lab::start(2).expect("lab starts");
    ssh_ok(
        &lab,
        0,
        "setsid nohup sleep 300 >/dev/null 2>&1 < /dev/null & echo started",
    );
    let spawned = lab
        .exec(0, &["sh", "-c", "sleep 301 >/dev/null 2>&1 &"])
        .expect("exec");
    assert!(spawned.status.success());
    ssh_ok(
        &lab,
        1,
        "setsid nohup sleep 302 >/dev/null 2>&1 < /dev/null &",
    );

    let killed = lab.kill_processes(0).expect("kill on h01");
    assert!(killed >= 2, "killed {killed}");
    let left = lab.exec(0, &["ps", "-eo", "comm="]).expect("ps");
    let left = text(&left.stdout);
    assert!(!left.contains("sleep"), "survivors:\n{left}");
    assert!(left.contains("sshd"), "sshd was killed:\n{left}");
    assert!(ssh_ok(&lab, 0, "cat /proc/1/cmdline").contains("init.sh"));
    // The other host is untouched.
    assert!(ssh_ok(&lab, 1, "ps -eo comm=").contains("sleep"));
    // Nothing left to kill the second time.
    assert_eq!(lab.kill_processes(0).expect("kill again"), 0);
}

#[test]
fn tiny_data_makes_writes_fail_with_enospc_and_keeps_what_is_there() {
    if !have_lab() {
        return;
    }
    let _shared = crate::labs_shared();
    let lab = Lab::start(1).expect("lab starts");
    ssh_ok(&lab, 0, "echo kept > /data/before");
    lab.set_data_size(0, 1 << 20)
        .expect("shrink /data to 1 MiB");
    let out = lab
        .ssh(0, "dd if=/dev/zero of=/data/big bs=64k count=64")
        .expect("ssh");
    assert!(!out.status.success(), "4 MiB fit into 1 MiB");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert_eq!(ssh_ok(&lab, 0, "cat /data/before"), "kept");

    // Shrinking below what is stored is refused with the numbers.
    let used = lab.data_used(0).expect("usage");
    assert!(used > 512 << 10, "used {used}");
    match lab.set_data_size(0, 64 << 10) {
        Err(LabError::DataSize { used, host, .. }) => {
            assert_eq!(host, "h01");
            assert!(used > 64 << 10);
        }
        other => panic!("shrinking below usage: {other:?}"),
    }
    assert!(matches!(
        lab.set_data_size(0, 0),
        Err(LabError::DataSize { .. })
    ));

    lab.set_data_size(0, 64 << 20).expect("grow /data again");
    ssh_ok(
        &lab,
        0,
        "dd if=/dev/zero of=/data/big bs=64k count=64 2>/dev/null && echo ok",
    );
}

#[test]
fn netem_adds_delay_or_says_clearly_that_the_kernel_cannot() {
    if !have_lab() {
        return;
    }
    let _shared = crate::labs_shared();
    let lab = Lab::start(1).expect("lab starts");
    let connect_time = |host: &LabHost| {
        let started = Instant::now();
        std::net::TcpStream::connect_timeout(&(host.address, 22).into(), Duration::from_secs(5))
            .expect("connect");
        started.elapsed()
    };
    let host = lab.hosts()[0].clone();
    match lab.netem(0, 150, 0.0) {
        Err(LabError::NetemUnsupported { .. }) => {
            let err = lab.netem(0, 150, 0.0).expect_err("still unsupported");
            let msg = err.to_string();
            assert!(msg.contains("netem") && msg.contains("h01"), "{msg}");
            // Fails only when the run demands netem (TEST_REQUIRE=netem).
            have(Need::Netem, false, &msg);
            return;
        }
        Err(e) => panic!("netem failed: {e}"),
        Ok(()) => {}
    }
    // The delay is a floor netem guarantees whatever the host's load; how
    // fast a connect is without it is not, so clearing is checked on the
    // qdisc itself.
    let qdisc = || {
        let out = output_within(
            Command::new("ip").args([
                "netns",
                "exec",
                &host.netns,
                "tc",
                "qdisc",
                "show",
                "dev",
                "eth0",
            ]),
            SHORT,
        );
        assert!(out.status.success(), "tc qdisc show: {}", text(&out.stderr));
        text(&out.stdout)
    };
    let shown = qdisc();
    assert!(
        shown.contains("netem") && shown.contains("delay"),
        "{shown}"
    );
    let slow = connect_time(&host);
    assert!(
        slow >= Duration::from_millis(150),
        "connect took {slow:?} under 150 ms netem delay"
    );
    lab.clear_netem(0).expect("clear netem");
    let shown = qdisc();
    assert!(
        !shown.contains("netem"),
        "netem left after clearing: {shown}"
    );
    connect_time(&host);
    lab.clear_netem(0).expect("clearing twice is fine");
}

/// A bandwidth limit makes an upload to the host take its size over the
/// rate (a floor the token bucket keeps whatever the machine's load), and
/// clearing it removes the qdisc.
#[test]
fn a_bandwidth_limit_slows_uploads_to_the_host_to_its_rate() {
    if !have_lab() {
        return;
    }
    let _shared = crate::labs_shared();
    let lab = Lab::start(1).expect("lab starts");
    let host = lab.hosts()[0].clone();
    let qdisc = || {
        let out = output_within(
            Command::new("tc").args(["qdisc", "show", "dev", &host.veth]),
            SHORT,
        );
        assert!(out.status.success(), "tc qdisc show: {}", text(&out.stderr));
        text(&out.stdout)
    };
    assert!(lab.limit_bandwidth(0, 0).is_err(), "0 Mbit/s accepted");
    lab.limit_bandwidth(0, 20).expect("tbf");
    let shown = qdisc();
    assert!(shown.contains("tbf") && shown.contains("20Mbit"), "{shown}");

    // 2.5 MB of random bytes (ssh does not compress them) at 20 Mbit/s: 1 s.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("payload");
    let bytes: Vec<u8> = (0..2_500_000).map(|_| rand::random::<u8>()).collect();
    std::fs::write(&file, &bytes).unwrap();
    let inventory = fleetctl::inventory::load(Some(&lab.inventory_path()), &[]).unwrap();
    let target = inventory.hosts[0].host.clone();
    let took = tokio::runtime::Runtime::new().unwrap().block_on(async {
        let t = fleetctl::transport::Transport::connect(&target)
            .await
            .expect("connect");
        let started = Instant::now();
        t.upload(&file, "/tmp/payload", Duration::from_secs(60))
            .await
            .expect("upload");
        let took = started.elapsed();
        t.close().await.unwrap();
        took
    });
    assert!(
        took >= Duration::from_millis(900),
        "2.5 MB took {took:?} at 20 Mbit/s"
    );
    lab.clear_bandwidth(0).expect("clear");
    assert!(!qdisc().contains("tbf"), "tbf left after clearing");
    lab.clear_bandwidth(0).expect("clearing twice is fine");
}

#[test]
fn a_panic_while_a_lab_is_up_still_tears_it_down() {
    if !have_lab() {
        return;
    }
    let _shared = crate::labs_shared();
    let seen = Mutex::new(None);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let lab = Lab::start(2).expect("lab starts");
        *seen.lock().expect("lock") = Some(Footprint::of(&lab));
        panic!("deliberate panic with lab {} up", lab.id());
    }));
    assert!(outcome.is_err());
    let footprint = seen.into_inner().expect("lock").expect("lab had started");
    footprint.assert_gone();
}

/// Runs `fleetctl lab up --hold`, kills it with SIGKILL (no teardown runs),
/// and checks that the next `Lab::start` removes the orphaned lab.
#[test]
fn the_next_start_reaps_a_lab_whose_owner_was_killed() {
    if !have_lab() {
        return;
    }
    // Alone: any other test's `Lab::start` reaps orphans too, and could take
    // this one's before it is counted. (Cargo runs test binaries one at a
    // time, so no other binary's labs start meanwhile; this binary's other
    // lab tests hold the lock shared.)
    let _alone = crate::labs_alone();
    let mut owner = Command::new(env!("CARGO_BIN_EXE_fleetctl"))
        .args(["lab", "up", "--hosts", "2", "--hold"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn fleetctl lab up");
    let stdout = owner.stdout.take().expect("stdout piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut dir = None;
    let deadline = Instant::now() + Duration::from_secs(90);
    while dir.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .expect("fleetctl lab up prints its dir in time");
        if let Some(path) = line.trim().strip_prefix("dir:") {
            dir = Some(PathBuf::from(path.trim()));
        }
    }
    let dir = dir.expect("dir line");
    owner.kill().expect("SIGKILL the owner");
    owner.wait().expect("reap the owner");
    let id = dir
        .file_name()
        .expect("lab id")
        .to_string_lossy()
        .to_string();
    let netns: Vec<String> =
        text(&output_within(Command::new("ip").args(["netns", "list"]), SHORT).stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|ns| ns.contains(&id))
            .map(str::to_string)
            .collect();
    assert_eq!(
        netns.len(),
        2,
        "the orphaned lab's hosts outlive their owner"
    );
    assert!(dir.exists());

    let next = Lab::start(1).expect("next lab starts");
    Footprint {
        id,
        dir,
        netns,
        init_pids: Vec::new(),
    }
    .assert_gone();
    next.teardown().expect("teardown");
}

#[test]
fn thirty_two_hosts_start_and_stop() {
    if !have_lab() {
        return;
    }
    let _alone = crate::labs_alone();
    let started = Instant::now();
    let lab = Lab::start_with(LabConfig::new(32)).expect("lab of 32 starts");
    let start = started.elapsed();
    for i in 0..32 {
        let out = lab.exec(i, &["hostname"]).expect("exec");
        assert_eq!(text(&out.stdout), lab.hosts()[i].name);
    }
    assert_eq!(ssh_ok(&lab, 31, "hostname"), "h32");
    let footprint = Footprint::of(&lab);
    let stopping = Instant::now();
    lab.teardown().expect("teardown of 32");
    let stop = stopping.elapsed();
    footprint.assert_gone();
    eprintln!("lab of 32 hosts: start {start:.2?}, stop {stop:.2?}");
}

/// The inventory the lab writes is one fleetctl loads as it is, and
/// fleetctl's own SSH transport (mux, pinned keys) reaches every host
/// through it, many commands at once. Also: starting a lab from async code.
#[test]
fn fleetctl_reaches_the_lab_through_its_inventory_and_transport() {
    if !have_lab() {
        return;
    }
    let _shared = crate::labs_shared();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    runtime.block_on(async {
        let lab = tokio::task::spawn_blocking(|| Lab::start(3))
            .await
            .expect("start task")
            .expect("lab starts");
        let inventory = fleetctl::inventory::load(Some(&lab.inventory_path()), &[])
            .expect("the lab's inventory loads");
        let hosts: Vec<_> = inventory.hosts.iter().map(|r| r.host.clone()).collect();
        let names: Vec<&str> = hosts.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["h01", "h02", "h03"]);
        for (host, lab_host) in hosts.iter().zip(lab.hosts()) {
            assert_eq!(host.address, lab_host.address.to_string());
            assert_eq!(
                host.identity_file.as_deref(),
                Some(lab.client_key().as_path())
            );
            assert_eq!(
                host.known_hosts.as_deref(),
                Some(lab.known_hosts().as_path())
            );
            assert_eq!(host.install_dir, "/data/prover");
            assert!(host.groups.iter().any(|g| g == "lab"));
        }
        assert!(hosts[0].tags.iter().any(|t| t == "canary"));
        assert!(hosts[1].tags.is_empty());

        for host in &hosts {
            let transport = fleetctl::transport::Transport::connect(host)
                .await
                .unwrap_or_else(|e| panic!("connect {}: {e}", host.name));
            let transport = std::sync::Arc::new(transport);
            // More commands at once than one connection has channels.
            let mut runs = tokio::task::JoinSet::new();
            for _ in 0..12 {
                let transport = transport.clone();
                runs.spawn(
                    async move { transport.run(&["hostname"], Duration::from_secs(30)).await },
                );
            }
            while let Some(out) = runs.join_next().await {
                let out = out.expect("task").expect("run hostname");
                assert!(out.success(), "{}", out.stderr_text());
                assert_eq!(out.stdout_text().trim(), host.name);
            }
        }
        tokio::task::spawn_blocking(move || lab.teardown())
            .await
            .expect("teardown task")
            .expect("teardown");
    });
}

/// A start that fails half-way (here: no time at all to wait for sshd)
/// returns the error and leaves nothing behind.
#[test]
fn a_failed_start_reports_the_host_and_cleans_up_what_it_built() {
    if !have_lab() {
        return;
    }
    let _shared = crate::labs_shared();
    let base = PathBuf::from(format!(
        "/var/tmp/fleetlab-failed-start-{}",
        std::process::id()
    ));
    let config = LabConfig {
        base_dir: base.clone(),
        start_timeout: Duration::ZERO,
        ..LabConfig::new(4)
    };
    let err = Lab::start_with(config).expect_err("no host can be up in zero time");
    let msg = err.to_string();
    assert!(matches!(err, LabError::Timeout { .. }), "{msg}");
    assert!(msg.starts_with("h0"), "names the host: {msg}");
    let left: Vec<_> = std::fs::read_dir(&base)
        .expect("base dir exists")
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()
        .expect("read base dir");
    assert!(left.is_empty(), "left in {}: {left:?}", base.display());
    std::fs::remove_dir(&base).expect("remove the empty base dir");
}

/// The master sockets in a reuse directory, one per live master.
fn master_sockets(runtime: &Path) -> BTreeSet<PathBuf> {
    let pattern = format!(
        "{}/fleetctl-ssh/*/*/.ssh-connection*/master",
        runtime.display()
    );
    glob::glob(&pattern).expect("pattern").flatten().collect()
}

fn status_json(runtime: &Path, inv: &Path, extra: &[&str]) -> serde_json::Value {
    let out = output_within(
        Command::new(env!("CARGO_BIN_EXE_fleetctl"))
            .args(["status", "--json", "--deadline", "5s", "-i"])
            .arg(inv)
            .args(extra)
            .env("XDG_RUNTIME_DIR", runtime),
        SHORT,
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "status printed no JSON ({e}):\n{}\n{}",
            text(&out.stdout),
            text(&out.stderr)
        )
    })
}

fn reachable(rows: &serde_json::Value, host: &str) -> bool {
    rows.as_array()
        .expect("array")
        .iter()
        .find(|r| r["host"] == host)
        .unwrap_or_else(|| panic!("no row for {host}: {rows}"))["reachable"]
        == true
}

#[test]
fn ssh_masters_outlive_a_run_are_reused_and_go_with_the_host() {
    if !have_lab() {
        return;
    }
    let _shared = crate::labs_shared();
    let lab = Lab::start(2).expect("lab starts");
    let runtime = tempfile::tempdir().expect("tempdir");
    let inv = lab.inventory_path();

    let first = status_json(runtime.path(), &inv, &[]);
    assert!(
        reachable(&first, "h01") && reachable(&first, "h02"),
        "{first}"
    );
    let masters = master_sockets(runtime.path());
    assert_eq!(masters.len(), 2, "one master per host kept: {masters:?}");
    let base = runtime.path().join("fleetctl-ssh");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&base).expect("base dir").permissions(),
    );
    assert_eq!(mode & 0o777, 0o700, "private to us");

    // The second run goes through the same masters: no new ones.
    let second = status_json(runtime.path(), &inv, &[]);
    assert!(
        reachable(&second, "h01") && reachable(&second, "h02"),
        "{second}"
    );
    assert_eq!(master_sockets(runtime.path()), masters, "reused");

    // Host down: its master dies with the connection, and the next run
    // reports the host unreachable instead of using a dead socket.
    lab.stop_sshd(1).expect("stop h02's sshd");
    let deadline = Instant::now() + Duration::from_secs(10);
    while master_sockets(runtime.path()).len() != 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let third = status_json(runtime.path(), &inv, &[]);
    assert!(reachable(&third, "h01"), "{third}");
    assert!(!reachable(&third, "h02"), "{third}");

    // ssh_persist=0: the run makes and closes its own master elsewhere.
    lab.start_sshd(1).expect("start h02's sshd");
    let kept = master_sockets(runtime.path());
    let fourth = status_json(runtime.path(), &inv, &["-e", "ssh_persist=0"]);
    assert!(
        reachable(&fourth, "h01") && reachable(&fourth, "h02"),
        "{fourth}"
    );
    assert_eq!(master_sockets(runtime.path()), kept, "nothing new kept");
    lab.teardown().expect("teardown");
}

fn row<'a>(rows: &'a serde_json::Value, host: &str) -> &'a serde_json::Value {
    rows.as_array()
        .expect("array")
        .iter()
        .find(|r| r["host"] == host)
        .unwrap_or_else(|| panic!("no row for {host}: {rows}"))
}

/// A fresh ed25519 public key, as `type base64` (no comment).
fn fresh_host_key(dir: &Path) -> String {
    let key = dir.join("other_host_key");
    let out = output_within(
        Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "", "-f"])
            .arg(&key),
        SHORT,
    );
    assert!(out.status.success(), "ssh-keygen: {}", text(&out.stderr));
    let public = std::fs::read_to_string(key.with_extension("pub")).expect("public key");
    public
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

/// ssh checks a host key only when a master is made. A master kept from
/// an earlier run must not outlive the key it was checked against: once
/// known_hosts pins another key for h01, the next run closes h01's master
/// and fails with the host-key message, while h02's master is reused; once
/// the old line is back, h01 answers again.
#[test]
fn a_kept_master_is_dropped_when_known_hosts_pins_another_key() {
    if !have_lab() {
        return;
    }
    let _shared = crate::labs_shared();
    let lab = Lab::start(2).expect("lab starts");
    let runtime = tempfile::tempdir().expect("tempdir");
    let inv = lab.inventory_path();
    let first = status_json(runtime.path(), &inv, &[]);
    assert!(
        reachable(&first, "h01") && reachable(&first, "h02"),
        "{first}"
    );
    let masters = master_sockets(runtime.path());
    assert_eq!(masters.len(), 2, "{masters:?}");

    let pinned = std::fs::read_to_string(lab.known_hosts()).expect("known_hosts");
    let h01 = lab.hosts()[0].address.to_string();
    let other = fresh_host_key(runtime.path());
    let replaced: String = pinned
        .lines()
        .map(|line| {
            if line.split_whitespace().next() == Some(h01.as_str()) {
                format!("{h01} {other}\n")
            } else {
                format!("{line}\n")
            }
        })
        .collect();
    assert_ne!(replaced, pinned, "h01's line was replaced");
    std::fs::write(lab.known_hosts(), &replaced).expect("write known_hosts");

    let second = status_json(runtime.path(), &inv, &[]);
    assert!(!reachable(&second, "h01"), "kept master used: {second}");
    let why = row(&second, "h01")["error"].as_str().unwrap_or_default();
    assert!(why.contains("HOST KEY MISMATCH"), "{second}");
    assert!(reachable(&second, "h02"), "{second}");
    let left = master_sockets(runtime.path());
    assert_eq!(left.len(), 1, "h01's master closed, h02's kept: {left:?}");
    assert!(masters.is_superset(&left), "h02's master reused: {left:?}");

    std::fs::write(lab.known_hosts(), &pinned).expect("restore known_hosts");
    let third = status_json(runtime.path(), &inv, &[]);
    assert!(
        reachable(&third, "h01") && reachable(&third, "h02"),
        "{third}"
    );
    lab.teardown().expect("teardown");
}

/// Runs the fleetctl binary in `cwd`; (exit code, stdout, stderr).
fn fleetctl_in(cwd: &Path, runtime: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fleetctl"))
        .args(args)
        .current_dir(cwd)
        .env("XDG_RUNTIME_DIR", runtime)
        .env_remove("FLEETCTL_STATE_DIR")
        .output()
        .expect("fleetctl runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A resume continues the run it names, on the lab: the canary's upload is
/// corrupted (a host var), the run halts with h02 not started and prints
/// the command that resumes it. Another build is refused naming both
/// checksums; a check of the resume writes nothing to the run's audit log
/// or state; the printed command, run as printed (no `-i`), finishes the
/// run on the lab inventory from the state file, not the built-in local
/// one, and takes over the lock a killed process of this run left on h02.
#[test]
fn a_resume_continues_its_own_run_on_the_lab_as_the_halted_line_says() {
    if !have_lab() {
        return;
    }
    let _shared = crate::labs_shared();
    let lab = Lab::start(2).expect("lab starts");
    let work = tempfile::tempdir().expect("tempdir");
    let runtime = tempfile::tempdir().expect("tempdir");
    let cwd = work.path();
    let run = |args: &[&str]| fleetctl_in(cwd, runtime.path(), args);

    let generated = std::fs::read_to_string(lab.inventory_path()).expect("inventory");
    let h01 = lab.hosts()[0].address.to_string();
    let plain = format!("  h01: {{ address: {h01}, tags: [canary] }}");
    assert!(generated.contains(&plain), "{generated}");
    let faulty = generated.replace(
        &plain,
        &format!(
            "  h01: {{ address: {h01}, tags: [canary], vars: {{ fault_corrupt_upload: true }} }}"
        ),
    );
    std::fs::write(cwd.join("fleet.yaml"), &faulty).expect("write inventory");
    std::fs::write(
        cwd.join("ship.yaml"),
        "name: ship\nstrategy: { canary: 1, batch: 1, max_fail: 0, rollback_on_failure: false }\nsteps:\n  - upload: {}\n",
    )
    .expect("write playbook");
    std::fs::write(cwd.join("build-a"), crate::fake_build(b"build a\n")).expect("write build");
    std::fs::write(cwd.join("build-b"), crate::fake_build(b"build b\n")).expect("write build");
    let sha = |p: &str| fleetctl::steps::sha256_file(&cwd.join(p)).expect("hash");
    let (sha_a, sha_b) = (sha("build-a"), sha("build-b"));

    let (code, out, err) = run(&[
        "run",
        "-p",
        "./ship.yaml",
        "-i",
        "fleet.yaml",
        "--binary",
        "build-a",
        "--plain",
    ]);
    assert_eq!(code, Some(3), "halted\n{out}\n{err}");
    let resume = out
        .lines()
        .find_map(|l| l.strip_prefix("resume with: "))
        .unwrap_or_else(|| panic!("no resume hint\n{out}"))
        .to_owned();
    let run_id = resume.rsplit(' ').next().expect("run id").to_owned();
    assert_eq!(
        resume,
        format!("fleetctl run -p ./ship.yaml --resume {run_id}")
    );
    assert!(
        out.contains(&format!("Fix the cause, then: {resume}")),
        "{out}"
    );
    let audit = cwd.join(format!(".fleetctl/audit/{run_id}.jsonl"));
    let state = cwd.join(format!(".fleetctl/state/{run_id}.json"));
    let (audit_before, state_before) = (
        std::fs::read(&audit).expect("audit log"),
        std::fs::read(&state).expect("state file"),
    );

    // Fix the cause: the inventory without the fault.
    std::fs::write(cwd.join("fleet.yaml"), &generated).expect("write inventory");

    let (code, out, err) = run(&[
        "run",
        "-p",
        "./ship.yaml",
        "--resume",
        &run_id,
        "--binary",
        "build-b",
        "--plain",
    ]);
    assert_eq!(code, Some(1), "another build\n{out}\n{err}");
    assert!(err.contains(&sha_a) && err.contains(&sha_b), "{err}");

    let (code, out, err) = run(&[
        "run",
        "-p",
        "./ship.yaml",
        "--resume",
        &run_id,
        "--check",
        "--plain",
    ]);
    assert_eq!(code, Some(0), "check\n{out}\n{err}");
    assert_eq!(
        std::fs::read(&audit).expect("audit log"),
        audit_before,
        "a check appends nothing"
    );
    assert_eq!(
        std::fs::read(&state).expect("state file"),
        state_before,
        "a check saves nothing"
    );

    // What a SIGKILLed fleetctl of this run leaves on h02: its lock, held
    // by a pid that no longer exists on this machine.
    let mut gone = Command::new("true").spawn().expect("spawn");
    gone.wait().expect("wait");
    let this_host = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    ssh_ok(
        &lab,
        1,
        &format!(
            "mkdir -p /data/prover/state/lock && printf 'dead-token\\nrun={run_id} user=root host={} pid={} since=2026-01-01T00:00:00Z\\n' > /data/prover/state/lock/owner",
            this_host.trim(),
            gone.id()
        ),
    );

    let words: Vec<&str> = resume.split(' ').collect();
    assert_eq!(words[0], "fleetctl");
    let mut args = words[1..].to_vec();
    args.push("--plain");
    let (code, out, err) = run(&args);
    assert_eq!(code, Some(0), "resumed\n{out}\n{err}");
    for host in ["h01", "h02"] {
        let row = out
            .lines()
            .find(|l| l.starts_with(&format!("│ {host} ")))
            .unwrap_or_else(|| panic!("no row for {host}\n{out}"));
        assert!(row.contains(" ok "), "{out}");
        assert_eq!(
            ssh_ok(
                &lab,
                if host == "h01" { 0 } else { 1 },
                "readlink -f /data/prover/releases/*/prover"
            ),
            format!("/data/prover/releases/{sha_a}/prover"),
        );
    }
    assert!(
        !out.contains("│ local "),
        "the built-in local inventory: {out}"
    );
    assert!(!cwd.join(".deploy").exists(), "shipped to this machine");
    assert!(err.contains("taken over from dead holder"), "{err}");
    assert_eq!(
        ssh_ok(&lab, 1, "ls /data/prover/state/lock 2>&1 || true"),
        "ls: cannot access '/data/prover/state/lock': No such file or directory"
    );
    lab.teardown().expect("teardown");
}

/// A run killed outright, for real: fleetctl is SIGKILLed
/// while both hosts of its batch hold their lock (each is in a `verify`
/// that waits for a daemon). Its locks stay behind, held by a pid that is
/// gone; the resume takes them over, says so, finishes, and gives them back.
#[test]
fn a_sigkilled_run_is_resumed_taking_over_its_own_locks() {
    if !have_lab() {
        return;
    }
    let _shared = crate::labs_shared();
    let lab = Lab::start(2).expect("lab starts");
    let work = tempfile::tempdir().expect("tempdir");
    let runtime = tempfile::tempdir().expect("tempdir");
    let cwd = work.path();
    std::fs::copy(lab.inventory_path(), cwd.join("fleet.yaml")).expect("inventory");
    std::fs::write(cwd.join("build-a"), crate::fake_build(b"build a\n")).expect("write build");
    let playbook = |steps: &str| {
        std::fs::write(
            cwd.join("ship.yaml"),
            format!("name: ship\nstrategy: {{ batch: \"100%\", rollback_on_failure: false }}\nsteps:\n{steps}"),
        )
        .expect("write playbook")
    };
    playbook("  - upload: {}\n  - verify: { timeout: 60s }\n");

    let mut child = Command::new(env!("CARGO_BIN_EXE_fleetctl"))
        .args([
            "run",
            "-p",
            "./ship.yaml",
            "-i",
            "fleet.yaml",
            "--binary",
            "build-a",
            "--plain",
        ])
        .current_dir(cwd)
        .env("XDG_RUNTIME_DIR", runtime.path())
        .env_remove("FLEETCTL_STATE_DIR")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("fleetctl starts");
    // Both hosts past `upload`, so both locks are held, then SIGKILL.
    let audit_dir = cwd.join(".fleetctl/audit");
    let deadline = Instant::now() + Duration::from_secs(30);
    let run_id = loop {
        let found = std::fs::read_dir(&audit_dir)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(Result::ok);
        if let Some(entry) = found {
            let log = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let uploaded = log
                .lines()
                .filter(|l| {
                    l.contains("\"event\":\"step_started\"") && l.contains("\"step\":\"verify\"")
                })
                .count();
            if uploaded == 2 {
                break entry
                    .path()
                    .file_stem()
                    .expect("name")
                    .to_string_lossy()
                    .into_owned();
            }
        }
        assert!(
            Instant::now() < deadline,
            "the run never reached verify on both hosts"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    child.kill().expect("SIGKILL fleetctl");
    child.wait().expect("reap fleetctl");
    for i in 0..2 {
        let owner = ssh_ok(&lab, i, "sed -n 2p /data/prover/state/lock/owner");
        assert!(
            owner.contains(&format!("run={run_id} "))
                && owner.contains(&format!("pid={} ", child.id())),
            "the killed run's lock: {owner}"
        );
    }

    // The cause fixed (no daemon to wait for: ship only), then the resume.
    playbook("  - upload: {}\n");
    // Regression (issue 51, item 13e): a check of the resume shows the dead
    // run's locks, their owner, and that the resume takes them over; it
    // takes nothing itself.
    let (code, out, err) = fleetctl_in(
        cwd,
        runtime.path(),
        &[
            "run",
            "-p",
            "./ship.yaml",
            "--resume",
            &run_id,
            "--check",
            "--plain",
        ],
    );
    assert_eq!(code, Some(0), "check\n{out}\n{err}");
    let said = format!("{out}\n{err}");
    assert_eq!(
        said.matches("a DEAD holder").count(),
        2,
        "both dead locks shown\n{said}"
    );
    assert!(
        said.contains(&format!("run={run_id} "))
            && said.contains(&format!("pid {} no longer runs", child.id()))
            && said.contains("this resume takes it over"),
        "{said}"
    );
    for i in 0..2 {
        let owner = ssh_ok(&lab, i, "sed -n 2p /data/prover/state/lock/owner");
        assert!(
            owner.contains(&format!("run={run_id} ")),
            "untouched: {owner}"
        );
    }
    let (code, out, err) = fleetctl_in(
        cwd,
        runtime.path(),
        &["run", "-p", "./ship.yaml", "--resume", &run_id, "--plain"],
    );
    assert_eq!(code, Some(0), "resumed\n{out}\n{err}");
    assert!(!out.contains("LOCKED"), "{out}");
    assert_eq!(
        err.matches("taken over from dead holder").count(),
        2,
        "both locks taken over, and said so\n{err}"
    );
    for i in 0..2 {
        assert_eq!(
            ssh_ok(
                &lab,
                i,
                "[ -e /data/prover/state/lock ] && echo held || echo free"
            ),
            "free"
        );
    }
    lab.teardown().expect("teardown");
}

/// Waits for `child` (its stdout drained first), returning its exit code
/// and its own peak resident memory in KiB (`wait4`'s rusage: this child
/// alone, not every child of the test binary).
fn wait_with_max_rss(mut child: std::process::Child) -> (Option<i32>, i64) {
    if let Some(mut out) = child.stdout.take() {
        let _ = std::io::copy(&mut out, &mut std::io::sink());
    }
    let mut status = 0;
    // SAFETY: plain data, all-zero is valid; filled in by wait4.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: our own child's pid, not reaped elsewhere; valid out pointers.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4");
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    (code, usage.ru_maxrss)
}

/// A timing record the report reads (a finished proof).
fn proof_line(n: u32) -> String {
    format!(
        r#"{{"kind":"proof","v":1,"ts_ms":{n},"host":"h01","build":"b1","job_id":"j{n}","circuit":"chain","size":16,"partitions":1,"backend":"cpu","total_ms":3.0}}"#
    )
}

/// Regression (issue 51, item 11): one hostile line in a host's timing log
/// (here 8 MiB of one line, and a line that is no record) no longer goes
/// into the store whole nor blocks the fleet's report: collect leaves both
/// out and says where (host, file, line number), the report reports every
/// record and lists what was left out; a store that already holds an
/// overlong line (an older collect's) is reported too.
#[test]
fn a_hostile_timing_line_is_left_out_and_named_and_the_report_goes_on() {
    if !have_lab() {
        return;
    }
    let _shared = crate::labs_shared();
    let lab = Lab::start(1).expect("lab starts");
    let work = tempfile::tempdir().expect("tempdir");
    let runtime = tempfile::tempdir().expect("tempdir");
    let cwd = work.path();
    let inv = lab.inventory_path();
    let inv = inv.to_str().expect("utf-8 path");
    ssh_ok(
        &lab,
        0,
        &format!(
            "mkdir -p /data/prover/logs && cd /data/prover/logs && {{ echo '{}'; head -c 8388608 /dev/zero | tr '\\0' x; echo; echo 'not a record'; echo '{}'; }} > timing.jsonl && wc -c < timing.jsonl",
            proof_line(1),
            proof_line(2)
        ),
    );
    let (code, out, err) = fleetctl_in(
        cwd,
        runtime.path(),
        // A chunk smaller than the line: it is measured on the host and
        // passed over without being fetched.
        &[
            "timing",
            "collect",
            "-i",
            inv,
            "--store",
            "store",
            "--chunk-bytes",
            "4194304",
        ],
    );
    assert_eq!(code, Some(0), "collect\n{out}\n{err}");
    assert!(
        out.contains("h01: left out 2 line(s)")
            && out.contains(
                "/data/prover/logs/timing.jsonl line 2: line of 8388609 bytes, longer than the 1048576"
            )
            && out.contains("/data/prover/logs/timing.jsonl line 3: not a timing record"),
        "{out}"
    );
    let stored: u64 = glob::glob(&format!("{}/store/h01/timing.jsonl@*", cwd.display()))
        .expect("pattern")
        .flatten()
        .map(|p| std::fs::metadata(p).expect("stored file").len())
        .sum();
    assert_eq!(
        stored,
        2 * (proof_line(1).len() as u64 + 1),
        "only the records"
    );

    let (code, out, err) = fleetctl_in(
        cwd,
        runtime.path(),
        &["timing", "report", "--store", "store", "--format", "json"],
    );
    assert_eq!(code, Some(0), "report\n{out}\n{err}");
    let r: serde_json::Value = serde_json::from_str(&out).expect("JSON report");
    assert_eq!(r["sections"][0]["proofs"], 2, "{out}");
    assert_eq!(r["collect_skipped_count"], 2, "{out}");
    assert_eq!(r["collect_skipped"][0]["host"], "h01");
    assert_eq!(r["collect_skipped"][0]["line"], 2);

    // A 200 MB line with the default chunk: collect holds a chunk of it at
    // most, never the line (it held all of it: RSS past the line's size).
    ssh_ok(
        &lab,
        0,
        &format!(
            "cd /data/prover/logs && {{ echo '{}'; head -c 200000000 /dev/zero | tr '\\0' x; echo; }} > timing.jsonl.1",
            proof_line(4)
        ),
    );
    let child = Command::new(env!("CARGO_BIN_EXE_fleetctl"))
        .args(["timing", "collect", "-i", inv, "--store", "store"])
        .current_dir(cwd)
        .env("XDG_RUNTIME_DIR", runtime.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("fleetctl starts");
    let (status, max_rss_kib) = wait_with_max_rss(child);
    assert_eq!(status, Some(0));
    eprintln!("collect of a 200 MB line: peak RSS {max_rss_kib} KiB");
    assert!(
        max_rss_kib < 120 * 1024,
        "collect held {max_rss_kib} KiB for a 200 MB line"
    );

    // A store written before collect left anything out: the overlong line
    // is passed over and listed, every other record reported.
    let old = cwd.join("store/h01/timing.jsonl@old");
    std::fs::write(
        &old,
        format!("{}\n{}\n", "y".repeat(2 << 20), proof_line(3)),
    )
    .expect("write an old store file");
    let (code, out, err) = fleetctl_in(
        cwd,
        runtime.path(),
        &["timing", "report", "--store", "store"],
    );
    assert_eq!(code, Some(0), "report of an old store\n{out}\n{err}");
    assert!(
        out.contains("1 malformed lines skipped")
            && out.contains("timing.jsonl@old:1: line of 2097153 bytes")
            && out.contains("3 lines left out at collect")
            && out.contains("h01: /data/prover/logs/timing.jsonl line 2: line of 8388609 bytes"),
        "{out}"
    );
    lab.teardown().expect("teardown");
}

/// Regression (issue 51, item 12): Ansible's colon forms select as their
/// comma forms (`all:!h03`, `lab:&h01`), a run with a failed host writes a
/// retry file and says where, and `--limit @FILE` runs only its hosts.
#[test]
fn ansible_limits_and_a_retry_file_take_exactly_their_hosts() {
    if !have_lab() {
        return;
    }
    let _shared = crate::labs_shared();
    let lab = Lab::start(3).expect("lab starts");
    let work = tempfile::tempdir().expect("tempdir");
    let runtime = tempfile::tempdir().expect("tempdir");
    let cwd = work.path();
    std::fs::copy(lab.inventory_path(), cwd.join("fleet.yaml")).expect("inventory");
    std::fs::write(cwd.join("build-a"), crate::fake_build(b"build a\n")).expect("write build");
    std::fs::write(
        cwd.join("ship.yaml"),
        "name: ship\nstrategy: { batch: \"100%\", max_fail: 3 }\nsteps:\n  - upload: {}\n",
    )
    .expect("write playbook");
    let ship = |limit: &str| {
        fleetctl_in(
            cwd,
            runtime.path(),
            &[
                "run",
                "-p",
                "./ship.yaml",
                "-i",
                "fleet.yaml",
                "--binary",
                "build-a",
                "--plain",
                "-e",
                "ssh_persist=0",
                "--limit",
                limit,
            ],
        )
    };
    let rows = status_json(
        runtime.path(),
        &cwd.join("fleet.yaml"),
        &["--limit", "lab:&h01"],
    );
    let names: Vec<&str> = rows
        .as_array()
        .expect("array")
        .iter()
        .map(|r| r["host"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(names, ["h01"], "{rows}");

    lab.stop_sshd(1).expect("stop h02's sshd");
    let (code, out, err) = ship("all:!h03");
    assert_eq!(code, Some(2), "h02 fails\n{out}\n{err}");
    let retry_line = out
        .lines()
        .find(|l| l.starts_with("retry file: "))
        .unwrap_or_else(|| panic!("no retry line\n{out}"));
    let retry = retry_line
        .trim_start_matches("retry file: ")
        .split(" (")
        .next()
        .expect("a path");
    assert!(
        retry.starts_with(".fleetctl/retry/") && retry.ends_with(".retry"),
        "{retry_line}"
    );
    assert_eq!(
        std::fs::read_to_string(cwd.join(retry)).expect("retry file"),
        "h02\n"
    );
    assert!(
        retry_line.contains(&format!("--limit @{retry}")),
        "{retry_line}"
    );
    assert_eq!(
        ssh_ok(
            &lab,
            2,
            "[ -e /data/prover ] && echo touched || echo untouched"
        ),
        "untouched",
        "h03 was left out"
    );

    lab.start_sshd(1).expect("start h02's sshd");
    let (code, out, err) = ship(&format!("@{retry}"));
    assert_eq!(code, Some(0), "the retry\n{out}\n{err}");
    assert!(
        out.contains("h02") && !out.contains("h01") && !out.contains("retry file"),
        "only h02 ran, and nothing failed\n{out}"
    );
    let touched = |i| {
        ssh_ok(
            &lab,
            i,
            "[ -e /data/prover ] && echo touched || echo untouched",
        )
    };
    assert_eq!(touched(1), "touched", "h02 ran");
    assert_eq!(touched(2), "untouched", "h03 never ran");
    lab.teardown().expect("teardown");
}

/// Regression (issue 51, item 13a): a host that goes silent behind a kept
/// SSH master (its link down: a black hole, no refusal) is reported
/// UNREACHABLE with no answer, not as an overloaded host.
#[test]
fn a_blackholed_host_behind_a_kept_master_is_unreachable() {
    if !have_lab() {
        return;
    }
    let _shared = crate::labs_shared();
    let lab = Lab::start(1).expect("lab starts");
    let runtime = tempfile::tempdir().expect("tempdir");
    let work = tempfile::tempdir().expect("tempdir");
    let inv = lab.inventory_path();
    let first = status_json(runtime.path(), &inv, &[]);
    assert!(reachable(&first, "h01"), "{first}");
    assert_eq!(master_sockets(runtime.path()).len(), 1, "a master kept");
    let down = lab
        .exec(0, &["ip", "link", "set", "eth0", "down"])
        .expect("exec");
    assert!(down.status.success(), "{}", text(&down.stderr));
    let (code, out, err) = fleetctl_in(
        work.path(),
        runtime.path(),
        &[
            "run",
            "-p",
            "health",
            "-i",
            inv.to_str().expect("utf-8"),
            "--plain",
        ],
    );
    assert_eq!(code, Some(2), "{out}\n{err}");
    assert!(
        out.contains("UNREACHABLE") && out.contains("no answer within"),
        "{out}\n{err}"
    );
    assert!(!out.contains("overloaded"), "{out}");
    lab.teardown().expect("teardown");
}
