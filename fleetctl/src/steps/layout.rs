//! Where things are on a host: the install layout every step agrees on.

use crate::health::INTENT_FILE;
use crate::inventory::Host;

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
