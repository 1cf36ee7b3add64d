//! `fleetctl`: rolls prover builds out to GPU hosts and keeps them healthy.
//!
//! # Layout
//! [`inventory`], [`playbook`] -> [`plan`] -> [`executor`] (dispatcher + one
//! task per host) -> [`steps`] (one file per step) over [`transport`]
//! (`ssh`, `local`, `quote`) -> [`audit`], [`summary`] (the final table).
//! Beside it: [`timing`] (fleet-wide timing), [`health`] (policy, status),
//! [`experiment`] (a candidate on canaries judged against baselines), [`lab`]
//! (a fleet of real sshd hosts on this machine for tests). Every per-host
//! parallel run goes through [`fanout`], every file of fleetctl's own
//! (state, audit logs) through [`persist`], every file it is given to read
//! (inventories, playbooks, timing logs, the build) through [`input`]. The
//! command line (clap, Ctrl-C, exit codes) belongs to the binary
//! (`src/cli/`), which hands the library plain types.

pub mod audit;
pub mod executor;
pub mod experiment;
pub mod fanout;
pub mod health;
pub mod input;
pub mod inventory;
pub mod lab;
pub mod persist;
pub mod plan;
pub mod playbook;
pub mod steps;
pub mod summary;
pub mod timing;
pub mod transport;
