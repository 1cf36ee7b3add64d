//! `cuMemHostAlloc` as a source of pinned pool regions.
//!
//! Flags, chosen deliberately:
//! - `CU_MEMHOSTALLOC_PORTABLE`: the pages count as pinned for every CUDA
//!   context in the process, so one pool serves all GPUs of a host.
//! - not `WRITECOMBINED`: synthesis writes a, b, c and the assignments *and
//!   reads them back* on the host (the MSMs read the assignments); reads
//!   from write-combined memory are uncached and an order of magnitude slower.
//! - not `DEVICEMAP`: kernels never read host memory directly; with unified
//!   addressing the pages are mappable anyway, and the flag only adds setup.
//!
//! The driver pins through its own mapping, so these pages show up as
//! `Shmem` and RSS rather than `Mlocked`.

use super::check::check;
use super::{device_count, driver_present};
use crate::backend::BackendError;
use crate::pool::{HostAllocator, PoolError, Region, REGION_ALIGN};
use cudarc::driver::{result, sys, CudaContext};
use std::ptr::NonNull;
use std::sync::Arc;

/// Pinned host memory from the CUDA driver, tied to the primary context of
/// one device (made current on whichever thread allocates or frees).
pub struct CudaHostAllocator {
    ctx: Arc<CudaContext>,
    device: u32,
}

impl std::fmt::Debug for CudaHostAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaHostAllocator")
            .field("device", &self.device)
            .finish()
    }
}

const FLAGS: u32 = sys::CU_MEMHOSTALLOC_PORTABLE;

impl CudaHostAllocator {
    /// Uses the primary context of device `ordinal`.
    pub fn new(ordinal: u32) -> Result<Self, BackendError> {
        if !driver_present() || ordinal >= device_count() {
            return Err(BackendError::Device {
                device: ordinal,
                call: "CudaHostAllocator::new".into(),
                file: file!(),
                line: line!(),
                reason: format!(
                    "no CUDA device {ordinal} (driver present: {})",
                    driver_present()
                ),
            });
        }
        let ctx = check!(
            ordinal,
            "cuDevicePrimaryCtxRetain",
            CudaContext::new(ordinal as usize)
        )?;
        Ok(Self {
            ctx,
            device: ordinal,
        })
    }

    fn fail(&self, bytes: usize, reason: String) -> PoolError {
        PoolError::Alloc {
            allocator: "cuda",
            bytes,
            reason: format!("device {}: {reason}", self.device),
        }
    }
}

impl HostAllocator for CudaHostAllocator {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn page_locked(&self) -> bool {
        true
    }

    fn alloc(&self, bytes: usize) -> Result<Region, PoolError> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| self.fail(bytes, format!("cuCtxSetCurrent: {e:?}")))?;
        // SAFETY: the context is current; the region owns the pointer until
        // `free` hands it back to cuMemFreeHost.
        let ptr = unsafe { result::malloc_host(bytes, FLAGS) }
            .map_err(|e| self.fail(bytes, format!("cuMemHostAlloc(PORTABLE): {e:?}")))?;
        let ptr = NonNull::new(ptr.cast::<u8>())
            .ok_or_else(|| self.fail(bytes, "cuMemHostAlloc returned null".into()))?;
        if !(ptr.as_ptr() as usize).is_multiple_of(REGION_ALIGN) {
            // SAFETY: just allocated, not shared.
            let _ = unsafe { result::free_host(ptr.as_ptr().cast()) };
            return Err(self.fail(bytes, format!("pointer not {REGION_ALIGN}-aligned")));
        }
        // The driver may hand back recycled pinned pages; the pool's contract
        // is initialised memory, so clear it (the pages are resident anyway).
        // SAFETY: `bytes` writable bytes at `ptr`.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, bytes) };
        // SAFETY: page-aligned, initialised, `bytes` long, owned.
        Ok(unsafe { Region::from_raw(ptr, bytes) })
    }

    unsafe fn free(&self, region: Region) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: the caller guarantees the region came from `alloc`.
            let _ = unsafe { result::free_host(region.as_ptr().cast()) };
        }
    }
}
