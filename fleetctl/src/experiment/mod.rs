//! `fleetctl experiment`: roll a candidate build to canary hosts, measure it
//! against baseline hosts under the same load, judge the difference per
//! metric, then promote the candidate, restore the canaries, or keep them.
//!
//! # Layout
//! [`raw`] (the definition file, file:line:column errors) -> [`definition`]
//! (defaults, cross-field rules) ; [`metric`] (what is judged, read from
//! timing records) -> [`analysis`] (records of the window -> samples per
//! group) -> [`judge`] (per-metric outcome, verdict) over [`stats`]
//! (Mann-Whitney U, quantiles).

pub mod analysis;
pub mod definition;
pub mod judge;
pub mod metric;
pub mod raw;
pub mod stats;

pub use analysis::{analyse, Analysis, HostRecords, HostWindow};
pub use definition::{Definition, DefinitionError};
pub use judge::{Judgement, Verdict};
pub use metric::Metric;
pub use raw::Action;
