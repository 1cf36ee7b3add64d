//! Running helper commands with a deadline, and reading `/proc` to find,
//! identify and kill the processes that belong to a lab host.

use super::error::LabError;
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Runs `cmd` with stdin closed and output captured, killing it at `timeout`.
/// A non-zero exit is not an error here; see [`run_checked`].
pub(crate) fn run_bounded(
    host: &str,
    cmd: &mut Command,
    timeout: Duration,
) -> Result<Output, LabError> {
    let line = render(cmd);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| LabError::Spawn {
            host: host.to_string(),
            command: line.clone(),
            source,
        })?;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = match wait_until(&mut child, deadline) {
        Some(status) => status,
        None => {
            // Kill and reap so no zombie is left; the readers end with the pipes.
            let _ = child.kill();
            let _ = child.wait();
            return Err(LabError::CommandTimeout {
                host: host.to_string(),
                command: line,
                waited: timeout,
            });
        }
    };
    // A grandchild may still hold the pipes (a daemon started without
    // redirections): take what arrived and do not wait for it forever.
    let grace = Duration::from_secs(2);
    Ok(Output {
        status,
        stdout: stdout.recv_timeout(grace).unwrap_or_default(),
        stderr: stderr.recv_timeout(grace).unwrap_or_default(),
    })
}

/// [`run_bounded`], and a non-zero exit becomes [`LabError::Command`].
pub(crate) fn run_checked(
    host: &str,
    cmd: &mut Command,
    timeout: Duration,
) -> Result<Output, LabError> {
    let out = run_bounded(host, cmd, timeout)?;
    if out.status.success() {
        Ok(out)
    } else {
        Err(command_failed(host, cmd, &out))
    }
}

pub(crate) fn command_failed(host: &str, cmd: &Command, out: &Output) -> LabError {
    LabError::Command {
        host: host.to_string(),
        command: render(cmd),
        status: out.status.to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    }
}

/// The command line as a human would type it (for error messages only).
pub(crate) fn render(cmd: &Command) -> String {
    let mut line = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        line.push(' ');
        line.push_str(&arg.to_string_lossy());
    }
    line
}

fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut pipe) = pipe {
        thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            let _ = tx.send(buf);
        });
    }
    rx
}

/// Polls `child` until it exits or `deadline` passes (then `None`, child still running).
pub(crate) fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            // ECHILD: someone else reaped it; treat as gone.
            Err(_) => return None,
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(25));
    }
}

/// A process identified by pid and start time, so a recycled pid is never
/// mistaken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ProcStamp {
    pub pid: u32,
    /// Field 22 of `/proc/<pid>/stat`, in clock ticks since boot.
    pub start_time: u64,
}

impl ProcStamp {
    pub fn of(pid: u32) -> Option<ProcStamp> {
        stat(pid).map(|s| ProcStamp {
            pid,
            start_time: s.start_time,
        })
    }

    pub fn current() -> Option<ProcStamp> {
        ProcStamp::of(std::process::id())
    }

    /// True while the same process (not a zombie, not a recycled pid) runs.
    pub fn alive(&self) -> bool {
        matches!(stat(self.pid), Some(s) if s.start_time == self.start_time && s.state != 'Z')
    }
}

pub(crate) struct Stat {
    pub state: char,
    pub ppid: u32,
    pub start_time: u64,
}

pub(crate) fn stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state), so field N is fields[N - 3].
    Some(Stat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        start_time: fields.get(19)?.parse().ok()?,
    })
}

/// Every pid currently listed in `/proc`.
pub(crate) fn all_pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// The (device, inode) of a namespace file such as `/proc/<pid>/ns/pid` or
/// `/run/netns/<name>`; two processes share a namespace iff these match.
pub(crate) fn ns_id(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Pids of the live (non-zombie) processes whose namespace `kind` (`net`,
/// `pid`, ...) is `ns`.
pub(crate) fn pids_in_ns(kind: &str, ns: (u64, u64)) -> Vec<u32> {
    all_pids()
        .into_iter()
        .filter(|pid| ns_id(Path::new(&format!("/proc/{pid}/ns/{kind}"))) == Some(ns))
        .collect()
}

/// The executable's path, `None` for zombies and vanished processes.
pub(crate) fn exe(pid: u32) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

pub(crate) fn signal(pid: u32, sig: libc::c_int) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) has no memory-safety preconditions; a vanished pid
        // only yields ESRCH, which is what we want to ignore.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_stamp_is_alive_and_a_changed_start_time_is_not() {
        let me = ProcStamp::current().expect("/proc/self/stat is readable");
        assert!(me.alive());
        let other = ProcStamp {
            pid: me.pid,
            start_time: me.start_time + 1,
        };
        assert!(!other.alive());
    }

    #[test]
    fn run_bounded_kills_at_the_deadline_and_names_the_command() {
        let started = Instant::now();
        let err = run_bounded(
            "h99",
            Command::new("sleep").arg("30"),
            Duration::from_millis(200),
        )
        .expect_err("sleep 30 cannot finish in 200 ms");
        assert!(started.elapsed() < Duration::from_secs(5));
        let msg = err.to_string();
        assert!(msg.contains("h99") && msg.contains("sleep 30"), "{msg}");
    }

    #[test]
    fn run_checked_reports_stderr_of_a_failing_command() {
        let err = run_checked(
            "h01",
            Command::new("sh").args(["-c", "echo broken pipe dream >&2; exit 3"]),
            Duration::from_secs(10),
        )
        .expect_err("exit 3 is a failure");
        let msg = err.to_string();
        assert!(
            msg.contains("broken pipe dream") && msg.contains("h01"),
            "{msg}"
        );
    }
}
