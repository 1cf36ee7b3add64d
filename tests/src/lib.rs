//! Shared helpers for the end-to-end tests in `tests/tests/`: where the built
//! binaries are and running `fleetctl` as a subprocess (the root check the
//! lab fleet needs is `fleet_testkit::have_lab`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `target/<profile>`, found from the running test binary (`target/<profile>/deps/…`).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe path");
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps")
        .to_owned()
}

/// A workspace binary; panics with the fix when it was not built.
pub fn binary(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.is_file(),
        "{} is missing: run `cargo build --workspace --bins` first",
        path.display()
    );
    path
}

/// The prover to deploy: `FLEET_TESTS_PROVER`, else the workspace build
/// without its debug info (the debug build carries hundreds of MB of it,
/// and several releases of it would fill a lab host's `/data`).
pub fn prover() -> PathBuf {
    if let Some(p) = std::env::var_os("FLEET_TESTS_PROVER") {
        return PathBuf::from(p);
    }
    static STRIPPED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    STRIPPED
        .get_or_init(|| {
            let built = binary("prover");
            let out = built.with_file_name("prover-stripped");
            let staged = built.with_file_name(format!("prover-stripped.{}", std::process::id()));
            let stripped = std::process::Command::new("strip")
                .arg("--strip-debug")
                .arg("-o")
                .arg(&staged)
                .arg(&built)
                .status()
                .is_ok_and(|s| s.success());
            if stripped && std::fs::rename(&staged, &out).is_ok() {
                return out;
            }
            let _ = std::fs::remove_file(&staged);
            built
        })
        .clone()
}

/// One finished command with its outputs as text.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from(o: Output) -> Run {
        Run {
            code: o.status.code(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    pub fn show(&self) -> String {
        format!(
            "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs the workspace `fleetctl` in `cwd`.
pub fn fleetctl(cwd: &Path, args: &[&str]) -> Run {
    let out = fleet_testkit::output_within(
        Command::new(binary("fleetctl")).args(args).current_dir(cwd),
        FLEETCTL_LIMIT,
    );
    Run::from(out)
}

/// An HTML page rendered by headless Chromium: the screenshot's pixels (RGB
/// or RGBA, row by row) and the samples per pixel. Without Chromium the
/// test fails, or, when the run leaves Chromium out, records its skip and
/// gets `None`.
pub fn screenshot(html: &Path, dir: &Path, name: &str) -> Option<(Vec<u8>, usize)> {
    let on_path = |name: &str| {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(name).is_file()))
    };
    let limit = std::time::Duration::from_secs(60);
    let chromium = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find(|c| {
            on_path(c)
                && fleet_testkit::output_within(Command::new(c).arg("--version"), limit)
                    .status
                    .success()
        });
    let Some(chromium) = chromium else {
        fleet_testkit::have(
            fleet_testkit::Need::Chromium,
            false,
            "no chromium, chromium-browser or google-chrome on PATH (scripts/test.sh installs it)",
        );
        return None;
    };
    let shot = dir.join(format!("{name}.png"));
    let profile = dir.join(format!("{name}-chromium-profile"));
    let out = fleet_testkit::output_within(
        Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                "--window-size=1000,1600",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(format!("--screenshot={}", shot.display()))
            .arg(format!("file://{}", html.display())),
        std::time::Duration::from_secs(120),
    );
    assert!(
        shot.is_file(),
        "no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decoder = png::Decoder::new(std::fs::File::open(&shot).expect("open png"));
    let mut reader = decoder.read_info().expect("png header");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("png frame");
    buf.truncate(info.buffer_size());
    Some((buf, info.color_type.samples()))
}

/// Pixels of a screenshot within `tolerance` of the colour `rgb`.
pub fn pixels_of(shot: &(Vec<u8>, usize), rgb: [u8; 3], tolerance: u8) -> usize {
    shot.0
        .chunks(shot.1)
        .filter(|p| {
            p.len() >= 3
                && p[..3]
                    .iter()
                    .zip(rgb)
                    .all(|(a, b)| a.abs_diff(b) <= tolerance)
        })
        .count()
}

/// The most one `fleetctl` command of these tests may take (a rollout of
/// eight lab hosts takes well under a minute).
pub const FLEETCTL_LIMIT: std::time::Duration = std::time::Duration::from_secs(300);

/// The daemon config shipped to lab hosts: small budget, a tiny preload.
pub const LAB_DAEMON_CONFIG: &str = r#"
listen = "127.0.0.1:7878"
drain_timeout = "30s"
# Lab hosts prove the smoke statement with TEST-ONLY parameters.
test_params = true
[[preload]]
circuit = "chain"
size = 1024
[paths]
pid_file = "run/prover.pid"
log_file = "logs/prover.log"
timing_log = "logs/timing.jsonl"
params_dir = "params"
[memory]
budget = "1GiB"
safety_margin = "256MiB"
[pool]
pageable = true
[gpu]
devices = []
"#;
