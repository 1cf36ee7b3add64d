//! Giving memory back: a buffer's range returning to its slab, idle slabs
//! released by age or to a target size, and freeing slabs on several
//! threads (unpinning is as slow per byte as pinning). Only whole idle
//! slabs ever go back to the system, largest first.

use parking_lot::Mutex;
use std::time::Instant;

use super::books::{Slab, State};
use super::limits::ShrinkReport;
use super::{workers_for, Inner, PinnedPool};

impl PinnedPool {
    /// Releases slabs that have been idle at least `idle_shrink_after` at
    /// `now`, largest first. The daemon calls this periodically; nothing
    /// runs in the background.
    pub fn shrink_idle(&self, now: Instant) -> ShrinkReport {
        let after = self.inner.limits.idle_shrink_after;
        self.inner.shrink("idle", |st| {
            st.take_idle(|slab| now.saturating_duration_since(slab.idle_since) >= after)
        })
    }

    /// Releases idle slabs, largest first, until the pool holds at most
    /// `target` bytes (or no idle slab is left). `shrink_to(0)` releases
    /// every idle slab, e.g. at shutdown, on several threads.
    pub fn shrink_to(&self, target: u64) -> ShrinkReport {
        self.inner.shrink("target", |st| {
            let mut held = st.held;
            st.take_idle(|slab| {
                if held <= target {
                    return false;
                }
                held -= slab.len();
                true
            })
        })
    }
}

impl Inner {
    fn shrink(&self, why: &str, pick: impl FnOnce(&mut State) -> Vec<Slab>) -> ShrinkReport {
        let mut st = self.state.lock();
        let picked = pick(&mut st);
        st.shrinks += picked.len() as u64;
        let held = st.held;
        drop(st);
        let report = ShrinkReport {
            regions: picked.len(),
            bytes: picked.iter().map(Slab::len).sum(),
        };
        if report.regions > 0 {
            let t = Instant::now();
            self.free_all(picked);
            tracing::info!(
                why,
                regions = report.regions,
                bytes = report.bytes,
                held,
                ms = t.elapsed().as_secs_f64() * 1e3,
                "pinned pool shrank"
            );
            // Room under max_bytes may let a waiter grow now.
            self.returned.notify_all();
        }
        report
    }

    /// Frees slabs (each releases its reservation after), several at once
    /// on several threads: unpinning is as slow per byte as pinning.
    pub(super) fn free_all(&self, slabs: Vec<Slab>) {
        let free_one = |slab: Slab| {
            // SAFETY: every slab came from this allocator, and one off the
            // books has no buffer out (only idle slabs are taken).
            unsafe { self.allocator.free(slab.region) };
            drop(slab.reservation);
        };
        let threads = workers_for(slabs.len());
        if threads == 1 {
            slabs.into_iter().for_each(free_one);
            return;
        }
        let queue = Mutex::new(slabs);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    while let Some(slab) = {
                        let next = queue.lock().pop();
                        next
                    } {
                        free_one(slab);
                    }
                });
            }
        });
    }

    /// Called by a dropped [`PinnedBuf`](crate::pool::PinnedBuf).
    pub(crate) fn give_back(&self, slab: u64, offset: usize, bytes: usize, who: &str) {
        let mut st = self.state.lock();
        // A growth waits on the budget, which an idle slab holds.
        let evict_if_idle = st.budget_blocked > 0;
        let release = st.give_back(slab, offset, bytes, evict_if_idle);
        tracing::debug!(who, bytes, in_use = st.in_use, "pinned buffer returned");
        drop(st);
        if let Some(gone) = release {
            self.free_all(vec![gone]);
        }
        self.returned.notify_all();
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Buffers hold the pool alive, so every slab is idle by now.
        let slabs = std::mem::take(&mut self.state.get_mut().slabs);
        self.free_all(slabs);
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_pool as pool;
    use std::time::{Duration, Instant};

    const PAGE: usize = 4096;

    #[test]
    fn shrinking_to_a_target_releases_idle_slabs_largest_first() {
        let p = pool(1 << 20, 1 << 20, 1);
        let bufs = p.checkout_many("job", &[PAGE, 2 * PAGE, 3 * PAGE]).unwrap();
        let busy = p.checkout("busy", 4 * PAGE).unwrap();
        assert_eq!(p.stats().regions, 2, "one slab for the three, one for busy");
        drop(bufs);
        let report = p.shrink_to(0);
        assert_eq!((report.regions, report.bytes), (1, 6 * PAGE as u64));
        let s = p.stats();
        assert_eq!(
            (s.regions, s.bytes_pinned, s.shrinks),
            (1, 4 * PAGE as u64, 1)
        );
        assert_eq!(
            p.budget().stats().reserved,
            4 * PAGE as u64,
            "budget released"
        );
        drop(busy);
        assert_eq!(
            p.shrink_to(4 * PAGE as u64).regions,
            0,
            "already at the target"
        );
    }

    #[test]
    fn only_slabs_idle_long_enough_are_shrunk() {
        let p = pool(1 << 20, 1 << 20, 4);
        drop(p.checkout("job", PAGE).unwrap());
        let now = Instant::now();
        assert_eq!(p.shrink_idle(now).regions, 0, "idle for less than a minute");
        let later = now + Duration::from_secs(61);
        let report = p.shrink_idle(later);
        assert_eq!((report.regions, report.bytes), (1, 4 * PAGE as u64));
        assert_eq!(p.stats().bytes_pinned, 0);
    }
}
