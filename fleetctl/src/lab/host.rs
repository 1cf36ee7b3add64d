//! One lab host: its files (host key, sshd config), its init (PID 1 of fresh
//! PID/mount/UTS/IPC namespaces inside the host's network namespace) and the
//! wait until its sshd accepts connections.

use super::error::LabError;
use super::procs::{self, run_checked, ProcStamp};
use std::ffi::CString;
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The script bash runs as the host's PID 1.
const INIT_SCRIPT: &str = include_str!("init.sh");
/// PATH for everything started inside a host.
pub(crate) const HOST_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const KEYGEN_TIMEOUT: Duration = Duration::from_secs(30);

/// A host of a running lab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabHost {
    /// `h01`, `h02`, ...
    pub name: String,
    pub address: Ipv4Addr,
    /// Name of its network namespace (`ip netns exec <netns> ...`).
    pub netns: String,
    /// The machine's end of its veth pair (a qdisc there shapes what the
    /// host receives).
    pub veth: String,
    /// Pid (in the root PID namespace) of the host's init, its PID 1.
    pub init_pid: u32,
}

/// Where a host's files live inside the lab directory.
#[derive(Debug, Clone)]
pub(crate) struct HostPaths {
    pub dir: PathBuf,
    pub host_key: PathBuf,
    pub sshd_config: PathBuf,
    pub pid_file: PathBuf,
    pub sshd_log: PathBuf,
    pub init_log: PathBuf,
    pub fifo: PathBuf,
}

impl HostPaths {
    pub fn new(lab_dir: &Path, name: &str) -> HostPaths {
        let dir = lab_dir.join(name);
        HostPaths {
            host_key: dir.join("ssh_host_ed25519_key"),
            sshd_config: dir.join("sshd_config"),
            pid_file: dir.join("sshd.pid"),
            sshd_log: dir.join("sshd.log"),
            init_log: dir.join("init.log"),
            fifo: dir.join("init.fifo"),
            dir,
        }
    }
}

/// Settings every host of a lab shares.
#[derive(Debug, Clone)]
pub(crate) struct HostSpec<'a> {
    pub authorized_keys: &'a Path,
    pub init_script: &'a Path,
    pub data_size: u64,
    pub max_sessions: u32,
}

/// Generates an ed25519 key pair at `path` (`path.pub` for the public half)
/// and returns the public line.
pub(crate) fn keygen(host: &str, path: &Path, comment: &str) -> Result<String, LabError> {
    run_checked(
        host,
        Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f"])
            .arg(path),
        KEYGEN_TIMEOUT,
    )?;
    let mut public = path.as_os_str().to_owned();
    public.push(".pub");
    let public = PathBuf::from(public);
    std::fs::read_to_string(&public)
        .map(|s| s.trim().to_string())
        .map_err(|e| LabError::io(&public, "read", e))
}

/// Writes the init script once per lab (hosts take their settings as arguments).
pub(crate) fn write_init_script(path: &Path) -> Result<(), LabError> {
    std::fs::write(path, INIT_SCRIPT).map_err(|e| LabError::io(path, "write", e))
}

/// sshd_config values are quoted so a lab directory with spaces still works.
fn sshd_config(spec: &HostSpec<'_>, paths: &HostPaths, address: Ipv4Addr) -> String {
    format!(
        "# sshd of one fleetctl lab host\n\
         ListenAddress {address}:22\n\
         HostKey \"{host_key}\"\n\
         PidFile \"{pid_file}\"\n\
         AuthorizedKeysFile \"{authorized_keys}\"\n\
         PermitRootLogin prohibit-password\n\
         PubkeyAuthentication yes\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         UsePAM no\n\
         StrictModes no\n\
         UseDNS no\n\
         PrintMotd no\n\
         X11Forwarding no\n\
         MaxSessions {max_sessions}\n\
         MaxStartups 100:30:200\n\
         Subsystem sftp internal-sftp\n",
        host_key = paths.host_key.display(),
        pid_file = paths.pid_file.display(),
        authorized_keys = spec.authorized_keys.display(),
        max_sessions = spec.max_sessions,
    )
}

/// Creates the host's directory, key, sshd config and wake-up fifo; returns
/// the public host key line.
pub(crate) fn prepare(
    spec: &HostSpec<'_>,
    paths: &HostPaths,
    name: &str,
    address: Ipv4Addr,
) -> Result<String, LabError> {
    std::fs::create_dir_all(&paths.dir).map_err(|e| LabError::io(&paths.dir, "create", e))?;
    let public = keygen(name, &paths.host_key, &format!("{name}@fleetlab"))?;
    std::fs::write(&paths.sshd_config, sshd_config(spec, paths, address))
        .map_err(|e| LabError::io(&paths.sshd_config, "write", e))?;
    mkfifo(&paths.fifo)?;
    Ok(public)
}

fn mkfifo(path: &Path) -> Result<(), LabError> {
    let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        LabError::io(
            path,
            "create fifo",
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "path contains NUL"),
        )
    })?;
    // SAFETY: c_path is a valid NUL-terminated string that outlives the call.
    if unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) } != 0 {
        return Err(LabError::io(
            path,
            "create fifo",
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Starts the host: `unshare` inside the host's network namespace forks the
/// init that becomes PID 1. Returns the `unshare` process (reap it after the
/// host dies) and the init's identity.
pub(crate) fn spawn_init(
    spec: &HostSpec<'_>,
    paths: &HostPaths,
    name: &str,
    netns: &str,
    deadline: Instant,
) -> Result<(Child, ProcStamp), LabError> {
    let log =
        File::create(&paths.init_log).map_err(|e| LabError::io(&paths.init_log, "create", e))?;
    let log_err = log
        .try_clone()
        .map_err(|e| LabError::io(&paths.init_log, "reopen", e))?;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", netns])
        .args(["unshare", "--pid", "--mount", "--uts", "--ipc", "--fork"])
        // The init dies with its unshare parent, so killing either ends the host.
        .args(["--kill-child", "--mount-proc", "--propagation", "private"])
        .arg("/bin/bash")
        .arg(spec.init_script)
        .arg(name)
        .arg(spec.data_size.to_string())
        .arg(&paths.sshd_config)
        .arg(&paths.sshd_log)
        .arg(&paths.fifo)
        .env_clear()
        .env("PATH", HOST_PATH)
        .env("HOME", "/root")
        .env("LANG", "C.UTF-8")
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        // Own process group: a Ctrl-C meant for the test run or for
        // `fleetctl lab up` does not take the hosts down half-way.
        .process_group(0);
    let command = procs::render(&cmd);
    let mut child = cmd.spawn().map_err(|source| LabError::Spawn {
        host: name.to_string(),
        command,
        source,
    })?;
    let parent = child.id();
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(init) = procs::all_pids()
            .into_iter()
            .find(|&pid| procs::stat(pid).is_some_and(|s| s.ppid == parent))
            .and_then(ProcStamp::of)
        {
            return Ok((child, init));
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(init_exited(name, paths, status.to_string()));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(LabError::Timeout {
                host: name.to_string(),
                what: "the host's init did not appear",
                waited: Duration::ZERO,
                detail: tail(&paths.init_log),
            });
        }
        thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

fn init_exited(name: &str, paths: &HostPaths, status: String) -> LabError {
    LabError::InitExited {
        host: name.to_string(),
        status,
        log: tail(&paths.init_log),
    }
}

/// Waits until `address:22` accepts a TCP connection, failing early if the
/// host's init dies.
pub(crate) fn wait_for_sshd(
    name: &str,
    paths: &HostPaths,
    address: Ipv4Addr,
    init: ProcStamp,
    timeout: Duration,
) -> Result<(), LabError> {
    let started = Instant::now();
    let deadline = started + timeout;
    let target = SocketAddr::from((address, 22));
    loop {
        if TcpStream::connect_timeout(&target, Duration::from_millis(500)).is_ok() {
            return Ok(());
        }
        if !init.alive() {
            return Err(init_exited(name, paths, "init is gone".to_string()));
        }
        if Instant::now() >= deadline {
            return Err(LabError::Timeout {
                host: name.to_string(),
                what: "sshd did not accept TCP connections",
                waited: started.elapsed(),
                detail: format!(
                    "sshd log: {}; init log: {}",
                    tail(&paths.sshd_log),
                    tail(&paths.init_log)
                ),
            });
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `address:22` refuses connections (the listener is gone).
pub(crate) fn wait_for_sshd_gone(
    name: &str,
    address: Ipv4Addr,
    timeout: Duration,
) -> Result<(), LabError> {
    let started = Instant::now();
    let target = SocketAddr::from((address, 22));
    while TcpStream::connect_timeout(&target, Duration::from_millis(500)).is_ok() {
        if started.elapsed() >= timeout {
            return Err(LabError::Timeout {
                host: name.to_string(),
                what: "sshd still accepted connections after being stopped",
                waited: started.elapsed(),
                detail: String::new(),
            });
        }
        thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// The last lines of a log file, for error messages.
pub(crate) fn tail(path: &Path) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            let from = lines.len().saturating_sub(5);
            let joined = lines[from..].join(" | ");
            if joined.is_empty() {
                format!("({} is empty)", path.display())
            } else {
                joined
            }
        }
        Err(e) => format!("({}: {e})", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sshd_config_has_the_settings_parallel_connections_need() {
        let dir = Path::new("/run/fleetlab/0a1b2c");
        let paths = HostPaths::new(dir, "h01");
        let spec = HostSpec {
            authorized_keys: &dir.join("authorized_keys"),
            init_script: &dir.join("init.sh"),
            data_size: 1 << 20,
            max_sessions: 10,
        };
        let text = sshd_config(&spec, &paths, Ipv4Addr::new(10, 213, 7, 2));
        for line in [
            "ListenAddress 10.213.7.2:22",
            "MaxStartups 100:30:200",
            "MaxSessions 10",
            "PasswordAuthentication no",
            "UsePAM no",
            "AuthorizedKeysFile \"/run/fleetlab/0a1b2c/authorized_keys\"",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    #[test]
    fn keygen_writes_an_ed25519_pair() {
        let dir = tempfile::tempdir().expect("tempdir");
        let public = keygen("h01", &dir.path().join("key"), "h01@test").expect("ssh-keygen");
        assert!(public.starts_with("ssh-ed25519 AAAA"), "{public}");
        assert!(dir.path().join("key").is_file());
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("log");
        let text: String = (1..=8).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&log, text).expect("write");
        assert_eq!(tail(&log), "line 4 | line 5 | line 6 | line 7 | line 8");
    }
}
