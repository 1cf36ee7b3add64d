//! What a host gets when no inventory layer sets a key: read by the
//! resolver and by `Host`'s own constructors alike.

/// Defaults when no layer sets a key.
pub const DEFAULT_PORT: u16 = 22;
pub const DEFAULT_CONNECT_TIMEOUT_S: u64 = 10;
/// Idle seconds an SSH master outlives the fleetctl that opened it, for the
/// next invocation to reuse (Ansible keeps its masters 60 s; a fleet polled
/// every minute should never pay for a handshake twice).
pub const DEFAULT_SSH_PERSIST_S: u64 = 120;
/// The login user when no layer sets one: whoever runs fleetctl, as ssh
/// itself would pick.
pub fn default_user() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "root".to_string())
}

/// The daemon config when no `config_path` is set: the one shipped with the
/// current release.
pub fn default_config_path(install_dir: &str) -> String {
    format!("{}/current/prover.toml", install_dir.trim_end_matches('/'))
}
