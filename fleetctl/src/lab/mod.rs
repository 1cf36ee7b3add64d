//! A lab fleet of real sshd hosts in network, PID and mount namespaces, for tests and demos.
//!
//! [`Lab::start`] builds `n` hosts on this machine (root only): each has its
//! own network namespace with an address on a per-lab bridge, its own PID 1,
//! private `/data` and `/tmp`, and a real OpenSSH `sshd` reachable with the
//! lab's client key and pinned `known_hosts`. It writes an inventory for
//! fleetctl and an `ssh_config` for humans, offers fault knobs (see
//! `faults.rs`) and tears everything down on [`Lab::teardown`] or drop, even
//! after a panic. A lab whose owner process died is reaped by the next
//! [`Lab::start`] (or `fleetctl lab down`). See `docs/lab.md`.
//!
//! Layout: `net` (names, subnet claims, bridge and veths), `host` (files and
//! init of one host), `files` (inventory, ssh_config, known_hosts), `state`
//! (the state file that makes stale labs recoverable), `faults` (the knobs),
//! `procs` (bounded commands, `/proc`). `fleetctl lab up|down|list` is the
//! binary's `cli::lab`.

mod error;
mod faults;
mod files;
mod host;
mod net;
mod procs;
mod state;

pub use error::LabError;
pub use host::LabHost;

use host::{HostPaths, HostSpec};
use procs::{run_bounded, ProcStamp};
use state::{LabDir, LabState};
use std::collections::{BTreeSet, HashSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

/// Where labs live unless told otherwise. Not under `/tmp`: that is private
/// inside every host, and the hosts' sshd reads its config from here.
pub const DEFAULT_BASE_DIR: &str = "/run/fleetlab";
/// Hosts per lab: the /24 has .1 for the bridge and .2 - .251 for hosts.
pub const MAX_HOSTS: usize = 250;
/// Default `/data` size per host. tmpfs only uses memory for what is written.
pub const DEFAULT_DATA_SIZE: u64 = 2 << 30;
/// Default deadline for one command run by [`Lab::exec`] or [`Lab::ssh`].
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);
/// How long teardown waits for a host's processes to die.
const KILL_TIMEOUT: Duration = Duration::from_secs(15);

/// A started host's init and public host key line, or why it did not start.
type HostStart = Result<(ProcStamp, String), LabError>;

/// How to build a lab; [`LabConfig::new`] gives the defaults.
#[derive(Debug, Clone)]
pub struct LabConfig {
    pub hosts: usize,
    /// Parent of the lab directory (`<base_dir>/<id>/`); must not be under
    /// `/tmp` or `/data`, which hosts do not share with the machine.
    pub base_dir: PathBuf,
    /// Size of each host's `/data` tmpfs, in bytes.
    pub data_size: u64,
    /// sshd `MaxSessions` (multiplexed sessions per connection).
    pub max_sessions: u32,
    /// Deadline for each host's sshd to accept connections.
    pub start_timeout: Duration,
}

impl LabConfig {
    pub fn new(hosts: usize) -> LabConfig {
        LabConfig {
            hosts,
            base_dir: PathBuf::from(DEFAULT_BASE_DIR),
            data_size: DEFAULT_DATA_SIZE,
            max_sessions: 10,
            start_timeout: Duration::from_secs(60),
        }
    }
}

/// A running lab; tears itself down when dropped (unless [`Lab::detach`]ed).
#[derive(Debug)]
pub struct Lab {
    id: String,
    dir: PathBuf,
    subnet: [u8; 2],
    hosts: Vec<LabHost>,
    paths: Vec<HostPaths>,
    inits: Vec<ProcStamp>,
    state: LabState,
    /// The `unshare` parents of the inits, reaped at teardown.
    children: Mutex<Vec<Child>>,
    /// Set once torn down or detached: drop then does nothing.
    done: bool,
}

/// One lab found under a base directory (for `fleetctl lab down`).
#[derive(Debug, Clone)]
pub struct LabSummary {
    pub id: String,
    pub dir: PathBuf,
    pub hosts: usize,
    /// `None`: detached (`fleetctl lab up`); `Some(true)`: a live process owns it.
    pub owner_alive: Option<bool>,
    /// A teardown of it is in progress (or was, by a process that died).
    pub reaping: bool,
}

/// Fails unless this process runs as root (namespaces, links, sshd).
pub fn require_root() -> Result<(), LabError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        Ok(())
    } else {
        Err(LabError::NotRoot { uid })
    }
}

impl Lab {
    /// Starts a lab of `n` hosts with the default [`LabConfig`].
    pub fn start(n: usize) -> Result<Lab, LabError> {
        Lab::start_with(LabConfig::new(n))
    }

    /// Starts a lab. Blocking; from async code use `spawn_blocking`.
    pub fn start_with(config: LabConfig) -> Result<Lab, LabError> {
        require_root()?;
        if config.hosts == 0 || config.hosts > MAX_HOSTS {
            return Err(LabError::HostCount {
                requested: config.hosts,
                max: MAX_HOSTS,
            });
        }
        let base = prepare_machine(&config.base_dir)?;
        for problem in reap_stale(&base) {
            tracing::warn!("stale lab cleanup: {problem}");
        }
        let (id, dir) = create_lab_dir(&base)?;
        let state = LabState::new(&id, ProcStamp::current(), config.hosts);
        // From here on, dropping `lab` tears down whatever exists so far.
        let mut lab = Lab {
            id,
            dir,
            subnet: [0, 0],
            hosts: Vec::new(),
            paths: Vec::new(),
            inits: Vec::new(),
            state,
            children: Mutex::new(Vec::new()),
            done: false,
        };
        lab.state.save(&lab.dir)?;
        lab.subnet = net::claim_subnet(&lab.id, rand::random::<u32>())?;
        lab.state.subnet = Some(lab.subnet);
        lab.state.save(&lab.dir)?;
        lab.build(&config)?;
        Ok(lab)
    }

    fn build(&mut self, config: &LabConfig) -> Result<(), LabError> {
        let client_key = self.client_key();
        let client_public =
            host::keygen(&format!("lab {}", self.id), &client_key, "fleetlab-client")?;
        let authorized_keys = self.dir.join("authorized_keys");
        std::fs::write(&authorized_keys, format!("{client_public}\n"))
            .map_err(|e| LabError::io(&authorized_keys, "write", e))?;
        let init_script = self.dir.join("init.sh");
        host::write_init_script(&init_script)?;
        net::create_bridge(&self.id, self.subnet)?;

        let spec = HostSpec {
            authorized_keys: &authorized_keys,
            init_script: &init_script,
            data_size: config.data_size,
            max_sessions: config.max_sessions,
        };
        let n = config.hosts;
        let next = AtomicUsize::new(0);
        let results: Vec<Mutex<Option<HostStart>>> = (0..n).map(|_| Mutex::new(None)).collect();
        let workers = n.min(16);
        let deadline = Instant::now() + config.start_timeout;
        thread::scope(|scope| {
            for _ in 0..workers {
                scope.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let outcome = self.start_host(&spec, i, deadline);
                    if let Ok(mut slot) = results[i].lock() {
                        *slot = Some(outcome);
                    }
                });
            }
        });

        let mut entries_keys = Vec::with_capacity(n);
        for (i, slot) in results.into_iter().enumerate() {
            let outcome = slot.into_inner().ok().flatten().unwrap_or_else(|| {
                Err(LabError::InitExited {
                    host: state::host_name(i + 1),
                    status: "start-up thread panicked".to_string(),
                    log: String::new(),
                })
            });
            match outcome {
                Ok((init, public)) => {
                    self.state.hosts[i].init = Some(init);
                    self.state.hosts[i].address = Some(net::host_address(self.subnet, i + 1));
                    entries_keys.push((init, public));
                }
                Err(e) => {
                    // Keep what did start in the state file so teardown is complete.
                    let _ = self.state.save(&self.dir);
                    return Err(e);
                }
            }
        }
        self.state.save(&self.dir)?;
        for (i, (init, _)) in entries_keys.iter().enumerate() {
            let record = &self.state.hosts[i];
            self.hosts.push(LabHost {
                name: record.name.clone(),
                address: net::host_address(self.subnet, i + 1),
                netns: record.netns.clone(),
                veth: record.veth.clone(),
                init_pid: init.pid,
            });
            self.paths.push(HostPaths::new(&self.dir, &record.name));
            self.inits.push(*init);
        }
        self.write_files(&entries_keys)
    }

    /// Network, files, init and the wait for sshd of host `i` (0-based).
    fn start_host(&self, spec: &HostSpec<'_>, i: usize, deadline: Instant) -> HostStart {
        let record = &self.state.hosts[i];
        let address = net::host_address(self.subnet, i + 1);
        let paths = HostPaths::new(&self.dir, &record.name);
        let public = host::prepare(spec, &paths, &record.name, address)?;
        net::create_host_net(&record.name, &self.id, i + 1, address)?;
        let (child, init) = host::spawn_init(spec, &paths, &record.name, &record.netns, deadline)?;
        if let Ok(mut children) = self.children.lock() {
            children.push(child);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        host::wait_for_sshd(&record.name, &paths, address, init, left)?;
        Ok((init, public))
    }

    fn write_files(&self, keys: &[(ProcStamp, String)]) -> Result<(), LabError> {
        let entries: Vec<files::Entry<'_>> = self
            .hosts
            .iter()
            .zip(keys)
            .map(|(h, (_, key))| files::Entry {
                name: &h.name,
                address: h.address,
                host_key: key,
            })
            .collect();
        let (client_key, known_hosts) = (self.client_key(), self.known_hosts());
        for (path, text) in [
            (known_hosts.clone(), files::known_hosts(&entries)),
            (
                self.inventory_path(),
                files::inventory(&entries, &client_key, &known_hosts),
            ),
            (
                self.ssh_config_path(),
                files::ssh_config(&entries, &client_key, &known_hosts),
            ),
        ] {
            std::fs::write(&path, text).map_err(|e| LabError::io(&path, "write", e))?;
        }
        Ok(())
    }

    /// Short unique id (6 hex digits) naming the lab's directory, links and namespaces.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The hosts, `h01` first; the knobs take an index into this slice.
    pub fn hosts(&self) -> &[LabHost] {
        &self.hosts
    }

    pub fn host(&self, index: usize) -> Result<&LabHost, LabError> {
        self.hosts.get(index).ok_or(LabError::NoSuchHost {
            index,
            count: self.hosts.len(),
        })
    }

    /// The lab directory: keys, configs, logs, state file.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn inventory_path(&self) -> PathBuf {
        self.dir.join("inventory.yaml")
    }

    pub fn ssh_config_path(&self) -> PathBuf {
        self.dir.join("ssh_config")
    }

    /// Private half of the lab's client key (authorized on every host).
    pub fn client_key(&self) -> PathBuf {
        self.dir.join("client_key")
    }

    /// `known_hosts` with each host's address pinned to its generated key.
    pub fn known_hosts(&self) -> PathBuf {
        self.dir.join("known_hosts")
    }

    /// The `10.a.b.0/24` of this lab's hosts.
    pub fn subnet(&self) -> (Ipv4Addr, u8) {
        (Ipv4Addr::new(10, self.subnet[0], self.subnet[1], 0), 24)
    }

    /// The address of the bridge (the machine itself, as the hosts see it).
    pub fn gateway(&self) -> Ipv4Addr {
        net::bridge_address(self.subnet)
    }

    /// Runs `argv` inside host `index`'s namespaces (no ssh), bounded by
    /// [`COMMAND_TIMEOUT`]. A non-zero exit is returned, not an error.
    pub fn exec(&self, index: usize, argv: &[&str]) -> Result<Output, LabError> {
        self.exec_with_timeout(index, argv, COMMAND_TIMEOUT)
    }

    pub fn exec_with_timeout(
        &self,
        index: usize,
        argv: &[&str],
        timeout: Duration,
    ) -> Result<Output, LabError> {
        let host = self.host(index)?;
        let init = self.live_init(index)?;
        let mut cmd = Command::new("nsenter");
        cmd.arg("--target")
            .arg(init.pid.to_string())
            .args(["--net", "--mount", "--pid", "--uts", "--ipc", "--"])
            .args(argv)
            .env_clear()
            .env("PATH", host::HOST_PATH)
            .env("HOME", "/root")
            .env("LANG", "C.UTF-8")
            .current_dir("/");
        run_bounded(&host.name, &mut cmd, timeout)
    }

    /// Runs the shell line `command` on host `index` with the system `ssh`
    /// and the lab's `ssh_config` (batch mode, pinned host keys, 5 s connect
    /// timeout), bounded by [`COMMAND_TIMEOUT`]. Exit status 255 is ssh's
    /// own failure (connection refused, key mismatch); stderr says which.
    pub fn ssh(&self, index: usize, command: &str) -> Result<Output, LabError> {
        self.ssh_with_timeout(index, command, COMMAND_TIMEOUT)
    }

    pub fn ssh_with_timeout(
        &self,
        index: usize,
        command: &str,
        timeout: Duration,
    ) -> Result<Output, LabError> {
        let host = self.host(index)?;
        let mut cmd = Command::new("ssh");
        cmd.arg("-F")
            .arg(self.ssh_config_path())
            .arg(&host.name)
            .arg(command);
        run_bounded(&host.name, &mut cmd, timeout)
    }

    /// The init of host `index`, if it is still the same live process.
    fn live_init(&self, index: usize) -> Result<ProcStamp, LabError> {
        let init = self.inits.get(index).copied().ok_or(LabError::NoSuchHost {
            index,
            count: self.hosts.len(),
        })?;
        if init.alive() {
            Ok(init)
        } else {
            Err(LabError::InitExited {
                host: self.hosts[index].name.clone(),
                status: format!("init pid {} is gone", init.pid),
                log: host::tail(&self.paths[index].init_log),
            })
        }
    }

    /// Tears the lab down now and reports anything left behind.
    pub fn teardown(mut self) -> Result<(), LabError> {
        self.done = true;
        let children = std::mem::take(self.children.get_mut().unwrap_or_else(|p| p.into_inner()));
        let problems = reap(&self.dir, &self.state, children);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(LabError::Teardown {
                id: self.id.clone(),
                problems,
            })
        }
    }

    /// Leaves the lab running after this value is gone (`fleetctl lab up`):
    /// the state file no longer names an owner, so only `fleetctl lab down`
    /// (or [`destroy_lab`]) removes it. Returns the lab directory.
    pub fn detach(mut self) -> Result<PathBuf, LabError> {
        self.state.owner = None;
        self.state.save(&self.dir)?;
        self.done = true;
        // The unshare parents are re-parented to the machine's init when we exit.
        self.children
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        Ok(self.dir.clone())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        let children = std::mem::take(self.children.get_mut().unwrap_or_else(|p| p.into_inner()));
        for problem in reap(&self.dir, &self.state, children) {
            tracing::warn!(lab = %self.id, "teardown: {problem}");
        }
    }
}

/// Creates what every lab needs on the machine and checks the base directory.
fn prepare_machine(base: &Path) -> Result<PathBuf, LabError> {
    let bad = |reason: &str| LabError::BaseDir {
        path: base.to_path_buf(),
        reason: reason.to_string(),
    };
    if !base.is_absolute() {
        return Err(bad("must be an absolute path"));
    }
    std::fs::create_dir_all(base).map_err(|e| LabError::io(base, "create", e))?;
    let base = base
        .canonicalize()
        .map_err(|e| LabError::io(base, "resolve", e))?;
    if base.starts_with("/tmp") || base.starts_with("/data") {
        return Err(bad(
            "hosts mount their own /tmp and /data, so they would not see it",
        ));
    }
    // sshd refuses to start without its privilege separation directory, and
    // /data must exist as a mount point for the hosts' private tmpfs.
    for dir in ["/run/sshd", "/data"] {
        std::fs::create_dir_all(dir).map_err(|e| LabError::io(dir, "create", e))?;
    }
    Ok(base)
}

fn create_lab_dir(base: &Path) -> Result<(String, PathBuf), LabError> {
    let mut last = None;
    for _ in 0..32 {
        let id = format!("{:06x}", rand::random::<u32>() & 0x00ff_ffff);
        let dir = base.join(&id);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok((id, dir)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(LabError::io(&dir, "create", e)),
        }
    }
    Err(LabError::io(
        base,
        "find an unused lab id",
        last.unwrap_or_else(|| std::io::Error::other("no id found")),
    ))
}

/// Kills every process of every host, removes links, namespaces, the
/// subnet claim and the lab directory. Returns what could not be removed.
fn reap(dir: &Path, state: &LabState, mut children: Vec<Child>) -> Vec<String> {
    let mut problems = Vec::new();
    // Everything running in a host's network namespace belongs to the host:
    // its init (whose death ends its whole PID namespace), the unshare parent
    // and anything entered with nsenter.
    let netns: HashSet<(u64, u64)> = state
        .hosts
        .iter()
        .filter_map(|h| procs::ns_id(&Path::new("/run/netns").join(&h.netns)))
        .collect();
    let inits: Vec<ProcStamp> = state.hosts.iter().filter_map(|h| h.init).collect();
    // The `unshare` parents reap their init once it dies; killing them first
    // would leave the init a zombie of the machine's init for a while.
    let parents: HashSet<u32> = inits
        .iter()
        .filter(|i| i.alive())
        .filter_map(|i| procs::stat(i.pid).map(|s| s.ppid))
        .chain(children.iter().map(Child::id))
        .collect();
    let started = Instant::now();
    let deadline = started + KILL_TIMEOUT;
    let mut pause = Duration::from_millis(2);
    loop {
        let mut victims: BTreeSet<u32> =
            inits.iter().filter(|i| i.alive()).map(|i| i.pid).collect();
        if !netns.is_empty() {
            for pid in procs::all_pids() {
                let ns = procs::ns_id(Path::new(&format!("/proc/{pid}/ns/net")));
                if ns.is_some_and(|ns| netns.contains(&ns)) {
                    victims.insert(pid);
                }
            }
        }
        for child in &mut children {
            if matches!(child.try_wait(), Ok(None)) {
                victims.insert(child.id());
            }
        }
        if victims.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            problems.push(format!(
                "processes still running after {KILL_TIMEOUT:?}: {victims:?}"
            ));
            break;
        }
        let spare_parents = started.elapsed() < KILL_TIMEOUT / 3;
        for pid in victims {
            if !(spare_parents && parents.contains(&pid)) {
                procs::signal(pid, libc::SIGKILL);
            }
        }
        thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
    let names: Vec<(String, String)> = state
        .hosts
        .iter()
        .map(|h| (h.netns.clone(), h.veth.clone()))
        .collect();
    problems.extend(net::destroy(&state.bridge, &names));
    if let Some(subnet) = state.subnet {
        if let Err(e) = net::release_subnet(&state.id, subnet) {
            problems.push(e);
        }
    }
    if problems.is_empty() {
        if let Err(e) = std::fs::remove_dir_all(dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                problems.push(format!("{}: remove: {e}", dir.display()));
            }
        }
    }
    problems
}

/// Tears down every lab under `base` whose owner died (and finishes
/// teardowns whose reaper died). Returns the problems met, per lab.
pub fn reap_stale(base: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    for found in state::list_lab_dirs(base) {
        let Ok(lab_state) = LabState::load(&found.path) else {
            continue;
        };
        let orphaned = match found.reaper {
            Some(reaper) => !reaper.alive(),
            None => lab_state.is_stale(),
        };
        if orphaned {
            problems.extend(reap_dir(&found, &lab_state));
        }
    }
    problems
}

fn reap_dir(found: &LabDir, lab_state: &LabState) -> Vec<String> {
    // Of several processes finding the same lab, only one wins the rename.
    let Some(path) = state::claim_for_reaping(found) else {
        return Vec::new();
    };
    tracing::info!(lab = %found.id, "tearing down lab at {}", path.display());
    reap(&path, lab_state, Vec::new())
        .into_iter()
        .map(|p| format!("lab {}: {p}", found.id))
        .collect()
}

/// Every lab under `base`.
pub fn list_labs(base: &Path) -> Vec<LabSummary> {
    state::list_lab_dirs(base)
        .into_iter()
        .filter_map(|found| {
            let lab_state = LabState::load(&found.path).ok()?;
            Some(LabSummary {
                id: found.id.clone(),
                dir: found.path.clone(),
                hosts: lab_state.hosts.len(),
                owner_alive: lab_state.owner.map(|o| o.alive()),
                reaping: found.reaper.is_some(),
            })
        })
        .collect()
}

/// Tears down lab `id` under `base`, whoever owns it.
pub fn destroy_lab(base: &Path, id: &str) -> Result<(), LabError> {
    require_root()?;
    let found = state::list_lab_dirs(base)
        .into_iter()
        .find(|d| d.id == id)
        .ok_or_else(|| LabError::UnknownLab {
            id: id.to_string(),
            base: base.to_path_buf(),
        })?;
    if found.reaper.is_some_and(|r| r.alive()) {
        // Someone else is on it already.
        return Ok(());
    }
    let lab_state = LabState::load(&found.path)?;
    let problems = reap_dir(&found, &lab_state);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(LabError::Teardown {
            id: id.to_string(),
            problems,
        })
    }
}
