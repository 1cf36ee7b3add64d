//! Fault knobs: take a host's sshd down and up, crash everything deployed on
//! it, shrink its `/data`, degrade its network with netem, and slow its
//! link with a token bucket.

use super::error::LabError;
use super::host;
use super::procs::{self, run_bounded, ProcStamp};
use super::{net, Lab};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

const KNOB_TIMEOUT: Duration = Duration::from_secs(20);
/// The fastest link [`Lab::limit_bandwidth`] sets (100 Gbit/s).
const MAX_MBIT: u32 = 100_000;
const SSHD: &str = "/usr/sbin/sshd";

impl Lab {
    /// Host down: host `index`'s sshd exits, listener and open sessions
    /// alike, so new connections are refused and connections already made
    /// (a master kept from an earlier fleetctl run) are dropped, as when a
    /// host goes away. Every other process keeps running. Idempotent.
    pub fn stop_sshd(&self, index: usize) -> Result<(), LabError> {
        let host = self.host(index)?;
        let init = self.live_init(index)?;
        for pid in listeners(init) {
            procs::signal(pid, libc::SIGTERM);
        }
        host::wait_for_sshd_gone(&host.name, host.address, KNOB_TIMEOUT)?;
        // Sessions after the listener: none can be opened in between.
        let pidns = pid_ns(&host.name, init)?;
        kill_until_gone(&host.name, "sshd sessions survived SIGKILL", || {
            procs::pids_in_ns("pid", pidns)
                .into_iter()
                .filter(|&pid| pid != init.pid && is_sshd(pid))
                .filter(|&pid| procs::stat(pid).is_some_and(|s| s.state != 'Z'))
                .collect()
        })
        .map(|_| ())
    }

    /// Host up again: the host's init starts a fresh sshd; returns once it
    /// accepts connections. Idempotent.
    pub fn start_sshd(&self, index: usize) -> Result<(), LabError> {
        let host = self.host(index)?;
        let init = self.live_init(index)?;
        if listeners(init).is_empty() {
            procs::signal(init.pid, libc::SIGUSR1);
        }
        host::wait_for_sshd(
            &host.name,
            &self.paths[index],
            host.address,
            init,
            KNOB_TIMEOUT,
        )
    }

    /// Crash of everything deployed: SIGKILL to every process of host
    /// `index` except its init and sshd (the listener and the sessions'
    /// sshd processes, so open connections survive; the commands they run
    /// do not). Returns how many processes were killed.
    pub fn kill_processes(&self, index: usize) -> Result<usize, LabError> {
        let host = self.host(index)?;
        let init = self.live_init(index)?;
        let pidns = pid_ns(&host.name, init)?;
        // Repeat: a process may fork while we kill its parent.
        let killed = kill_until_gone(&host.name, "processes survived SIGKILL", || {
            procs::pids_in_ns("pid", pidns)
                .into_iter()
                .filter(|&pid| pid != init.pid && !is_sshd(pid))
                .collect()
        })?;
        Ok(killed.len())
    }

    /// Disk full: resizes host `index`'s `/data` tmpfs to `bytes` (rounded up
    /// to whole pages) in place. Files already there stay; writing past the
    /// new size fails with ENOSPC. Shrinking below what is already stored
    /// fails with [`LabError::DataSize`]. Call again with a larger size (or
    /// [`super::DEFAULT_DATA_SIZE`]) to undo.
    pub fn set_data_size(&self, index: usize, bytes: u64) -> Result<(), LabError> {
        let host = self.host(index)?;
        let init = self.live_init(index)?;
        if bytes == 0 {
            // For tmpfs, size=0 means "no limit": the opposite of what was asked.
            return Err(LabError::DataSize {
                host: host.name.clone(),
                requested: 0,
                used: data_used(&host.name, init).unwrap_or(0),
                reason: "a tmpfs of size 0 is unlimited; ask for at least one byte".to_string(),
            });
        }
        let option = format!("remount,size={bytes}");
        let mut cmd = mount_ns(init);
        cmd.args(["mount", "-o", &option, "/data"]);
        let out = run_bounded(&host.name, &mut cmd, KNOB_TIMEOUT)?;
        if out.status.success() {
            return Ok(());
        }
        Err(LabError::DataSize {
            host: host.name.clone(),
            requested: bytes,
            used: data_used(&host.name, init).unwrap_or(0),
            reason: format!(
                "`{}` failed: {}",
                procs::render(&cmd),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        })
    }

    /// Bytes currently stored in host `index`'s `/data`.
    pub fn data_used(&self, index: usize) -> Result<u64, LabError> {
        let host = self.host(index)?;
        data_used(&host.name, self.live_init(index)?)
    }

    /// Adds `delay_ms` of delay and `loss_pct` % loss to every packet host
    /// `index` sends (so a round trip to it takes `delay_ms` longer).
    /// [`LabError::NetemUnsupported`] when the kernel has no netem.
    pub fn netem(&self, index: usize, delay_ms: u32, loss_pct: f64) -> Result<(), LabError> {
        let host = self.host(index)?;
        if !(0.0..=100.0).contains(&loss_pct) {
            return Err(LabError::Command {
                host: host.name.clone(),
                command: "netem".to_string(),
                status: "not run".to_string(),
                stderr: format!("loss {loss_pct}% is not a percentage"),
            });
        }
        let (delay, loss) = (format!("{delay_ms}ms"), format!("{loss_pct}%"));
        let args = [
            "qdisc", "replace", "dev", "eth0", "root", "netem", "delay", &delay, "loss", &loss,
        ];
        let out = net::tc(&host.name, &host.netns, &args)?;
        if out.status.success() {
            return Ok(());
        }
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        let command = format!("ip netns exec {} tc {}", host.netns, args.join(" "));
        if netem_missing(&stderr) {
            Err(LabError::NetemUnsupported {
                host: host.name.clone(),
                command,
                stderr,
            })
        } else {
            Err(LabError::Command {
                host: host.name.clone(),
                command,
                status: out.status.to_string(),
                stderr,
            })
        }
    }

    /// Limits what the machine sends to host `index` to `mbit` megabits
    /// per second (a token bucket on the machine's end of its veth), as a
    /// slower link than loopback would: uploads to the host take their
    /// size over the rate, whatever the machine's load. Each host has its
    /// own limit; [`Lab::netem`] on the host's side combines with it.
    pub fn limit_bandwidth(&self, index: usize, mbit: u32) -> Result<(), LabError> {
        let host = self.host(index)?;
        if !(1..=MAX_MBIT).contains(&mbit) {
            return Err(LabError::Command {
                host: host.name.clone(),
                command: "tbf".to_string(),
                status: "not run".to_string(),
                stderr: format!("{mbit} Mbit/s is outside 1-{MAX_MBIT}"),
            });
        }
        let args = net::tbf_args(&host.veth, mbit);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = net::tc_root(&host.name, &args)?;
        if out.status.success() {
            return Ok(());
        }
        Err(LabError::Command {
            host: host.name.clone(),
            command: format!("tc {}", args.join(" ")),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }

    /// Removes what [`Lab::limit_bandwidth`] added. Idempotent.
    pub fn clear_bandwidth(&self, index: usize) -> Result<(), LabError> {
        let host = self.host(index)?;
        let args = ["qdisc", "del", "dev", host.veth.as_str(), "root"];
        let out = net::tc_root(&host.name, &args)?;
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if out.status.success() || nothing_to_delete(&stderr) {
            Ok(())
        } else {
            Err(LabError::Command {
                host: host.name.clone(),
                command: format!("tc {}", args.join(" ")),
                status: out.status.to_string(),
                stderr,
            })
        }
    }

    /// Removes what [`Lab::netem`] added. Idempotent.
    pub fn clear_netem(&self, index: usize) -> Result<(), LabError> {
        let host = self.host(index)?;
        let args = ["qdisc", "del", "dev", "eth0", "root"];
        let out = net::tc(&host.name, &host.netns, &args)?;
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if out.status.success() || nothing_to_delete(&stderr) {
            Ok(())
        } else {
            Err(LabError::Command {
                host: host.name.clone(),
                command: format!("ip netns exec {} tc {}", host.netns, args.join(" ")),
                status: out.status.to_string(),
                stderr,
            })
        }
    }
}

/// The host's PID namespace (that of its init).
fn pid_ns(host: &str, init: ProcStamp) -> Result<(u64, u64), LabError> {
    procs::ns_id(Path::new(&format!("/proc/{}/ns/pid", init.pid))).ok_or_else(|| {
        LabError::InitExited {
            host: host.to_string(),
            status: "its PID namespace vanished".to_string(),
            log: String::new(),
        }
    })
}

/// SIGKILLs what `victims` lists until it lists nothing (bounded by
/// [`KNOB_TIMEOUT`]); returns every pid signalled.
fn kill_until_gone(
    host: &str,
    what: &'static str,
    victims: impl Fn() -> Vec<u32>,
) -> Result<BTreeSet<u32>, LabError> {
    let started = Instant::now();
    let mut killed = BTreeSet::new();
    loop {
        let now = victims();
        if now.is_empty() {
            return Ok(killed);
        }
        if started.elapsed() >= KNOB_TIMEOUT {
            return Err(LabError::Timeout {
                host: host.to_string(),
                what,
                waited: started.elapsed(),
                detail: format!("pids {now:?}"),
            });
        }
        for pid in now {
            procs::signal(pid, libc::SIGKILL);
            killed.insert(pid);
        }
        thread::sleep(Duration::from_millis(5));
    }
}

/// The host's sshd listeners: sshd processes whose parent is the init.
fn listeners(init: ProcStamp) -> Vec<u32> {
    procs::all_pids()
        .into_iter()
        .filter(|&pid| procs::stat(pid).is_some_and(|s| s.ppid == init.pid && s.state != 'Z'))
        .filter(|&pid| is_sshd(pid))
        .collect()
}

fn is_sshd(pid: u32) -> bool {
    procs::exe(pid).is_some_and(|exe| exe == Path::new(SSHD))
}

/// `nsenter` into only the host's mount namespace (enough for mount and statfs).
fn mount_ns(init: ProcStamp) -> Command {
    let mut cmd = Command::new("nsenter");
    cmd.arg("--target")
        .arg(init.pid.to_string())
        .args(["--mount", "--"])
        .env_clear()
        .env("PATH", host::HOST_PATH)
        .current_dir("/");
    cmd
}

fn data_used(host: &str, init: ProcStamp) -> Result<u64, LabError> {
    let mut cmd = mount_ns(init);
    cmd.args(["stat", "--file-system", "--format", "%b %f %S", "/data"]);
    let out = procs::run_checked(host, &mut cmd, KNOB_TIMEOUT)?;
    let text = String::from_utf8_lossy(&out.stdout);
    let nums: Vec<u64> = text
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    match nums[..] {
        [blocks, free, size] => Ok(blocks.saturating_sub(free) * size),
        _ => Err(LabError::Command {
            host: host.to_string(),
            command: procs::render(&cmd),
            status: "unexpected output".to_string(),
            stderr: text.trim().to_string(),
        }),
    }
}

/// tc's ways of saying the qdisc kind does not exist in this kernel.
/// Deleting the default qdisc is refused: then there was nothing to clear.
fn nothing_to_delete(stderr: &str) -> bool {
    stderr.contains("handle of zero") || stderr.contains("No such file")
}

fn netem_missing(stderr: &str) -> bool {
    stderr.contains("qdisc kind is unknown")
        || stderr.contains("Unknown qdisc")
        || stderr.contains("sch_netem")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tc_messages_for_a_missing_netem_are_recognised() {
        assert!(netem_missing("Error: Specified qdisc kind is unknown."));
        assert!(netem_missing(
            "Unknown qdisc \"netem\", hence option \"delay\" is unparsable"
        ));
        assert!(!netem_missing("Error: Exclusivity flag on, cannot modify."));
    }
}
