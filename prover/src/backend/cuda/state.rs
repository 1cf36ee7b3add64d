//! The mutable state of one device, held under its lock by every call.

use super::domain::DomainTables;
use super::memory::DeviceBuffer;
use super::msm::MsmWorkspace;
use super::resident::ResidentBases;
use super::workspace::Workspace;
use crate::backend::BackendError;
use cudarc::driver::CudaStream;
use std::collections::HashMap;
use std::sync::Arc;

/// Mutable per-device state, one h computation at a time.
#[derive(Debug)]
pub struct DeviceState {
    pub compute: Arc<CudaStream>,
    pub copy: Arc<CudaStream>,
    pub(super) workspace: Option<Workspace>,
    pub(super) tables: HashMap<u32, Arc<DomainTables>>,
    pub(super) msm: MsmWorkspace,
    pub(super) bases: ResidentBases,
    /// Bases of an MSM whose parameter set is unknown, uploaded per call.
    pub(super) transient_bases: Option<DeviceBuffer>,
    /// Compiled constraints kept for a, b, c on the device.
    pub(super) r1cs: super::abc::ResidentR1cs,
}

impl DeviceState {
    pub(super) fn workspace(&mut self) -> Result<&mut Workspace, BackendError> {
        self.workspace.as_mut().ok_or_else(|| BackendError::Device {
            device: u32::MAX,
            call: "workspace".into(),
            file: file!(),
            line: line!(),
            reason: "no device workspace allocated (internal ordering error)".into(),
        })
    }
}
