//! [`HeapAllocator`]: ordinary pageable memory, the baseline a device
//! copies from through a bounce buffer, and the pool's allocator wherever
//! memory need not be locked (tests, `pool.pageable`).

#[cfg(not(unix))]
use std::alloc::Layout;
#[cfg(not(unix))]
use std::ptr::NonNull;

use super::region::{HostAllocator, Region};
use crate::pool::error::PoolError;

/// Ordinary pageable memory.
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
        super::mmap::map_anonymous(self.name(), bytes)
    }

    #[cfg(unix)]
    unsafe fn free(&self, region: Region) {
        // SAFETY: the caller guarantees the region is one of our mappings.
        unsafe { super::mmap::unmap(region) };
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
    Layout::from_size_align(bytes.max(1), crate::pool::pages::REGION_ALIGN).map_err(|_| {
        PoolError::TooLarge {
            allocator: "heap",
            bytes: bytes as u64,
            why: "no layout of this size exists",
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_regions_are_aligned_zeroed_and_writable() {
        super::super::region::check_contract(&HeapAllocator);
        assert!(!HeapAllocator.page_locked());
    }
}
