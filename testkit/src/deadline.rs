//! Child processes of tests run with a deadline: a regression that makes one
//! hang (a daemon that accepts a config it should refuse, a command waiting
//! on a lock) fails its test with what it printed, instead of hanging CI.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Runs `cmd` to its end, as [`Command::output`] does (stdin closed, stdout
/// and stderr captured), but kills it and everything it started (its own
/// process group) and fails the test when it has not finished, pipes closed,
/// within `limit`.
#[track_caller]
pub fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    spawn_within(cmd, limit).output()
}

/// Starts `cmd` as [`output_within`] does and returns at once, for a test
/// that acts on the process while it runs (signals it, waits for a file it
/// writes). The deadline counts from here; [`Within::output`] collects the
/// result under it, and dropping the handle first kills the process group.
#[track_caller]
pub fn spawn_within(cmd: &mut Command, limit: Duration) -> Within {
    let started = Instant::now();
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {shown}: {e}"));
    let (tx, pipes) = mpsc::channel();
    let out = child.stdout.take().expect("piped stdout");
    let err = child.stderr.take().expect("piped stderr");
    for (which, mut pipe) in [
        (0, Box::new(out) as Box<dyn Read + Send>),
        (1, Box::new(err)),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            let _ = tx.send((which, buf));
        });
    }
    Within {
        child: Some(child),
        shown,
        started,
        limit,
        pipes,
    }
}

/// A child process running under a deadline (see [`spawn_within`]).
pub struct Within {
    /// `None` once collected.
    child: Option<Child>,
    shown: String,
    started: Instant,
    limit: Duration,
    pipes: mpsc::Receiver<(usize, Vec<u8>)>,
}

impl Within {
    /// The child's pid, which is also its process group's id.
    pub fn id(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Whether the child has exited (its status stays for [`output`](Self::output)).
    pub fn has_exited(&mut self) -> bool {
        let child = self.child.as_mut().expect("not collected yet");
        matches!(child.try_wait(), Ok(Some(_)))
    }

    /// Waits for the child to end and its pipes to close, within what is
    /// left of the deadline; past it, kills the group and fails the test.
    #[track_caller]
    pub fn output(mut self) -> Output {
        let mut bufs = [Vec::new(), Vec::new()];
        for _ in 0..2 {
            let left = self.limit.saturating_sub(self.started.elapsed());
            match self.pipes.recv_timeout(left) {
                Ok((which, buf)) => bufs[which] = buf,
                Err(_) => self.fail(),
            }
        }
        let status = loop {
            let child = self.child.as_mut().expect("not collected yet");
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if self.started.elapsed() < self.limit => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                Ok(None) => self.fail(),
                Err(e) => panic!("waiting for {}: {e}", self.shown),
            }
        };
        self.child = None;
        let [stdout, stderr] = bufs;
        Output {
            status,
            stdout,
            stderr,
        }
    }

    fn fail(&mut self) -> ! {
        self.kill_group();
        panic!(
            "{} did not finish within {:?} (killed)",
            self.shown, self.limit
        );
    }

    fn kill_group(&mut self) {
        if let Some(mut child) = self.child.take() {
            // The group id is the child's pid (process_group(0)); a negative
            // pid signals the whole group, so the child's own children go too.
            // SAFETY: kill(2) has no memory preconditions.
            unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
            let _ = child.wait();
        }
    }
}

impl Drop for Within {
    /// A test that fails (or returns) before collecting the child leaves
    /// nothing running.
    fn drop(&mut self) {
        self.kill_group();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_captured_like_command_output() {
        let out = output_within(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            Duration::from_secs(30),
        );
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
    }

    #[test]
    fn a_hanging_child_and_its_children_are_killed_at_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("grandchild");
        let script = format!("sleep 300 & echo $! > {}; wait", pid_file.display());
        let started = Instant::now();
        let panicked = std::panic::catch_unwind(|| {
            output_within(
                Command::new("sh").args(["-c", &script]),
                Duration::from_millis(500),
            )
        });
        let msg = *panicked
            .expect_err("the deadline fails the test")
            .downcast::<String>()
            .unwrap();
        assert!(msg.contains("did not finish within 500ms"), "{msg}");
        assert!(started.elapsed() < Duration::from_secs(30));
        let grandchild = std::fs::read_to_string(&pid_file).unwrap();
        let grandchild: i32 = grandchild.trim().parse().unwrap();
        // Killed with its group: gone, or a zombie until its reaper runs.
        let stat = std::fs::read_to_string(format!("/proc/{grandchild}/stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .next();
        assert!(
            stat.is_empty() || state == Some("Z"),
            "grandchild {grandchild} still runs: {stat}"
        );
    }

    #[test]
    fn a_spawned_child_is_signalled_while_it_runs_and_killed_when_dropped() {
        let mut sh = Command::new("sh");
        sh.args([
            "-c",
            "trap 'echo got INT; exit 7' INT; while :; do sleep 0.01; done",
        ]);
        // A shell cannot trap a signal that was ignored when it started, and
        // a test run launched in the background of a non-interactive shell
        // (`… &`) inherits SIGINT ignored: give the child the default so the
        // test checks the deadline helper, not how the suite was launched.
        // SAFETY: signal(2) is async-signal-safe; nothing else runs between
        // fork and exec here.
        unsafe {
            sh.pre_exec(|| {
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                Ok(())
            });
        }
        let mut running = spawn_within(&mut sh, Duration::from_secs(30));
        assert!(!running.has_exited());
        // The trap is set before the loop runs its first `sleep`: signal
        // once the shell has a child.
        let pid = running.id();
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .trim()
            .is_empty()
        {
            assert!(Instant::now() < deadline, "the loop never started");
            std::thread::sleep(Duration::from_millis(5));
        }
        // SAFETY: kill(2) has no memory preconditions.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) };
        let out = running.output();
        assert_eq!(out.status.code(), Some(7));
        assert_eq!(out.stdout, b"got INT\n");

        let dropped = spawn_within(Command::new("sleep").arg("300"), Duration::from_secs(30));
        let pid = dropped.id();
        drop(dropped);
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "dropping the handle leaves {pid} running"
        );
    }
}
