//! The lab's state file: who owns the lab and every name it created, so a
//! lab left behind by a killed process can be found and torn down later.

use super::error::LabError;
use super::procs::ProcStamp;
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

pub(crate) const STATE_FILE: &str = "state.json";
const STATE_VERSION: u32 = 1;

/// Written before anything is created and rewritten as resources appear.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct LabState {
    pub version: u32,
    pub id: String,
    /// The process whose exit ends the lab; `None` once detached (`lab up`).
    pub owner: Option<ProcStamp>,
    /// The claimed `10.a.b.0/24`, as `[a, b]`.
    pub subnet: Option<[u8; 2]>,
    pub bridge: String,
    pub hosts: Vec<HostRecord>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct HostRecord {
    pub name: String,
    pub netns: String,
    /// Root-namespace end of the host's veth pair.
    pub veth: String,
    pub address: Option<Ipv4Addr>,
    pub init: Option<ProcStamp>,
}

impl LabState {
    pub fn new(id: &str, owner: Option<ProcStamp>, hosts: usize) -> LabState {
        LabState {
            version: STATE_VERSION,
            id: id.to_string(),
            owner,
            subnet: None,
            bridge: super::net::bridge_name(id),
            hosts: (1..=hosts)
                .map(|n| HostRecord {
                    name: host_name(n),
                    netns: super::net::netns_name(id, n),
                    veth: super::net::veth_name(id, n),
                    address: None,
                    init: None,
                })
                .collect(),
        }
    }

    /// Atomic replace: a reader never sees half a file.
    pub fn save(&self, dir: &Path) -> Result<(), LabError> {
        let path = dir.join(STATE_FILE);
        let tmp = dir.join(".state.json.tmp");
        let text = serde_json::to_vec_pretty(self).map_err(|e| LabError::State {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        std::fs::write(&tmp, text).map_err(|e| LabError::io(&tmp, "write", e))?;
        std::fs::rename(&tmp, &path).map_err(|e| LabError::io(&path, "replace", e))
    }

    pub fn load(dir: &Path) -> Result<LabState, LabError> {
        let path = dir.join(STATE_FILE);
        let text = std::fs::read(&path).map_err(|e| LabError::io(&path, "read", e))?;
        let state: LabState = serde_json::from_slice(&text).map_err(|e| LabError::State {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        if state.version != STATE_VERSION {
            return Err(LabError::State {
                path,
                reason: format!(
                    "version {} is not the supported {STATE_VERSION}",
                    state.version
                ),
            });
        }
        Ok(state)
    }

    /// Owned by a process that is gone: nobody will tear it down but us.
    pub fn is_stale(&self) -> bool {
        matches!(self.owner, Some(owner) if !owner.alive())
    }
}

/// `h01`, `h02`, ... (two digits at least so names sort).
pub(crate) fn host_name(n: usize) -> String {
    format!("h{n:02}")
}

/// A lab directory in `base`: either a live lab (`<id>`) or one being torn
/// down (`<id>.reaping.<pid>.<start>`), whose reaper may itself have died.
#[derive(Debug, Clone)]
pub(crate) struct LabDir {
    pub path: PathBuf,
    pub id: String,
    pub reaper: Option<ProcStamp>,
}

pub(crate) fn list_lab_dirs(base: &Path) -> Vec<LabDir> {
    let Ok(entries) = std::fs::read_dir(base) else {
        return Vec::new();
    };
    let mut dirs = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !entry.path().join(STATE_FILE).is_file() {
            continue;
        }
        let mut parts = name.split('.');
        let id = parts.next().unwrap_or_default().to_string();
        let reaper = match (parts.next(), parts.next(), parts.next()) {
            (Some("reaping"), Some(pid), Some(start)) => match (pid.parse(), start.parse()) {
                (Ok(pid), Ok(start_time)) => Some(ProcStamp { pid, start_time }),
                _ => continue,
            },
            (None, _, _) => None,
            _ => continue,
        };
        if super::net::valid_id(&id) {
            dirs.push(LabDir {
                path: entry.path(),
                id,
                reaper,
            });
        }
    }
    dirs.sort_by(|a, b| a.id.cmp(&b.id));
    dirs
}

/// Takes exclusive charge of tearing a lab down by renaming its directory:
/// of several processes trying at once, exactly one rename succeeds.
pub(crate) fn claim_for_reaping(dir: &LabDir) -> Option<PathBuf> {
    let me = ProcStamp::current()?;
    let parent = dir.path.parent()?;
    let target = parent.join(format!("{}.reaping.{}.{}", dir.id, me.pid, me.start_time));
    std::fs::rename(&dir.path, &target).ok().map(|()| target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_and_plans_every_name_up_front() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut state = LabState::new("0a1b2c", ProcStamp::current(), 3);
        state.subnet = Some([213, 7]);
        state.save(dir.path()).expect("save");
        let back = LabState::load(dir.path()).expect("load");
        assert_eq!(back.hosts.len(), 3);
        assert_eq!(back.hosts[2].name, "h03");
        assert_eq!(back.hosts[2].netns, "fl-0a1b2c-h03");
        assert_eq!(back.bridge, "flb0a1b2c");
        assert_eq!(back.subnet, Some([213, 7]));
        assert!(!back.is_stale(), "owned by this live test process");
    }

    #[test]
    fn a_lab_owned_by_a_dead_process_is_stale_and_a_detached_one_is_not() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id();
        let start_time = ProcStamp::of(pid).map(|s| s.start_time).unwrap_or(0);
        child.wait().expect("reap true");
        let mut state = LabState::new("0a1b2c", Some(ProcStamp { pid, start_time }), 1);
        assert!(state.is_stale());
        state.owner = None;
        assert!(!state.is_stale());
    }

    #[test]
    fn lab_dirs_are_listed_with_their_reaper_and_junk_is_skipped() {
        let base = tempfile::tempdir().expect("tempdir");
        for name in [
            "0a1b2c",
            "0d0e0f.reaping.12.34",
            "not-a-lab",
            "0a0a0a.other",
        ] {
            let dir = base.path().join(name);
            std::fs::create_dir(&dir).expect("mkdir");
            LabState::new("0a1b2c", None, 1).save(&dir).expect("save");
        }
        let dirs = list_lab_dirs(base.path());
        let ids: Vec<_> = dirs.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(ids, ["0a1b2c", "0d0e0f"]);
        assert_eq!(
            dirs[1].reaper,
            Some(ProcStamp {
                pid: 12,
                start_time: 34
            })
        );
    }
}
