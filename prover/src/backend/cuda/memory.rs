//! Raw device allocations with an owner: freed on drop with the context
//! made current, so buffers can be handed between threads and kept alive
//! past one call (h left on the device for a later h-MSM).

use super::check::check;
use crate::backend::BackendError;
use cudarc::driver::{result, sys, CudaContext, CudaStream};
use std::sync::Arc;

/// Copies `src` to `dst` in `stream`'s order and returns once it is on the
/// device. Every upload that kernels read goes through here: a plain
/// synchronous `cuMemcpyHtoD` from pageable memory returns once the bytes
/// are staged, before the DMA lands, and runs on the legacy stream, which
/// does not order the non-blocking streams the kernels run on, so a kernel
/// launched right after it could read the old contents (seen: a domain's
/// tables built from a half-copied upload, every h value of that size wrong).
pub fn upload_ordered(
    device: u32,
    stream: &CudaStream,
    dst: sys::CUdeviceptr,
    src: &[u8],
) -> Result<(), BackendError> {
    // SAFETY: the caller's `dst` has room for `src`; `src` outlives the
    // copy because the stream is synchronised before returning.
    check!(device, "cuMemcpyHtoDAsync", unsafe {
        result::memcpy_htod_async(dst, src, stream.cu_stream())
    })?;
    check!(device, "cuStreamSynchronize", stream.synchronize())
}

/// `bytes` of device memory on one context.
#[derive(Debug)]
pub struct DeviceBuffer {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    ctx: Arc<CudaContext>,
    device: u32,
}

impl DeviceBuffer {
    /// Allocates `bytes` (synchronously, outside any stream ordering).
    pub fn alloc(ctx: &Arc<CudaContext>, device: u32, bytes: usize) -> Result<Self, BackendError> {
        check!(device, "cuCtxSetCurrent", ctx.bind_to_thread())?;
        // SAFETY: the context is current; the pointer is owned by the value.
        let ptr = check!(device, "cuMemAlloc", unsafe { result::malloc_sync(bytes) })?;
        Ok(Self {
            ptr,
            bytes,
            ctx: ctx.clone(),
            device,
        })
    }

    pub fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn device(&self) -> u32 {
        self.device
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // A failed free leaks device memory but must not panic in drop.
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: allocated by `alloc` and freed exactly once here.
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

/// Page-locked host memory from the driver (`cuMemHostAlloc`), for staging
/// copies that must run at the link's speed and overlap the host's work:
/// a copy from or to pageable memory goes through the driver's own bounce
/// buffer at a fraction of that and returns only when done.
#[derive(Debug)]
pub struct PinnedStage {
    ptr: std::ptr::NonNull<u8>,
    bytes: usize,
    ctx: Arc<CudaContext>,
}

// SAFETY: the stage owns its allocation; the pointer is not shared.
unsafe impl Send for PinnedStage {}
// SAFETY: shared access only reads through `as_slice`.
unsafe impl Sync for PinnedStage {}

impl PinnedStage {
    pub fn alloc(ctx: &Arc<CudaContext>, device: u32, bytes: usize) -> Result<Self, BackendError> {
        check!(device, "cuCtxSetCurrent", ctx.bind_to_thread())?;
        let bytes = bytes.max(1);
        // SAFETY: the context is current; the allocation is owned by the value.
        let raw = check!(device, "cuMemHostAlloc", unsafe {
            result::malloc_host(bytes, 0)
        })?;
        let ptr = std::ptr::NonNull::new(raw.cast::<u8>()).ok_or_else(|| {
            super::check::device_error(
                device,
                "cuMemHostAlloc",
                file!(),
                line!(),
                &"the driver returned a null pointer",
            )
        })?;
        Ok(Self {
            ptr,
            bytes,
            ctx: ctx.clone(),
        })
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `bytes` bytes allocated by the driver, owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.bytes) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as for `as_slice`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.bytes) }
    }
}

impl Drop for PinnedStage {
    fn drop(&mut self) {
        // A failed free leaks host memory but must not panic in drop.
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: allocated by `alloc` and freed exactly once here.
            let _ = unsafe { result::free_host(self.ptr.as_ptr().cast()) };
        }
    }
}
