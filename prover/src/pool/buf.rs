//! [`PinnedBuf`]: one region checked out of the pool, returned on drop.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use super::alloc::Region;
use super::pinned::Inner;
use crate::budget::Reservation;

/// An owned host buffer from a [`PinnedPool`](super::PinnedPool).
///
/// Derefs to the first `len()` bytes of its region; `capacity()` is the
/// whole region. Dropping it returns the region (and its budget
/// reservation) to the pool for the next job; the memory stays pinned.
pub struct PinnedBuf {
    ptr: *mut u8,
    len: usize,
    capacity: usize,
    /// Always `Some` until `drop` hands it back.
    owned: Option<(Region, Reservation)>,
    pool: Arc<Inner>,
    who: String,
}

// SAFETY: the buffer owns its region exclusively; the raw pointer is only a
// cached copy of the region's pointer, valid on any thread.
unsafe impl Send for PinnedBuf {}
// SAFETY: shared access only gives `&[u8]`.
unsafe impl Sync for PinnedBuf {}

impl PinnedBuf {
    pub(crate) fn new(
        pool: Arc<Inner>,
        region: Region,
        reservation: Reservation,
        len: usize,
        who: &str,
    ) -> Self {
        Self {
            ptr: region.as_ptr(),
            len: len.min(region.len()),
            capacity: region.len(),
            owned: Some((region, reservation)),
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

    /// Bytes of the underlying region (`>= len()`, page-rounded).
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
        // SAFETY: the region is valid, initialised (allocator contract) and
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
        if let Some((region, reservation)) = self.owned.take() {
            self.pool.give_back(region, reservation, &self.who);
        }
    }
}
