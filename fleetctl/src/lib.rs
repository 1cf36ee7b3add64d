//! `fleetctl`: rolls prover builds out to GPU hosts and keeps them healthy.
//!
//! # Layout
//! [`inventory`], [`playbook`] -> [`plan`] -> [`executor`] (dispatcher + one
//! task per host) -> [`steps`] (one file per step) over [`transport`]
//! (`ssh`, `local`, `quote`) -> [`audit`], [`report`]. Beside it: [`timing`]
//! (fleet-wide timing), [`health`] (policy, status), [`experiment`] (a
//! candidate on canaries judged against baselines), [`lab`] (a fleet of real
//! sshd hosts on this machine for tests).

pub mod audit;
pub mod cli;
pub mod executor;
pub mod experiment;
pub mod health;
pub mod inventory;
pub mod lab;
pub mod plan;
pub mod playbook;
pub mod report;
pub mod steps;
pub mod timing;
pub mod transport;
