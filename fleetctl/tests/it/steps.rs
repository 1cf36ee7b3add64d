//! Rollout steps against a real lab fleet (sshd hosts in namespaces): needs
//! root, and is skipped with a message otherwise.
//!
//! The shipped "binary" is a small stand-in prover compiled here from
//! [`STAND_IN`] (a real ELF, so `/proc/<pid>/exe` checks hold as for the
//! real daemon); its behaviour is picked by `mode` in the shipped config.
//! Distinct releases are the same ELF with a different build marker appended.

use fleetctl::inventory::{self, Host};
use fleetctl::lab::{Lab, LabConfig};
use fleetctl::steps::{
    self, acquire_lock, release_lock, DrainParams, HealthParams, Release, StartParams, StepCtx,
    StepOutcome, StepSpec, UploadParams, VerifyParams, WaitReleaseParams,
};
use fleetctl::transport::Transport;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Stand-in for `prover` with the same subcommands the steps call.
const STAND_IN: &str = r#"
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
static TERM: AtomicBool = AtomicBool::new(false);
extern "C" { fn signal(sig: i32, handler: usize) -> usize; }
extern "C" fn on_term(_: i32) { TERM.store(true, Ordering::SeqCst); }
fn build_of(exe: &str) -> String {
    // The marker is the file's last line: only the tail is read, so a
    // release padded to a real build's size costs no more per probe.
    use std::io::{Read, Seek, SeekFrom};
    let mut tail = Vec::new();
    if let Ok(mut f) = std::fs::File::open(exe) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(4096)));
        let _ = f.read_to_end(&mut tail);
    }
    let text = String::from_utf8_lossy(&tail);
    text.rsplit("\nFIXTURE_BUILD=").next().unwrap_or("").trim().to_string()
}
fn arg(args: &[String], name: &str) -> String {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned().unwrap_or_default()
}
fn now_ms() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis())
}
fn pid_alive() -> (Option<u32>, bool) {
    let pid = std::fs::read_to_string("run/prover.pid").ok().and_then(|s| s.trim().parse::<u32>().ok());
    let alive = pid.map_or(false, |p| {
        std::fs::read_to_string(format!("/proc/{p}/stat")).map_or(false, |s| !s.contains(") Z "))
    });
    (pid, alive)
}
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let config = arg(&args, "--config");
    let mode = std::fs::read_to_string(&config).unwrap_or_default()
        .lines().find_map(|l| l.strip_prefix("mode = ")).unwrap_or("\"normal\"").trim_matches('"').to_string();
    let me = build_of("/proc/self/exe");
    match args.get(1).map(String::as_str) {
        // A build that cannot start on the host (missing library, bad CPU).
        Some("--version") if me.contains("no-start") => { eprintln!("error while loading shared libraries"); std::process::exit(127); }
        Some("--version") => println!("prover 0.1.0 ({me})"),
        // `prepare`: no GPU here, and a config is accepted unless its mode says not.
        // `prepare_sleep_ms = N` in the release's own prover.toml: a stand-in
        // for a kernel compilation that takes that long (the benchmark's).
        Some("kernels") => {
            let exe = std::fs::read_link("/proc/self/exe").unwrap_or_default();
            let ms: u64 = std::fs::read_to_string(exe.with_file_name("prover.toml"))
                .unwrap_or_default()
                .lines()
                .find_map(|l| l.strip_prefix("prepare_sleep_ms = "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            std::thread::sleep(std::time::Duration::from_millis(ms));
            println!("no CUDA device 0 and no --arch: nothing compiled");
        }
        Some("daemon") if args.iter().any(|a| a == "--check-config") => {
            if mode == "refused_config" {
                eprintln!("{config}: refused");
                std::process::exit(1);
            }
            println!("{config}: ok");
        }
        Some("daemon") => {
            println!("INFO starting build={me}");
            println!("INFO configuration loaded");
            if mode == "gated" {
                // Held until the test opens the gate: whatever `start` waits for, it is not this.
                while !std::path::Path::new("run/gate").exists() {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            }
            // A config the build refuses does not start a daemon either.
            if mode == "crash" || mode == "refused_config" {
                eprintln!("Error: cannot bind 127.0.0.1:1: address in use");
                std::process::exit(1);
            }
            if mode == "truncate_crash" {
                // A build that opens its log with O_TRUNC, then dies.
                let _ = std::fs::File::create("logs/prover.log");
                eprintln!("Error: opening /dev/nvidia0: permission denied");
                std::process::exit(1);
            }
            if mode == "no_pid" {
                // A build that hangs before its pid file, with a child.
                let _child = std::process::Command::new("/proc/self/exe").arg("linger").spawn();
                loop { std::thread::sleep(std::time::Duration::from_secs(1)); }
            }
            // `--handover WAITs`: as the real daemon, wait for the running
            // one to give up its pid file, then take over.
            let handover = args.iter().position(|a| a == "--handover");
            if let Some(i) = handover {
                println!("INFO started, waiting to take over");
                let secs: u64 = args.get(i + 1).and_then(|w| w.trim_end_matches('s').parse().ok()).unwrap_or(60);
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
                while pid_alive().1 {
                    if std::time::Instant::now() >= deadline {
                        eprintln!("Error: handover: the running daemon did not let go within {secs}s");
                        std::process::exit(1);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                println!("INFO took over");
            }
            std::fs::write("run/prover.pid", format!("{}\n", std::process::id())).unwrap();
            unsafe { signal(15, if mode == "ignore_term" { 1 } else { on_term as extern "C" fn(i32) as usize }); }
            println!("INFO pinned pool allocated 0 bytes");
            if mode == "panic" {
                let _ = std::thread::spawn(|| panic!("engine lost its device")).join();
            }
            println!("INFO ready listen=127.0.0.1:0 ts_ms={}", now_ms());
            if mode == "die_after_takeover" && handover.is_some() {
                // Takes over, says ready, and dies a moment later (a device lost at the first job).
                std::thread::sleep(std::time::Duration::from_millis(100));
                println!("INFO died ts_ms={}", now_ms());
                std::process::exit(1);
            }
            loop {
                if TERM.load(Ordering::SeqCst) {
                    println!("INFO draining ts_ms={}", now_ms());
                    println!("INFO drained");
                    let _ = std::fs::remove_file("run/prover.pid");
                    println!("INFO exiting");
                    std::process::exit(0);
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        Some("linger") => loop { std::thread::sleep(std::time::Duration::from_secs(1)); },
        Some("health") => {
            if mode == "probe_fails" {
                eprintln!("health: cannot open /dev/nvidiactl: permission denied");
                std::process::exit(1);
            }
            let (pid, alive) = pid_alive();
            let build = pid.filter(|_| alive).map(|p| build_of(&format!("/proc/{p}/exe"))).unwrap_or_default();
            // `cpu_fallback`: a GPU host whose daemon, asked for "all", came up
            // on the CPU backend (what a broken NVRTC does).
            let (devices, gpus) = if mode == "cpu_fallback" {
                (
                    ",\"gpu_devices\":\"all\",\"devices\":[{\"backend\":\"cpu\",\"workers\":2,\"busy\":0,\"partitions_done\":0}]",
                    "{\"nvml\":{\"available\":true},\"devices\":[{\"index\":0,\"name\":\"Stand-in GPU\",\"pcie\":{},\"ecc\":{},\"retired_pages\":{},\"remapped_rows\":{}}]}",
                )
            } else {
                ("", "{\"nvml\":{\"available\":false,\"reason\":\"stand-in\"},\"devices\":[]}")
            };
            println!(
                "{{\"probe_version\":1,\"host\":\"h\",\"ts_ms\":0,\"prober_version\":\"0.1.0\",\"prober_build\":\"{me}\",\"memory\":{{}},\
                 \"daemon\":{{\"config\":\"{config}\",\"pid_file\":\"run/prover.pid\",\"listen\":\"127.0.0.1:0\",\"pid\":{},\"alive\":{alive},\
                 \"build\":\"{build}\",\"ready\":{alive}{devices}}},\"gpus\":{gpus}}}",
                pid.map_or("null".to_string(), |p| p.to_string())
            );
        }
        // `client ready`: what a client's readiness check gets, ready while
        // the pid file names a live daemon (the serving-gap probe asks it).
        Some("client") if args.get(2).map(String::as_str) == Some("ready") => {
            std::process::exit(if pid_alive().1 { 0 } else { 1 });
        }
        // `client c2`: the C1 output on stdin (`--c1 -`), as the smoke sends
        // it; `no_fil_params`: a daemon whose Filecoin cache lacks the files.
        Some("client") if args.get(2).map(String::as_str) == Some("c2") => {
            if !pid_alive().1 { eprintln!("daemon not running"); std::process::exit(1); }
            let mut c1 = String::new();
            let _ = std::io::Read::read_to_string(&mut std::io::stdin(), &mut c1);
            if mode == "no_fil_params" {
                eprintln!("error: the daemon answered 422 params_missing: v28-stand-in.params is not in /var/tmp/filecoin-proof-parameters");
                std::process::exit(8);
            }
            let prover_id = arg(&args, "--prover-id");
            if arg(&args, "--c1") != "-" || !c1.contains("vanilla_proofs") || prover_id.len() != 64 {
                eprintln!("error: bad_filecoin_input: {} bytes on stdin, prover id {prover_id:?}", c1.len());
                std::process::exit(7);
            }
            let mut f = std::fs::OpenOptions::new().create(true).append(true).open("logs/timing.jsonl").unwrap();
            writeln!(f, "{{\"circuit\":\"porep-c2:2KiB\",\"sector\":\"{}\",\"total_ms\":1.0}}", arg(&args, "--sector-id")).unwrap();
            println!("{}", "ab".repeat(192));
        }
        Some("client") => {
            if !pid_alive().1 { eprintln!("daemon not running"); std::process::exit(1); }
            let mut f = std::fs::OpenOptions::new().create(true).append(true).open("logs/timing.jsonl").unwrap();
            writeln!(f, "{{\"circuit\":\"{}\",\"size\":{},\"total_ms\":1.0}}", arg(&args, "--circuit"), arg(&args, "--size")).unwrap();
            println!("{{\"job_id\":\"j1\",\"state\":\"done\",\"result\":{{\"verified\":true}}}}");
        }
        _ => std::process::exit(2),
    }
}
"#;

/// Compiles the stand-in once per test process.
pub(crate) fn stand_in() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        // Under target/tmp: cleaned with the build, never left in /tmp.
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("steps-stand-in-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("stand_in.rs");
        std::fs::write(&src, STAND_IN).unwrap();
        let rustc = Path::new(env!("CARGO")).with_file_name("rustc");
        let rustc = if rustc.exists() {
            rustc
        } else {
            PathBuf::from("rustc")
        };
        let out = dir.join("stand_in");
        let built = fleet_testkit::output_within(
            std::process::Command::new(rustc)
                .args(["--edition", "2021", "-O", "-o"])
                .arg(&out)
                .arg(&src),
            Duration::from_secs(300),
        );
        assert!(
            built.status.success(),
            "compiling the stand-in prover failed: {}",
            String::from_utf8_lossy(&built.stderr)
        );
        out
    })
}

/// A release of the stand-in: its own build marker (hence its own sha256),
/// optional padding, and a config selecting its behaviour.
fn release(dir: &Path, build: &str, mode: &str, pad: usize) -> Release {
    let mut bytes = std::fs::read(stand_in()).unwrap();
    bytes.extend(std::iter::repeat_n(0u8, pad));
    bytes.extend(format!("\nFIXTURE_BUILD={build}\n").as_bytes());
    let bin = dir.join(format!("prover-{build}"));
    std::fs::write(&bin, bytes).unwrap();
    let cfg = dir.join(format!("prover-{build}.toml"));
    std::fs::write(&cfg, format!("mode = \"{mode}\"\n")).unwrap();
    Release::from_files(&bin, Some(&cfg)).unwrap()
}

/// A lab of one host, up while this lives, beside the binary's other labs
/// (see `crate::LABS`).
struct OneHost {
    lab: Lab,
    // Dropped after the lab: the turn ends once it is torn down.
    _shared: std::sync::RwLockReadGuard<'static, ()>,
}

impl std::ops::Deref for OneHost {
    type Target = Lab;
    fn deref(&self) -> &Lab {
        &self.lab
    }
}

/// A lab of one host plus its resolved inventory entry; `None` (test
/// skipped, recorded) when not root and the run leaves the lab out.
#[track_caller]
fn lab(data_size: Option<u64>) -> Option<(OneHost, Host)> {
    if !fleet_testkit::have_lab() {
        return None;
    }
    let shared = crate::labs_shared();
    let mut config = LabConfig::new(1);
    if let Some(size) = data_size {
        config.data_size = size;
    }
    let lab = Lab::start_with(config).unwrap();
    let inv = inventory::load(Some(&lab.inventory_path()), &[]).unwrap();
    let host = inv.hosts[0].host.clone();
    Some((
        OneHost {
            lab,
            _shared: shared,
        },
        host,
    ))
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Every test body is bounded, whatever a step does.
fn bounded<F: std::future::Future<Output = ()>>(f: F) {
    rt().block_on(async {
        tokio::time::timeout(Duration::from_secs(180), f)
            .await
            .expect("test exceeded 180 s");
    });
}

async fn sh(t: &Transport, script: &str) -> String {
    let out = t.run_script(script, Duration::from_secs(10)).await.unwrap();
    out.stdout_text()
}

async fn step(spec: StepSpec, ctx: &mut StepCtx<'_>) -> Result<StepOutcome, steps::StepError> {
    steps::run(&spec, ctx).await
}

/// A step the test needs to succeed; a failure names the step.
async fn ok(spec: StepSpec, ctx: &mut StepCtx<'_>) -> StepOutcome {
    let name = spec.name();
    step(spec, ctx)
        .await
        .unwrap_or_else(|e| panic!("step {name} failed: {e}"))
}

/// A step the test needs to fail: its message.
async fn fails(spec: StepSpec, ctx: &mut StepCtx<'_>) -> String {
    let name = spec.name();
    match step(spec, ctx).await {
        Ok(outcome) => panic!("step {name} should have failed: {outcome:?}"),
        Err(e) => e.to_string(),
    }
}

/// Ships `ctx`'s release and starts it: the setup of every test about what
/// happens to a running daemon.
async fn upload_and_start(ctx: &mut StepCtx<'_>) {
    ok(StepSpec::Upload(UploadParams::default()), ctx).await;
    ok(StepSpec::Start(StartParams::default()), ctx).await;
}

fn fast_verify() -> VerifyParams {
    VerifyParams {
        timeout: Duration::from_secs(10),
        settle: Duration::from_millis(500),
        poll: Duration::from_millis(100),
        fail_patterns: vec![],
    }
}

#[test]
fn upload_is_content_addressed_skipped_when_present_and_rejects_corruption() {
    let Some((_lab, host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = release(dir.path(), "build-a", "normal", 0);
    let b = release(dir.path(), "build-b", "normal", 0);
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &a);
        let first = ok(StepSpec::Upload(UploadParams::default()), &mut ctx).await;
        assert!(matches!(first, StepOutcome::Done { .. }), "{first:?}");
        let rel_a = format!("/data/prover/releases/{}", a.id);
        assert_eq!(
            sh(&t, &format!("sha256sum {rel_a}/prover | cut -d' ' -f1")).await,
            a.binary_sha256
        );
        let second = ok(StepSpec::Upload(UploadParams::default()), &mut ctx).await;
        assert!(
            matches!(&second, StepOutcome::Skipped { reason } if reason.contains("already present")),
            "{second:?}"
        );

        let mut ctx = StepCtx::new(&host, &t, &b);
        ctx.faults.corrupt_upload = true;
        let msg = fails(StepSpec::Upload(UploadParams::default()), &mut ctx).await;
        assert!(
            msg.contains("sha256 mismatch")
                && msg.contains(&b.binary_sha256)
                && msg.contains("upload"),
            "{msg}"
        );
        // Release A untouched, nothing of B left behind.
        assert_eq!(
            sh(&t, &format!("sha256sum {rel_a}/prover | cut -d' ' -f1")).await,
            a.binary_sha256
        );
        assert_eq!(sh(&t, "ls -A /data/prover/releases").await, a.id);
        t.close().await.unwrap();
    });
}

/// Regression (issue 51, item 13b): an uploaded binary that fails
/// `prover --version` on the host leaves no release folder behind.
#[test]
fn an_uploaded_binary_that_does_not_start_leaves_no_release_behind() {
    let Some((_lab, host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = release(dir.path(), "build-a", "normal", 0);
    let bad = release(dir.path(), "no-start", "normal", 0);
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &a);
        ok(StepSpec::Upload(UploadParams::default()), &mut ctx).await;
        let mut ctx = StepCtx::new(&host, &t, &bad);
        let msg = fails(StepSpec::Upload(UploadParams::default()), &mut ctx).await;
        assert!(
            msg.contains("does not start on this host") && msg.contains("removed"),
            "{msg}"
        );
        assert_eq!(sh(&t, "ls -A /data/prover/releases").await, a.id);
        t.close().await.unwrap();
    });
}

/// The sha256 of the binary a release landed as on the host.
async fn landed(t: &Transport, r: &Release) -> String {
    sh(
        t,
        &format!(
            "sha256sum /data/prover/releases/{}/prover | cut -d' ' -f1",
            r.id
        ),
    )
    .await
}

/// Compressed where the host's gzip works, plain (with the reason) where it
/// does not or the playbook says so; the same bytes land either way.
#[test]
fn upload_goes_compressed_and_plain_where_the_host_cannot_inflate() {
    let Some((lab, host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let zipped = release(dir.path(), "zipped", "normal", 4 << 20);
    let no_gzip = release(dir.path(), "no-gzip", "normal", 4 << 20);
    let off = release(dir.path(), "off", "normal", 4 << 20);
    let file_bytes = |r: &Release| {
        std::fs::metadata(&r.binary).unwrap().len()
            + std::fs::metadata(r.config.as_ref().unwrap()).unwrap().len()
    };
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &zipped);
        let o = ok(StepSpec::Upload(UploadParams::default()), &mut ctx).await;
        assert!(o.text().contains("gzip"), "{o:?}");
        let sent = ctx.state.uploaded.clone().expect("recorded");
        assert_eq!(
            (
                sent.encoding,
                sent.file_bytes,
                sent.plain_because.as_deref()
            ),
            ("gzip", file_bytes(&zipped), None)
        );
        assert!(sent.sent_bytes * 4 < sent.file_bytes, "{sent:?}");
        assert_eq!(landed(&t, &zipped).await, zipped.binary_sha256);

        // A host whose gzip cannot run: a plain file over it, on this host only.
        let hidden = lab
            .exec(
                0,
                &[
                    "sh",
                    "-c",
                    "printf '' > /tmp/not-gzip && mount --bind /tmp/not-gzip /usr/bin/gzip",
                ],
            )
            .unwrap();
        assert!(hidden.status.success(), "{hidden:?}");
        let mut ctx = StepCtx::new(&host, &t, &no_gzip);
        let o = ok(StepSpec::Upload(UploadParams::default()), &mut ctx).await;
        assert!(
            o.text().contains("sent plain: the host has no `gzip`"),
            "{o:?}"
        );
        let sent = ctx.state.uploaded.clone().expect("recorded");
        assert_eq!(
            (sent.encoding, sent.sent_bytes),
            ("plain", file_bytes(&no_gzip))
        );
        assert_eq!(landed(&t, &no_gzip).await, no_gzip.binary_sha256);

        let mut ctx = StepCtx::new(&host, &t, &off);
        let params = UploadParams {
            compress: false,
            ..UploadParams::default()
        };
        let o = ok(StepSpec::Upload(params), &mut ctx).await;
        assert!(o.text().ends_with("sent plain)"), "{o:?}");
        assert_eq!(ctx.state.uploaded.unwrap().plain_because, None);
        assert_eq!(landed(&t, &off).await, off.binary_sha256);
        t.close().await.unwrap();
    });
}

#[test]
fn upload_keeps_n_releases_but_never_current_or_previous() {
    let Some((_lab, host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let rels: Vec<Release> = (1..=5)
        .map(|i| release(dir.path(), &format!("keep-{i}"), "normal", 0))
        .collect();
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let keep = UploadParams {
            keep_releases: 2,
            ..Default::default()
        };
        for (i, r) in rels.iter().enumerate() {
            let mut ctx = StepCtx::new(&host, &t, r);
            ok(StepSpec::Upload(keep.clone()), &mut ctx).await;
            if i == 0 {
                // Release 1 is what the host runs, release 2 what it ran before.
                sh(
                    &t,
                    &format!("cd /data/prover && ln -s releases/{} current", r.id),
                )
                .await;
            }
            if i == 1 {
                sh(&t, &format!("echo {} > /data/prover/state/previous", r.id)).await;
            }
        }
        let mut left: Vec<String> = sh(&t, "ls -1 /data/prover/releases")
            .await
            .lines()
            .map(str::to_owned)
            .collect();
        left.sort();
        let mut want: Vec<String> = [0, 1, 3, 4].iter().map(|&i| rels[i].id.clone()).collect();
        want.sort();
        assert_eq!(left, want, "release 3 is the only one old and unprotected");
        t.close().await.unwrap();
    });
}

/// After A passed verify, three builds that never did (rollouts without
/// rollback, each left `current`) push A past `keep_releases`: it stays, and a
/// rollback still finds it. Temporary files a killed upload left, in the
/// new release's folder and in another's, are gone after the next upload.
#[test]
fn upload_never_prunes_the_last_verified_release_and_sweeps_killed_uploads() {
    let Some((_lab, host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let good = release(dir.path(), "verified-a", "normal", 0);
    let bad: Vec<Release> = (1..=3)
        .map(|i| release(dir.path(), &format!("never-{i}"), "crash", 0))
        .collect();
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &good);
        upload_and_start(&mut ctx).await;
        ok(StepSpec::Verify(fast_verify()), &mut ctx).await;
        ok(StepSpec::Drain(DrainParams::default()), &mut ctx).await;
        let keep = UploadParams {
            keep_releases: 1,
            ..Default::default()
        };
        let mut before = good.id.clone();
        for r in &bad {
            let mut ctx = StepCtx::new(&host, &t, r);
            ok(StepSpec::Upload(keep.clone()), &mut ctx).await;
            sh(
                &t,
                &format!(
                    "cd /data/prover && ln -sfn releases/{} current && echo {before} > state/previous",
                    r.id
                ),
            )
            .await;
            before = r.id.clone();
        }
        let left = sh(&t, "ls -1 /data/prover/releases").await;
        assert!(left.contains(&good.id), "last verified pruned: {left}");
        let mut ctx = StepCtx::new(&host, &t, &bad[2]);
        ok(StepSpec::Rollback(Default::default()), &mut ctx).await;
        assert_eq!(
            sh(&t, "readlink /data/prover/current").await,
            format!("releases/{}", good.id)
        );

        // What a SIGKILLed upload leaves: a partial binary under its temporary name.
        let stale = [
            format!(
                "/data/prover/releases/{}/.prover.00000000deadbeef.tmp",
                bad[0].id
            ),
            format!(
                "/data/prover/releases/{}/.prover.toml.00000000deadbeef.tmp",
                good.id
            ),
        ];
        for f in &stale {
            sh(
                &t,
                &format!("mkdir -p \"$(dirname {f})\" && head -c 65536 /dev/zero > {f}"),
            )
            .await;
        }
        let mut ctx = StepCtx::new(&host, &t, &bad[0]);
        let out = ok(StepSpec::Upload(UploadParams::default()), &mut ctx).await;
        assert!(
            format!("{out:?}").contains("removed 2 temporary file(s) of an interrupted upload"),
            "{out:?}"
        );
        let tmp = sh(&t, "find /data/prover/releases -name '*.tmp'").await;
        assert_eq!(tmp, "", "temporary files left");
        t.close().await.unwrap();
    });
}

#[test]
fn upload_to_a_full_disk_fails_clearly_and_leaves_nothing_behind() {
    let Some((_lab, host)) = lab(Some(2 << 20)) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let big = release(dir.path(), "big", "normal", 8 << 20);
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &big);
        let msg = fails(StepSpec::Upload(UploadParams::default()), &mut ctx).await;
        assert!(
            msg.contains("disk is full") && msg.contains("temporary files removed"),
            "{msg}"
        );
        assert_eq!(sh(&t, "ls -A /data/prover/releases").await, "");
        let used: u64 = sh(&t, "df --output=used -B1 /data | tail -1")
            .await
            .trim()
            .parse()
            .unwrap();
        assert!(used < (1 << 20), "/data still holds {used} bytes");
        t.close().await.unwrap();
    });
}

#[test]
fn rollout_start_detaches_verify_passes_and_rollback_restores_the_previous_release() {
    let Some((_lab, host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = release(dir.path(), "roll-a", "gated", 0);
    let b = release(dir.path(), "roll-b", "normal", 0);
    bounded(async {
        // Release A: upload, start, and the daemon must outlive the connection.
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &a);
        ok(StepSpec::Upload(UploadParams::default()), &mut ctx).await;
        let started = ok(StepSpec::Start(StartParams::default()), &mut ctx).await;
        let pid_a = ctx.state.started.as_ref().unwrap().pid;
        // `start` came back while its daemon is held at the gate, before
        // writing its pid file: it waits for nothing the daemon does.
        let held =
            format!("test -d /proc/{pid_a} && test ! -e /data/prover/run/prover.pid && echo held");
        assert_eq!(sh(&t, &held).await.trim(), "held", "{started:?}");
        sh(&t, "touch /data/prover/run/gate").await;
        t.close().await.unwrap();

        let t = Transport::connect(&host).await.unwrap();
        let alive = sh(&t, &format!("readlink /proc/{pid_a}/exe")).await;
        assert_eq!(
            alive,
            format!("/data/prover/releases/{}/prover", a.id),
            "daemon died with the SSH session"
        );
        let mut ctx = StepCtx::new(&host, &t, &a);
        let v = ok(StepSpec::Verify(fast_verify()), &mut ctx).await;
        assert!(
            matches!(&v, StepOutcome::Done { detail } if detail.contains("roll-a")),
            "{v:?}"
        );

        // Release B: the full sequence.
        let mut ctx = StepCtx::new(&host, &t, &b);
        ok(StepSpec::Upload(UploadParams::default()), &mut ctx).await;
        let d = ok(StepSpec::Drain(DrainParams::default()), &mut ctx).await;
        assert!(
            matches!(&d, StepOutcome::Done { detail } if detail.contains("after SIGTERM")),
            "{d:?}"
        );
        ok(
            StepSpec::WaitRelease(WaitReleaseParams::default()),
            &mut ctx,
        )
        .await;
        ok(StepSpec::Start(StartParams::default()), &mut ctx).await;
        ok(StepSpec::Verify(fast_verify()), &mut ctx).await;
        let smoke = ok(StepSpec::Smoke(Default::default()), &mut ctx).await;
        assert!(
            matches!(&smoke, StepOutcome::Done { detail } if detail.contains("1 new timing record")),
            "{smoke:?}"
        );
        assert_eq!(sh(&t, "cat /data/prover/state/previous").await, a.id);
        let log = sh(&t, "cat /data/prover/logs/prover.log").await;
        assert!(
            log.contains("build=roll-a")
                && log.contains("INFO drained")
                && log.contains("build=roll-b"),
            "{log}"
        );

        // Rollback: back to A, B recorded as previous.
        let mut ctx = StepCtx::new(&host, &t, &b);
        let r = ok(StepSpec::Rollback(Default::default()), &mut ctx).await;
        assert!(
            matches!(&r, StepOutcome::Done { detail } if detail.contains("rolled back")),
            "{r:?}"
        );
        assert_eq!(
            sh(&t, "readlink /data/prover/current").await,
            format!("releases/{}", a.id)
        );
        assert_eq!(sh(&t, "cat /data/prover/state/previous").await, b.id);
        let v = ok(StepSpec::Verify(fast_verify()), &mut ctx).await;
        assert!(
            matches!(&v, StepOutcome::Done { detail } if detail.contains("roll-a")),
            "{v:?}"
        );
        // Start refuses while a daemon runs.
        let msg = fails(StepSpec::Start(StartParams::default()), &mut ctx).await;
        assert!(msg.contains("still running"), "{msg}");
        t.close().await.unwrap();
    });
}

/// Processes on the host running a binary under `/data/prover/releases`,
/// as `pid exe` lines.
async fn release_processes(t: &Transport) -> Vec<String> {
    let out = sh(
        t,
        "for d in /proc/[0-9]*; do e=$(readlink $d/exe 2>/dev/null) || continue; \
         case \"$e\" in /data/prover/releases/*) echo \"${d#/proc/} $e\";; esac; done",
    )
    .await;
    out.lines().map(str::to_owned).collect()
}

/// A build that never writes its pid file (and has a child) is invisible to
/// the drain; the rollback still stops all of it before it starts the old
/// release, so the host ends with one daemon: the old one.
#[test]
fn rollback_stops_every_process_of_the_failed_release_and_leaves_one_daemon() {
    let Some((_lab, host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = release(dir.path(), "one-a", "normal", 0);
    let b = release(dir.path(), "one-b", "no_pid", 0);
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &a);
        upload_and_start(&mut ctx).await;
        ok(StepSpec::Verify(fast_verify()), &mut ctx).await;

        let mut ctx = StepCtx::new(&host, &t, &b);
        ok(StepSpec::Upload(UploadParams::default()), &mut ctx).await;
        ok(StepSpec::Drain(DrainParams::default()), &mut ctx).await;
        ok(StepSpec::Start(StartParams::default()), &mut ctx).await;
        let deadline = Instant::now() + Duration::from_secs(5);
        while release_processes(&t).await.len() < 2 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let before = release_processes(&t).await;
        assert_eq!(
            before.len(),
            2,
            "the failed build and its child: {before:?}"
        );
        let mut quick = fast_verify();
        quick.timeout = Duration::from_secs(2);
        fails(StepSpec::Verify(quick), &mut ctx).await;

        let r = ok(StepSpec::Rollback(Default::default()), &mut ctx).await;
        assert!(
            matches!(&r, StepOutcome::Done { detail } if detail.contains("stopped what was left")),
            "{r:?}"
        );
        let after = release_processes(&t).await;
        assert_eq!(after.len(), 1, "one daemon per host: {after:?}");
        assert!(
            after[0].ends_with(&format!("/releases/{}/prover", a.id)),
            "{after:?}"
        );
        t.close().await.unwrap();
    });
}

/// A release that never passed verify is no rollback target: after A
/// verified, B failed at start and stayed `current` (so `state/previous`
/// names B when C starts); C fails, and the rollback goes to A, not B.
#[test]
fn rollback_goes_to_the_last_release_that_passed_verify_not_the_previous() {
    let Some((_lab, host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = release(dir.path(), "good-a", "normal", 0);
    let b = release(dir.path(), "bad-b", "crash", 0);
    let c = release(dir.path(), "bad-c", "no_pid", 0);
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &a);
        upload_and_start(&mut ctx).await;
        ok(StepSpec::Verify(fast_verify()), &mut ctx).await;

        let mut ctx = StepCtx::new(&host, &t, &b);
        ok(StepSpec::Upload(UploadParams::default()), &mut ctx).await;
        ok(StepSpec::Drain(DrainParams::default()), &mut ctx).await;
        ok(StepSpec::Start(StartParams::default()), &mut ctx).await;
        fails(StepSpec::Verify(fast_verify()), &mut ctx).await;

        let mut ctx = StepCtx::new(&host, &t, &c);
        ok(StepSpec::Upload(UploadParams::default()), &mut ctx).await;
        step(StepSpec::Drain(DrainParams::default()), &mut ctx)
            .await
            .ok();
        ok(StepSpec::Start(StartParams::default()), &mut ctx).await;
        assert_eq!(sh(&t, "cat /data/prover/state/previous").await, b.id);
        let mut quick = fast_verify();
        quick.timeout = Duration::from_secs(2);
        fails(StepSpec::Verify(quick), &mut ctx).await;
        ok(StepSpec::Rollback(Default::default()), &mut ctx).await;
        assert_eq!(
            sh(&t, "readlink /data/prover/current").await,
            format!("releases/{}", a.id),
            "rolled back onto the build that worked"
        );
        ok(StepSpec::Verify(fast_verify()), &mut ctx).await;
        t.close().await.unwrap();
    });
}

/// A probe that fails the same way every poll ends verify at once with
/// its output, instead of after the whole readiness deadline.
#[test]
fn verify_fails_fast_on_a_probe_that_fails_the_same_way_every_time() {
    let Some((_lab, host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = release(dir.path(), "probe-bad", "probe_fails", 0);
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &a);
        upload_and_start(&mut ctx).await;
        let mut slow = fast_verify();
        slow.timeout = Duration::from_secs(60);
        let began = Instant::now();
        let msg = fails(StepSpec::Verify(slow), &mut ctx).await;
        let took = began.elapsed();
        assert!(took < Duration::from_secs(10), "took {took:?}: {msg}");
        assert!(
            msg.contains("same way") && msg.contains("cannot open /dev/nvidiactl"),
            "{msg}"
        );
        t.close().await.unwrap();
    });
}

#[test]
fn rollback_without_a_previous_release_fails_clearly() {
    let Some((_lab, host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = release(dir.path(), "only", "normal", 0);
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &a);
        let msg = fails(StepSpec::Rollback(Default::default()), &mut ctx).await;
        assert!(msg.contains("no previous release"), "{msg}");
        t.close().await.unwrap();
    });
}

#[test]
fn drain_sigkills_a_daemon_that_ignores_sigterm() {
    let Some((_lab, host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let stubborn = release(dir.path(), "stubborn", "ignore_term", 0);
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &stubborn);
        upload_and_start(&mut ctx).await;
        ok(StepSpec::Verify(fast_verify()), &mut ctx).await;
        let pid = ctx.state.started.as_ref().unwrap().pid;
        let params = DrainParams {
            timeout: Duration::from_secs(1),
            ..Default::default()
        };
        let began = Instant::now();
        let out = ok(StepSpec::Drain(params), &mut ctx).await;
        assert!(
            matches!(&out, StepOutcome::Forced { detail, flag } if detail.contains("ignored SIGTERM") && flag == "SIGKILL"),
            "{out:?}"
        );
        assert!(
            began.elapsed() < Duration::from_secs(8),
            "{:?}",
            began.elapsed()
        );
        assert!(ctx.state.drained.as_ref().unwrap().killed);
        assert_eq!(
            sh(
                &t,
                &format!("[ -d /proc/{pid} ] && cat /proc/{pid}/status | grep State || echo gone")
            )
            .await,
            "gone"
        );
        // Nothing left to drain: the pid file is stale now.
        let again = ok(StepSpec::Drain(DrainParams::default()), &mut ctx).await;
        assert!(
            matches!(&again, StepOutcome::Skipped { reason } if reason.contains("stale") || reason.contains("no pid file")),
            "{again:?}"
        );
        t.close().await.unwrap();
    });
}

#[test]
fn drain_never_signals_a_recycled_pid_of_another_program() {
    let Some((_lab, host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = release(dir.path(), "recycled", "normal", 0);
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &a);
        ok(StepSpec::Upload(UploadParams::default()), &mut ctx).await;
        // The daemon died and its pid now belongs to another program.
        let other = sh(&t, "nohup sleep 300 >/dev/null 2>&1 </dev/null & echo $!").await;
        sh(
            &t,
            &format!("mkdir -p /data/prover/run && echo {other} > /data/prover/run/prover.pid"),
        )
        .await;
        let out = ok(StepSpec::Drain(DrainParams::default()), &mut ctx).await;
        assert!(
            matches!(&out, StepOutcome::Skipped { reason } if reason.contains(&format!("pid {other}")) && reason.contains("not a prover")),
            "{out:?}"
        );
        assert_eq!(
            sh(
                &t,
                &format!("grep '^State' /proc/{other}/status || echo gone")
            )
            .await,
            "State:\tS (sleeping)",
            "the other program was not signalled"
        );
        sh(&t, &format!("kill {other}")).await;
        t.close().await.unwrap();
    });
}

#[test]
fn wait_release_waits_while_the_drained_daemon_is_a_zombie() {
    let Some((_lab, host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = release(dir.path(), "zombie", "normal", 0);
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &a);
        upload_and_start(&mut ctx).await;
        ok(StepSpec::Verify(fast_verify()), &mut ctx).await;
        ok(StepSpec::Drain(DrainParams::default()), &mut ctx).await;
        // A child that exits under a parent that never reaps it: the child
        // waits on a FIFO until its parent has become `sleep` (exec), then
        // the test lets it exit; every wait is on an event, bounded.
        let zombie = t
            .run_script(
                "cd /data && rm -f zfifo zchild zparent && mkfifo zfifo && \
                 (sh -c 'read x < zfifo & echo $! > zchild; echo $$ > zparent; exec sleep 300' >/dev/null 2>&1 </dev/null &); \
                 for i in $(seq 600); do [ -s zparent ] && [ \"$(cat /proc/$(cat zparent)/comm 2>/dev/null)\" = sleep ] && break; sleep 0.05; done; \
                 echo go > zfifo; \
                 for i in $(seq 600); do grep -q '^State:.Z' /proc/$(cat zchild)/status 2>/dev/null && break; sleep 0.05; done; \
                 if grep -q '^State:.Z' /proc/$(cat zchild)/status; then cat zchild; \
                 else echo \"child $(cat zchild):\"; ps -eo pid,ppid,stat,args; fi",
                Duration::from_secs(90),
            )
            .await
            .unwrap()
            .stdout_text();
        assert!(zombie.parse::<u32>().is_ok(), "no zombie: {zombie:?}");
        ctx.state.drained.as_mut().unwrap().pid = zombie.parse().unwrap();
        let params = WaitReleaseParams {
            timeout: Duration::from_secs(1),
            ..Default::default()
        };
        let msg = fails(StepSpec::WaitRelease(params), &mut ctx).await;
        assert!(
            msg.contains(&format!("pid {zombie} still in /proc (state Z")),
            "a zombie still holds its pinned pages: {msg}"
        );
        t.close().await.unwrap();
    });
}

#[test]
fn wait_release_deadline_fails_with_numbers_and_nothing_is_started() {
    let Some((_lab, host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = release(dir.path(), "wr", "normal", 0);
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &a);
        upload_and_start(&mut ctx).await;
        ok(StepSpec::Verify(fast_verify()), &mut ctx).await;
        ok(StepSpec::Drain(DrainParams::default()), &mut ctx).await;
        // More MemAvailable than any machine has: the memory never "comes back".
        let params = WaitReleaseParams {
            timeout: Duration::from_secs(1),
            min_available: Some(steps::ByteSize::parse("64TiB").unwrap()),
            ..Default::default()
        };
        let msg = fails(StepSpec::WaitRelease(params), &mut ctx).await;
        assert!(
            msg.contains("not released within 1.0s")
                && msg.contains("MemAvailable")
                && msg.contains("< 64TiB"),
            "{msg}"
        );
        assert!(msg.contains("NOT started"), "{msg}");
        assert_eq!(
            sh(
                &t,
                "[ -e /data/prover/run/prover.pid ] && echo running || echo none"
            )
            .await,
            "none"
        );
        t.close().await.unwrap();
    });
}

#[test]
fn verify_catches_a_build_that_crashes_at_start_and_one_that_panics() {
    let Some((_lab, host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let crash = release(dir.path(), "crash", "crash", 0);
    let panic = release(dir.path(), "panic", "panic", 0);
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &crash);
        upload_and_start(&mut ctx).await;
        let msg = fails(StepSpec::Verify(fast_verify()), &mut ctx).await;
        assert!(
            msg.contains("has exited") && msg.contains("cannot bind"),
            "{msg}"
        );

        let mut ctx = StepCtx::new(&host, &t, &panic);
        upload_and_start(&mut ctx).await;
        let msg = fails(StepSpec::Verify(fast_verify()), &mut ctx).await;
        assert!(
            msg.contains("failure lines")
                && msg.contains("panicked")
                && msg.contains("engine lost its device"),
            "{msg}"
        );
        assert!(
            !msg.contains("crash"),
            "old log lines must not count: {msg}"
        );
        ok(StepSpec::Drain(DrainParams::default()), &mut ctx).await;

        // The log is shorter than where the start left it: its last words
        // are still shown, not an empty "last log lines:".
        let trunc = release(dir.path(), "trunc", "truncate_crash", 0);
        sh(&t, "yes 'INFO an old line of an earlier daemon' | head -c 200000 >> /data/prover/logs/prover.log").await;
        let mut ctx = StepCtx::new(&host, &t, &trunc);
        upload_and_start(&mut ctx).await;
        let msg = fails(StepSpec::Verify(fast_verify()), &mut ctx).await;
        assert!(
            msg.contains("has exited") && msg.contains("opening /dev/nvidia0: permission denied"),
            "{msg}"
        );
        t.close().await.unwrap();
    });
}

#[test]
fn lock_refuses_a_second_holder_and_names_the_first() {
    let Some((_lab, host)) = lab(None) else {
        return;
    };
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let first = acquire_lock(&host, &t, "run-1").await.unwrap();
        let err = acquire_lock(&host, &t, "run-2").await.unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("locked by run=run-1") && msg.contains("/data/prover/state/lock"),
            "{msg}"
        );
        // The owner is a user name and a UTC time a person reads, not
        // `user=?` and a raw epoch.
        let user = msg.split("user=").nth(1).and_then(|r| r.split(' ').next());
        assert!(user.is_some_and(|u| !u.is_empty() && u != "?"), "{msg}");
        let since = msg
            .split("since=")
            .nth(1)
            .map(|r| r.chars().take(20).collect::<String>())
            .unwrap_or_default();
        assert!(
            humantime::parse_rfc3339(&since).is_ok() && since.ends_with('Z'),
            "since={since:?}: {msg}"
        );
        release_lock(&host, &t, &first).await.unwrap();
        let second = acquire_lock(&host, &t, "run-2").await.unwrap();
        // A stale guard cannot remove someone else's lock.
        assert!(release_lock(&host, &t, &first).await.is_err());
        release_lock(&host, &t, &second).await.unwrap();
        t.close().await.unwrap();
    });
}

/// Sets the pid in the host's lock owner file, as if another fleetctl
/// process of this controller had taken the lock.
async fn set_lock_pid(t: &Transport, pid: u32) {
    sh(
        t,
        &format!("sed -i '2s/ pid=[0-9]* / pid={pid} /' /data/prover/state/lock/owner && sed -n 2p /data/prover/state/lock/owner"),
    )
    .await;
}

/// A resume of a run that was SIGKILLed takes over the locks that run left
/// (same run id, this controller, pid gone) and says from whom; a live
/// holder of the same run and any other run are still refused.
#[test]
fn a_resume_takes_over_the_lock_of_its_own_killed_run_and_nothing_else() {
    let Some((_lab, host)) = lab(None) else {
        return;
    };
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let left = acquire_lock(&host, &t, "run-9").await.unwrap();
        assert!(left.took_over.is_none());

        // The killed fleetctl: a process of ours that is gone.
        let mut killed = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let dead_pid = killed.id();
        killed.kill().unwrap();
        killed.wait().unwrap();
        set_lock_pid(&t, dead_pid).await;

        let err = acquire_lock(&host, &t, "run-8").await.unwrap_err();
        assert!(err.to_string().contains("locked by run=run-9"), "{err}");

        let mut alive = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        set_lock_pid(&t, alive.id()).await;
        let err = acquire_lock(&host, &t, "run-9").await.unwrap_err();
        assert!(
            err.to_string().contains("locked by run=run-9"),
            "live holder: {err}"
        );
        alive.kill().unwrap();
        alive.wait().unwrap();
        let alive_pid = alive.id();

        let taken = acquire_lock(&host, &t, "run-9").await.unwrap();
        let from = taken.took_over.clone().expect("taken over");
        assert!(
            from.contains("run=run-9") && from.contains(&format!("pid={alive_pid}")),
            "{from}"
        );
        // The old guard's token is no longer the owner's: only the new one releases.
        assert!(release_lock(&host, &t, &left).await.is_err());
        release_lock(&host, &t, &taken).await.unwrap();
        t.close().await.unwrap();
    });
}

#[test]
fn a_host_that_is_down_gives_a_bounded_clear_error() {
    let Some((lab, mut host)) = lab(None) else {
        return;
    };
    // An address on the lab's bridge that no host owns.
    let (net, _) = lab.subnet();
    let o = net.octets();
    host.address = format!("{}.{}.{}.250", o[0], o[1], o[2]);
    host.connect_timeout_s = 1;
    bounded(async {
        let began = Instant::now();
        let err = Transport::connect(&host).await.unwrap_err();
        let took = began.elapsed();
        let msg = err.to_string();
        eprintln!("down host after {took:?}: {msg}");
        assert!(took < Duration::from_secs(30), "took {took:?}");
        assert!(
            msg.contains(&host.name) && msg.contains(&host.address) && msg.contains("fix:"),
            "{msg}"
        );
        assert!(
            msg.contains("3 attempt"),
            "transient failures are retried: {msg}"
        );
    });
}

#[test]
fn ssh_commands_are_quoted_deadlined_and_share_one_connection() {
    let Some((_lab, host)) = lab(None) else {
        return;
    };
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let out = t
            .run(
                &["printf", "%s|", "a b", "$(id)", "it's", ""],
                Duration::from_secs(5),
            )
            .await
            .unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), "a b|$(id)|it's||");
        let began = Instant::now();
        let err = t
            .run(&["sleep", "60"], Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("did not finish within 1s"),
            "{err}"
        );
        assert!(began.elapsed() < Duration::from_secs(6));
        // More concurrent commands than sshd's MaxSessions: the semaphore queues them.
        let t = std::sync::Arc::new(t);
        let tasks: Vec<_> = (0..24)
            .map(|i| {
                let t = t.clone();
                tokio::spawn(async move {
                    t.run(&["echo", &i.to_string()], Duration::from_secs(20))
                        .await
                })
            })
            .collect();
        for (i, task) in tasks.into_iter().enumerate() {
            let out = task.await.unwrap().unwrap();
            assert_eq!(out.stdout_text(), i.to_string());
        }
        let t = std::sync::Arc::try_unwrap(t).unwrap();
        t.close().await.unwrap();
    });
}

/// The real `prover` built in this workspace (`cargo build -p prover`), if any.
/// The workspace's debug prover; fails with the fix when it was not built
/// (cargo builds only this package's binaries for its tests).
fn real_prover() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the fleetctl crate lives in the workspace")
        .to_owned();
    let target = match std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from) {
        Some(t) if t.is_absolute() => t,
        Some(t) => root.join(t),
        None => root.join("target"),
    };
    let bin = target.join("debug/prover");
    assert!(
        bin.is_file(),
        "{} is missing: run `cargo build -p prover` first",
        bin.display()
    );
    bin
}

/// Small CPU-only daemon config: mlock pool (so the drain's memory shows in
/// `Mlocked`), TEST-ONLY parameters for the smoke proof generated and
/// preloaded (a lab host has no ceremony parameters).
const REAL_CONFIG: &str = r#"listen = "127.0.0.1:7878"
drain_timeout = "30s"
test_params = true
[[preload]]
circuit = "chain"
size = 1024
[memory]
budget = "2GiB"
safety_margin = "0"
[pool]
allocator = "mlock"
max_bytes = "256MiB"
[gpu]
devices = []
"#;

#[test]
fn real_prover_rolls_out_smokes_drains_and_rolls_back() {
    let Some((_lab, host)) = lab(None) else {
        return;
    };
    let prover = real_prover();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prover.toml");
    std::fs::write(&config, REAL_CONFIG).unwrap();
    let a = Release::from_files(&prover, Some(&config)).unwrap();
    // Same program, another release id: a marker appended past the ELF's end.
    let b_bin = dir.path().join("prover-b");
    let mut bytes = std::fs::read(&prover).unwrap();
    bytes.extend(b"\nFIXTURE_BUILD=b\n");
    std::fs::write(&b_bin, bytes).unwrap();
    let b = Release::from_files(&b_bin, Some(&config)).unwrap();
    let verify = VerifyParams {
        timeout: Duration::from_secs(60),
        settle: Duration::from_secs(1),
        poll: Duration::from_millis(250),
        fail_patterns: vec![],
    };
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &a);
        let began = Instant::now();
        let up = ok(StepSpec::Upload(UploadParams::default()), &mut ctx).await;
        eprintln!("upload: {up:?} in {:?}", began.elapsed());
        // That `start` does not wait for the daemon is the stand-in's test
        // (rollout_start_detaches…); here it only has to succeed.
        ok(StepSpec::Start(StartParams::default()), &mut ctx).await;
        let v = ok(StepSpec::Verify(verify.clone()), &mut ctx).await;
        eprintln!("verify: {v:?}");
        let s = ok(StepSpec::Smoke(Default::default()), &mut ctx).await;
        eprintln!("smoke: {s:?}");
        assert!(
            matches!(&s, StepOutcome::Done { detail } if detail.contains("verified")),
            "{s:?}"
        );

        let mut ctx = StepCtx::new(&host, &t, &b);
        ok(StepSpec::Upload(UploadParams::default()), &mut ctx).await;
        let d = ok(StepSpec::Drain(DrainParams::default()), &mut ctx).await;
        eprintln!("drain: {d:?}");
        assert!(
            matches!(&d, StepOutcome::Done { detail } if detail.contains("after SIGTERM")),
            "{d:?}"
        );
        assert!(
            ctx.state.drained.as_ref().unwrap().vm_lck > 0,
            "the mlock pool shows as VmLck"
        );
        let w = ok(
            StepSpec::WaitRelease(WaitReleaseParams::default()),
            &mut ctx,
        )
        .await;
        eprintln!("wait_release: {w:?}");
        ok(StepSpec::Start(StartParams::default()), &mut ctx).await;
        let v = ok(StepSpec::Verify(verify.clone()), &mut ctx).await;
        eprintln!("verify b: {v:?}");

        let r = ok(StepSpec::Rollback(Default::default()), &mut ctx).await;
        eprintln!("rollback: {r:?}");
        assert_eq!(
            sh(&t, "readlink /data/prover/current").await,
            format!("releases/{}", a.id)
        );
        ok(StepSpec::Verify(verify), &mut ctx).await;
        ok(StepSpec::Drain(DrainParams::default()), &mut ctx).await;
        let log = sh(&t, "cat /data/prover/logs/prover.log").await;
        // Three daemons started (a, b, a again), each reached `ready`.
        let ready = log.lines().filter(|l| l.contains(": ready ")).count();
        assert_eq!(ready, 3, "{log}");
        t.close().await.unwrap();
    });
}

fn keygen(dir: &Path, name: &str) -> PathBuf {
    let key = dir.join(name);
    let out = fleet_testkit::output_within(
        std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
            .arg(&key),
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    key
}

#[test]
fn connection_failures_name_their_cause_and_only_transient_ones_are_retried() {
    let Some((_lab, host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    bounded(async {
        let connect_err =
            |h: Host| async move { Transport::connect(&h).await.unwrap_err().to_string() };

        // A key the host does not have in known_hosts: mismatch, never retried.
        let other = keygen(dir.path(), "other_host_key");
        let public = std::fs::read_to_string(other.with_extension("pub")).unwrap();
        let mut key_part = public.split_whitespace();
        let (kind, blob) = (key_part.next().unwrap(), key_part.next().unwrap());
        let wrong_known = dir.path().join("known_hosts_wrong");
        std::fs::write(&wrong_known, format!("{} {kind} {blob}\n", host.address)).unwrap();
        let mut h = host.clone();
        h.known_hosts = Some(wrong_known);
        let msg = connect_err(h).await;
        assert!(
            msg.contains("HOST KEY MISMATCH")
                && msg.contains("1 attempt")
                && msg.contains(&host.address),
            "{msg}"
        );

        // No entry at all: strict checking refuses.
        let empty = dir.path().join("known_hosts_empty");
        std::fs::write(&empty, "").unwrap();
        let mut h = host.clone();
        h.known_hosts = Some(empty);
        let msg = connect_err(h).await;
        assert!(
            msg.contains("host key not in known_hosts") && msg.contains("1 attempt"),
            "{msg}"
        );

        // A client key the host does not accept.
        let mut h = host.clone();
        h.identity_file = Some(keygen(dir.path(), "stranger"));
        let msg = connect_err(h).await;
        assert!(
            msg.contains("authentication failed") && msg.contains("identity_file"),
            "{msg}"
        );

        // Nothing listens on that port: refused, retried with backoff.
        let mut h = host.clone();
        h.port = 2;
        let began = Instant::now();
        let msg = connect_err(h).await;
        assert!(
            msg.contains("connection refused") && msg.contains("3 attempt"),
            "{msg}"
        );
        assert!(
            began.elapsed() < Duration::from_secs(15),
            "{:?}",
            began.elapsed()
        );
    });
}

#[test]
fn check_mode_describes_and_changes_nothing() {
    let Some((_lab, host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = release(dir.path(), "check", "normal", 0);
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &a);
        ctx.check = true;
        for spec in [
            StepSpec::Upload(UploadParams::default()),
            StepSpec::Drain(DrainParams::default()),
            StepSpec::Start(StartParams::default()),
        ] {
            let out = ok(spec, &mut ctx).await;
            assert!(
                matches!(&out, StepOutcome::Skipped { reason } if reason.starts_with("check mode: would")),
                "{out:?}"
            );
        }
        assert_eq!(
            sh(&t, "ls -A /data").await,
            "",
            "check mode wrote to the host"
        );
        t.close().await.unwrap();
    });
}

/// The same steps over the local transport (no root, no SSH): the command
/// lines are identical, only the way they reach `sh -c` differs.
#[test]
fn local_transport_runs_the_same_rollout() {
    let dir = tempfile::tempdir().unwrap();
    let install = dir.path().join("install dir");
    let a = release(dir.path(), "local-a", "normal", 0);
    let host = Host::local("local", install.to_str().unwrap());
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &a);
        upload_and_start(&mut ctx).await;
        let v = step(StepSpec::Verify(fast_verify()), &mut ctx).await;
        // Stop the daemon whatever verify said: it runs on this machine.
        let d = step(StepSpec::Drain(DrainParams::default()), &mut ctx).await;
        let v = v.unwrap();
        assert!(
            matches!(&v, StepOutcome::Done { detail } if detail.contains("local-a")),
            "{v:?}"
        );
        let d = d.unwrap();
        assert!(
            matches!(&d, StepOutcome::Done { detail } if detail.contains("after SIGTERM")),
            "{d:?}"
        );
        t.close().await.unwrap();
    });
}

/// Over the local transport too, a compressed and a plain upload land the
/// same bytes; the compressed one sends the release's shared copy.
#[test]
fn local_uploads_compressed_and_plain_land_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let install = dir.path().join("install");
    let a = release(dir.path(), "local-zip", "normal", 1 << 20);
    let b = release(dir.path(), "local-plain", "normal", 1 << 20);
    let host = Host::local("local", install.to_str().unwrap());
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &a);
        let o = ok(StepSpec::Upload(UploadParams::default()), &mut ctx).await;
        assert!(o.text().contains("gzip"), "{o:?}");
        let shared = a.compressed.get(&a.binary).await.unwrap();
        assert_eq!(
            ctx.state.uploaded.as_ref().map(|s| s.sent_bytes),
            Some(shared.len + std::fs::metadata(a.config.as_ref().unwrap()).unwrap().len())
        );
        let mut ctx = StepCtx::new(&host, &t, &b);
        let params = UploadParams {
            compress: false,
            ..UploadParams::default()
        };
        ok(StepSpec::Upload(params), &mut ctx).await;
        for r in [&a, &b] {
            let on_host = install.join("releases").join(&r.id).join("prover");
            assert_eq!(
                std::fs::read(on_host).unwrap(),
                std::fs::read(&r.binary).unwrap()
            );
        }
        t.close().await.unwrap();
    });
}

/// A PoRep C2 smoke over the local transport: the fixture's C1 output
/// reaches `client c2` on its stdin, and a daemon without the sector size's
/// parameters fails the step with the fix.
#[test]
fn local_transport_smokes_a_porep_c2_and_names_missing_parameters() {
    use fleetctl::steps::smoke::{SmokeParams, SmokeProof};
    let dir = tempfile::tempdir().unwrap();
    let install = dir.path().join("install");
    let host = Host::local("local", install.to_str().unwrap());
    let c2 = || {
        StepSpec::Smoke(SmokeParams {
            proof: SmokeProof::PorepC2 {
                fixture: None,
                grpc: false,
            },
            timeout: Duration::from_secs(30),
        })
    };
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        for (build, mode) in [("c2-ok", "normal"), ("c2-no-params", "no_fil_params")] {
            let r = release(dir.path(), build, mode, 0);
            let mut ctx = StepCtx::new(&host, &t, &r);
            upload_and_start(&mut ctx).await;
            let v = step(StepSpec::Verify(fast_verify()), &mut ctx).await;
            let smoke = match &v {
                Ok(_) => Some(step(c2(), &mut ctx).await),
                Err(_) => None,
            };
            // Stop the daemon whatever the steps said: it runs on this machine.
            let d = step(StepSpec::Drain(DrainParams::default()), &mut ctx).await;
            v.unwrap();
            d.unwrap();
            let smoke = smoke.unwrap();
            match mode {
                "normal" => {
                    let s = smoke.unwrap();
                    assert!(
                        matches!(&s, StepOutcome::Done { detail }
                            if detail.contains("porep-c2 of built-in porep-c2-2KiB.json (StackedDrg2KiBV1_1 sector ")
                                && detail.contains("1 partition(s) verified")
                                && detail.contains("1 new timing record")),
                        "{s:?}"
                    );
                }
                _ => {
                    let e = smoke.unwrap_err().to_string();
                    assert!(
                        e.contains("no usable parameters for StackedDrg2KiBV1_1")
                            && e.contains("v28-stand-in.params")
                            && e.contains("prover setup --filecoin StackedDrg2KiBV1_1"),
                        "{e}"
                    );
                }
            }
        }
        t.close().await.unwrap();
    });
}

/// Runs `playbook` on the lab host through the executor (lock, steps,
/// rollback, events), as `fleetctl run` does; `binary` ships when the
/// playbook uploads. Returns the run's end and its final table.
async fn run_playbook(
    host: &Host,
    playbook: fleetctl::playbook::Playbook,
    binary: Option<&Release>,
) -> (
    fleetctl::executor::RunSummary,
    String,
    Vec<fleetctl::executor::Event>,
) {
    use fleetctl::executor::{self, state::Origin, Build, Prepared, RealRunner, RunOptions};
    let state = tempfile::tempdir().unwrap();
    let prepared = Prepared {
        playbook: std::sync::Arc::new(playbook),
        inventory: "lab".into(),
        hosts: vec![host.clone()],
        release: std::sync::Arc::new(Build::new(
            binary.map_or_else(PathBuf::new, |r| r.binary.clone()),
            binary.map(|r| r.binary_sha256.clone()),
        )),
    };
    let opts = RunOptions {
        check: false,
        resume: None,
        state_dir: state.path().to_owned(),
        origin: Origin::default(),
        resume_with: None,
    };
    let (_tx, rx) = tokio::sync::watch::channel(executor::Stop::Run);
    let done = executor::execute(prepared, &opts, std::sync::Arc::new(RealRunner), vec![], rx)
        .await
        .unwrap();
    let events = fleetctl::audit::read(&done.audit).unwrap();
    (done.summary, done.table.render(), events)
}

/// The built-in `stop` playbook drains and starts nothing; a daemon that
/// ignores SIGTERM is SIGKILLed at the deadline, and the final table says
/// so in the drain's own cell (not only stderr and the audit log).
#[test]
fn the_stop_playbook_starts_nothing_and_a_sigkill_shows_in_the_drain_cell() {
    let Some((_lab, host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let stubborn = release(dir.path(), "stop-stubborn", "ignore_term", 0);
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &stubborn);
        upload_and_start(&mut ctx).await;
        ok(StepSpec::Verify(fast_verify()), &mut ctx).await;
        assert_eq!(release_processes(&t).await.len(), 1);

        let mut stop = fleetctl::playbook::load("stop").unwrap();
        assert!(
            stop.steps.iter().all(|s| matches!(s, StepSpec::Drain(_))),
            "stop only drains: {:?}",
            stop.steps
        );
        // The shipped 60 s grace, shortened: the test is about what happens at it.
        for s in &mut stop.steps {
            if let StepSpec::Drain(d) = s {
                d.timeout = Duration::from_secs(1);
            }
        }
        let (summary, table, _) = run_playbook(&host, stop, None).await;
        assert_eq!(
            summary.hosts,
            [(host.name.clone(), fleetctl::executor::HostStatus::Ok)],
            "{table}"
        );
        let row = table
            .lines()
            .find(|l| l.contains(&format!(" {} ", host.name)))
            .unwrap();
        assert!(row.contains("SIGKILL"), "{table}");
        assert!(
            table.contains(&format!("{}: drain: pid", host.name))
                && table.contains("ignored SIGTERM"),
            "{table}"
        );
        assert!(release_processes(&t).await.is_empty(), "nothing started");
        assert_eq!(
            sh(&t, "readlink /data/prover/current").await,
            format!("releases/{}", stubborn.id),
            "nothing switched"
        );
        t.close().await.unwrap();
    });
}

/// A rollout whose new build fails is rolled back, and the restored daemon
/// is verified like a new start: when it does not come up (here the old
/// release's config was broken on the host since it last verified), the
/// host ends ROLLBACK FAILED, counted as a failure, its error says why.
#[test]
fn a_rollback_whose_restored_daemon_fails_verify_ends_rollback_failed() {
    let Some((_lab, mut host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = release(dir.path(), "rb-a", "normal", 0);
    let b = release(dir.path(), "rb-b", "crash", 0);
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &a);
        upload_and_start(&mut ctx).await;
        ok(StepSpec::Verify(fast_verify()), &mut ctx).await;
        sh(
            &t,
            &format!(
                "sed -i 's/mode = \"normal\"/mode = \"crash\"/' /data/prover/releases/{}/prover.toml",
                a.id
            ),
        )
        .await;

        host.config_file = b.config.clone();
        // Without the handover, which would catch the crash before the drain.
        let mut rollout = fleetctl::playbook::load("rollout").unwrap();
        rollout
            .steps
            .retain(|s| !matches!(s, StepSpec::Handover(_)));
        let (summary, table, events) = run_playbook(&host, rollout, Some(&b)).await;
        assert_eq!(
            summary.hosts,
            [(
                host.name.clone(),
                fleetctl::executor::HostStatus::RollbackFailed
            )],
            "{table}"
        );
        assert_eq!(summary.end, fleetctl::executor::RunEnd::HostsFailed);
        assert!(
            table.contains("ROLLBACK FAILED: the restored daemon did not verify"),
            "{table}"
        );
        let failed: Vec<&str> = events
            .iter()
            .filter_map(|e| match &e.kind {
                fleetctl::executor::EventKind::StepFailed { step, .. } => Some(step.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(failed, ["verify", "verify rollback"], "{table}");
        assert_eq!(
            sh(&t, "readlink /data/prover/current").await,
            format!("releases/{}", a.id),
            "rolled back onto the last verified release"
        );
        t.close().await.unwrap();
    });
}

/// The built-in rollout hands over where memory allows: a new build is
/// started beside the old daemon, which serves until the new one is up.
/// One that crashes at start is caught there, before the drain: the old
/// daemon serves on, `current` points at it again. One that starts takes
/// over, and the serving gap is the drain alone.
#[test]
fn the_rollout_hands_over_and_a_build_that_crashes_is_caught_before_the_drain() {
    let Some((_lab, mut host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = release(dir.path(), "ho-a", "normal", 0);
    let b = release(dir.path(), "ho-b", "crash", 0);
    let c = release(dir.path(), "ho-c", "normal", 0);
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &a);
        upload_and_start(&mut ctx).await;
        ok(StepSpec::Verify(fast_verify()), &mut ctx).await;
        let old_pid = sh(&t, "cat /data/prover/run/prover.pid").await;

        host.config_file = b.config.clone();
        let rollout = fleetctl::playbook::load("rollout").unwrap();
        let (summary, table, events) = run_playbook(&host, rollout.clone(), Some(&b)).await;
        assert_eq!(
            summary.hosts,
            [(host.name.clone(), fleetctl::executor::HostStatus::Failed)],
            "{table}"
        );
        assert!(
            table.contains("handover: daemon pid") && table.contains("cannot bind"),
            "{table}"
        );
        let steps: Vec<&str> = events
            .iter()
            .filter_map(|e| match &e.kind {
                fleetctl::executor::EventKind::StepStarted { step } => Some(step.as_str()),
                _ => None,
            })
            .collect();
        assert!(
            !steps.contains(&"drain"),
            "nothing drained: {steps:?}\n{table}"
        );
        assert_eq!(
            sh(&t, "cat /data/prover/run/prover.pid").await,
            old_pid,
            "{table}"
        );
        assert_eq!(
            sh(&t, "readlink /data/prover/current").await,
            format!("releases/{}", a.id),
            "`current` points at the serving release again"
        );

        host.config_file = c.config.clone();
        let (summary, table, events) = run_playbook(&host, rollout, Some(&c)).await;
        assert_eq!(
            summary.hosts,
            [(host.name.clone(), fleetctl::executor::HostStatus::Ok)],
            "{table}"
        );
        let detail = |name: &str| {
            events
                .iter()
                .find_map(|e| match &e.kind {
                    fleetctl::executor::EventKind::StepFinished { step, detail, .. }
                        if step == name =>
                    {
                        Some(detail.clone())
                    }
                    _ => None,
                })
                .unwrap_or_default()
        };
        assert!(detail("handover").contains("started beside pid"), "{table}");
        assert!(detail("drain").contains("handed over to pid"), "{table}");
        assert!(
            detail("wait_release").contains("after it handed over"),
            "{table}"
        );
        assert!(detail("start").contains("took over from pid"), "{table}");
        let new_pid = sh(&t, "cat /data/prover/run/prover.pid").await;
        assert_ne!(new_pid, old_pid, "{table}");
        assert_eq!(
            sh(&t, "readlink /data/prover/current").await,
            format!("releases/{}", c.id)
        );
        t.close().await.unwrap();
    });
}

/// Issue 51, item 9: shipping the build that serves with a changed config
/// is a new release (its id covers the config), staged beside the serving
/// one: a config the build refuses fails `prepare` while nothing the
/// serving daemon reads on a restart has changed, and a restart afterwards
/// brings back the daemon that served.
#[test]
fn a_config_only_rollout_is_a_new_release_and_never_touches_the_serving_one() {
    let Some((_lab, mut host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = release(dir.path(), "cfg-a", "normal", 0);
    // The same binary, with a config its build refuses (and cannot start on).
    let refused = dir.path().join("refused.toml");
    std::fs::write(&refused, "mode = \"refused_config\"\n").unwrap();
    let b = Release::from_files(&a.binary, Some(&refused)).unwrap();
    assert_eq!(a.binary_sha256, b.binary_sha256);
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let rollout = fleetctl::playbook::load("rollout").unwrap();
        host.config_file = a.config.clone();
        let (summary, table, _) = run_playbook(&host, rollout.clone(), Some(&a)).await;
        assert_eq!(
            summary.hosts,
            [(host.name.clone(), fleetctl::executor::HostStatus::Ok)],
            "{table}"
        );
        let serving_config = sh(&t, "cat /data/prover/current/prover.toml").await;
        let old_pid = sh(&t, "cat /data/prover/run/prover.pid").await;

        host.config_file = b.config.clone();
        let (summary, table, _) = run_playbook(&host, rollout, Some(&b)).await;
        assert_eq!(
            summary.hosts,
            [(host.name.clone(), fleetctl::executor::HostStatus::Failed)],
            "{table}"
        );
        assert!(table.contains("refuses the config"), "{table}");
        assert_eq!(
            sh(&t, "readlink /data/prover/current").await,
            format!("releases/{}", a.id)
        );
        assert_eq!(
            sh(&t, "cat /data/prover/current/prover.toml").await,
            serving_config,
            "the serving release's config was overwritten\n{table}"
        );
        assert_eq!(
            sh(
                &t,
                &format!("cat /data/prover/releases/{}/prover.toml", b.id)
            )
            .await,
            "mode = \"refused_config\"",
            "staged beside the serving release"
        );
        assert_eq!(sh(&t, "cat /data/prover/run/prover.pid").await, old_pid);
        assert_ne!(a.id, b.id, "a changed config is a new release");

        // What serves restarts as it was.
        let restart = fleetctl::playbook::load("restart").unwrap();
        let (summary, table, _) = run_playbook(&host, restart, None).await;
        assert_eq!(
            summary.hosts,
            [(host.name.clone(), fleetctl::executor::HostStatus::Ok)],
            "{table}"
        );
        t.close().await.unwrap();
    });
}

/// Issue 51, item 10: a successor that died while it waited to take over
/// costs the old daemon nothing. The drain does not signal it, `current`
/// points back at its release, and the host records nothing drained or
/// switched, so no rollback drains and restarts the daemon that serves.
#[test]
fn a_successor_that_died_before_the_drain_leaves_the_old_daemon_untouched() {
    let Some((_lab, host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = release(dir.path(), "dead-a", "normal", 0);
    let b = release(dir.path(), "dead-b", "normal", 0);
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &a);
        upload_and_start(&mut ctx).await;
        ok(StepSpec::Verify(fast_verify()), &mut ctx).await;
        let old_pid = sh(&t, "cat /data/prover/run/prover.pid").await;

        let mut ctx = StepCtx::new(&host, &t, &b);
        ok(StepSpec::Upload(UploadParams::default()), &mut ctx).await;
        let handed = ok(StepSpec::Handover(Default::default()), &mut ctx).await;
        assert!(handed.text().contains("started beside pid"), "{handed:?}");
        let successor = ctx.state.started.as_ref().unwrap().pid;
        sh(&t, &format!("kill -9 {successor}")).await;
        let gone = sh(
            &t,
            &format!(
                "i=0; while [ $i -lt 100 ] && [ -e /proc/{successor}/exe ] && ! grep -q '^State:.*Z' /proc/{successor}/status; do i=$((i+1)); sleep 0.05; done; echo done"
            ),
        )
        .await;
        assert_eq!(gone, "done");

        let msg = fails(StepSpec::Drain(DrainParams::default()), &mut ctx).await;
        assert!(msg.contains("was not signalled"), "{msg}");
        assert_eq!(sh(&t, "cat /data/prover/run/prover.pid").await, old_pid);
        assert_eq!(
            sh(&t, &format!("kill -0 {old_pid} && echo alive")).await,
            "alive"
        );
        assert_eq!(
            sh(&t, "readlink /data/prover/current").await,
            format!("releases/{}", a.id),
            "`current` points at the serving release again"
        );
        // What a failed host's rollback reads: nothing drained, started or
        // switched, so there is nothing to roll back.
        assert_eq!(
            (
                &ctx.state.drained,
                &ctx.state.started,
                &ctx.state.previous_release
            ),
            (&None, &None, &None)
        );
        t.close().await.unwrap();
    });
}

/// Issue 51, item 10: the serving gap is what a client sees. A successor
/// that takes over, says `ready` and dies a moment later is caught, the
/// host is rolled back, and the gap reported covers the whole outage until
/// the restored daemon serves, not the 0.1 s of the switch alone.
#[test]
fn the_serving_gap_covers_a_successor_that_dies_after_taking_over() {
    let Some((_lab, mut host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = release(dir.path(), "gap-a", "normal", 0);
    let b = release(dir.path(), "gap-b", "die_after_takeover", 0);
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &a);
        upload_and_start(&mut ctx).await;
        ok(StepSpec::Verify(fast_verify()), &mut ctx).await;
        let offset: usize = sh(&t, "wc -c < /data/prover/logs/prover.log")
            .await
            .parse()
            .unwrap();

        host.config_file = b.config.clone();
        let mut rollout = fleetctl::playbook::load("rollout").unwrap();
        rollout
            .steps
            .retain(|s| !matches!(s, StepSpec::Smoke(_) | StepSpec::Health(_)));
        let (summary, table, events) = run_playbook(&host, rollout, Some(&b)).await;
        assert_eq!(
            summary.hosts,
            [(host.name.clone(), fleetctl::executor::HostStatus::Failed)],
            "{table}"
        );
        assert!(table.contains("rolled back"), "{table}");
        assert_eq!(
            sh(&t, "readlink /data/prover/current").await,
            format!("releases/{}", a.id)
        );
        let gaps: Vec<u64> = events
            .iter()
            .filter_map(|e| match &e.kind {
                fleetctl::executor::EventKind::ServingGap { gap_ms, .. } => Some(*gap_ms),
                _ => None,
            })
            .collect();
        assert_eq!(gaps.len(), 1, "one gap per host: {gaps:?}\n{table}");

        // No daemon at all, by the daemons' own clocks: from the
        // successor's death to the restored daemon's `ready`.
        let log = sh(&t, "cat /data/prover/logs/prover.log").await;
        let ts = |line: &str| -> u64 {
            line.rsplit("ts_ms=")
                .next()
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        };
        let new_lines = &log[offset.min(log.len())..];
        let died = new_lines
            .lines()
            .find(|l| l.contains("INFO died"))
            .map(ts)
            .unwrap_or_else(|| panic!("no death in the log:\n{new_lines}"));
        let restored = new_lines
            .lines()
            .filter(|l| l.contains("INFO ready"))
            .map(ts)
            .next_back()
            .unwrap();
        let no_daemon = restored.saturating_sub(died);
        assert!(
            no_daemon >= 150,
            "the outage to measure is too short to tell ({no_daemon} ms)\n{new_lines}"
        );
        // The probe's resolution is 50 ms.
        assert!(
            gaps[0] + 60 >= no_daemon,
            "serving gap {} ms reported, but no daemon served for {no_daemon} ms\n{table}",
            gaps[0]
        );
        t.close().await.unwrap();
    });
}

/// `fleetctl health` on the lab host, as a user runs it: (exit code, stdout, stderr).
fn fleetctl_health(lab: &Lab) -> (Option<i32>, String, String) {
    let inv = lab.inventory_path();
    fleetctl_cmd(&[
        "health",
        "-i",
        inv.to_str().unwrap(),
        "--history",
        "history",
    ])
}

/// `fleetctl status` on the lab host: (exit code, stdout, stderr).
fn fleetctl_status(lab: &Lab) -> (Option<i32>, String, String) {
    let inv = lab.inventory_path();
    fleetctl_cmd(&["status", "-i", inv.to_str().unwrap()])
}

/// The fleetctl binary in a fresh folder (its state, history and SSH
/// sockets there), masters closed at the end.
fn fleetctl_cmd(args: &[&str]) -> (Option<i32>, String, String) {
    let cwd = tempfile::tempdir().unwrap();
    let out = fleet_testkit::output_within(
        std::process::Command::new(env!("CARGO_BIN_EXE_fleetctl"))
            .args(args)
            .args(["-e", "ssh_persist=0"])
            .current_dir(cwd.path())
            .env("XDG_RUNTIME_DIR", cwd.path())
            // -v flags decide the log level, not the test's environment.
            .env_remove("RUST_LOG"),
        Duration::from_secs(120),
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A daemon that dies after its rollout leaves a host that should serve
/// and does not: `fleetctl health` fails it (`daemon_down`, exit 2). The
/// `stop` playbook's drain (`stop: true`) records the stop as meant: OK
/// again. Issue 29: a GPU host whose daemon came up on the CPU backend fails
/// the rollout's health step by `daemon_on_cpu`.
#[test]
fn health_fails_a_host_whose_daemon_should_run_and_a_gpu_host_proving_on_the_cpu() {
    let Some((lab, host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = release(dir.path(), "health-a", "normal", 0);
    let cpu = release(dir.path(), "health-cpu", "cpu_fallback", 0);
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &a);
        upload_and_start(&mut ctx).await;
        ok(StepSpec::Verify(fast_verify()), &mut ctx).await;
        ok(StepSpec::Health(HealthParams::default()), &mut ctx).await;
        assert_eq!(sh(&t, "cat /data/prover/state/daemon").await, "running");
        let (code, out, err) = fleetctl_health(&lab);
        assert_eq!(code, Some(0), "{out}{err}");

        // Issue 30, 5: the same machine twice in an inventory is refused
        // before anything runs, naming both; the daemon is left alone.
        let inv = tempfile::tempdir().unwrap();
        let dup = inv.path().join("dup.yaml");
        let generated = std::fs::read_to_string(lab.inventory_path()).unwrap();
        let address = lab.hosts()[0].address;
        std::fs::write(
            &dup,
            format!(
                "{generated}  h01-again: {{ address: {address}, install_dir: /data/prover2 }}\n"
            ),
        )
        .unwrap();
        let (code, _, err) = fleetctl_cmd(&["run", "-p", "stop", "-i", dup.to_str().unwrap()]);
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains("hosts `h01` and `h01-again` are the same machine"),
            "{err}"
        );
        assert_eq!(sh(&t, "cat /data/prover/state/daemon").await, "running");
        let state = sh(&t, "ls /data/prover/state").await;
        assert!(!state.contains("lock"), "no lock taken: {state}");

        // The daemon crashes: nothing restarts it.
        sh(&t, "kill -9 $(cat /data/prover/run/prover.pid)").await;
        let (code, out, err) = fleetctl_health(&lab);
        assert_eq!(
            code,
            Some(2),
            "a stopped daemon that should run: {out}{err}"
        );
        assert!(out.contains("FAIL") && out.contains("daemon_down"), "{out}");
        // Regression (issue 51, item 13d): `status` tells a crash from a stop.
        let (_, out, err) = fleetctl_status(&lab);
        assert!(
            out.contains("daemon DOWN") && out.contains("crashed or killed"),
            "{out}{err}"
        );

        // Stopped on purpose, as the stop playbook does: not a failure.
        let stop = DrainParams {
            stop: true,
            ..Default::default()
        };
        ok(StepSpec::Drain(stop), &mut ctx).await;
        assert_eq!(sh(&t, "cat /data/prover/state/daemon").await, "stopped");
        let (code, out, err) = fleetctl_health(&lab);
        assert_eq!(code, Some(0), "{out}{err}");
        let (_, out, err) = fleetctl_status(&lab);
        assert!(
            out.contains("daemon stopped on purpose") && !out.contains("DOWN"),
            "{out}{err}"
        );

        // A build whose daemon fell back to the CPU on a host with a GPU.
        let mut ctx = StepCtx::new(&host, &t, &cpu);
        upload_and_start(&mut ctx).await;
        ok(StepSpec::Verify(fast_verify()), &mut ctx).await;
        let msg = fails(StepSpec::Health(HealthParams::default()), &mut ctx).await;
        assert!(
            msg.contains("daemon_on_cpu") && msg.contains("CPU backend"),
            "{msg}"
        );
        let (code, out, _) = fleetctl_health(&lab);
        assert_eq!(code, Some(2), "{out}");
        assert!(out.contains("daemon_on_cpu"), "{out}");
        ok(StepSpec::Drain(DrainParams::default()), &mut ctx).await;
        t.close().await.unwrap();
    });
}

/// Issue 30, 7: remote failures say what they are in one line, without our
/// script or the lock's token. A read-only `/data` is a FAILED host whose
/// error says read-only (it was UNREACHABLE with a shell arithmetic error);
/// a build for another architecture fails the upload as an exec format
/// error before anything is sent, with the running daemon untouched.
#[test]
fn remote_failures_are_classified_in_one_line_without_the_script() {
    let Some((lab, host)) = lab(None) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = release(dir.path(), "classify-a", "normal", 0);
    // The same ELF marked as built for aarch64 (e_machine 0xb7).
    let mut foreign = std::fs::read(&a.binary).unwrap();
    foreign[18] = 0xb7;
    foreign[19] = 0;
    let foreign_bin = dir.path().join("prover-aarch64");
    std::fs::write(&foreign_bin, &foreign).unwrap();
    let foreign = Release::from_files(&foreign_bin, a.config.as_deref()).unwrap();
    bounded(async {
        let t = Transport::connect(&host).await.unwrap();
        let mut ctx = StepCtx::new(&host, &t, &a);
        upload_and_start(&mut ctx).await;
        let pid = ctx.state.started.as_ref().unwrap().pid;

        let mut ctx = StepCtx::new(&host, &t, &foreign);
        let msg = fails(StepSpec::Upload(UploadParams::default()), &mut ctx).await;
        assert!(
            msg.contains("exec format error")
                && msg.contains("built for aarch64 and the host runs x86_64"),
            "{msg}"
        );
        assert!(!msg.contains('\n'), "one line: {msg}");
        assert_eq!(
            sh(&t, "ls /data/prover/releases").await,
            a.id,
            "nothing sent"
        );
        assert_eq!(
            sh(&t, &format!("kill -0 {pid} && echo alive")).await,
            "alive"
        );

        // A filesystem with a file open for writing (the daemon's log)
        // cannot go read-only: stop the daemon first.
        ok(
            StepSpec::Drain(DrainParams::default()),
            &mut StepCtx::new(&host, &t, &a),
        )
        .await;
        let remount = |mode: &str| {
            let out = lab
                .exec(0, &["mount", "-o", &format!("remount,{mode}"), "/data"])
                .unwrap();
            assert!(
                out.status.success(),
                "remount {mode}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        remount("ro");
        let inv = lab.inventory_path();
        let (code, out, err) = fleetctl_cmd(&[
            "-vv",
            "run",
            "-p",
            "stop",
            "-i",
            inv.to_str().unwrap(),
            "--plain",
        ]);
        remount("rw");
        assert_eq!(code, Some(2), "{out}\n{err}");
        let line = out
            .lines()
            .find(|l| l.starts_with("h01: "))
            .unwrap_or_else(|| panic!("no error line for h01: {out}"));
        assert!(
            line.starts_with("h01: FAILED: lock: h01: read-only filesystem: "),
            "{line}"
        );
        assert!(line.contains("Read-only file system"), "{line}");
        for script in ["printf", "mkdir -p", "age=", "sed -n"] {
            assert!(!out.contains(script), "the script is shown: {out}");
        }
        // -vv logs the command for whoever debugs it, never the lock's token.
        assert!(
            err.contains("remote command failed") && err.contains("mkdir"),
            "{err}"
        );
        assert!(err.contains("<secret>"), "{err}");
        let tokenish = err
            .split(|c: char| !c.is_ascii_hexdigit())
            .any(|w| w.len() == 32);
        assert!(!tokenish, "a 128-bit token in the log: {err}");
        t.close().await.unwrap();
    });
}

/// Issue 30, 6: three `fleetctl timing collect` runs at once into one store
/// (cron, an operator, an experiment's collect stage) store every record of
/// the host once; they tripled the report's counts.
#[test]
fn concurrent_timing_collects_store_every_record_once() {
    let Some((lab, _host)) = lab(None) else {
        return;
    };
    let lines = 4000;
    let out = lab
        .exec(
            0,
            &[
                "sh",
                "-c",
                &format!(
                    "mkdir -p /data/prover/logs && seq 1 {lines} | sed 's/.*/{{\"kind\":\"proof\",\"n\":&}}/' > /data/prover/logs/timing.jsonl"
                ),
            ],
        )
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let inv = lab.inventory_path();
    let runs: Vec<_> = (0..3)
        .map(|_| {
            let (inv, store) = (inv.clone(), store.clone());
            std::thread::spawn(move || {
                fleetctl_cmd(&[
                    "timing",
                    "collect",
                    "-i",
                    inv.to_str().unwrap(),
                    "--store",
                    store.to_str().unwrap(),
                    "--chunk-bytes",
                    "4096",
                ])
            })
        })
        .collect();
    for r in runs {
        let (code, out, err) = r.join().unwrap();
        assert_eq!(code, Some(0), "{out}\n{err}");
    }
    let mut stored = Vec::new();
    for e in std::fs::read_dir(store.join("h01")).unwrap() {
        let e = e.unwrap();
        if !e.file_name().to_string_lossy().starts_with('.') {
            stored.extend(
                std::fs::read_to_string(e.path())
                    .unwrap()
                    .lines()
                    .map(str::to_owned),
            );
        }
    }
    assert_eq!(stored.len(), lines, "each record once");
    stored.sort();
    stored.dedup();
    assert_eq!(stored.len(), lines);
}
