//! [`PinnedBuf`]: one range carved from a pool slab, returned on drop.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use super::pinned::Inner;

/// An owned host buffer from a [`PinnedPool`](super::PinnedPool).
///
/// Derefs to the first `len()` bytes of its range; `capacity()` is the
/// whole range (page-rounded). Dropping it returns the range to its slab
/// for the next job; the memory stays pinned, and its budget reservation
/// stays with the slab.
pub struct PinnedBuf {
    ptr: *mut u8,
    len: usize,
    capacity: usize,
    slab: u64,
    offset: usize,
    pool: Arc<Inner>,
    who: String,
}

// SAFETY: the buffer owns its range exclusively (the pool carved it out for
// this buffer alone); the raw pointer is valid on any thread.
unsafe impl Send for PinnedBuf {}
// SAFETY: shared access only gives `&[u8]`.
unsafe impl Sync for PinnedBuf {}

impl PinnedBuf {
    /// Wraps the range `offset..offset + capacity` of slab `slab`, which
    /// starts at `ptr`.
    pub(crate) fn new(
        pool: Arc<Inner>,
        ptr: *mut u8,
        slab: u64,
        offset: usize,
        capacity: usize,
        len: usize,
        who: &str,
    ) -> Self {
        Self {
            ptr,
            len: len.min(capacity),
            capacity,
            slab,
            offset,
            pool,
            who: who.to_owned(),
        }
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr
    }

    /// Bytes requested at checkout (what `Deref` exposes).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of the carved range (`>= len()`, page-rounded).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether the memory is page-locked (fast device copies).
    pub fn page_locked(&self) -> bool {
        self.pool.page_locked()
    }
}

impl Deref for PinnedBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: the range is valid, initialised (allocator contract) and
        // exclusively ours for `capacity >= len` bytes.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl DerefMut for PinnedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl std::fmt::Debug for PinnedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedBuf")
            .field("who", &self.who)
            .field("len", &self.len)
            .field("capacity", &self.capacity)
            .field("page_locked", &self.page_locked())
            .finish()
    }
}

impl Drop for PinnedBuf {
    fn drop(&mut self) {
        self.pool
            .give_back(self.slab, self.offset, self.capacity, &self.who);
    }
}

#[cfg(test)]
mod tests {
    use crate::pool::pinned::test_pool;

    const PAGE: usize = 4096;

    #[test]
    fn a_buffer_exposes_its_length_and_owns_its_whole_range() {
        let p = test_pool(1 << 20, 1 << 20, 4);
        let mut buf = p.checkout("job", 100).unwrap();
        assert_eq!(
            (buf.len(), buf.capacity(), buf.is_empty()),
            (100, PAGE, false)
        );
        assert!(!buf.page_locked(), "heap memory");
        assert_eq!(buf.as_ptr() as usize % PAGE, 0);
        buf.fill(7);
        assert!(buf.iter().all(|b| *b == 7));
        let text = format!("{buf:?}");
        assert!(
            text.contains("\"job\"") && text.contains("capacity: 4096"),
            "{text}"
        );
        let empty = p.checkout("empty", 0).unwrap();
        assert_eq!((empty.len(), empty.capacity()), (0, PAGE), "still a page");
    }

    #[test]
    fn dropping_a_buffer_hands_its_range_back_on_any_thread() {
        let p = test_pool(1 << 20, 1 << 20, 4);
        let buf = p.checkout("job", 3 * PAGE).unwrap();
        assert_eq!(p.stats().buffers_in_use, 1);
        std::thread::spawn(move || drop(buf)).join().unwrap();
        let s = p.stats();
        assert_eq!((s.buffers_in_use, s.bytes_in_use, s.regions), (0, 0, 1));
        let again = p.checkout("next", 4 * PAGE).unwrap();
        assert_eq!(
            p.stats().grows,
            1,
            "the range merged back into a whole slab"
        );
        drop(again);
    }
}
