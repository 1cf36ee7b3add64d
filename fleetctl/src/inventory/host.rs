//! The resolved host: what every step and transport sees after group vars,
//! host vars and defaults have been merged (see `docs/inventory.md` for the
//! precedence).

use super::defaults::{
    default_config_path, default_user, DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_PORT,
    DEFAULT_SSH_PERSIST_S,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// How fleetctl reaches a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportKind {
    /// OpenSSH with one multiplexed master connection per host.
    Ssh,
    /// This machine, same steps, no SSH.
    Local,
}

/// One host, fully resolved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// Inventory name (unique).
    pub name: String,
    pub transport: TransportKind,
    /// DNS name or IP address (ignored for the local transport).
    pub address: String,
    pub port: u16,
    pub user: String,
    pub identity_file: Option<PathBuf>,
    /// `ProxyJump` value, e.g. `ops@bastion:22`.
    pub jump_host: Option<String>,
    /// Pinned known_hosts file; host key checking is always on.
    pub known_hosts: Option<PathBuf>,
    /// Seconds to establish the SSH master connection.
    pub connect_timeout_s: u64,
    /// Idle seconds the SSH master stays up for the next fleetctl to reuse;
    /// 0 closes it when this one is done.
    #[serde(default)]
    pub ssh_persist_s: u64,
    /// Root of the installation on the host: `releases/`, `current`, logs, pid file.
    pub install_dir: String,
    /// Daemon config path on the host; defaults to
    /// `<install_dir>/current/prover.toml` (the config shipped with the release).
    pub config_path: String,
    /// Local prover.toml shipped with each release (resolved to an absolute
    /// path); `None` keeps whatever config the host already has.
    #[serde(default)]
    pub config_file: Option<PathBuf>,
    /// GPUs the host is expected to have (the health gate checks it).
    pub gpus: u32,
    pub tags: Vec<String>,
    /// Groups the host belongs to, outermost first.
    pub groups: Vec<String>,
    /// Every other variable, merged, for steps and templates.
    pub vars: BTreeMap<String, serde_json::Value>,
}

impl Host {
    /// This machine under `name`, reached without SSH, with every other
    /// setting at what the inventory entry `{ transport: local, install_dir }`
    /// resolves to; for running steps here without writing an inventory.
    /// `install_dir` is taken as given: unlike the resolver, nothing makes a
    /// relative one absolute.
    pub fn local(name: impl Into<String>, install_dir: impl Into<String>) -> Host {
        let name = name.into();
        let install_dir = install_dir.into();
        Host {
            address: name.clone(),
            name,
            transport: TransportKind::Local,
            port: DEFAULT_PORT,
            user: default_user(),
            identity_file: None,
            jump_host: None,
            known_hosts: None,
            connect_timeout_s: DEFAULT_CONNECT_TIMEOUT_S,
            ssh_persist_s: DEFAULT_SSH_PERSIST_S,
            config_path: default_config_path(&install_dir),
            install_dir,
            config_file: None,
            gpus: 0,
            tags: Vec::new(),
            groups: Vec::new(),
            vars: BTreeMap::new(),
        }
    }
}
