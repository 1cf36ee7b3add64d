//! Growing the pool: the budget reservation for a new slab (releasing idle
//! slabs when the budget is short), pinning it, and preallocation, which
//! pins many slabs on many threads before the first job.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::{workers_for, Inner, PinnedPool};
use crate::budget::{BudgetError, Reservation};
use crate::pool::error::PoolError;
use crate::pool::host::Region;
use crate::pool::pages::pages_for;

/// How long a growth may wait for its budget reservation.
#[derive(Debug, Clone, Copy)]
pub(super) enum BudgetWait {
    /// Take what is free now or fail: preallocation never queues ahead of
    /// jobs in the budget's line.
    Never,
    /// A checkout's: until its deadline, or without a bound where it has
    /// none (a timeout too long to be a deadline).
    Until(Option<Instant>),
}

impl PinnedPool {
    /// Pins `bytes` (rounded up to a page) as idle slabs up front, so the
    /// first jobs do not pay for pinning. Slabs are pinned on several
    /// threads and each is usable as soon as it is made. Returns the time
    /// it took.
    pub fn preallocate(&self, bytes: u64) -> Result<Duration, PoolError> {
        self.preallocate_cancellable(bytes, &AtomicBool::new(false))
    }

    /// [`preallocate`](Self::preallocate) that stops starting new slabs once
    /// `cancel` is set (slabs already being pinned are finished and kept).
    pub fn preallocate_cancellable(
        &self,
        bytes: u64,
        cancel: &AtomicBool,
    ) -> Result<Duration, PoolError> {
        let start = Instant::now();
        let total = pages_for(usize::try_from(bytes).unwrap_or(usize::MAX));
        if bytes == 0 {
            return Ok(Duration::ZERO);
        }
        self.inner.check_never_fits("preallocate", total)?;
        {
            let mut st = self.inner.state.lock();
            if st.held + st.pending + total > self.inner.limits.max_bytes {
                return Err(PoolError::ExceedsLimit {
                    who: "preallocate".into(),
                    requested: st.held + st.pending + total,
                    max_bytes: self.inner.limits.max_bytes,
                });
            }
            st.pending += total;
        }
        let slab = self.inner.limits.slab_bytes;
        let sizes: Vec<u64> = (0..total.div_ceil(slab))
            .map(|i| slab.min(total - i * slab))
            .collect();
        let next = AtomicUsize::new(0);
        let made = AtomicU64::new(0);
        let failed: Mutex<Option<PoolError>> = Mutex::new(None);
        let stop = || cancel.load(Ordering::Relaxed) || failed.lock().is_some();
        let worker = || {
            while !stop() {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&size) = sizes.get(i) else { break };
                match self.inner.pin_slab("preallocate", size, BudgetWait::Never) {
                    Ok((region, reservation, took)) => {
                        let mut st = self.inner.state.lock();
                        st.pending -= size;
                        st.admit(region, reservation, took);
                        drop(st);
                        made.fetch_add(size, Ordering::Relaxed);
                        // A checkout waiting for room may fit now.
                        self.inner.returned.notify_all();
                    }
                    Err(e) => {
                        failed.lock().get_or_insert(e);
                    }
                }
            }
        };
        let threads = workers_for(sizes.len());
        if threads == 1 {
            worker();
        } else {
            std::thread::scope(|s| {
                for _ in 0..threads {
                    s.spawn(worker);
                }
            });
        }
        let made = made.into_inner();
        self.inner.state.lock().pending -= total - made;
        self.inner.returned.notify_all();
        let took = start.elapsed();
        tracing::info!(
            allocator = self.inner.allocator.name(),
            bytes = made,
            slabs = sizes.len(),
            threads,
            ms = took.as_secs_f64() * 1e3,
            "pinned pool allocated {made} bytes in {:.0} ms",
            took.as_secs_f64() * 1e3
        );
        match failed.into_inner() {
            Some(e) => Err(e),
            None => Ok(took),
        }
    }
}

impl Inner {
    /// Reserves budget for and pins one slab of `size` bytes; the caller
    /// admits it.
    pub(super) fn pin_slab(
        &self,
        who: &str,
        size: u64,
        wait: BudgetWait,
    ) -> Result<(Region, Reservation, Duration), PoolError> {
        let label = format!("pool:{who}");
        let mut reservation = match wait {
            BudgetWait::Until(deadline) => self.reserve_for_growth(&label, size, deadline)?,
            BudgetWait::Never => self.budget.try_reserve(&label, size)?,
        };
        let bytes = usize::try_from(size).map_err(|_| PoolError::TooLarge {
            allocator: self.allocator.name(),
            bytes: size,
            why: "the size does not fit this platform's address space",
        })?;
        let t = Instant::now();
        let region = self.allocator.alloc(bytes)?;
        let took = t.elapsed();
        if region.len() as u64 > size {
            // The allocator rounded up further than the pool: account for it.
            match self.budget.try_reserve(&label, region.len() as u64 - size) {
                Ok(extra) => reservation.merge(extra),
                Err(e) => {
                    // SAFETY: just made by this allocator, never handed out.
                    unsafe { self.allocator.free(region) };
                    return Err(e.into());
                }
            }
        }
        Ok((region, reservation, took))
    }

    /// The budget reservation for a new slab, waiting until `deadline`
    /// (none: without a bound). When the budget is short, slabs idle in the
    /// pool hold part of it: they are released first, and while this
    /// waits, slabs whose last buffer comes back are released instead of
    /// kept (see `give_back`), since only the budget can wake this wait.
    fn reserve_for_growth(
        &self,
        label: &str,
        size: u64,
        deadline: Option<Instant>,
    ) -> Result<Reservation, BudgetError> {
        // Counted before trying, so no slab can turn idle and stay between a
        // failed try and the wait.
        self.state.lock().budget_blocked += 1;
        let result = match self.budget.try_reserve(label, size) {
            Ok(r) => Ok(r),
            Err(_) => {
                let short = size.saturating_sub(self.budget.available());
                let evicted = self.state.lock().evict_idle(short);
                self.free_all(evicted);
                match deadline {
                    Some(d) => self.budget.reserve_timeout(
                        label,
                        size,
                        d.saturating_duration_since(Instant::now()),
                    ),
                    None => self.budget.reserve(label, size),
                }
            }
        };
        self.state.lock().budget_blocked -= 1;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_pool as pool;
    use super::*;

    const PAGE: usize = 4096;

    /// Waits (bounded) until the checkout on `waiter` queues on the pool's
    /// budget; fails at once if it ended instead.
    fn until_the_budget_has_a_waiter<T>(p: &PinnedPool, waiter: &std::thread::JoinHandle<T>) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while p.budget().stats().waiters == 0 {
            assert!(
                !waiter.is_finished(),
                "the checkout ended without waiting on the budget"
            );
            assert!(
                Instant::now() < deadline,
                "growth never waited on the budget"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn growth_blocked_on_the_budget_gets_the_memory_of_a_returned_slab() {
        // The budget, not max_bytes, binds; the pool itself holds all of it.
        let p = pool(u64::MAX, 4 * PAGE as u64, 256);
        let all = p.checkout("first", 4 * PAGE).unwrap();
        assert_eq!(
            p.stats().bytes_pinned,
            4 * PAGE as u64,
            "slab cut to the budget"
        );
        let p2 = p.clone();
        let waiter = std::thread::spawn(move || {
            p2.checkout_timeout("second", 5 * PAGE / 2, Duration::from_secs(20))
                .map(|b| b.capacity())
        });
        until_the_budget_has_a_waiter(&p, &waiter);
        drop(all);
        assert_eq!(waiter.join().unwrap().unwrap(), 3 * PAGE);
        let s = p.stats();
        assert_eq!(
            (s.regions, s.bytes_pinned, s.evictions),
            (1, 3 * PAGE as u64, 1)
        );
        assert_eq!(p.budget().stats().reserved, 3 * PAGE as u64);
    }

    /// Regression: a checkout whose timeout is too long for a deadline
    /// waited without a bound for buffers, but took the budget for a growth
    /// only if it was free at once, failing with `WouldBlock` instead of
    /// waiting like any other checkout.
    #[test]
    fn a_checkout_without_a_deadline_waits_for_the_budget() {
        let p = pool(u64::MAX, 4 * PAGE as u64, 4);
        let other = p.budget().reserve("params", 4 * PAGE as u64).unwrap();
        let p2 = p.clone();
        let waiter = std::thread::spawn(move || {
            p2.checkout_timeout("forever", PAGE, Duration::MAX)
                .map(|b| b.capacity())
        });
        until_the_budget_has_a_waiter(&p, &waiter);
        drop(other);
        assert_eq!(waiter.join().unwrap().unwrap(), PAGE);
    }

    #[test]
    fn preallocation_is_whole_slabs_and_serves_checkouts_without_growing() {
        let p = pool(1 << 20, 1 << 20, 4);
        p.preallocate(10 * PAGE as u64).unwrap();
        let s = p.stats();
        assert_eq!(
            (s.grows, s.regions, s.bytes_pinned),
            (3, 3, 10 * PAGE as u64)
        );
        let b = p.checkout_many("job", &[PAGE, 2 * PAGE, 4 * PAGE]).unwrap();
        let s = p.stats();
        assert_eq!((s.grows, s.hits, s.misses), (3, 3, 0));
        assert_eq!(b[2].capacity(), 4 * PAGE);
        assert!(matches!(
            p.preallocate(1 << 20),
            Err(PoolError::ExceedsLimit { .. })
        ));
        let cancel = AtomicBool::new(true);
        p.preallocate_cancellable(8 * PAGE as u64, &cancel).unwrap();
        let after = p.stats();
        assert_eq!(
            (after.regions, after.bytes_pinned),
            (3, 10 * PAGE as u64),
            "a cancelled preallocation pins nothing more"
        );
        drop(b);
    }

    #[test]
    fn preallocation_does_not_queue_for_the_budget() {
        let p = pool(u64::MAX, 4 * PAGE as u64, 1);
        let _other = p.budget().reserve("params", 3 * PAGE as u64).unwrap();
        let err = p.preallocate(2 * PAGE as u64).unwrap_err();
        assert!(
            matches!(err, PoolError::Budget(BudgetError::WouldBlock { .. })),
            "{err}"
        );
        let s = p.stats();
        assert_eq!(
            (s.regions, s.bytes_pinned),
            (1, PAGE as u64),
            "the slab that fitted stays"
        );
    }
}
