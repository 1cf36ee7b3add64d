//! What the prover reads from the operating system, each in one place:
//! [`meminfo`] (`/proc/meminfo` and `/proc/<pid>/status`), [`cgroup`] (the
//! memory limit of the process's cgroup), [`hostname`], the wall clock
//! ([`clock`]), a GPU's PCI address ([`pci`]) and a file system's free
//! space ([`disk`]). The budget, the pool, the probe and the timing records all
//! read through here, so a timing record and the probe name a host alike.

pub mod cgroup;
pub mod clock;
pub mod disk;
pub mod meminfo;
pub mod pci;

/// Whether `pid` names a live process (not a zombie) right now.
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state letter follows the `(comm)` field, which may itself hold
        // spaces and parentheses.
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].trim_start().chars().next())
            .is_some_and(|state| state != 'Z'),
        Err(_) => false,
    }
}

/// When `pid` started, in Unix seconds (`/proc/<pid>/stat`'s start time
/// after boot, plus the boot time of `/proc/stat`); `None` if it cannot be
/// read. Good to about a second (the boot time is whole seconds).
pub fn process_started_unix(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after `(comm)`: state is field 3, start time field 22.
    let rest = &stat[stat.rfind(')')? + 1..];
    let ticks: u64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    let boot: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| boot as f64 + ticks as f64 / hz as f64)
}

/// This host's name as the kernel knows it (`gethostname`, the UTS
/// nodename); `unknown` if it cannot be read. Timing records and the health
/// probe both carry it, and fleet reports join the two on it.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates
    // unless truncated, which the `position` below tolerates.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).trim().to_owned();
    if rc != 0 || name.is_empty() {
        return "unknown".into();
    }
    name
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn hostname_is_the_kernels() {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_eq!(super::hostname(), kernel.trim());
    }

    #[test]
    fn this_process_started_in_the_recent_past() {
        let started = super::process_started_unix(std::process::id()).expect("start time");
        let now = super::clock::unix_secs() as f64;
        assert!(
            started <= now + 2.0 && started > now - 86_400.0,
            "{started} vs {now}"
        );
        assert!(super::process_started_unix(u32::MAX).is_none());
    }
}
