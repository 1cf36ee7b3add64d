//! [`Region`] and [`HostAllocator`]: one block of host memory, and the
//! small trait every source of them implements (the pool's own allocators
//! and a device runtime's pinned allocator, `cuMemHostAlloc`).

use std::ptr::NonNull;

use crate::pool::error::PoolError;

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
    /// least [`REGION_ALIGN`](crate::pool::REGION_ALIGN), initialised (pages
    /// zero-filled by the kernel count), and not used by anything else until
    /// it is freed.
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
///   asks for whole pages, [`pages_for`](crate::pool::pages_for), and
///   accounts `Region::len()` against the budget), aligned to
///   [`REGION_ALIGN`](crate::pool::REGION_ALIGN), initialised, usable as a
///   raw `*mut u8` by any thread.
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

/// Checks the [`HostAllocator`] contract on `alloc`: a region of at least
/// the size asked, aligned, zeroed, writable to its last byte, freed again.
#[cfg(test)]
pub(crate) fn check_contract(alloc: &dyn HostAllocator) {
    use crate::pool::pages::REGION_ALIGN;
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
