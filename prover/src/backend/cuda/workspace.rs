//! The device buffers of one domain size, kept between h computations.

use super::check::check;
use super::memory::DeviceBuffer;
use crate::backend::BackendError;
use blstrs::Scalar;
use cudarc::driver::{sys, CudaContext};
use std::sync::Arc;

/// Device buffers for one domain size: a, b, c and a scratch vector the
/// passes ping-pong through. `slot[v]` maps logical vector v (0 = a,
/// 1 = b, 2 = c, 3 = scratch) to a buffer, so an odd pass count is a swap.
#[derive(Debug)]
pub struct Workspace {
    pub log_n: u32,
    pub bufs: Vec<DeviceBuffer>,
    pub slot: [usize; 4],
}

impl Workspace {
    pub fn new(ctx: &Arc<CudaContext>, device: u32, log_n: u32) -> Result<Self, BackendError> {
        let bytes = (1usize << log_n) * std::mem::size_of::<Scalar>();
        let (free, _) = check!(device, "cuMemGetInfo", ctx.mem_get_info())?;
        let need = 4 * bytes;
        if free < need {
            return Err(BackendError::DeviceMemory {
                device,
                need: need as u64,
                free: free as u64,
            });
        }
        let bufs = (0..4)
            .map(|_| DeviceBuffer::alloc(ctx, device, bytes))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            log_n,
            bufs,
            slot: [0, 1, 2, 3],
        })
    }

    pub fn ptr(&self, v: usize) -> sys::CUdeviceptr {
        self.bufs[self.slot[v]].ptr()
    }

    /// After a transform of v that ended in scratch, scratch holds v.
    pub(super) fn swap_with_scratch(&mut self, v: usize) {
        self.slot.swap(v, 3);
    }
}
