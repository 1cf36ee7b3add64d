//! `fleetctl experiment`: roll a candidate build to canary hosts, measure it
//! against baseline hosts under the same load, judge the difference per
//! metric, then promote the candidate, restore the canaries, or keep them.
//!
//! # Layout
//! [`raw`] (the definition file, file:line:column errors) -> [`definition`]
//! (defaults, cross-field rules) ; [`metric`] (what is judged, read from
//! timing records) -> [`analysis`] (records of the window -> samples per
//! group) -> [`judge`] (per-metric outcome, verdict) over [`stats`]
//! (Mann-Whitney U, quantiles) -> [`report`] (table, JSON, HTML).
//!
//! The run: [`groups`] (canaries, baselines, the rest) -> [`run`] (stages:
//! deploy with the rollout playbook, [`workload`] on every host at once,
//! collect into the timing store, [`records`] of the window, analyse, act)
//! with [`state`] (for `--resume`) and [`log`] (the audit log). The command
//! line is the binary's (`src/cli/experiment.rs`), converted into
//! [`run::Options`].

pub mod analysis;
pub mod definition;
pub mod groups;
pub mod judge;
pub mod log;
pub mod metric;
pub mod raw;
pub mod records;
pub mod report;
pub mod run;
pub mod state;
pub mod stats;
pub mod workload;

pub use analysis::{analyse, Analysis, HostRecords, HostWindow};
pub use definition::{Definition, DefinitionError};
pub use judge::{Judgement, Verdict};
pub use metric::Metric;
pub use raw::Action;
