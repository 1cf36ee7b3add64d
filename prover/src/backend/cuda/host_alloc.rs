//! Pinned pool slabs from the CUDA driver.
//!
//! Two ways to pin, tried in this order:
//! 1. **Register**: a huge-page backed anonymous mapping, faulted in from
//!    several threads, then `cuMemHostRegister(PORTABLE)`. The driver only
//!    pins pages that already exist, and several slabs register in
//!    parallel: 32 GiB took about 1 s on a 16-core host. These pages show
//!    as the process's RSS (anonymous), not as `Shmem` or `Mlocked`.
//! 2. **Alloc**: `cuMemHostAlloc(PORTABLE)`, where registration fails (a
//!    kernel or driver that refuses it); the driver makes and zeroes the
//!    pages itself and serialises concurrent calls (32 GiB: about 15 s).
//!    These pages show as `Shmem`.
//!
//! The first registration failure is logged with its reason, and from then
//! on this allocator uses `cuMemHostAlloc` only.
//!
//! Flags, chosen deliberately:
//! - `CU_MEMHOSTALLOC_PORTABLE`: the pages count as pinned for every CUDA
//!   context in the process, so one pool serves all GPUs of a host.
//! - not `WRITECOMBINED`: synthesis writes a, b, c and the assignments *and
//!   reads them back* on the host (the MSMs read the assignments); reads
//!   from write-combined memory are uncached and an order of magnitude slower.
//! - not `DEVICEMAP`: kernels never read host memory directly; with unified
//!   addressing the pages are mappable anyway, and the flag only adds setup.

use super::check::check;
use super::driver::{device_count, driver_present};
use crate::backend::BackendError;
use crate::pool::{HostAllocator, PoolError, Region, REGION_ALIGN};
use cudarc::driver::{result, sys, CudaContext};
use parking_lot::Mutex;
use std::collections::HashSet;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// How a [`CudaHostAllocator`] pins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinMode {
    /// Register huge-page backed anonymous memory; `cuMemHostAlloc` where
    /// that fails.
    Register,
    /// `cuMemHostAlloc` only.
    HostAlloc,
}

/// Pinned host memory from the CUDA driver, tied to the primary context of
/// one device (made current on whichever thread allocates or frees).
pub struct CudaHostAllocator {
    ctx: Arc<CudaContext>,
    device: u32,
    /// Cleared at the first registration failure (or for `HostAlloc`).
    register: AtomicBool,
    /// Whether the way in use was logged yet.
    told: AtomicBool,
    /// Base addresses of registered regions (the rest came from
    /// `cuMemHostAlloc`), so `free` undoes each the right way.
    registered: Mutex<HashSet<usize>>,
}

impl std::fmt::Debug for CudaHostAllocator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaHostAllocator")
            .field("device", &self.device)
            .finish()
    }
}

const FLAGS: u32 = sys::CU_MEMHOSTALLOC_PORTABLE;
/// Registered pages count as pinned for every context, like `FLAGS`.
const REGISTER_FLAGS: u32 = sys::CU_MEMHOSTREGISTER_PORTABLE;

impl CudaHostAllocator {
    /// Uses the primary context of device `ordinal`, pinning by registration.
    pub fn new(ordinal: u32) -> Result<Self, BackendError> {
        Self::with_mode(ordinal, PinMode::Register)
    }

    /// Uses the primary context of device `ordinal`, pinning as `mode` says.
    pub fn with_mode(ordinal: u32, mode: PinMode) -> Result<Self, BackendError> {
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
            register: AtomicBool::new(mode == PinMode::Register && cfg!(unix)),
            told: AtomicBool::new(false),
            registered: Mutex::new(HashSet::new()),
        })
    }

    /// Logs once which way this allocator pins, and why.
    fn tell(&self, how: &str, why: &str) {
        if !self.told.swap(true, Ordering::Relaxed) {
            tracing::info!(device = self.device, why, "cuda pinned pool: {how}");
        }
    }

    /// Maps, faults in and registers `bytes`; `Err` carries why not, for
    /// the fallback's log line.
    #[cfg(unix)]
    fn alloc_registered(&self, bytes: usize) -> Result<Region, String> {
        use crate::pool::mmap::{fault_in, map_anonymous, unmap};
        let region = map_anonymous("cuda", bytes).map_err(|e| e.to_string())?;
        // Registering pins only resident pages and faults the rest in on
        // this one thread: fault them in on many first.
        fault_in(&region);
        let registered = self
            .ctx
            .bind_to_thread()
            .map_err(|e| format!("cuCtxSetCurrent: {e:?}"))
            .and_then(|()| {
                // SAFETY: the context is current; the range is a live
                // mapping of ours, `region.len()` bytes long.
                unsafe {
                    sys::cuMemHostRegister_v2(region.as_ptr().cast(), region.len(), REGISTER_FLAGS)
                }
                .result()
                .map_err(|e| {
                    format!(
                        "cuMemHostRegister(PORTABLE) of {} bytes: {e:?}",
                        region.len()
                    )
                })
            });
        match registered {
            Ok(()) => {
                self.registered.lock().insert(region.as_ptr() as usize);
                Ok(region)
            }
            Err(why) => {
                // SAFETY: the mapping just made, not registered, unused.
                unsafe { unmap(region) };
                Err(why)
            }
        }
    }

    #[cfg(not(unix))]
    fn alloc_registered(&self, _bytes: usize) -> Result<Region, String> {
        Err("anonymous mappings need a unix host".into())
    }

    fn alloc_driver(&self, bytes: usize) -> Result<Region, PoolError> {
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

    /// Host-to-device bandwidth from `src` (pinned memory, ideally) in
    /// GB/s: the mean of `reps` synchronous copies into one device buffer.
    pub fn h2d_gbps(&self, src: &[u8], reps: u32) -> Result<f64, BackendError> {
        let device = self.device;
        check!(device, "cuCtxSetCurrent", self.ctx.bind_to_thread())?;
        // SAFETY: the context is current; the buffer is freed below.
        let dst = check!(device, "cuMemAlloc", unsafe {
            result::malloc_sync(src.len())
        })?;
        let copy = || -> Result<f64, BackendError> {
            // A first copy outside the timing: it pays for mapping the range.
            // SAFETY: `dst` holds `src.len()` bytes.
            check!(device, "cuMemcpyHtoD", unsafe {
                result::memcpy_htod_sync(dst, src)
            })?;
            let t = Instant::now();
            for _ in 0..reps.max(1) {
                // SAFETY: as above.
                check!(device, "cuMemcpyHtoD", unsafe {
                    result::memcpy_htod_sync(dst, src)
                })?;
            }
            let secs = t.elapsed().as_secs_f64();
            Ok(src.len() as f64 * f64::from(reps.max(1)) / secs / 1e9)
        };
        let gbps = copy();
        // SAFETY: allocated above, no copy in flight (all were synchronous).
        let _ = unsafe { result::free_sync(dst) };
        gbps
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
        if self.register.load(Ordering::Relaxed) {
            match self.alloc_registered(bytes) {
                Ok(region) => {
                    self.tell(
                        "registering huge-page backed memory (mmap + cuMemHostRegister)",
                        "registration works here",
                    );
                    return Ok(region);
                }
                Err(why) => {
                    if self.register.swap(false, Ordering::Relaxed) {
                        tracing::warn!(
                            device = self.device,
                            reason = %why,
                            "cuda pinned pool: registration failed ({why}); using cuMemHostAlloc from now on"
                        );
                        self.told.store(true, Ordering::Relaxed);
                    }
                }
            }
        } else {
            self.tell("cuMemHostAlloc", "registration not asked for");
        }
        self.alloc_driver(bytes)
    }

    unsafe fn free(&self, region: Region) {
        let registered = self.registered.lock().remove(&(region.as_ptr() as usize));
        if self.ctx.bind_to_thread().is_err() {
            // Without a context neither call can succeed; the pages go back
            // when the process exits.
            return;
        }
        if registered {
            // SAFETY: the caller guarantees the region came from `alloc`,
            // which registered this very base address; after unregistering
            // it is our plain mapping again.
            #[cfg(unix)]
            unsafe {
                match sys::cuMemHostUnregister(region.as_ptr().cast()).result() {
                    Ok(()) => crate::pool::mmap::unmap(region),
                    // Unmapping a range the driver still counts as pinned
                    // would let a later mapping at the same address be
                    // copied from the old pages: leak it instead.
                    Err(e) => tracing::error!(
                        device = self.device,
                        bytes = region.len(),
                        error = ?e,
                        "cuMemHostUnregister failed; the region stays mapped until exit"
                    ),
                }
            }
        } else {
            // SAFETY: the caller guarantees the region came from `alloc`.
            let _ = unsafe { result::free_host(region.as_ptr().cast()) };
        }
    }
}
