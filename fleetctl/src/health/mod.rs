//! Host and GPU health: the policy over `prover health` probe documents, and
//! the reading of that probe on every selected host in parallel (for
//! `fleetctl status` / `fleetctl health`, whose command-line side lives in
//! the binary's `cli`).
//!
//! The probe is the deployed `prover health` rather than a separate fleetctl
//! agent: it is already on every host with each release, it shares the probe
//! type with this reader through `fleet-wire`, and it reads the daemon's own
//! config to find its pid file and API.

pub mod policy;
pub mod status;

/// The file under `<install_dir>/state/` that says whether the daemon should
/// be up: `running` (written by every start) or `stopped` (written by a
/// drain with `stop: true`, the `stop` playbook). `fleetctl health` fails a
/// host whose daemon should run and does not.
pub const INTENT_FILE: &str = "daemon";
/// [`INTENT_FILE`]'s word for a daemon that should be up.
pub const INTENT_RUNNING: &str = "running";
/// [`INTENT_FILE`]'s word for a daemon stopped on purpose.
pub const INTENT_STOPPED: &str = "stopped";
