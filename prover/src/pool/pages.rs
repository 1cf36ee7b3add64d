//! The size rules every part of the pool shares, written once: a request
//! takes whole pages, and every region is aligned to [`REGION_ALIGN`].
//! Admission counts a job's buffers with the same [`pages_for`], so what a
//! job is admitted for is exactly what its checkout takes.

/// Alignment every allocator guarantees. A page is enough for `mlock`, for
/// DMA engines and for any `T` a [`PinnedVec`](super::PinnedVec) holds;
/// buffers start at whole-page offsets of a region, so they keep it.
pub const REGION_ALIGN: usize = 4096;

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

/// `bytes` rounded up to whole pages, a zero-byte request still taking
/// one; `None` where the rounding overflows.
pub fn whole_pages(bytes: usize) -> Option<usize> {
    bytes.max(1).checked_next_multiple_of(page_size())
}

/// What a buffer of `bytes` takes from the pool: [`whole_pages`]. A size
/// that cannot be rounded saturates, so it fails the pool's "can never
/// fit" check instead of overflowing.
pub fn pages_for(bytes: usize) -> u64 {
    whole_pages(bytes).map_or(u64::MAX, |b| b as u64)
}

/// What a checkout of buffers of `sizes` takes from the pool, together:
/// each one's [`pages_for`], summed (saturating, as each one does).
pub fn pages_for_all(sizes: &[usize]) -> u64 {
    sizes
        .iter()
        .fold(0u64, |sum, b| sum.saturating_add(pages_for(*b)))
}

/// The whole pages that fit in `bytes` (rounded down): how much of a limit
/// a slab can use.
pub(crate) fn whole_pages_within(bytes: u64) -> u64 {
    let page = page_size() as u64;
    bytes / page * page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_takes_whole_pages_and_an_empty_one_takes_one() {
        let page = page_size();
        assert_eq!(pages_for(0), page as u64);
        assert_eq!(pages_for(1), page as u64);
        assert_eq!(pages_for(page), page as u64);
        assert_eq!(pages_for(page + 1), 2 * page as u64);
        assert_eq!(whole_pages(3 * page - 1), Some(3 * page));
    }

    #[test]
    fn sizes_that_cannot_be_rounded_saturate_instead_of_wrapping() {
        assert_eq!(whole_pages(usize::MAX), None);
        assert_eq!(pages_for(usize::MAX), u64::MAX);
        assert_eq!(pages_for_all(&[usize::MAX / 2 + 1; 2]), u64::MAX);
        assert_eq!(pages_for_all(&[usize::MAX, 1]), u64::MAX);
    }

    #[test]
    fn a_checkout_takes_the_sum_of_its_buffers_pages() {
        let page = page_size() as u64;
        assert_eq!(pages_for_all(&[]), 0);
        assert_eq!(pages_for_all(&[0, 1, page as usize + 1]), 4 * page);
    }

    #[test]
    fn a_limit_holds_the_whole_pages_below_it() {
        let page = page_size() as u64;
        assert_eq!(whole_pages_within(page - 1), 0);
        assert_eq!(whole_pages_within(3 * page + 7), 3 * page);
        assert_eq!(whole_pages_within(u64::MAX) % page, 0);
    }

    #[test]
    fn regions_aligned_to_pages_are_aligned_enough() {
        assert!(page_size().is_multiple_of(REGION_ALIGN));
    }
}
