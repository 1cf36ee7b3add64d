//! Anonymous mappings for slabs: huge-page backed where the kernel allows,
//! and faulted in from several threads.
//!
//! Pinning is dominated by the kernel zeroing and mapping pages. With 2 MiB
//! transparent huge pages that is one fault per 512 pages, and spreading the
//! faults over threads uses the memory bandwidth of every core instead of
//! one (measured on a 16-core host: 32 GiB in about 1 s, against 15 s for a
//! single `cuMemHostAlloc`, which the driver serialises).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::region::Region;
use crate::pool::error::PoolError;
use crate::pool::pages::{page_size, whole_pages};

/// Transparent huge page size on x86-64 and most arm64 kernels; used only
/// for alignment and advice, so a kernel with another size loses nothing.
pub const HUGE_PAGE: usize = 2 << 20;

/// Each faulting thread gets at least this much: below it, starting a
/// thread costs more than the faults it saves.
const FAULT_CHUNK: usize = 64 << 20;

/// A fresh anonymous private read-write mapping of `bytes` rounded up to
/// whole pages, made on behalf of `allocator` (named in errors). Mappings of
/// at least [`HUGE_PAGE`] are aligned to it and advised `MADV_HUGEPAGE`, so
/// the kernel can back them with huge pages; forked children get no copy.
#[cfg(unix)]
pub fn map_anonymous(allocator: &'static str, bytes: usize) -> Result<Region, PoolError> {
    let too_large = |why| PoolError::TooLarge {
        allocator,
        bytes: bytes as u64,
        why,
    };
    let len = whole_pages(bytes)
        .ok_or_else(|| too_large("the size overflows when rounded to whole pages"))?;
    let huge = len >= HUGE_PAGE;
    // Over-map by one huge page so an aligned start exists inside, then trim.
    let map_len = if huge {
        len.checked_add(HUGE_PAGE)
            .ok_or_else(|| too_large("the size overflows with huge-page alignment slack"))?
    } else {
        len
    };
    // SAFETY: a fresh anonymous mapping; no existing memory is touched.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(PoolError::Os {
            allocator,
            call: "mmap",
            bytes: len,
            source: std::io::Error::last_os_error(),
        });
    }
    let base = ptr as usize;
    let start = if huge {
        let start = base.next_multiple_of(HUGE_PAGE);
        let head = start - base;
        let tail = map_len - head - len;
        // Trimming cannot fail for ranges inside a mapping we just made; if
        // it did, the slack would only stay mapped (and unused) until exit.
        // SAFETY: both ranges lie inside the mapping and nothing uses them.
        unsafe {
            if head > 0 {
                libc::munmap(base as *mut libc::c_void, head);
            }
            if tail > 0 {
                libc::munmap((start + len) as *mut libc::c_void, tail);
            }
        }
        start
    } else {
        base
    };
    #[cfg(target_os = "linux")]
    // SAFETY: advice on the mapping just made. Both are best effort: without
    // huge pages faulting is slower, without DONTFORK a fork shares the
    // pages copy-on-write (and the next write could move a page a device is
    // reading); the memory works either way.
    unsafe {
        if huge {
            libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        }
        libc::madvise(start as *mut libc::c_void, len, libc::MADV_DONTFORK);
    }
    let ptr = NonNull::new(start as *mut u8).ok_or_else(|| PoolError::Alloc {
        allocator,
        bytes: len,
        reason: "mmap returned null".into(),
    })?;
    // SAFETY: page-aligned, zero-filled by the kernel, `len` long, ours.
    Ok(unsafe { Region::from_raw(ptr, len) })
}

/// Unmaps a region made by [`map_anonymous`] (unlocking it too).
///
/// # Safety
/// `region` must be such a mapping, used by nothing afterwards.
#[cfg(unix)]
pub unsafe fn unmap(region: Region) {
    // munmap cannot fail for a whole mapping we made, and there would be
    // nothing useful to do about it during teardown anyway.
    // SAFETY: guaranteed by the caller.
    unsafe { libc::munmap(region.as_ptr().cast(), region.len()) };
}

/// Threads faulting pages in right now, across every [`fault_in`] call: the
/// pool grows several slabs at once, and each of them splitting itself over
/// every core as well would only oversubscribe the cores.
static FAULTING: AtomicUsize = AtomicUsize::new(0);

/// Writes one zero byte per page of `region` so every page is resident,
/// splitting the range over the cores no other `fault_in` is using. The
/// pages are fresh and zero already, so the contents do not change.
pub fn fault_in(region: &Region) {
    let page = page_size();
    let len = region.len();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let free = cores.saturating_sub(FAULTING.load(Ordering::Relaxed));
    let threads = free.min(len / FAULT_CHUNK).max(1);
    FAULTING.fetch_add(threads, Ordering::Relaxed);
    let _done = Finally(threads);
    // Chunks of whole huge pages, so two threads never fault the same one.
    let chunk = len.div_ceil(threads).next_multiple_of(HUGE_PAGE.max(page));
    let base = region.as_ptr() as usize;
    let touch = |from: usize, to: usize| {
        let mut at = from;
        while at < to {
            // SAFETY: `at` lies inside the region (from..to is within 0..len),
            // which the caller owns; a volatile write keeps the store (and
            // so the fault) from being optimised away.
            unsafe { ((base + at) as *mut u8).write_volatile(0) };
            at += page;
        }
    };
    if threads == 1 {
        touch(0, len);
        return;
    }
    std::thread::scope(|s| {
        for i in 0..threads {
            let from = (i * chunk).min(len);
            let to = ((i + 1) * chunk).min(len);
            if from < to {
                s.spawn(move || touch(from, to));
            }
        }
    });
}

/// Gives back a [`fault_in`] call's share of [`FAULTING`], on every exit.
struct Finally(usize);

impl Drop for Finally {
    fn drop(&mut self) {
        FAULTING.fetch_sub(self.0, Ordering::Relaxed);
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn large_mappings_are_huge_page_aligned_and_small_ones_page_aligned() {
        let big = map_anonymous("test", HUGE_PAGE + 1).unwrap();
        assert_eq!(big.as_ptr() as usize % HUGE_PAGE, 0);
        assert_eq!(big.len(), (HUGE_PAGE + 1).next_multiple_of(page_size()));
        fault_in(&big);
        // SAFETY: the mapping is ours and `len` bytes long.
        let bytes = unsafe { std::slice::from_raw_parts(big.as_ptr(), big.len()) };
        assert!(bytes.iter().all(|b| *b == 0), "faulting keeps pages zero");
        // SAFETY: made above, no longer used.
        unsafe { unmap(big) };
        let small = map_anonymous("test", 1).unwrap();
        assert_eq!(small.len(), page_size());
        // SAFETY: made above, no longer used.
        unsafe { unmap(small) };
    }
}
