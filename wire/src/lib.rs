//! Wire formats shared by the `prover` daemon and `fleetctl`.
//!
//! Every format that crosses a process or host boundary is defined once here,
//! versioned, and used by both the writer and the reader, so the two can never
//! drift apart (nextest-metadata is the model: serde types, few dependencies).
//!
//! # Layout
//! - [`timing`]: the per-partition and per-proof timing records and the TIMELINE
//!   event stream, written by the prover as JSON lines, read by `fleetctl timing`.
//! - [`phase`]: the one declaration of the phases a partition record times.
//! - [`api`]: the daemon's HTTP request and response bodies.
//! - [`health`]: the host probe document printed by `prover health`.
//! - [`metrics`]: Prometheus metric names exported at `/metrics`.
//! - [`exit`]: the `prover` binary's exit codes, which fleetctl reads from
//!   the `prover client` commands it runs.
//! - [`error_line`]: the one-line form of an error both binaries end with.

pub mod api;
pub mod error_line;
pub mod exit;
pub mod health;
pub mod metrics;
pub mod phase;
pub mod timing;
