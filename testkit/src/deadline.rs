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
    let started = Instant::now();
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {shown}: {e}"));
    let (tx, rx) = mpsc::channel();
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
    drop(tx);
    let mut bufs = [Vec::new(), Vec::new()];
    for _ in 0..2 {
        let left = limit.saturating_sub(started.elapsed());
        match rx.recv_timeout(left) {
            Ok((which, buf)) => bufs[which] = buf,
            Err(_) => fail(&mut child, &shown, limit),
        }
    }
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < limit => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => fail(&mut child, &shown, limit),
            Err(e) => panic!("waiting for {shown}: {e}"),
        }
    };
    let [stdout, stderr] = bufs;
    Output {
        status,
        stdout,
        stderr,
    }
}

fn fail(child: &mut Child, shown: &str, limit: Duration) -> ! {
    // The group id is the child's pid (process_group(0)); a negative pid
    // signals the whole group, so the child's own children go too.
    // SAFETY: kill(2) has no memory preconditions.
    unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
    let _ = child.wait();
    panic!("{shown} did not finish within {limit:?} (killed)");
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
}
