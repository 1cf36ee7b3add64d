//! Everything a step sees on one host.

use super::layout::Layout;
use super::progress::HostProgress;
use super::release::Release;
use crate::inventory::Host;
use crate::transport::Transport;

/// Test hooks that inject faults no healthy host produces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Faults {
    /// Flip one byte of the binary on its way to the host.
    pub corrupt_upload: bool,
}

/// Everything a step sees on one host.
#[derive(Debug)]
pub struct StepCtx<'a> {
    pub host: &'a Host,
    pub transport: &'a Transport,
    pub release: &'a Release,
    pub state: HostProgress,
    /// Dry run: describe, read what is cheap to read, change nothing.
    pub check: bool,
    /// `drain` starts the probe of the daemon's address that measures the
    /// serving gap ([`super::gap_probe`]); whoever sets this stops it (the
    /// executor, when the host is done). Off for a step run on its own,
    /// which has nobody to stop it.
    pub measure_gap: bool,
    pub faults: Faults,
}

impl<'a> StepCtx<'a> {
    pub fn new(host: &'a Host, transport: &'a Transport, release: &'a Release) -> StepCtx<'a> {
        StepCtx {
            host,
            transport,
            release,
            state: HostProgress::default(),
            check: false,
            measure_gap: false,
            faults: Faults::default(),
        }
    }

    pub fn layout(&self) -> Layout {
        Layout::new(self.host)
    }
}
