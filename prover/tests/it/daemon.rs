//! End-to-end tests of the daemon: the real `prover` binary started on
//! loopback port 0 in a temporary install dir (it records the port it bound
//! beside its pid file, where the client subcommands find it too), driven
//! over HTTP.

use fleet_testkit::{output_within, spawn_within};
use fleet_wire::api::{JobState, JobStatus, Ready, Status, SubmitResponse};
use fleet_wire::timing::{TimelineKind, TimingLine};
use prover::backend::cpu::CpuBackend;
use prover::circuit::{self, CircuitKind};
use prover::daemon::engine::proof_bytes;
use prover::params::ParamStore;
use prover::prove::{create_proof, partition_randomness};
use reqwest::blocking::{Client, RequestBuilder, Response};
use reqwest::StatusCode;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "test-token";
const SIZE: u64 = 1024;
/// The most a one-shot `prover` command of these tests may take.
const COMMAND_LIMIT: Duration = Duration::from_secs(120);

/// A daemon process in its own temporary install dir; killed and cleaned up on drop.
struct Daemon {
    dir: tempfile::TempDir,
    child: Option<Child>,
    port: u16,
    http: Client,
}

/// The test defaults (CPU backend, 1 GiB budget, chain/1024 preloaded) with
/// `extra` TOML merged over them, table by table.
fn config_text(extra: &str) -> String {
    let base = format!(
        "listen = \"127.0.0.1:0\"\napi_token = \"{TOKEN}\"\ndrain_timeout = \"60s\"\ntest_params = true\n\
         [gpu]\ndevices = []\n[memory]\nbudget = \"1GiB\"\n[[preload]]\ncircuit = \"chain\"\nsize = {SIZE}\n"
    );
    fn merge(into: &mut toml::Table, from: toml::Table) {
        for (k, v) in from {
            match (into.get_mut(&k), v) {
                (Some(toml::Value::Table(a)), toml::Value::Table(b)) => merge(a, b),
                (_, v) => {
                    into.insert(k, v);
                }
            }
        }
    }
    let mut table: toml::Table = base.parse().expect("base config");
    merge(&mut table, extra.parse().expect("extra config"));
    toml::to_string(&table).expect("config text")
}

impl Daemon {
    /// Starts a daemon whose config is the test defaults plus `extra` TOML.
    fn start(extra: &str) -> Daemon {
        let mut d = Self::spawn_only(extra, false);
        d.wait_ready(Duration::from_secs(120));
        d
    }

    /// Starts a daemon without waiting for readiness, only until it has
    /// bound its port; with `stderr_to_log` its stderr is appended to the log
    /// file, as fleetctl starts it.
    fn spawn_only(extra: &str, stderr_to_log: bool) -> Daemon {
        let mut d = Self::unstarted(extra);
        d.launch(stderr_to_log);
        d
    }

    /// The install dir with its config, the daemon not started yet.
    fn unstarted(extra: &str) -> Daemon {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("prover.toml"), config_text(extra)).expect("write config");
        Daemon {
            dir,
            child: None,
            port: 0,
            http: Client::builder()
                .timeout(Duration::from_secs(120))
                .build()
                .expect("client"),
        }
    }

    /// Starts the daemon of an [`unstarted`](Self::unstarted) dir and waits
    /// until it has bound its port.
    fn launch(&mut self, stderr_to_log: bool) {
        let mut cmd = self.command();
        if stderr_to_log {
            std::fs::create_dir_all(self.path("logs")).expect("logs dir");
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.path("logs/prover.log"))
                .expect("open log");
            cmd.stderr(log);
        }
        self.child = Some(cmd.spawn().expect("spawn prover daemon"));
        self.port = self.wait_listening(Duration::from_secs(60));
    }

    /// The port the daemon recorded beside its pid file once it bound
    /// `listen` (port 0 here, so no other process can take the port between
    /// the test choosing it and the daemon binding it).
    fn wait_listening(&mut self, timeout: Duration) -> u16 {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(addr) = prover::daemon::pidfile::read_listen(&self.path("run/prover.pid")) {
                return addr.port();
            }
            if let Some(Ok(Some(st))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!("daemon exited before listening: {st}\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "daemon not listening within {timeout:?}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The daemon's command; its stdout goes to `daemon.stdout` (the daemon
    /// must write nothing there).
    fn command(&self) -> Command {
        let stdout = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("daemon.stdout"))
            .expect("stdout file");
        let mut c = Command::new(env!("CARGO_BIN_EXE_prover"));
        c.args(["daemon", "--config", "prover.toml"])
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(Stdio::null());
        c
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn get(&self, path: &str) -> RequestBuilder {
        self.http.get(self.url(path)).bearer_auth(TOKEN)
    }

    fn send(&self, req: RequestBuilder) -> (StatusCode, Value) {
        let resp: Response = req.send().expect("request");
        let status = resp.status();
        let text = resp.text().expect("body");
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    fn submit(&self, body: Value) -> (StatusCode, Value) {
        self.send(
            self.http
                .post(self.url("/v1/jobs"))
                .bearer_auth(TOKEN)
                .json(&body),
        )
    }

    fn submit_ok(&self, body: Value) -> String {
        let (status, v) = self.submit(body);
        assert_eq!(status, StatusCode::ACCEPTED, "{v}");
        let r: SubmitResponse = serde_json::from_value(v).expect("submit response");
        r.job_id
    }

    fn wait_job(&self, id: &str) -> JobStatus {
        let (status, v) = self.send(self.get(&format!("/v1/jobs/{id}/wait?timeout=100s")));
        assert_eq!(status, StatusCode::OK, "{v}");
        let job: JobStatus = serde_json::from_value(v).expect("job status");
        assert!(job.state.is_finished(), "job {id} did not finish: {job:?}");
        job
    }

    fn status(&self) -> Status {
        let (code, v) = self.send(self.get("/status"));
        assert_eq!(code, StatusCode::OK);
        serde_json::from_value(v).expect("status")
    }

    fn wait_ready(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(Ok(Some(st))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!("daemon exited during start-up: {st}\n{}", self.log());
            }
            if let Ok(r) = self.get("/readyz").timeout(Duration::from_secs(2)).send() {
                if r.status() == StatusCode::OK {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("daemon not ready within {timeout:?}\n{}", self.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.path("logs/prover.log")).unwrap_or_default()
    }

    fn timing_lines(&self) -> Vec<TimingLine> {
        let text = std::fs::read_to_string(self.path("logs/timing.jsonl")).expect("timing log");
        text.lines()
            .map(|l| TimingLine::parse(l).unwrap_or_else(|e| panic!("bad timing line {l:?}: {e}")))
            .collect()
    }

    fn signal(&self, sig: i32) {
        // SAFETY: plain kill(2) on our own child.
        let rc = unsafe { libc::kill(self.pid() as i32, sig) };
        assert_eq!(rc, 0, "kill failed");
    }

    fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let child = self.child.as_mut().expect("running");
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = child.try_wait().expect("try_wait") {
                self.child = None;
                return st;
            }
            assert!(
                Instant::now() < deadline,
                "daemon did not exit within {timeout:?}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The one-shot library proof for the same circuit, parameters and seeds.
fn library_proof(params_dir: &Path, seed: u64, rs_seed: u64, partition: u32) -> String {
    let store = ParamStore::open(params_dir).expect("param store");
    let params = store
        .load(CircuitKind::Chain, SIZE as usize)
        .expect("params");
    let (c, _) = circuit::bundled(CircuitKind::Chain, SIZE as usize, seed).expect("circuit");
    let (r, s) = partition_randomness(rs_seed, partition);
    let pool = prover::synthesis::heap_pool(1 << 30);
    let proof = create_proof(c, params.as_ref(), r, s, &CpuBackend::new(), &pool).expect("prove");
    hex::encode(proof_bytes(&proof))
}

#[test]
fn proofs_over_http_are_verified_and_byte_identical_to_the_library() {
    let d = Daemon::start("");
    let id = d.submit_ok(
        json!({"circuit": "chain", "size": SIZE, "partitions": 2, "seed": 7, "rs_seed": 11}),
    );
    let job = d.wait_job(&id);
    assert_eq!(job.state, JobState::Done, "{job:?}");
    let result = job.result.expect("result");
    assert!(result.verified);
    assert_eq!(result.proofs.len(), 2);
    for p in &result.proofs {
        assert!(p.verified);
        assert_eq!(
            p.proof,
            library_proof(&d.path("params"), 7, 11, p.partition),
            "partition {}",
            p.partition
        );
    }
    assert!(result.timing.total_ms > 0.0);

    // Poll, cancel of a finished job, unknown job.
    let (code, v) = d.send(d.get(&format!("/v1/jobs/{id}")));
    assert_eq!(code, StatusCode::OK);
    assert_eq!(v["state"], "done");
    let (code, v) = d.send(
        d.http
            .delete(d.url(&format!("/v1/jobs/{id}")))
            .bearer_auth(TOKEN),
    );
    assert_eq!((code, v["state"].as_str()), (StatusCode::OK, Some("done")));
    let (code, v) = d.send(d.get("/v1/jobs/nope"));
    assert_eq!(
        (code, v["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );

    // Health, readiness, status, metrics.
    let (code, v) = d.send(d.http.get(d.url("/healthz")));
    assert_eq!((code, v["alive"].as_bool()), (StatusCode::OK, Some(true)));
    let (code, v) = d.send(d.get("/readyz"));
    assert_eq!(code, StatusCode::OK);
    let ready: Ready = serde_json::from_value(v).expect("ready");
    assert!(ready.ready);
    let st = d.status();
    assert_eq!(st.proofs_completed, 1);
    assert_eq!(st.queue.depth, 0);
    assert_eq!(st.pid, d.pid());
    assert_eq!(st.backend, "cpu");
    assert_eq!(st.build, prover::BUILD_HASH);
    assert!(st.budget.total_bytes == 1 << 30);
    assert!(st.pool.held_bytes > 0, "pool preallocated: {:?}", st.pool);
    assert!(st.last_proof_ms.is_some());
    let text = d
        .get("/metrics")
        .send()
        .expect("metrics")
        .text()
        .expect("text");
    for name in fleet_wire::metrics::ALL {
        assert!(text.contains(name), "{name} missing");
    }
    assert!(text.contains("prover_proofs_completed_total 1"), "{text}");
    assert!(text.contains("phase=\"msm\""), "{text}");
    // The CPU backend measures no device time: no kernel-busy series, not a zero one.
    assert!(
        !text.contains("prover_kernel_busy_seconds_total{"),
        "{text}"
    );

    // The client subcommands read address and token from the config.
    let out = output_within(
        Command::new(env!("CARGO_BIN_EXE_prover"))
            .args([
                "client",
                "submit",
                "--config",
                "prover.toml",
                "--size",
                "1024",
                "--seed",
                "7",
                "--rs-seed",
                "11",
                "--wait",
            ])
            .current_dir(d.dir.path()),
        COMMAND_LIMIT,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let job: JobStatus = serde_json::from_slice(&out.stdout).expect("client output");
    assert_eq!(
        job.result.expect("result").proofs[0].proof,
        result.proofs[0].proof
    );
    let ready = output_within(
        Command::new(env!("CARGO_BIN_EXE_prover"))
            .args(["client", "ready", "--config", "prover.toml"])
            .current_dir(d.dir.path()),
        COMMAND_LIMIT,
    );
    assert!(ready.status.success());

    // The health probe sees this daemon.
    let out = output_within(
        Command::new(env!("CARGO_BIN_EXE_prover"))
            .args(["health", "--config", "prover.toml"])
            .current_dir(d.dir.path()),
        COMMAND_LIMIT,
    );
    assert!(out.status.success());
    let probe =
        fleet_wire::health::Probe::parse(&String::from_utf8_lossy(&out.stdout)).expect("probe");
    let dm = probe.daemon.expect("daemon section");
    assert_eq!(dm.pid, Some(d.pid()));
    assert!(dm.alive);
    assert_eq!(dm.ready, Some(true));
    assert_eq!(dm.build.as_deref(), Some(prover::BUILD_HASH));
    assert!(
        dm.vm_lck_bytes.unwrap_or(0) > 0,
        "mlock pool shows as VmLck: {dm:?}"
    );
}

#[test]
fn bad_requests_get_4xx_with_clear_errors() {
    let d = Daemon::start("[memory]\nbudget = \"64MiB\"\n");
    let post = |body: &str| {
        d.send(
            d.http
                .post(d.url("/v1/jobs"))
                .bearer_auth(TOKEN)
                .body(body.to_string()),
        )
    };
    let (code, v) = post("{\"circuit\": \"chain\", ");
    assert_eq!(
        (code, v["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("bad_request")),
        "{v}"
    );
    assert!(
        v["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("invalid job JSON"),
        "{v}"
    );
    let (code, v) = post(r#"{"circuit": "chain", "size": 1024, "colour": "red"}"#);
    assert_eq!(code, StatusCode::BAD_REQUEST);
    assert!(
        v["detail"].as_str().unwrap_or_default().contains("colour"),
        "{v}"
    );
    let (code, v) = d.submit(json!({"circuit": "poseidon", "size": 1024}));
    assert_eq!(
        (code, v["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("unknown_circuit"))
    );
    assert!(
        v["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("chain, sha256"),
        "{v}"
    );
    let (code, v) = d.submit(json!({"circuit": "chain", "size": 3}));
    assert_eq!(
        (code, v["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("size_out_of_range")),
        "{v}"
    );
    let (code, v) = d.submit(json!({"circuit": "chain", "size": 1 << 20}));
    assert_eq!(
        (code, v["error"].as_str()),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("too_large_for_budget")
        ),
        "{v}"
    );
    let (code, v) = d.send(
        d.http
            .post(d.url("/v1/jobs"))
            .json(&json!({"circuit": "chain", "size": 1024})),
    );
    assert_eq!(
        (code, v["error"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unauthorized"))
    );
    let (code, _) = d.send(d.http.get(d.url("/status")).bearer_auth("wrong"));
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    let (code, v) = d.send(d.get("/v2/nothing"));
    assert_eq!(
        (code, v["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    let (code, _) = d.send(d.get("/v1/jobs/x/wait?timeout=soon"));
    assert_eq!(code, StatusCode::BAD_REQUEST);
}

#[test]
fn a_full_queue_answers_429_and_accepts_again_once_drained() {
    let d = Daemon::start("[queue]\nmax_jobs = 1\n");
    let first =
        d.submit_ok(json!({"circuit": "chain", "size": SIZE, "partitions": 4, "rs_seed": 1}));
    let (code, v) = d.submit(json!({"circuit": "chain", "size": SIZE}));
    assert_eq!(
        (code, v["error"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("queue_full")),
        "{v}"
    );
    assert_eq!(d.wait_job(&first).state, JobState::Done);
    let again = d.submit_ok(json!({"circuit": "chain", "size": SIZE}));
    assert_eq!(d.wait_job(&again).state, JobState::Done);
    let text = d
        .get("/metrics")
        .send()
        .expect("metrics")
        .text()
        .expect("text");
    assert!(
        text.contains("prover_jobs_rejected_queue_full_total 1"),
        "{text}"
    );
}

#[test]
fn sigterm_mid_job_finishes_the_job_and_exits_zero() {
    let mut d = Daemon::start("");
    let id = d.submit_ok(json!({"circuit": "chain", "size": SIZE, "partitions": 4, "rs_seed": 3}));
    wait_running(&d, &id);
    let waiter = {
        let (url, http) = (
            d.url(&format!("/v1/jobs/{id}/wait?timeout=60s")),
            d.http.clone(),
        );
        std::thread::spawn(move || {
            http.get(url)
                .bearer_auth(TOKEN)
                .send()
                .and_then(|r| r.json::<JobStatus>())
        })
    };
    d.signal(libc::SIGTERM);
    // Intake stops at once; the job in flight still completes.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match d
            .http
            .post(d.url("/v1/jobs"))
            .bearer_auth(TOKEN)
            .json(&json!({"circuit": "chain", "size": SIZE}))
            .send()
        {
            Ok(r) if r.status() == StatusCode::SERVICE_UNAVAILABLE => break,
            Ok(r) => assert!(
                Instant::now() < deadline,
                "submit during drain answered {}",
                r.status()
            ),
            Err(_) => break, // already gone: the drain finished first
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let job = waiter.join().expect("waiter").expect("wait answer");
    assert_eq!(job.state, JobState::Done, "{job:?}");
    assert!(job.result.expect("result").verified);
    let st = d.wait_exit(Duration::from_secs(60));
    assert_eq!(st.code(), Some(0), "{}", d.log());
    assert!(!d.path("run/prover.pid").exists(), "pid file removed");
    assert!(
        !d.path("run/prover.pid.addr").exists(),
        "bound address removed"
    );
    let log = d.log();
    let order = [
        "starting",
        "configuration loaded",
        "pinned pool allocated",
        "ready",
        "draining",
        "drained",
        "pinned pool released",
        "exiting",
    ];
    let mut at = 0;
    for line in order {
        let pos = log[at..]
            .find(line)
            .unwrap_or_else(|| panic!("{line:?} missing after byte {at}:\n{log}"));
        at += pos + line.len();
    }
    // Every line of the timing log parses; the job has all its records.
    let lines = d.timing_lines();
    let parts = lines
        .iter()
        .filter(
            |l| matches!(l, TimingLine::Partition(p) if p.tag.job_id == id && p.error.is_none()),
        )
        .count();
    let proofs = lines
        .iter()
        .filter(|l| matches!(l, TimingLine::Proof(p) if p.tag.job_id == id))
        .count();
    let ends = lines
        .iter()
        .filter(|l| matches!(l, TimingLine::Timeline(e) if e.job_id == id && e.event == TimelineKind::GpuEnd))
        .count();
    assert_eq!((parts, proofs, ends), (4, 1, 4));
}

#[test]
fn a_second_daemon_on_the_same_pid_file_is_refused() {
    let d = Daemon::start("");
    let out = output_within(&mut d.command(), COMMAND_LIMIT);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("pid {}", d.pid())), "{err}");
    assert!(err.contains("run/prover.pid"), "{err}");
    // The first one is unharmed.
    assert_eq!(d.status().state, fleet_wire::api::DaemonState::Ready);
}

#[test]
fn an_exhausted_budget_makes_partitions_wait_then_complete() {
    // The pool (capped at 160 KiB) holds one partition's 132 KiB of buffers
    // at a time; the rest of the 1 MiB budget holds the loaded parameters
    // (~590 KB, which take a reservation) and the working memory.
    let d = Daemon::start(
        "[memory]\nbudget = \"1MiB\"\n[pool]\npreallocate = 0\nmax_bytes = \"160KiB\"\n[synthesis]\nconcurrency = 2\nlookahead = 2\n",
    );
    let ids: Vec<String> = (0..2)
        .map(|i| {
            d.submit_ok(
                json!({"circuit": "chain", "size": SIZE, "partitions": 2, "seed": i, "rs_seed": i}),
            )
        })
        .collect();
    for id in &ids {
        let job = d.wait_job(id);
        assert_eq!(job.state, JobState::Done, "{job:?}");
        assert!(job.result.expect("result").verified);
    }
    // However fast the host, a partition that found the memory taken waited
    // for it, and the pool or the budget logs each such wait once granted.
    let log = d.log();
    assert!(
        log.contains("pinned buffers granted after waiting")
            || log.contains("memory reservation granted after waiting"),
        "no partition waited for memory:\n{log}"
    );
    let st = d.status();
    assert_eq!(st.proofs_completed, 2);
    assert!(st.budget.total_bytes == 1 << 20);
}

/// The daemon's stderr for a config it must refuse; a regression that
/// accepts the config fails at the deadline (and the daemon is killed)
/// instead of serving on the default port until CI times out.
fn daemon_config_error(text: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("prover.toml"), text).expect("write");
    let out = output_within(
        Command::new(env!("CARGO_BIN_EXE_prover"))
            .args(["daemon", "--config", "prover.toml"])
            .current_dir(dir.path()),
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(1));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn config_errors_name_the_key_path() {
    let e = daemon_config_error("[pool]\nallocator = \"heap\"\nmax_bytes = \"12XB\"\n");
    assert!(
        e.contains(
            "pool.max_bytes: invalid size \"12XB\": expected bytes or a number with KiB/MiB/GiB"
        ),
        "{e}"
    );
    let e = daemon_config_error("[queue]\nmax_jobz = 3\n");
    assert!(
        e.contains("queue.max_jobz") && e.contains("unknown field"),
        "{e}"
    );
}

/// (synthesis_start, synthesis_end, gpu_start, gpu_end) per partition, µs.
fn intervals(lines: &[TimingLine], job: &str) -> HashMap<u32, [u64; 4]> {
    let mut out: HashMap<u32, [u64; 4]> = HashMap::new();
    for l in lines {
        if let TimingLine::Timeline(e) = l {
            if e.job_id != job {
                continue;
            }
            let slot = match e.event {
                TimelineKind::SynthesisStart => 0,
                TimelineKind::SynthesisEnd => 1,
                TimelineKind::GpuStart => 2,
                TimelineKind::GpuEnd => 3,
                _ => continue,
            };
            out.entry(e.partition).or_default()[slot] = e.ts_us;
        }
    }
    out
}

/// Partitions k whose compute overlapped the synthesis of partition k+1.
fn overlaps(iv: &HashMap<u32, [u64; 4]>) -> Vec<u32> {
    (0..iv.len() as u32 - 1)
        .filter(|k| {
            let (cur, next) = (iv[k], iv[&(k + 1)]);
            next[0] < cur[3] && next[1] > cur[2]
        })
        .collect()
}

#[test]
fn pipelined_run_synthesises_the_next_partition_during_compute() {
    let d = Daemon::start("[synthesis]\nconcurrency = 1\nlookahead = 1\n");
    let id = d.submit_ok(json!({"circuit": "chain", "size": SIZE, "partitions": 8, "rs_seed": 5}));
    assert_eq!(d.wait_job(&id).state, JobState::Done);
    let lines = d.timing_lines();
    let iv = intervals(&lines, &id);
    assert_eq!(iv.len(), 8);
    // The CPU backend has no device: its records leave device_busy_ms out
    // (not measured), so a report shows kernel busy as n/a, not 0%.
    for l in &lines {
        if let TimingLine::Partition(p) = l {
            assert_eq!(p.device_busy_ms, None, "{p:?}");
        }
    }
    for (p, t) in &iv {
        assert!(
            t[0] <= t[1] && t[1] <= t[2] && t[2] <= t[3],
            "partition {p}: {t:?}"
        );
    }
    assert!(!overlaps(&iv).is_empty(), "no overlap: {iv:?}");

    // The same run unpipelined: synthesis only ever follows the previous compute.
    let d = Daemon::start("[synthesis]\nconcurrency = 1\nlookahead = 0\n");
    let id = d.submit_ok(json!({"circuit": "chain", "size": SIZE, "partitions": 8, "rs_seed": 5}));
    assert_eq!(d.wait_job(&id).state, JobState::Done);
    let iv = intervals(&d.timing_lines(), &id);
    assert_eq!(iv.len(), 8);
    assert!(overlaps(&iv).is_empty(), "lookahead = 0 overlapped: {iv:?}");
}

#[test]
fn fixture_teardown_kills_the_daemon_and_removes_its_dir() {
    let d = Daemon::start("");
    let (pid, dir) = (d.pid(), d.dir.path().to_path_buf());
    drop(d);
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "daemon {pid} still running"
    );
    assert!(!dir.exists());
}

#[test]
fn readyz_is_503_starting_and_submissions_wait_until_start_up_finishes() {
    // The timing log is a FIFO: start-up opens it for appending, and that
    // open blocks until this test opens the reading end. Until then the
    // daemon is listening but starting, however fast the host.
    let mut d = Daemon::unstarted("");
    let fifo = d.path("logs/timing.jsonl");
    std::fs::create_dir_all(d.path("logs")).expect("logs dir");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: mkfifo(3) on a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0, "mkfifo");
    d.launch(false);
    let (code, v) = d.send(d.get("/readyz"));
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{v}");
    let ready: Ready = serde_json::from_value(v).expect("ready body");
    assert!(!ready.ready);
    assert!(
        ready
            .reason
            .as_deref()
            .unwrap_or_default()
            .starts_with("starting"),
        "{ready:?}"
    );
    assert_eq!(d.status().state, fleet_wire::api::DaemonState::Starting);
    let (code, v) = d.submit(json!({"circuit": "chain", "size": SIZE}));
    assert_eq!(
        (code, v["error"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("not_ready")),
        "{v}"
    );
    // Release start-up; the reader drains the log until the daemon ends.
    std::thread::spawn(move || {
        let mut lines = Vec::new();
        if let Ok(mut f) = std::fs::File::open(&fifo) {
            let _ = std::io::Read::read_to_end(&mut f, &mut lines);
        }
    });
    d.wait_ready(Duration::from_secs(120));
    assert_eq!(d.status().state, fleet_wire::api::DaemonState::Ready);
    let id = d.submit_ok(json!({"circuit": "chain", "size": SIZE}));
    assert_eq!(d.wait_job(&id).state, JobState::Done);
}

#[test]
fn cancelling_a_running_job_skips_its_remaining_partitions() {
    let d = Daemon::start("");
    // The most partitions a job may have: far more than can finish before
    // the cancel arrives.
    let id = d.submit_ok(json!({"circuit": "chain", "size": SIZE, "partitions": 1024}));
    let (code, v) = d.send(
        d.http
            .delete(d.url(&format!("/v1/jobs/{id}")))
            .bearer_auth(TOKEN),
    );
    assert_eq!(
        (code, v["state"].as_str()),
        (StatusCode::OK, Some("cancelled")),
        "{v}"
    );
    let job = d.wait_job(&id);
    assert_eq!(job.state, JobState::Cancelled);
    assert!(job.partitions_done < 1024, "{job:?}");
    // The daemon goes on proving.
    let next = d.submit_ok(json!({"circuit": "chain", "size": SIZE}));
    assert_eq!(d.wait_job(&next).state, JobState::Done);
}

#[test]
fn stderr_appended_to_the_log_file_writes_each_line_once() {
    let mut d = Daemon::spawn_only("", true);
    d.wait_ready(Duration::from_secs(120));
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(Duration::from_secs(60)).code(), Some(0));
    let log = d.log();
    for line in [
        "starting",
        "configuration loaded",
        "ready",
        "draining",
        "drained",
        "exiting",
    ] {
        let n = log
            .lines()
            .filter(|l| l.ends_with(line) || l.contains(&format!(" {line} ")))
            .count();
        assert_eq!(n, 1, "{line:?} appears {n} times:\n{log}");
    }
    assert!(!log.contains('\u{1b}'), "no colour codes in a file");
    let stdout = std::fs::read(d.path("daemon.stdout")).expect("stdout file");
    assert!(stdout.is_empty(), "the daemon wrote to stdout: {stdout:?}");
}

#[test]
fn json_log_format_writes_one_json_object_per_line() {
    let mut d = Daemon::start("[log]\nformat = \"json\"\n");
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(Duration::from_secs(60)).code(), Some(0));
    let log = d.log();
    let messages: Vec<String> = log
        .lines()
        .map(|l| {
            let v: Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}"));
            v["fields"]["message"]
                .as_str()
                .unwrap_or_else(|| panic!("no fields.message: {l}"))
                .to_string()
        })
        .collect();
    for line in ["starting", "ready", "drained", "exiting"] {
        assert!(messages.iter().any(|m| m == line), "{line:?} in\n{log}");
    }
    assert!(std::fs::read(d.path("daemon.stdout")).unwrap().is_empty());
}

fn wait_running(d: &Daemon, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, v) = d.send(d.get(&format!("/v1/jobs/{id}")));
        if v["state"] == "running" {
            return;
        }
        assert!(Instant::now() < deadline && v["state"] == "queued", "{v}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A job of the most partitions a job may have: with one started, a drain
/// waits for all of them, far longer than any step of these tests, so the
/// daemon stays draining until the test ends it (second signal, timeout).
fn submit_a_long_job(d: &Daemon) -> String {
    let id = d.submit_ok(json!({"circuit": "chain", "size": SIZE, "partitions": 1024}));
    wait_running(d, &id);
    id
}

#[test]
fn drain_timeout_or_a_second_sigterm_aborts_with_exit_5() {
    let mut d = Daemon::start("drain_timeout = \"300ms\"\n");
    submit_a_long_job(&d);
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(Duration::from_secs(60)).code(), Some(5));
    assert!(
        d.log().contains("drain aborted: drain_timeout"),
        "{}",
        d.log()
    );
    assert!(!d.path("run/prover.pid").exists());

    let mut d = Daemon::start("");
    submit_a_long_job(&d);
    // Queued behind the long job: none of its partitions started.
    let queued = d.submit_ok(json!({"circuit": "chain", "size": SIZE}));
    let (_, v) = d.send(d.get(&format!("/v1/jobs/{queued}")));
    assert_eq!(v["state"], "queued", "{v}");
    d.signal(libc::SIGTERM);
    // Draining, held there by the long job: /readyz is 503 `draining`, `client
    // ready` exits 4, a submission is refused with 503.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, v) = d.send(d.get("/readyz"));
        if code == StatusCode::SERVICE_UNAVAILABLE {
            assert_eq!(v["reason"].as_str(), Some("draining"), "{v}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz stayed {code} after SIGTERM: {v}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let ready = output_within(
        Command::new(env!("CARGO_BIN_EXE_prover"))
            .args(["client", "ready", "--config", "prover.toml"])
            .current_dir(d.dir.path()),
        COMMAND_LIMIT,
    );
    assert_eq!(ready.status.code(), Some(4), "client ready while draining");
    // The drain cancelled the job none of whose partitions had started.
    let (_, v) = d.send(d.get(&format!("/v1/jobs/{queued}")));
    assert_eq!(v["state"], "cancelled", "{v}");
    assert!(
        v["error"].as_str().unwrap_or_default().contains("draining"),
        "{v}"
    );
    let (code, v) = d.submit(json!({"circuit": "chain", "size": SIZE}));
    assert_eq!(
        (code, v["error"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("draining")),
        "{v}"
    );
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(Duration::from_secs(60)).code(), Some(5));
    assert!(
        d.log().contains("drain aborted: a second stop signal"),
        "{}",
        d.log()
    );
    after_an_aborted_drain_exiting_is_the_last_log_line(&d);
}

#[test]
fn client_submit_wait_exits_6_on_a_job_the_drain_cancelled() {
    let mut d = Daemon::start("");
    submit_a_long_job(&d);
    let before = d.status().queue.depth;
    let client = spawn_within(
        Command::new(env!("CARGO_BIN_EXE_prover"))
            .args([
                "client",
                "submit",
                "--config",
                "prover.toml",
                "--size",
                "1024",
                "--wait",
            ])
            .current_dir(d.dir.path()),
        COMMAND_LIMIT,
    );
    // Its job is queued behind the long one, none of its partitions started.
    let deadline = Instant::now() + Duration::from_secs(60);
    while d.status().queue.depth == before {
        assert!(Instant::now() < deadline, "the client's job never queued");
        std::thread::sleep(Duration::from_millis(5));
    }
    d.signal(libc::SIGTERM);
    let out = client.output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{err}");
    let job: JobStatus = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("client output is a job status ({e}): {err}"));
    assert_eq!(job.state, JobState::Cancelled, "{job:?}");
    assert!(
        job.error
            .as_deref()
            .unwrap_or_default()
            .contains("draining"),
        "{job:?}"
    );
    d.signal(libc::SIGTERM);
    assert_eq!(d.wait_exit(Duration::from_secs(60)).code(), Some(5));
}

fn after_an_aborted_drain_exiting_is_the_last_log_line(d: &Daemon) {
    // Workers still running when the process ends must not log after it.
    std::thread::sleep(Duration::from_millis(300));
    let log = d.log();
    let last = log
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    assert!(last.contains("exiting"), "last line {last:?} of\n{log}");
}

/// Runs the real `prover` binary with `args`, killed after 120 s.
fn prover_cli(args: &[&str]) -> (Option<i32>, String, String) {
    let out = output_within(
        Command::new(env!("CARGO_BIN_EXE_prover")).args(args),
        COMMAND_LIMIT,
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn prove_takes_the_power_syntax_prints_public_inputs_and_verify_exits_3_on_a_bad_proof() {
    let dir = tempfile::tempdir().expect("tempdir");
    let params = dir.path().join("params");
    let params = params.to_str().expect("utf-8 path");
    let (code, out, err) = prover_cli(&[
        "prove",
        "--backend",
        "cpu",
        "--size",
        "2^10",
        "--seed",
        "4",
        "--params-dir",
        params,
        "--test-params",
    ]);
    assert_eq!(code, Some(0), "prove failed:\n{err}");
    // stderr is a pipe here, not a terminal: no colour codes.
    assert!(
        !err.contains('\u{1b}'),
        "ANSI escapes on a non-terminal:\n{err}"
    );
    let inputs = out
        .lines()
        .find_map(|l| l.strip_prefix("public_inputs "))
        .expect("public_inputs line");
    assert!(
        inputs
            .split(',')
            .all(|h| h.len() == 64 && hex::decode(h).is_ok()),
        "{inputs}"
    );
    let proof = out
        .lines()
        .find_map(|l| l.strip_prefix("proof "))
        .expect("proof line")
        .to_string();
    let verify = |p: &str| {
        prover_cli(&[
            "verify",
            "--size",
            "2^10",
            "--seed",
            "4",
            "--params-dir",
            params,
            "--proof",
            p,
        ])
    };
    let (code, _, err) = verify(&proof);
    assert_eq!(code, Some(0), "the proof just made must verify:\n{err}");
    // Well formed (three valid points) but of another statement: the same
    // proof against the public inputs of seed 5 must fail verification and
    // exit 3, not only proofs that cannot be decoded.
    let (code, out, err) = prover_cli(&[
        "verify",
        "--size",
        "2^10",
        "--seed",
        "5",
        "--params-dir",
        params,
        "--proof",
        &proof,
    ]);
    assert_eq!(
        code,
        Some(3),
        "a valid-looking proof of another statement must exit 3:\n{err}"
    );
    assert!(out.contains("partition 0: INVALID"), "{out}");
    // A flipped bit in the first point's x coordinate: not a curve point,
    // so the proof cannot be decoded, which is a proof that did not verify.
    let mut bytes = hex::decode(&proof).expect("hex");
    bytes[20] ^= 0x01;
    let (code, _, err) = verify(&hex::encode(&bytes));
    assert_eq!(code, Some(3), "a corrupted proof must exit 3:\n{err}");
    assert!(err.contains("INVALID"), "{err}");
    // Truncated.
    let (code, _, err) = verify(&proof[..proof.len() - 2]);
    assert_eq!(code, Some(3), "a truncated proof must exit 3:\n{err}");
}

#[test]
fn a_bad_command_line_exits_2_naming_the_problem() {
    let (code, _, err) = prover_cli(&["prove", "--size", "banana"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--size") && err.contains("banana"), "{err}");
    let (code, _, err) = prover_cli(&["frobnicate"]);
    assert_eq!(code, Some(2), "{err}");
    let (code, _, err) = prover_cli(&["client", "ready"]);
    assert_eq!(code, Some(2), "--config is required: {err}");
    // Sizes are bounded before `1 << log_size` (2^99 once wrapped to 2^35).
    for bad in ["99", "3", "28"] {
        let (code, _, err) = prover_cli(&["bench", "--log-sizes", bad]);
        assert_eq!(code, Some(2), "--log-sizes {bad}: {err}");
        assert!(err.contains("--log-sizes") && err.contains(bad), "{err}");
    }
    let (code, _, err) = prover_cli(&["bench", "--repeat", "0"]);
    assert_eq!(code, Some(2), "--repeat 0: {err}");
    for bad in ["0", "1025"] {
        let (code, _, err) = prover_cli(&["prove", "--partitions", bad]);
        assert_eq!(code, Some(2), "--partitions {bad}: {err}");
    }
}

#[test]
fn an_error_and_its_causes_are_printed_once_each() {
    // bench's error ends with its source's message, which the chain holds
    // again: the last word names the missing parameters once.
    let dir = tempfile::tempdir().expect("tempdir");
    let (code, _, err) = prover_cli(&[
        "bench",
        "--circuits",
        "chain",
        "--log-sizes",
        "10",
        "--no-baseline",
        "--params-dir",
        &dir.path().join("none").display().to_string(),
    ]);
    assert_eq!(code, Some(1), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: bench chain 2^10: parameters: "),
        "{err}"
    );
    assert_eq!(
        last.matches("no parameters for circuit").count(),
        1,
        "{err}"
    );
}

#[test]
fn a_parameter_file_truncated_or_replaced_under_the_daemon_does_not_take_it_down() {
    // The daemon reads a parameter set whole into memory (it never maps the
    // file), so truncating the file in place, which would SIGBUS a reader
    // of a mapping, or renaming another over it, changes nothing for the
    // loaded set.
    let d = Daemon::start("");
    let params = d.path("params/chain-1024.params");
    let len = std::fs::metadata(&params).expect("params file").len();
    let pid = d.status().pid;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&params)
        .expect("open")
        .set_len(len / 3)
        .expect("truncate in place");
    let job = d.wait_job(&d.submit_ok(json!({"circuit": "chain", "size": SIZE, "seed": 3})));
    assert_eq!(job.state, JobState::Done, "{job:?}\n{}", d.log());
    assert!(job.result.is_some_and(|r| r.verified));
    let replacement = d.path("params/replacement");
    std::fs::write(&replacement, b"not parameters").expect("write");
    std::fs::rename(&replacement, &params).expect("replace by rename");
    let job = d.wait_job(&d.submit_ok(json!({"circuit": "chain", "size": SIZE, "seed": 4})));
    assert_eq!(job.state, JobState::Done, "{job:?}\n{}", d.log());
    let st = d.status();
    assert_eq!(st.pid, pid, "the daemon restarted");
    assert_eq!(st.state, fleet_wire::api::DaemonState::Ready);
    // The timing log says which devices this daemon proves on.
    let devices = d
        .timing_lines()
        .into_iter()
        .find_map(|l| match l {
            TimingLine::Devices(r) => Some(r),
            _ => None,
        })
        .expect("a devices record");
    assert_eq!(devices.backend, "cpu");
    assert!(devices.devices.is_empty());
}

/// `prover daemon --check-config`: a config whose preloaded parameters are
/// missing is refused with the entry named; with `test_params` (the daemon
/// generates them) or an unparsable config, what a start would do.
/// Nothing is started and nothing is written to the parameter directory.
#[test]
fn check_config_names_a_missing_preloaded_parameter_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, test_params: bool| {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!(
                "test_params = {test_params}\n[paths]\nparams_dir = \"params\"\n[[preload]]\ncircuit = \"chain\"\nsize = 1024\n"
            ),
        )
        .expect("write config");
        path
    };
    let check = |config: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_prover"))
            .args(["daemon", "--check-config", "--config"])
            .arg(config)
            .current_dir(dir.path())
            .output()
            .expect("run prover")
    };
    let out = check(&write("strict.toml", false));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("preload[0] chain/1024"), "{err}");
    assert!(err.contains("does not exist"), "{err}");
    let out = check(&write("generated.toml", true));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("generated at start (test_params)"), "{text}");
    assert!(text.contains("not there yet; created at start"), "{text}");
    std::fs::write(dir.path().join("bad.toml"), "listen = \"not-an-address\"\n").expect("write");
    let out = check(&dir.path().join("bad.toml"));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(!dir.path().join("run").exists(), "nothing was started");
    assert!(
        !dir.path().join("params").exists(),
        "a check creates no parameter directory"
    );
    std::fs::write(dir.path().join("params"), "a file").expect("write");
    let out = check(&write("file.toml", true));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is not a directory"), "{err}");
}

/// `--check-config` and `[filecoin] param_cache`: a folder the config names
/// must be there (the daemon never creates it); a file there is refused; an
/// existing folder passes.
#[test]
fn check_config_refuses_a_missing_filecoin_param_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let check = |cache: &std::path::Path| {
        let config = dir.path().join("prover.toml");
        std::fs::write(
            &config,
            format!(
                "[filecoin]\nparam_cache = {:?}\n",
                cache.to_str().expect("utf-8")
            ),
        )
        .expect("write config");
        Command::new(env!("CARGO_BIN_EXE_prover"))
            .args(["daemon", "--check-config", "--config"])
            .arg(&config)
            .current_dir(dir.path())
            .output()
            .expect("run prover")
    };
    let missing = dir.path().join("no-cache");
    let out = check(&missing);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("filecoin.param_cache") && err.contains("does not exist"),
        "{err}"
    );
    assert!(!missing.exists(), "the check created the cache");
    std::fs::write(&missing, b"a file").expect("write");
    let out = check(&missing);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let cache = dir.path().join("cache");
    std::fs::create_dir(&cache).expect("dir");
    let out = check(&cache);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("filecoin.param_cache"));
}

/// A loopback port free right now (a handover needs a fixed `listen`).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("ephemeral port")
        .port()
}

/// `prover daemon --handover WAIT` in `d`'s install dir.
fn spawn_successor(d: &Daemon, wait: &str) -> fleet_testkit::Within {
    spawn_within(
        d.command().args(["--handover", wait]),
        Duration::from_secs(300),
    )
}

/// Polls `what` every 10 ms until it holds or `timeout` passes.
fn wait_until(timeout: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "not within {timeout:?}: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_successor_starts_while_the_daemon_serves_and_takes_over_once_it_drained() {
    let port = free_port();
    let mut old = Daemon::start(&format!("listen = \"127.0.0.1:{port}\"\n"));
    let pid_file = old.path("run/prover.pid");
    let read_pid = || prover::daemon::pidfile::read_pid(&pid_file).ok();
    let mut new = spawn_successor(&old, "60s");
    wait_until(Duration::from_secs(120), "the successor's start-up", || {
        old.log().contains("started, waiting to take over")
    });
    // Started up beside it: the old daemon still holds the pid file and serves.
    assert_eq!(read_pid(), Some(old.pid()));
    assert_eq!(old.status().state, fleet_wire::api::DaemonState::Ready);
    assert!(!new.has_exited(), "{}", old.log());

    // A job in flight when the drain starts finishes on the old daemon.
    let id =
        old.submit_ok(json!({"circuit": "chain", "size": SIZE, "partitions": 3, "rs_seed": 5}));
    wait_running(&old, &id);
    let waiter = {
        let (url, http) = (
            old.url(&format!("/v1/jobs/{id}/wait?timeout=60s")),
            old.http.clone(),
        );
        std::thread::spawn(move || {
            http.get(url)
                .bearer_auth(TOKEN)
                .send()
                .and_then(|r| r.json::<JobStatus>())
        })
    };
    old.signal(libc::SIGTERM);
    let job = waiter.join().expect("waiter").expect("wait answer");
    assert_eq!(job.state, JobState::Done, "{job:?}");
    assert_eq!(old.wait_exit(Duration::from_secs(60)).code(), Some(0));

    wait_until(
        Duration::from_secs(30),
        "the successor's pid in the pid file",
        || read_pid() == Some(new.id()),
    );
    old.wait_ready(Duration::from_secs(30));
    assert!(old.log().contains("took over"), "{}", old.log());
    let served = old.submit_ok(json!({"circuit": "chain", "size": SIZE, "rs_seed": 5}));
    let done = old.wait_job(&served);
    assert!(done.result.expect("result").verified);

    // SAFETY: plain kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(new.id() as i32, libc::SIGTERM) }, 0);
    let out = new.output();
    assert_eq!(out.status.code(), Some(0), "{}", old.log());
    assert!(!pid_file.exists(), "pid file removed by the successor");
}

#[test]
fn a_successor_that_cannot_take_over_exits_1_and_one_on_port_0_binds_a_port_of_its_own() {
    let port = free_port();
    let old = Daemon::start(&format!("listen = \"127.0.0.1:{port}\"\n"));
    let new = spawn_successor(&old, "1s");
    let out = new.output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}\n{}", old.log());
    assert!(
        old.log()
            .contains("handover: the running daemon did not let go within 1s"),
        "{}",
        old.log()
    );
    assert_eq!(
        prover::daemon::pidfile::read_pid(&old.path("run/prover.pid")).ok(),
        Some(old.pid())
    );
    assert_eq!(old.status().state, fleet_wire::api::DaemonState::Ready);

    // On port 0 the successor binds a port of its own once it has taken
    // over, recorded beside the pid file, where clients look.
    let mut zero = Daemon::start("");
    let new = spawn_successor(&zero, "60s");
    wait_until(Duration::from_secs(120), "the successor's start-up", || {
        zero.log().contains("started, waiting to take over")
    });
    zero.signal(libc::SIGTERM);
    assert_eq!(zero.wait_exit(Duration::from_secs(60)).code(), Some(0));
    let pid_file = zero.path("run/prover.pid");
    wait_until(Duration::from_secs(30), "the successor's pid file", || {
        prover::daemon::pidfile::read_pid(&pid_file).ok() == Some(new.id())
    });
    zero.port = zero.wait_listening(Duration::from_secs(30));
    zero.wait_ready(Duration::from_secs(30));
    assert_eq!(zero.status().listen, format!("127.0.0.1:{}", zero.port));
    // SAFETY: plain kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(new.id() as i32, libc::SIGTERM) }, 0);
    assert_eq!(new.output().status.code(), Some(0), "{}", zero.log());

    // A wait of 0 or of days, or no duration at all, is refused by the CLI.
    let d = Daemon::unstarted("");
    for bad in ["0s", "2days", "soon"] {
        let out = output_within(d.command().args(["--handover", bad]), COMMAND_LIMIT);
        assert_eq!(out.status.code(), Some(2), "--handover {bad}");
    }
}

/// Sends a request head (no body) on a new connection and returns the
/// stream, for bodies that never come.
fn open_head(port: u16, path: &str, auth: bool, content_length: u64) -> std::net::TcpStream {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let auth = match auth {
        true => format!("Authorization: Bearer {TOKEN}\r\n"),
        false => String::new(),
    };
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: t\r\n{auth}Content-Type: application/json\r\nContent-Length: {content_length}\r\n\r\n"
    )
    .expect("write head");
    s
}

/// The status code of the first answer on `s`, read within its timeout.
fn answer_status(s: &mut std::net::TcpStream) -> (u16, String) {
    use std::io::Read;
    let mut buf = vec![0u8; 8192];
    let mut got = Vec::new();
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!("no answer: {e}"),
        }
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    (
        text.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0),
        text,
    )
}

// Regression: the token used to be checked only after the whole body was
// read, so strangers could hold both Filecoin body slots for
// `body_read_timeout` and make the daemon buffer 257 MiB each.
#[test]
fn a_request_without_the_token_is_refused_from_its_head_and_holds_no_body_slot() {
    let d = Daemon::start("");
    // A 200 MB body declared and never sent: the 401 comes at once.
    let t = Instant::now();
    let mut big = open_head(d.port, "/v1/filecoin/jobs", false, 200_000_000);
    let (status, text) = answer_status(&mut big);
    assert_eq!(status, 401, "{text}");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    // More strangers than there are Filecoin body slots, each stalling its body.
    let mut strangers: Vec<_> = (0..4)
        .map(|_| open_head(d.port, "/v1/filecoin/jobs", false, 1_000_000))
        .collect();
    for s in &mut strangers {
        assert_eq!(answer_status(s).0, 401);
    }
    // The same on the general routes and on an unknown one.
    for path in ["/v1/jobs", "/no/such/route"] {
        let mut s = open_head(d.port, path, false, 1_000_000);
        assert_eq!(answer_status(&mut s).0, 401, "{path}");
    }
    // An authorised Filecoin body still gets a slot: its bad JSON is judged
    // (400), not turned away as busy (503).
    let (status, v) = d.send(
        d.http
            .post(d.url("/v1/filecoin/jobs"))
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body("{\"kind\": 1}"),
    );
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
    // /healthz needs no token.
    let r = d.http.get(d.url("/healthz")).send().expect("healthz");
    assert_eq!(r.status(), StatusCode::OK);
    // The daemon buffered nothing of the 200 MB: its RSS stayed small.
    let rss_kib = std::fs::read_to_string(format!("/proc/{}/status", d.pid()))
        .expect("proc status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS");
    assert!(rss_kib < 150 * 1024, "RSS {rss_kib} KiB");
}

// Regression: `listen = "0.0.0.0:…"` without a token used to open every
// route to the network silently.
#[test]
fn a_listener_beyond_loopback_without_a_token_is_refused_unless_allowed_and_then_warned() {
    let e = daemon_config_error("listen = \"0.0.0.0:0\"\n[gpu]\ndevices = []\n");
    assert!(
        e.contains("listen:") && e.contains("api_token is unset"),
        "{e}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("prover.toml"),
        "listen = \"0.0.0.0:0\"\n[gpu]\ndevices = []\n",
    )
    .expect("write");
    let out = output_within(
        Command::new(env!("CARGO_BIN_EXE_prover"))
            .args(["daemon", "--config", "prover.toml", "--check-config"])
            .current_dir(dir.path()),
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("allow_unauthenticated = true"), "{stderr}");

    // Allowed explicitly: it starts, and says so in its log.
    let mut d = Daemon::unstarted("");
    std::fs::write(
        d.path("prover.toml"),
        "listen = \"0.0.0.0:0\"\nallow_unauthenticated = true\ndrain_timeout = \"60s\"\n\
         [gpu]\ndevices = []\n[memory]\nbudget = \"1GiB\"\n",
    )
    .expect("write config");
    d.launch(true);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !d.log().contains("without api_token") {
        assert!(Instant::now() < deadline, "no warning\n{}", d.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(d.log().contains("WARN"), "{}", d.log());
}
