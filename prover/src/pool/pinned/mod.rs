//! The pool: pins large slabs, carves buffers out of them, keeps the slabs
//! between jobs.
//!
//! Pinning is paid per slab (1 GiB by default), not per buffer: a 32 GiB
//! pool is 32 slabs, not a million regions, so making it is a few dozen
//! allocator calls that run in parallel, and giving it back is as many.
//!
//! Policy, in the order a checkout tries it:
//! 1. **Reuse**, best fit: the smallest free extent of any slab at least as
//!    large as the request (largest requests are placed first when several
//!    are asked for together). Returned buffers coalesce with free
//!    neighbours, so a slab whose buffers all came back is whole again.
//! 2. **Grow**: pin one new slab holding every request that did not fit
//!    (`slab_bytes`, or more for a larger request; less where `max_bytes` or
//!    the budget leave less), after a budget reservation. Idle slabs (no
//!    buffer out) that could not serve the request are released, largest
//!    first, to make room under `max_bytes` or the budget.
//! 3. **Wait** for buffers in use to come back (condition variable, bounded
//!    by the call's timeout). A request larger than `max_bytes` or the whole
//!    budget fails at once.
//!
//! Waiters are served first come, first served (tickets), like the budget,
//! so a job asking for large a/b/c buffers is not starved by small requests.
//! [`PinnedPool::checkout_many`] plans all of a job's buffers in one step
//! under the lock, so a job never holds some buffers while waiting for the
//! rest and two jobs cannot deadlock on each other's halves.
//!
//! Only whole idle slabs ever go back to the system (shrinking, eviction),
//! largest first. Slow calls (pinning, freeing) never run with the lock
//! held, and several slabs are pinned or freed on several threads at once.
//!
//! Layout, in the order a checkout goes through it:
//! - [`limits`]: [`PoolLimits`] in, [`PoolStats`] and [`ShrinkReport`] out.
//! - [`free_list`]: one slab's free extents (best fit, coalescing).
//! - `books`: the slabs and byte counts kept under the lock.
//! - `plan`: deciding a checkout under the lock.
//! - `checkout`: the checkout calls, the waiting line, carrying a plan out.
//! - `grow`: budget reservations and pinning new slabs; preallocation.
//! - `release`: returned buffers, shrinking, freeing slabs.

use parking_lot::{Condvar, Mutex};
use std::sync::Arc;

use crate::budget::MemoryBudget;
use crate::pool::host::HostAllocator;

mod books;
mod checkout;
pub mod free_list;
mod grow;
pub mod limits;
mod plan;
mod release;

pub use limits::{PoolLimits, PoolStats, ShrinkReport, DEFAULT_SLAB_BYTES};

use books::State;

/// Pool of host buffers; cheap to clone (all clones share one pool).
#[derive(Clone)]
pub struct PinnedPool {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PinnedPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedPool")
            .field("stats", &self.stats())
            .finish()
    }
}

/// What every clone of a pool and every buffer out of it share.
pub(crate) struct Inner {
    allocator: Arc<dyn HostAllocator>,
    budget: Arc<MemoryBudget>,
    limits: PoolLimits,
    state: Mutex<State>,
    /// Woken whenever memory may have come free: a buffer returned, a slab
    /// made or released, a waiter leaving the line.
    returned: Condvar,
}

impl PinnedPool {
    pub fn new(
        allocator: Arc<dyn HostAllocator>,
        budget: Arc<MemoryBudget>,
        limits: PoolLimits,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                allocator,
                budget,
                limits: limits.in_whole_pages(),
                state: Mutex::new(State::default()),
                returned: Condvar::new(),
            }),
        }
    }

    pub fn allocator_name(&self) -> &'static str {
        self.inner.allocator.name()
    }

    pub fn page_locked(&self) -> bool {
        self.inner.allocator.page_locked()
    }

    pub fn limits(&self) -> &PoolLimits {
        &self.inner.limits
    }

    pub fn budget(&self) -> &Arc<MemoryBudget> {
        &self.inner.budget
    }

    pub fn stats(&self) -> PoolStats {
        let st = self.inner.state.lock();
        PoolStats {
            allocator: self.inner.allocator.name().to_owned(),
            page_locked: self.inner.allocator.page_locked(),
            bytes_pinned: st.held,
            bytes_in_use: st.in_use,
            bytes_idle: st.held - st.in_use,
            regions: st.slabs.len(),
            regions_in_use: st.slabs.iter().filter(|s| !s.idle()).count(),
            buffers_in_use: st.buffers_in_use,
            slab_bytes: self.inner.limits.slab_bytes,
            max_bytes: self.inner.limits.max_bytes,
            hits: st.hits,
            misses: st.misses,
            grows: st.grows,
            shrinks: st.shrinks,
            evictions: st.evictions,
            waits: st.waits,
            alloc_time_ms: st.alloc_time.as_secs_f64() * 1e3,
        }
    }
}

impl Inner {
    pub(crate) fn page_locked(&self) -> bool {
        self.allocator.page_locked()
    }
}

/// Threads to pin or free `slabs` slabs with: one slab per thread, at most
/// one thread per core.
fn workers_for(slabs: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    slabs.min(cores).max(1)
}

/// A heap-backed pool of at most `max_bytes` under a budget of `budget`,
/// carving slabs of `slab_pages` pages, for the tests of every part.
#[cfg(test)]
pub(crate) fn test_pool(max_bytes: u64, budget: u64, slab_pages: u64) -> PinnedPool {
    use std::time::Duration;
    PinnedPool::new(
        Arc::new(crate::pool::host::HeapAllocator),
        MemoryBudget::new(budget),
        PoolLimits {
            max_bytes,
            slab_bytes: slab_pages * 4096,
            idle_shrink_after: Duration::from_secs(60),
            checkout_timeout: Duration::from_secs(5),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::test_pool as pool;

    #[test]
    fn a_new_pool_holds_nothing_and_reports_its_limits() {
        let p = pool(1 << 20, 1 << 20, 3);
        let s = p.stats();
        assert_eq!(
            (
                s.allocator.as_str(),
                s.page_locked,
                s.bytes_pinned,
                s.regions
            ),
            ("heap", false, 0, 0)
        );
        assert_eq!((s.slab_bytes, s.max_bytes), (3 * 4096, 1 << 20));
        assert_eq!(p.clone().stats(), s, "clones share one pool");
    }
}
