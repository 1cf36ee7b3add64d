//! What the steps read on a host, with nothing but sh and coreutils there:
//! the install layout, the pid file, `/proc/<pid>`, `/proc/meminfo`, and the
//! deployed binary's own probe.

use super::{Cause, StepCtx};
use crate::inventory::Host;
use crate::transport::quote::quote;
use fleet_wire::health::Probe;
use std::time::Duration;

/// Short commands (cat, readlink, stat) get this long.
pub const QUICK: Duration = Duration::from_secs(15);

/// Paths of the remote layout (see ARCHITECTURE.md, "Remote layout").
#[derive(Debug, Clone)]
pub struct Layout {
    pub install: String,
    /// The daemon's config on the host (the inventory's `config_path`,
    /// by default the one shipped in `current/`).
    pub config: String,
}

impl Layout {
    pub fn new(host: &Host) -> Layout {
        let install = host.install_dir.trim_end_matches('/').to_owned();
        let config = if host.config_path.is_empty() {
            format!("{install}/current/prover.toml")
        } else {
            host.config_path.clone()
        };
        Layout { install, config }
    }
    pub fn releases(&self) -> String {
        format!("{}/releases", self.install)
    }
    pub fn release(&self, sha: &str) -> String {
        format!("{}/releases/{sha}", self.install)
    }
    pub fn current(&self) -> String {
        format!("{}/current", self.install)
    }
    pub fn current_binary(&self) -> String {
        format!("{}/current/prover", self.install)
    }
    pub fn pid_file(&self) -> String {
        format!("{}/run/prover.pid", self.install)
    }
    pub fn log(&self) -> String {
        format!("{}/logs/prover.log", self.install)
    }
    pub fn timing(&self) -> String {
        format!("{}/logs/timing.jsonl", self.install)
    }
    pub fn state(&self) -> String {
        format!("{}/state", self.install)
    }
    pub fn previous_file(&self) -> String {
        format!("{}/state/previous", self.install)
    }
    /// `running` or `stopped`: whether the daemon should be up, as the last
    /// `start` (running) or a `stop: true` drain (stopped) left it; `fleetctl
    /// health` fails a host whose daemon should run and does not.
    pub fn intent_file(&self) -> String {
        format!("{}/state/{INTENT_FILE}", self.install)
    }
    /// Releases that passed `verify` on this host, oldest first: what a
    /// rollback may go back to.
    pub fn verified_file(&self) -> String {
        format!("{}/state/verified", self.install)
    }
    pub fn lock_dir(&self) -> String {
        format!("{}/state/lock", self.install)
    }
}

/// Quotes for a script; a quoting failure is a step failure, never a panic.
pub fn q(s: &str) -> Result<String, Cause> {
    Ok(quote(s)?)
}

/// A release id is a lowercase sha256: anything else in `current` or
/// `state/previous` is not ours and must not be turned into a path.
pub fn is_release_id(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What the pid file says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PidFile {
    Missing,
    Garbage(String),
    Pid(u32),
}

pub async fn read_pid_file(ctx: &StepCtx<'_>) -> Result<PidFile, Cause> {
    let layout = ctx.layout();
    let f = q(&layout.pid_file())?;
    let out = ctx
        .transport
        .run_script_ok(
            &format!("if [ -f {f} ]; then printf 'pid:'; head -c 64 {f}; fi"),
            QUICK,
        )
        .await?;
    let text = out.stdout_text();
    let Some(body) = text.strip_prefix("pid:") else {
        return Ok(PidFile::Missing);
    };
    match body.trim().parse::<u32>() {
        Ok(pid) if pid > 1 => Ok(PidFile::Pid(pid)),
        _ => Ok(PidFile::Garbage(body.trim().to_owned())),
    }
}

/// One process, from `/proc/<pid>/status` and `/proc/<pid>/exe`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcInfo {
    /// State letter (`S`, `R`, `Z`, ...).
    pub state: char,
    /// Empty when unreadable (zombies have no exe).
    pub exe: String,
    pub vm_lck: u64,
    pub rss_shmem: u64,
    /// Anonymous resident memory: where registered (`cuMemHostRegister`)
    /// pinned memory shows, being neither `Shmem` nor `Mlocked`.
    pub rss_anon: u64,
}

impl ProcInfo {
    pub fn zombie(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// `None` when the pid is gone from /proc.
pub async fn proc_info(ctx: &StepCtx<'_>, pid: u32) -> Result<Option<ProcInfo>, Cause> {
    let script = format!(
        "if [ -r /proc/{pid}/status ]; then cat /proc/{pid}/status 2>/dev/null; printf 'Exe:\\t%s\\n' \"$(readlink /proc/{pid}/exe 2>/dev/null)\"; fi"
    );
    let out = ctx.transport.run_script_ok(&script, QUICK).await?;
    Ok(parse_proc_status(&out.stdout_text()))
}

pub fn parse_proc_status(text: &str) -> Option<ProcInfo> {
    let mut info = ProcInfo::default();
    let mut seen = false;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            "State" => {
                seen = true;
                info.state = value.chars().next().unwrap_or('?');
            }
            "Exe" => info.exe = value.to_owned(),
            "VmLck" => info.vm_lck = kb(value),
            "RssShmem" => info.rss_shmem = kb(value),
            "RssAnon" => info.rss_anon = kb(value),
            _ => {}
        }
    }
    seen.then_some(info)
}

fn kb(value: &str) -> u64 {
    value
        .split_whitespace()
        .next()
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// The host's memory, bytes, straight from `/proc/meminfo`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemInfo {
    pub total: u64,
    pub available: u64,
    pub shmem: u64,
    pub mlocked: u64,
}

pub async fn meminfo(ctx: &StepCtx<'_>) -> Result<MemInfo, Cause> {
    let out = ctx
        .transport
        .run_script_ok("cat /proc/meminfo", QUICK)
        .await?;
    parse_meminfo(&out.stdout_text())
        .ok_or_else(|| Cause::Check("/proc/meminfo has no MemTotal/MemAvailable".to_owned()))
}

pub fn parse_meminfo(text: &str) -> Option<MemInfo> {
    let mut m = MemInfo::default();
    let (mut total, mut avail) = (false, false);
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        match key {
            "MemTotal" => {
                total = true;
                m.total = kb(value)
            }
            "MemAvailable" => {
                avail = true;
                m.available = kb(value)
            }
            "Shmem" => m.shmem = kb(value),
            "Mlocked" => m.mlocked = kb(value),
            _ => {}
        }
    }
    (total && avail).then_some(m)
}

/// The daemon the pid file names, if it is a live process of one of our
/// releases. A stale pid now owned by some other program is not ours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DaemonState {
    Running {
        pid: u32,
        info: ProcInfo,
    },
    /// Nothing to act on, and why.
    NotRunning(String),
}

pub async fn daemon_state(ctx: &StepCtx<'_>) -> Result<DaemonState, Cause> {
    let layout = ctx.layout();
    let pid = match read_pid_file(ctx).await? {
        PidFile::Missing => {
            return Ok(DaemonState::NotRunning(format!(
                "no pid file at {}",
                layout.pid_file()
            )))
        }
        PidFile::Garbage(g) => {
            return Ok(DaemonState::NotRunning(format!(
                "pid file {} holds {g:?}, not a pid",
                layout.pid_file()
            )))
        }
        PidFile::Pid(pid) => pid,
    };
    let Some(info) = proc_info(ctx, pid).await? else {
        return Ok(DaemonState::NotRunning(format!(
            "stale pid file: pid {pid} is not running"
        )));
    };
    if info.zombie() {
        return Ok(DaemonState::NotRunning(format!(
            "pid {pid} has exited (zombie, not yet reaped)"
        )));
    }
    let releases = format!("{}/", canonical(ctx, &layout.releases()).await?);
    if !info.exe.starts_with(&releases) {
        return Ok(DaemonState::NotRunning(format!(
            "stale pid file: pid {pid} is {:?}, not a prover under {releases}",
            info.exe
        )));
    }
    Ok(DaemonState::Running { pid, info })
}

/// `readlink -f`, so a symlinked install dir still matches `/proc/<pid>/exe`.
pub async fn canonical(ctx: &StepCtx<'_>, path: &str) -> Result<String, Cause> {
    let out = ctx
        .transport
        .run_script_ok(&format!("readlink -f {}", q(path)?), QUICK)
        .await?;
    let text = out.stdout_text();
    Ok(if text.is_empty() {
        path.to_owned()
    } else {
        text
    })
}

/// Size of a remote file; 0 when it does not exist yet.
pub async fn file_size(ctx: &StepCtx<'_>, path: &str) -> Result<u64, Cause> {
    let p = q(path)?;
    let out = ctx
        .transport
        .run_script_ok(
            &format!("if [ -f {p} ]; then wc -c < {p}; else echo 0; fi"),
            QUICK,
        )
        .await?;
    out.stdout_text().parse().map_err(|_| {
        Cause::Check(format!(
            "cannot read the size of {path}: {:?}",
            out.stdout_text()
        ))
    })
}

/// The release `current` points at, if it is one of ours.
pub async fn current_release(ctx: &StepCtx<'_>) -> Result<Option<String>, Cause> {
    let out = ctx
        .transport
        .run_script_ok(
            &format!("readlink {} || true", q(&ctx.layout().current())?),
            QUICK,
        )
        .await?;
    let target = out.stdout_text();
    let id = target
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or("");
    Ok(is_release_id(id).then(|| id.to_owned()))
}

/// Runs the deployed binary's probe, from the install dir so the config's
/// relative paths (pid file, logs) resolve as the daemon's do.
pub async fn probe(ctx: &StepCtx<'_>, timeout: Duration) -> Result<Probe, Cause> {
    let layout = ctx.layout();
    let script = format!(
        "cd {} && exec {} health --config {}",
        q(&layout.install)?,
        q(&layout.current_binary())?,
        q(&layout.config)?
    );
    let out = ctx.transport.run_script_ok(&script, timeout).await?;
    Probe::parse(&String::from_utf8_lossy(&out.stdout))
        .map_err(|e| Cause::Check(format!("`prover health` output: {e}")))
}

pub use crate::health::INTENT_FILE;

/// Records that the daemon should (`running`) or should not (`stopped`) be up.
pub async fn record_intent(ctx: &StepCtx<'_>, intent: &str) -> Result<(), Cause> {
    let layout = ctx.layout();
    // A host with nothing installed is left so: a stop creates no tree.
    let script = format!(
        "[ -d {} ] || exit 0; mkdir -p {} && echo {intent} > {}",
        q(&layout.install)?,
        q(&layout.state())?,
        q(&layout.intent_file())?
    );
    ctx.transport.run_script_ok(&script, QUICK).await?;
    Ok(())
}

/// How many verified releases a host remembers.
const VERIFIED_KEPT: usize = 20;

/// Appends `sha` to the host's verified list (moved to the end when it was
/// there already), through a temporary file and a rename.
pub async fn record_verified(ctx: &StepCtx<'_>, sha: &str) -> Result<(), Cause> {
    let layout = ctx.layout();
    let file = q(&layout.verified_file())?;
    let tmp = q(&format!(
        "{}.{}.tmp",
        layout.verified_file(),
        std::process::id()
    ))?;
    let script = format!(
        "mkdir -p {state} && {{ grep -vxF {sha} {file} 2>/dev/null; echo {sha}; }} | tail -n {VERIFIED_KEPT} > {tmp} && mv -f {tmp} {file}",
        state = q(&layout.state())?,
        sha = q(sha)?,
    );
    ctx.transport.run_script_ok(&script, QUICK).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_status_reads_state_and_locked_memory() {
        let text = "Name:\tprover\nState:\tS (sleeping)\nVmLck:\t  2048 kB\nRssAnon:\t 4096 kB\nRssShmem:\t 1024 kB\nExe:\t/opt/p/releases/ab/prover\n";
        let info = parse_proc_status(text).unwrap();
        assert_eq!(info.state, 'S');
        assert_eq!(info.vm_lck, 2048 * 1024);
        assert_eq!(info.rss_shmem, 1024 * 1024);
        assert_eq!(info.rss_anon, 4096 * 1024);
        assert_eq!(info.exe, "/opt/p/releases/ab/prover");
        assert!(!info.zombie());
        assert!(parse_proc_status("State:\tZ (zombie)\nExe:\t\n")
            .unwrap()
            .zombie());
        assert_eq!(parse_proc_status(""), None);
    }

    #[test]
    fn meminfo_needs_total_and_available() {
        let text = "MemTotal:       16384 kB\nMemFree: 1 kB\nMemAvailable:    8192 kB\nShmem:  4 kB\nMlocked: 8 kB\n";
        let m = parse_meminfo(text).unwrap();
        assert_eq!(
            (m.total, m.available, m.shmem, m.mlocked),
            (16384 * 1024, 8192 * 1024, 4096, 8192)
        );
        assert_eq!(parse_meminfo("MemFree: 1 kB\n"), None);
    }

    #[test]
    fn release_ids_are_sha256_hex_only() {
        assert!(is_release_id(&"a".repeat(64)));
        assert!(!is_release_id(&"A".repeat(64)));
        assert!(!is_release_id("../../etc"));
    }
}
