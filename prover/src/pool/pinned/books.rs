//! The pool's books, kept under its lock: the slabs it holds, what is
//! carved out of each, and the byte counts every decision reads (held, in
//! use, pending). Every change to those counts is one method here, so a
//! carve and its undoing, or a slab leaving the books, are written once.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::free_list::FreeList;
use crate::budget::Reservation;
use crate::pool::host::Region;

/// One pinned allocator region and what is carved out of it.
pub(super) struct Slab {
    pub(super) id: u64,
    pub(super) region: Region,
    /// The slab's share of the memory budget, released when it is freed.
    pub(super) reservation: Reservation,
    pub(super) free: FreeList,
    /// Buffers carved out and not yet returned.
    pub(super) buffers: usize,
    /// When the last buffer came back (or the slab was made).
    pub(super) idle_since: Instant,
}

impl Slab {
    pub(super) fn len(&self) -> u64 {
        self.region.len() as u64
    }

    pub(super) fn idle(&self) -> bool {
        self.buffers == 0
    }
}

/// A range carved from a slab (under the lock).
#[derive(Debug, Clone, Copy)]
pub(super) struct Carved {
    pub(super) slab: u64,
    pub(super) offset: usize,
    pub(super) bytes: usize,
    /// Address of the range (the slab's base plus `offset`).
    pub(super) addr: usize,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) slabs: Vec<Slab>,
    next_slab: u64,
    /// Bytes of every slab held, idle or in use.
    pub(super) held: u64,
    /// Bytes carved out as buffers.
    pub(super) in_use: u64,
    pub(super) buffers_in_use: usize,
    /// Bytes being allocated right now, counted against `max_bytes` already.
    pub(super) pending: u64,
    /// Growths waiting for (or about to try) a budget reservation.
    pub(super) budget_blocked: usize,
    pub(super) next_ticket: u64,
    /// Tickets of the checkouts waiting, first come first served.
    pub(super) queue: VecDeque<u64>,
    pub(super) hits: u64,
    pub(super) misses: u64,
    pub(super) grows: u64,
    pub(super) shrinks: u64,
    pub(super) evictions: u64,
    pub(super) waits: u64,
    pub(super) alloc_time: Duration,
}

impl State {
    /// The best fit over every slab: (slab index, extent index).
    pub(super) fn best_fit(&self, bytes: usize) -> Option<(usize, usize)> {
        self.slabs
            .iter()
            .enumerate()
            .filter_map(|(si, slab)| slab.free.best_fit(bytes).map(|(ei, len)| (len, si, ei)))
            .min_by_key(|(len, _, _)| *len)
            .map(|(_, si, ei)| (si, ei))
    }

    /// Carves `bytes` from extent `ei` of slab `si`; counted as in use only
    /// when the plan commits (see `commit`).
    pub(super) fn carve(&mut self, si: usize, ei: usize, bytes: usize) -> Carved {
        let slab = &mut self.slabs[si];
        let offset = slab.free.carve(ei, bytes);
        slab.buffers += 1;
        Carved {
            slab: slab.id,
            offset,
            bytes,
            addr: slab.region.as_ptr() as usize + offset,
        }
    }

    /// Puts an uncommitted carve back (a plan that did not go ahead).
    pub(super) fn uncarve(&mut self, c: &Carved) {
        if let Some(slab) = self.slabs.iter_mut().find(|s| s.id == c.slab) {
            slab.free.give(c.offset, c.bytes);
            slab.buffers -= 1;
        }
    }

    /// Counts carved ranges as buffers in use.
    pub(super) fn commit(&mut self, carved: &[Carved]) {
        self.in_use += carved.iter().map(|c| c.bytes as u64).sum::<u64>();
        self.buffers_in_use += carved.len();
    }

    /// Undoes [`commit`](Self::commit) and the carves themselves: a
    /// checkout that failed after its plan was counted.
    pub(super) fn uncommit(&mut self, carved: &[Carved]) {
        for c in carved {
            self.uncarve(c);
        }
        self.in_use -= carved.iter().map(|c| c.bytes as u64).sum::<u64>();
        self.buffers_in_use -= carved.len();
    }

    /// Takes the idle slabs `take` accepts (visited largest first) off the
    /// books and out of the list.
    pub(super) fn take_idle(&mut self, mut take: impl FnMut(&Slab) -> bool) -> Vec<Slab> {
        self.slabs.sort_by_key(|s| std::cmp::Reverse(s.len()));
        let mut picked = Vec::new();
        let mut kept = Vec::with_capacity(self.slabs.len());
        for slab in self.slabs.drain(..) {
            if slab.idle() && take(&slab) {
                picked.push(slab);
            } else {
                kept.push(slab);
            }
        }
        self.slabs = kept;
        self.held -= picked.iter().map(Slab::len).sum::<u64>();
        picked
    }

    /// Evicts idle slabs, largest first, until they add up to at least
    /// `bytes` (or none is left), to make room for a growth.
    pub(super) fn evict_idle(&mut self, bytes: u64) -> Vec<Slab> {
        let mut freed = 0u64;
        let evicted = self.take_idle(|slab| {
            let take = freed < bytes;
            freed += if take { slab.len() } else { 0 };
            take
        });
        self.evictions += evicted.len() as u64;
        evicted
    }

    /// Puts a new slab on the books, idle; returns its index.
    pub(super) fn admit(
        &mut self,
        region: Region,
        reservation: Reservation,
        took: Duration,
    ) -> usize {
        let len = region.len();
        self.slabs.push(Slab {
            id: self.next_slab,
            region,
            reservation,
            free: FreeList::new(len),
            buffers: 0,
            idle_since: Instant::now(),
        });
        self.next_slab += 1;
        self.held += len as u64;
        self.grows += 1;
        self.alloc_time += took;
        self.slabs.len() - 1
    }

    /// A buffer's range coming back to slab `slab`. Returns the slab, off
    /// the books, when that was its last buffer and `evict_if_idle` (a
    /// growth waits on the budget the slab holds).
    pub(super) fn give_back(
        &mut self,
        slab: u64,
        offset: usize,
        bytes: usize,
        evict_if_idle: bool,
    ) -> Option<Slab> {
        self.in_use -= bytes as u64;
        self.buffers_in_use -= 1;
        let si = self.slabs.iter().position(|s| s.id == slab)?;
        let s = &mut self.slabs[si];
        s.free.give(offset, bytes);
        s.buffers -= 1;
        if !s.idle() {
            return None;
        }
        s.idle_since = Instant::now();
        if !evict_if_idle {
            return None;
        }
        let gone = self.slabs.swap_remove(si);
        self.held -= gone.len();
        self.evictions += 1;
        Some(gone)
    }
}

/// Books over real (heap) slabs, for the tests of the parts that decide
/// on them.
#[cfg(test)]
pub(super) mod testing {
    use super::*;
    use crate::budget::MemoryBudget;
    use crate::pool::host::{HeapAllocator, HostAllocator};

    pub const PAGE: usize = 4096;

    /// Books holding idle heap slabs of these many pages, all reserved
    /// against one budget.
    pub fn books(pages: &[usize]) -> State {
        let budget = MemoryBudget::new(1 << 30);
        let mut st = State::default();
        for &p in pages {
            let region = HeapAllocator.alloc(p * PAGE).unwrap();
            let reservation = budget.reserve("test", region.len() as u64).unwrap();
            st.admit(region, reservation, Duration::ZERO);
        }
        st
    }

    /// Returns slabs taken off the books (and those still on them) to the
    /// heap allocator.
    pub fn free(st: State, taken: Vec<Slab>) {
        for slab in st.slabs.into_iter().chain(taken) {
            // SAFETY: every slab came from the heap allocator, none is used.
            unsafe { HeapAllocator.free(slab.region) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{books, free, PAGE};
    use super::*;

    #[test]
    fn uncommit_undoes_commit_and_carve() {
        let mut st = books(&[4]);
        let (si, ei) = st.best_fit(PAGE).unwrap();
        let a = st.carve(si, ei, PAGE);
        let (si, ei) = st.best_fit(2 * PAGE).unwrap();
        let b = st.carve(si, ei, 2 * PAGE);
        st.commit(&[a, b]);
        assert_eq!((st.in_use, st.buffers_in_use), (3 * PAGE as u64, 2));
        assert!(!st.slabs[0].idle());
        st.uncommit(&[a, b]);
        assert_eq!((st.in_use, st.buffers_in_use), (0, 0));
        assert!(st.slabs[0].idle() && st.slabs[0].free.is_whole());
        free(st, Vec::new());
    }

    #[test]
    fn eviction_takes_idle_slabs_largest_first_until_enough() {
        let mut st = books(&[1, 3, 2, 5]);
        let (si, ei) = st.best_fit(5 * PAGE).unwrap();
        let busy = st.carve(si, ei, 5 * PAGE);
        st.commit(&[busy]);
        let gone = st.evict_idle(4 * PAGE as u64);
        let lens: Vec<u64> = gone.iter().map(Slab::len).collect();
        assert_eq!(lens, [3 * PAGE as u64, 2 * PAGE as u64], "the busy 5 stays");
        assert_eq!((st.evictions, st.held), (2, 6 * PAGE as u64));
        assert!(st.evict_idle(0).is_empty(), "nothing needed, nothing taken");
        free(st, gone);
    }

    #[test]
    fn a_returned_last_buffer_leaves_the_books_only_when_asked() {
        let mut st = books(&[2, 2]);
        let carved: Vec<Carved> = (0..2).map(|si| st.carve(si, 0, PAGE)).collect();
        st.commit(&carved);
        let kept = st.give_back(carved[0].slab, carved[0].offset, PAGE, false);
        assert!(kept.is_none());
        assert_eq!((st.slabs.len(), st.held), (2, 4 * PAGE as u64));
        let gone = st.give_back(carved[1].slab, carved[1].offset, PAGE, true);
        let gone = gone.expect("an idle slab is evicted while growth waits");
        assert!(gone.free.is_whole());
        assert_eq!(
            (st.slabs.len(), st.held, st.in_use, st.evictions),
            (1, 2 * PAGE as u64, 0, 1)
        );
        free(st, vec![gone]);
    }
}
