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
