//! Host allocators the pool draws regions from: page-locked (`mlock`) and
//! ordinary pageable heap memory, behind one small trait that a device
//! runtime's pinned allocator (`cuMemHostAlloc`) implements too.

#[cfg(not(unix))]
use std::alloc::Layout;
use std::ptr::NonNull;

use super::PoolError;

/// Alignment every allocator guarantees. A page is enough for `mlock`, for
/// DMA engines and for any `T` a [`PinnedVec`](super::PinnedVec) holds.
pub const REGION_ALIGN: usize = 4096;

/// One contiguous block of host memory owned by whoever holds the value.
///
/// A `Region` does not free itself: it goes back to the allocator that made
/// it through [`HostAllocator::free`]. The pool guarantees that.
#[derive(Debug)]
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a region is plain memory with a single owner; nothing about it is
// tied to the thread that allocated it (mlock and CUDA pinned memory are
// process-wide).
unsafe impl Send for Region {}
// SAFETY: `&Region` only hands out the pointer value, never access.
unsafe impl Sync for Region {}

impl Region {
    /// Wraps memory an allocator just made.
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` bytes, aligned to at
    /// least [`REGION_ALIGN`], initialised (pages zero-filled by the kernel
    /// count), and not used by anything else until it is freed.
    pub unsafe fn from_raw(ptr: NonNull<u8>, len: usize) -> Self {
        Self { ptr, len }
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A source of host memory regions.
///
/// Contract for implementations:
/// - `alloc(bytes)` returns a region of at least `bytes` bytes (the pool only
///   asks for multiples of 4096 and accounts `Region::len()` against the
///   budget), aligned to [`REGION_ALIGN`], initialised, usable as a raw
///   `*mut u8` by any thread.
/// - `free` gets back exactly the regions `alloc` of the same allocator made.
/// - Both may be slow (pinning 8 GiB takes seconds); the pool never calls
///   them with its lock held.
pub trait HostAllocator: Send + Sync {
    /// Short name for logs and stats (`"mlock"`, `"heap"`, `"cuda"`).
    fn name(&self) -> &'static str;

    /// Whether regions are page-locked, i.e. a device can DMA from them at
    /// full speed without a staging copy.
    fn page_locked(&self) -> bool;

    fn alloc(&self, bytes: usize) -> Result<Region, PoolError>;

    /// Returns `region` to the system.
    ///
    /// # Safety
    /// `region` must come from `self.alloc` and nothing may use its memory
    /// afterwards.
    unsafe fn free(&self, region: Region);
}

/// Ordinary pageable memory: the baseline a device copies from through a
/// bounce buffer.
///
/// On unix it is an anonymous private mapping (what the C allocator uses
/// for large blocks anyway): zero-filled by the kernel lazily, so making a
/// region costs nothing up front. `std::alloc::alloc_zeroed` with page
/// alignment would instead write every byte (measured: 0.7 s for 512 MiB).
#[derive(Debug, Default, Clone, Copy)]
pub struct HeapAllocator;

impl HostAllocator for HeapAllocator {
    fn name(&self) -> &'static str {
        "heap"
    }

    fn page_locked(&self) -> bool {
        false
    }

    #[cfg(unix)]
    fn alloc(&self, bytes: usize) -> Result<Region, PoolError> {
        map_anonymous(self.name(), bytes)
    }

    #[cfg(unix)]
    unsafe fn free(&self, region: Region) {
        // SAFETY: the caller guarantees the region is one of our mappings.
        unsafe { unmap(region) };
    }

    #[cfg(not(unix))]
    fn alloc(&self, bytes: usize) -> Result<Region, PoolError> {
        let layout = heap_layout(bytes)?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| PoolError::Alloc {
            allocator: self.name(),
            bytes,
            reason: "the heap allocator returned null (out of memory)".into(),
        })?;
        // SAFETY: fresh, zeroed, aligned to REGION_ALIGN, `bytes` long.
        Ok(unsafe { Region::from_raw(ptr, bytes) })
    }

    #[cfg(not(unix))]
    unsafe fn free(&self, region: Region) {
        if let Ok(layout) = heap_layout(region.len()) {
            // SAFETY: the caller passes a region from `alloc`, which used
            // this very layout.
            unsafe { std::alloc::dealloc(region.as_ptr(), layout) };
        }
    }
}

#[cfg(not(unix))]
fn heap_layout(bytes: usize) -> Result<Layout, PoolError> {
    Layout::from_size_align(bytes.max(1), REGION_ALIGN).map_err(|e| PoolError::Alloc {
        allocator: "heap",
        bytes,
        reason: e.to_string(),
    })
}

#[cfg(unix)]
use super::mmap::{fault_in, map_anonymous, unmap};

/// Anonymous private mappings locked into RAM with `mlock`: page-locked
/// without any device runtime, huge-page backed where the kernel allows. The host shows them as `Mlocked` in
/// `/proc/meminfo`, the process as `VmLck` in `/proc/<pid>/status`.
#[derive(Debug, Default, Clone, Copy)]
pub struct MlockAllocator;

impl HostAllocator for MlockAllocator {
    fn name(&self) -> &'static str {
        "mlock"
    }

    fn page_locked(&self) -> bool {
        true
    }

    #[cfg(unix)]
    fn alloc(&self, bytes: usize) -> Result<Region, PoolError> {
        // Huge-page backed and without a copy in forked children (see
        // `map_anonymous`). Faulting it in from several threads first
        // leaves `mlock` only the locking: it would otherwise fault every
        // page in itself, on one thread. Both make the region resident and
        // locked before this returns (the pool's allocation time).
        let region = map_anonymous(self.name(), bytes)?;
        let len = region.len();
        fault_in(&region);
        // SAFETY: the region is the mapping just made.
        if unsafe { libc::mlock(region.as_ptr().cast(), len) } != 0 {
            let err = std::io::Error::last_os_error();
            // SAFETY: the mapping just made, which nothing uses.
            unsafe { unmap(region) };
            return Err(mlock_error(len, err));
        }
        Ok(region)
    }

    #[cfg(unix)]
    unsafe fn free(&self, region: Region) {
        // SAFETY: the caller guarantees the region is one of our mappings.
        unsafe { unmap(region) };
    }

    #[cfg(not(unix))]
    fn alloc(&self, bytes: usize) -> Result<Region, PoolError> {
        Err(PoolError::Alloc {
            allocator: self.name(),
            bytes,
            reason: "mlock is only available on unix hosts".into(),
        })
    }

    #[cfg(not(unix))]
    unsafe fn free(&self, _region: Region) {}
}

#[cfg(unix)]
fn mlock_error(len: usize, err: std::io::Error) -> PoolError {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    let have_limit = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) } == 0;
    let locked_now = super::vm_locked_bytes();
    let fmt = |v: libc::rlim_t| {
        if v == libc::RLIM_INFINITY {
            "unlimited".to_string()
        } else {
            format!("{v} bytes")
        }
    };
    let limit_text = if have_limit {
        format!("soft {}, hard {}", fmt(limit.rlim_cur), fmt(limit.rlim_max))
    } else {
        "unknown".into()
    };
    match err.raw_os_error() {
        Some(libc::EPERM) | Some(libc::ENOMEM) | Some(libc::EAGAIN) => PoolError::MemlockLimit {
            bytes: len,
            limit: limit_text,
            locked: locked_now,
            reason: err.to_string(),
        },
        _ => PoolError::Alloc {
            allocator: "mlock",
            bytes: len,
            reason: format!("mlock: {err}"),
        },
    }
}

/// What a buffer of `bytes` takes from the pool: whole pages (a zero-byte
/// buffer still takes one). A size that cannot be rounded saturates, so it
/// fails the pool's "can never fit" check instead of overflowing.
pub fn pages_for(bytes: usize) -> u64 {
    bytes
        .max(1)
        .checked_next_multiple_of(page_size())
        .map_or(u64::MAX, |b| b as u64)
}

/// The system page size (4096 where it cannot be read).
pub fn page_size() -> usize {
    #[cfg(unix)]
    {
        // SAFETY: sysconf has no preconditions.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if size > 0 {
            return size as usize;
        }
    }
    4096
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exercise(alloc: &dyn HostAllocator) {
        let region = alloc.alloc(3 * 4096 + 1).unwrap();
        assert!(region.len() > 3 * 4096);
        assert_eq!(region.as_ptr() as usize % REGION_ALIGN, 0);
        // SAFETY: the region is ours and `len` bytes long.
        let bytes = unsafe { std::slice::from_raw_parts_mut(region.as_ptr(), region.len()) };
        assert!(bytes.iter().all(|b| *b == 0), "fresh regions are zeroed");
        bytes.fill(0xa5);
        assert_eq!(bytes[region.len() - 1], 0xa5);
        // SAFETY: from this allocator, no longer used.
        unsafe { alloc.free(region) };
    }

    #[test]
    fn heap_regions_are_aligned_zeroed_and_writable() {
        exercise(&HeapAllocator);
        assert!(!HeapAllocator.page_locked());
    }

    #[cfg(unix)]
    #[test]
    fn mlock_regions_are_aligned_zeroed_and_writable() {
        exercise(&MlockAllocator);
        assert!(MlockAllocator.page_locked());
    }

    #[cfg(unix)]
    #[test]
    fn mlock_rounds_to_pages() {
        let region = MlockAllocator.alloc(1).unwrap();
        assert_eq!(region.len(), page_size());
        // SAFETY: from this allocator, no longer used.
        unsafe { MlockAllocator.free(region) };
    }

    #[cfg(unix)]
    #[test]
    fn memlock_refusal_names_the_limit_and_the_fix() {
        let err = mlock_error(1 << 30, std::io::Error::from_raw_os_error(libc::EPERM));
        assert!(matches!(err, PoolError::MemlockLimit { bytes, .. } if bytes == 1 << 30));
        let text = err.to_string();
        assert!(text.contains("RLIMIT_MEMLOCK is soft"), "{text}");
        assert!(
            text.contains("ulimit -l") && text.contains("LimitMEMLOCK"),
            "{text}"
        );
        let other = mlock_error(4096, std::io::Error::from_raw_os_error(libc::EINVAL));
        assert!(matches!(
            other,
            PoolError::Alloc {
                allocator: "mlock",
                ..
            }
        ));
    }
}
