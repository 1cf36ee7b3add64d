//! What a test needs from the host it runs on, and the one rule for when it
//! may skip for want of it (see the crate root for the variables).
//!
//! A test that cannot run here (no root for the lab fleet, no GPU, no
//! Chromium, no NVRTC) calls [`have`] before doing anything. Missing parts
//! that CI has fail the test, unless the caller left them out by name in
//! `TEST_LEAVE_OUT`; a missing GPU or netem skips (CI has no GPU, and many
//! kernels no netem) unless `TEST_REQUIRE` names it. Every skip is appended to the file `TEST_SKIP_LOG` names, one
//! line per test, so that `scripts/test.sh` counts skips by reason instead of
//! libtest hiding them as passes.
//!
//! Skip log line: `skip<TAB>need<TAB>test<TAB>detail`, written with one
//! `write` to a file opened for appending, so that parallel tests and test
//! binaries do not interleave their lines.

use std::fmt;
use std::io::Write;
use std::panic::Location;

/// The environment variable naming the parts a run leaves out (comma list).
pub const LEAVE_OUT_VAR: &str = "TEST_LEAVE_OUT";
/// The environment variable naming optional parts a run demands (comma list).
pub const REQUIRE_VAR: &str = "TEST_REQUIRE";
/// The environment variable naming the file skips are appended to.
pub const SKIP_LOG_VAR: &str = "TEST_SKIP_LOG";

/// A part of the host some tests need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Root, for the lab fleet's namespaces, veth pairs and sshd.
    Lab,
    /// A CUDA device with a loadable NVRTC.
    Gpu,
    /// Chromium (or Chrome) on `PATH`, for the HTML report screenshot.
    Chromium,
    /// A loadable libnvrtc, for compiling the kernels with no GPU.
    Nvrtc,
    /// The kernel's netem qdisc, for the lab's delay and loss faults; a
    /// kernel feature many CI hosts lack, so optional like the GPU.
    Netem,
    /// Python's `grpcio` and `grpcio-tools` (PyPI), for the gRPC client that
    /// is not the daemon's own.
    Grpcio,
}

impl Need {
    pub const ALL: [Need; 6] = [
        Need::Lab,
        Need::Gpu,
        Need::Chromium,
        Need::Nvrtc,
        Need::Netem,
        Need::Grpcio,
    ];

    /// The name used in `TEST_LEAVE_OUT`, `TEST_REQUIRE` and the skip log.
    pub fn name(self) -> &'static str {
        match self {
            Need::Lab => "lab",
            Need::Gpu => "gpu",
            Need::Chromium => "chromium",
            Need::Nvrtc => "nvrtc",
            Need::Netem => "netem",
            Need::Grpcio => "grpcio",
        }
    }

    /// Whether a run without this part fails unless the caller leaves it out:
    /// true for what CI has.
    pub fn required_by_default(self) -> bool {
        !matches!(self, Need::Gpu | Need::Netem)
    }
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether a run whose `TEST_LEAVE_OUT` and `TEST_REQUIRE` hold these values
/// demands `need`: named in `require`, or required by default and not named
/// in `leave_out`.
pub fn demanded(need: Need, leave_out: Option<&str>, require: Option<&str>) -> bool {
    let names = |list: Option<&str>| -> bool {
        list.unwrap_or("")
            .split(',')
            .any(|n| n.trim() == need.name())
    };
    names(require) || (need.required_by_default() && !names(leave_out))
}

/// Whether the calling test may go on. `present` says whether the host has
/// `need`; when it does not, the test fails (a demanded part, see
/// [`demanded`]) or its skip is recorded and printed and the test should
/// return at once. `detail` says what was missing, for the log.
#[track_caller]
pub fn have(need: Need, present: bool, detail: &str) -> bool {
    if present {
        return true;
    }
    let leave_out = std::env::var(LEAVE_OUT_VAR).ok();
    let require = std::env::var(REQUIRE_VAR).ok();
    if demanded(need, leave_out.as_deref(), require.as_deref()) {
        panic!(
            "this test needs {need} ({detail}); to run without it, say so: \
             {LEAVE_OUT_VAR}={need}"
        );
    }
    let test = test_name(Location::caller());
    eprintln!("SKIP {need}: {test}: {detail}");
    if let Some(path) = std::env::var_os(SKIP_LOG_VAR) {
        let line = format!("skip\t{need}\t{test}\t{}\n", one_line(detail));
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        // A skip that cannot be counted must not pass as a pass.
        if let Err(e) = written {
            panic!("recording the skip in {}: {e}", path.to_string_lossy());
        }
    }
    false
}

/// [`have`] for the lab fleet: whether this process runs as root.
#[track_caller]
pub fn have_lab() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    have(
        Need::Lab,
        root,
        "the lab fleet needs root (namespaces, veth, sshd)",
    )
}

/// libtest runs each test on a thread named for it; on the main thread
/// (`--test-threads=1` on some toolchains) the call site names the test.
fn test_name(caller: &Location<'_>) -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" => name.to_string(),
        _ => format!("{}:{}", caller.file(), caller.line()),
    }
}

fn one_line(s: &str) -> String {
    s.replace(['\t', '\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_ci_has_is_demanded_unless_left_out_and_the_gpu_only_when_required() {
        for need in [Need::Lab, Need::Chromium, Need::Nvrtc] {
            assert!(demanded(need, None, None), "{need}");
            assert!(
                !demanded(need, Some("gpu, lab,chromium,nvrtc"), None),
                "{need}"
            );
            assert!(
                demanded(need, Some("labs"), None),
                "{need}: only exact names"
            );
        }
        assert!(!demanded(Need::Gpu, None, None));
        assert!(!demanded(Need::Netem, None, None));
        assert!(demanded(Need::Netem, None, Some("netem")));
        assert!(!demanded(Need::Gpu, Some("lab"), Some("chromium")));
        assert!(demanded(Need::Gpu, None, Some("nvrtc,gpu")));
    }

    /// Runs this binary's test `name` alone, as the child half of a test,
    /// with `env` set; whether it passed, and its output (libtest prints a
    /// failed test's panic on stdout).
    fn child(name: &str, env: &[(&str, &std::ffi::OsStr)]) -> (bool, String) {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", name, "--test-threads=2"])
            .env("TESTKIT_CHILD", "1")
            .env_remove(LEAVE_OUT_VAR)
            .env_remove(REQUIRE_VAR)
            .env_remove(SKIP_LOG_VAR);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = crate::deadline::output_within(&mut cmd, std::time::Duration::from_secs(60));
        let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text.into_owned())
    }

    fn is_child() -> bool {
        std::env::var_os("TESTKIT_CHILD").is_some()
    }

    #[test]
    fn a_missing_gpu_is_logged_with_the_test_name_and_the_test_passes() {
        if is_child() {
            assert!(!have(Need::Gpu, false, "no device\tat all"));
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("skips");
        let name = "skip::tests::a_missing_gpu_is_logged_with_the_test_name_and_the_test_passes";
        let (ok, output) = child(name, &[(SKIP_LOG_VAR, log.as_os_str())]);
        assert!(ok, "{output}");
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(text, format!("skip\tgpu\t{name}\tno device at all\n"));
    }

    #[test]
    fn a_missing_lab_fails_the_test_unless_left_out() {
        if is_child() {
            have(Need::Lab, false, "not root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("skips");
        let name = "skip::tests::a_missing_lab_fails_the_test_unless_left_out";
        let (ok, output) = child(name, &[(SKIP_LOG_VAR, log.as_os_str())]);
        assert!(!ok, "{output}");
        assert!(output.contains("TEST_LEAVE_OUT=lab"), "{output}");
        assert!(!log.exists(), "a failed requirement is not a skip");
        let (ok, output) = child(
            name,
            &[
                (SKIP_LOG_VAR, log.as_os_str()),
                (LEAVE_OUT_VAR, "chromium,lab".as_ref()),
            ],
        );
        assert!(ok, "{output}");
        assert!(std::fs::read_to_string(&log)
            .unwrap()
            .starts_with("skip\tlab\t"));
    }

    #[test]
    fn a_present_part_never_skips() {
        for need in Need::ALL {
            assert!(have(need, true, "unused"));
        }
    }
}
