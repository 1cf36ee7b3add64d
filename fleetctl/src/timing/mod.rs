//! Fleet-wide timing: collect the prover's timing logs from every host, then
//! turn them into answers ("is the GPU idle, and why?").
//!
//! # Layout
//! [`store`] (one local folder per host, what was fetched) <- [`collect`]
//! (incremental fetch over a transport; [`line`]: which lines are kept) ; [`scan`] (parse the collected JSON
//! lines into per host/build accumulators, in parallel) -> [`report`]
//! (statistics, outliers, build comparison) -> [`render`] (terminal table,
//! HTML with charts) and [`export`] (Prometheus textfile collector).

pub mod collect;
pub mod export;
pub mod line;
#[cfg(test)]
mod recorded_log_tests;
pub mod render;
pub mod report;
#[cfg(test)]
mod report_tests;
pub mod scan;
pub mod store;
