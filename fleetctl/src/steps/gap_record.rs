//! What the serving-gap probe ([`super::gap_probe`]) hands between steps:
//! where its record lies on the host, and what it saw. Plain data, so the
//! host's progress can hold a probe without depending on the steps that
//! run it.

use std::time::Duration;

/// A probe loop running on the host: its output file, under `run/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GapProbe {
    file: String,
}

impl GapProbe {
    pub(super) fn at(file: String) -> Self {
        GapProbe { file }
    }

    /// The record's path on the host.
    pub fn file(&self) -> &str {
        &self.file
    }
}

/// What the probe saw between its start and its stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    /// Total time the daemon's address did not answer ready.
    pub down: Duration,
    /// How many separate times it stopped answering.
    pub outages: u32,
    /// How long the probe ran.
    pub watched: Duration,
}
