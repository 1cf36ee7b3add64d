//! Handing buffers out: the checkout calls, the first-come-first-served
//! line a checkout waits in until its [`plan`](super::plan) can be made,
//! and carrying the plan out (evict, grow, wrap into [`PinnedBuf`]s).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::books::Carved;
use super::grow::BudgetWait;
use super::plan::{plan, Plan};
use super::{Inner, PinnedPool};
use crate::pool::buf::PinnedBuf;
use crate::pool::error::PoolError;
use crate::pool::pages::{pages_for, pages_for_all};

impl PinnedPool {
    /// One buffer of `bytes`, waiting up to the pool's `checkout_timeout`.
    pub fn checkout(&self, who: &str, bytes: usize) -> Result<PinnedBuf, PoolError> {
        self.checkout_timeout(who, bytes, self.inner.limits.checkout_timeout)
    }

    /// One buffer of `bytes`, waiting up to `timeout`.
    pub fn checkout_timeout(
        &self,
        who: &str,
        bytes: usize,
        timeout: Duration,
    ) -> Result<PinnedBuf, PoolError> {
        let mut bufs = self.checkout_many_timeout(who, &[bytes], timeout)?;
        Ok(bufs.pop().unwrap_or_else(|| unreachable_plan()))
    }

    /// Several buffers at once (a job's a, b, c), all or nothing, waiting up
    /// to the pool's `checkout_timeout`. Buffers come back in request order.
    pub fn checkout_many(&self, who: &str, sizes: &[usize]) -> Result<Vec<PinnedBuf>, PoolError> {
        self.checkout_many_timeout(who, sizes, self.inner.limits.checkout_timeout)
    }

    /// [`checkout_many`](Self::checkout_many) with an explicit timeout; one
    /// too long to have a deadline waits without a bound.
    pub fn checkout_many_timeout(
        &self,
        who: &str,
        sizes: &[usize],
        timeout: Duration,
    ) -> Result<Vec<PinnedBuf>, PoolError> {
        let start = Instant::now();
        let rounded: Vec<u64> = sizes.iter().map(|s| pages_for(*s)).collect();
        let total = pages_for_all(sizes);
        self.inner.check_never_fits(who, total)?;
        let deadline = start.checked_add(timeout);

        let plan = self
            .inner
            .plan_or_wait(who, &rounded, total, start, deadline)?;
        self.inner
            .execute(who, sizes, &rounded, plan, start, deadline)
    }
}

/// The plan carves exactly one range per request; reaching this would be a
/// bug in `plan`/`execute`, never an input error.
fn unreachable_plan() -> ! {
    unreachable!("pool plan placed fewer buffers than were requested")
}

impl Inner {
    /// Fails at once for a request no waiting can serve: more than the
    /// pool may hold, or more than the whole budget.
    pub(super) fn check_never_fits(&self, who: &str, total: u64) -> Result<(), PoolError> {
        if total > self.limits.max_bytes {
            return Err(PoolError::ExceedsLimit {
                who: who.to_owned(),
                requested: total,
                max_bytes: self.limits.max_bytes,
            });
        }
        Ok(self.budget.check_fits(who, total)?)
    }

    /// Takes a ticket and waits until this request is first in line and can
    /// be planned (`deadline` none: without a bound).
    fn plan_or_wait(
        &self,
        who: &str,
        sizes: &[u64],
        total: u64,
        start: Instant,
        deadline: Option<Instant>,
    ) -> Result<Plan, PoolError> {
        let mut st = self.state.lock();
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        st.queue.push_back(ticket);
        let mut waited = false;
        loop {
            if st.queue.front() == Some(&ticket) {
                if let Some(plan) = plan(&mut st, sizes, &self.limits, &self.budget) {
                    st.queue.pop_front();
                    drop(st);
                    // The next in line may be servable too.
                    self.returned.notify_all();
                    if waited {
                        tracing::info!(
                            who,
                            bytes = total,
                            waited_ms = start.elapsed().as_secs_f64() * 1e3,
                            "pinned buffers granted after waiting"
                        );
                    }
                    return Ok(plan);
                }
            }
            if !waited {
                waited = true;
                st.waits += 1;
                tracing::debug!(
                    who,
                    bytes = total,
                    in_use = st.in_use,
                    "waiting for pinned buffers"
                );
            }
            let timed_out = match deadline {
                Some(d) => self.returned.wait_until(&mut st, d).timed_out(),
                None => {
                    self.returned.wait(&mut st);
                    false
                }
            };
            if timed_out {
                if st.queue.front() == Some(&ticket) {
                    if let Some(plan) = plan(&mut st, sizes, &self.limits, &self.budget) {
                        st.queue.pop_front();
                        drop(st);
                        self.returned.notify_all();
                        return Ok(plan);
                    }
                }
                st.queue.retain(|t| *t != ticket);
                let in_use = st.in_use;
                drop(st);
                self.returned.notify_all();
                return Err(PoolError::Timeout {
                    who: who.to_owned(),
                    requested: total,
                    waited: start.elapsed(),
                    in_use,
                    max_bytes: self.limits.max_bytes,
                });
            }
        }
    }

    /// Carries out a plan without the lock: frees evicted slabs, pins the
    /// new one, and wraps everything into buffers; on failure puts every
    /// carved range back.
    fn execute(
        self: &Arc<Self>,
        who: &str,
        sizes: &[usize],
        rounded: &[u64],
        plan: Plan,
        start: Instant,
        deadline: Option<Instant>,
    ) -> Result<Vec<PinnedBuf>, PoolError> {
        let Plan {
            mut placed,
            grow,
            evicted,
        } = plan;
        if !evicted.is_empty() {
            let bytes: u64 = evicted.iter().map(|s| s.len()).sum();
            tracing::info!(
                who,
                regions = evicted.len(),
                bytes,
                "pool released idle slabs to make room"
            );
            self.free_all(evicted);
        }
        // A panic in the allocator (a driver binding that panics) must not
        // leave the growth counted as pending and the carved ranges as in
        // use: every later checkout would wait for them for ever. The books
        // are put right first, then the panic goes on to the caller.
        let grown = if grow > 0 {
            let pin = || self.pin_slab(who, grow, BudgetWait::Until(deadline));
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(pin)) {
                Ok(r) => Some(r),
                Err(panic) => {
                    let mut st = self.state.lock();
                    st.pending -= grow;
                    let carved: Vec<Carved> = placed.iter().flatten().copied().collect();
                    st.uncommit(&carved);
                    drop(st);
                    self.returned.notify_all();
                    std::panic::resume_unwind(panic);
                }
            }
        } else {
            None
        };

        let mut st = self.state.lock();
        st.pending -= grow;
        match grown {
            None => {}
            Some(Ok((region, reservation, took))) => {
                let si = st.admit(region, reservation, took);
                let mut fresh = Vec::new();
                for (slot, &bytes) in placed.iter_mut().zip(rounded) {
                    if slot.is_none() {
                        // The slab was sized for all of them, and nobody
                        // else has seen it yet: the first extent fits.
                        let c = st.carve(si, 0, bytes as usize);
                        fresh.push(c);
                        *slot = Some(c);
                    }
                }
                st.commit(&fresh);
                let held = st.held;
                tracing::info!(
                    who,
                    allocator = self.allocator.name(),
                    bytes = grow,
                    held,
                    alloc_ms = took.as_secs_f64() * 1e3,
                    since_request_ms = start.elapsed().as_secs_f64() * 1e3,
                    "pinned pool grew"
                );
            }
            Some(Err(err)) => {
                let carved: Vec<Carved> = placed.iter().flatten().copied().collect();
                st.uncommit(&carved);
                drop(st);
                self.returned.notify_all();
                return Err(err);
            }
        }
        drop(st);
        if grow > 0 {
            // Checkouts that found no room while this growth was pending
            // wait for a change, and the rest of the new slab is one: without
            // this they would sleep until a buffer comes back or their
            // deadline passes.
            self.returned.notify_all();
        }
        let bufs: Vec<PinnedBuf> = placed
            .into_iter()
            .zip(sizes)
            .map(|(slot, &len)| {
                let c = slot.unwrap_or_else(|| unreachable_plan());
                PinnedBuf::new(
                    Arc::clone(self),
                    c.addr as *mut u8,
                    c.slab,
                    c.offset,
                    c.bytes,
                    len,
                    who,
                )
            })
            .collect();
        tracing::debug!(
            who,
            buffers = bufs.len(),
            bytes = rounded.iter().sum::<u64>(),
            grown = grow,
            "pinned buffers checked out"
        );
        Ok(bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_pool as pool;
    use crate::budget::BudgetError;
    use crate::pool::error::PoolError;

    const PAGE: usize = 4096;

    #[test]
    fn buffers_come_back_in_request_order_with_requested_lengths() {
        let p = pool(1 << 20, 1 << 20, 16);
        let bufs = p.checkout_many("job", &[100, 3 * PAGE, PAGE]).unwrap();
        let lens: Vec<usize> = bufs.iter().map(|b| b.len()).collect();
        assert_eq!(lens, [100, 3 * PAGE, PAGE]);
        let caps: Vec<usize> = bufs.iter().map(|b| b.capacity()).collect();
        assert_eq!(caps, [PAGE, 3 * PAGE, PAGE]);
        let s = p.stats();
        assert_eq!(
            (s.bytes_in_use, s.bytes_pinned, s.regions, s.buffers_in_use),
            (5 * PAGE as u64, 16 * PAGE as u64, 1, 3),
            "one slab holds all three"
        );
        drop(bufs);
        let s = p.stats();
        assert_eq!(
            (s.bytes_in_use, s.bytes_idle, s.regions_in_use),
            (0, 16 * PAGE as u64, 0)
        );
        assert_eq!(p.budget().stats().reserved, 16 * PAGE as u64);
    }

    #[test]
    fn absurd_sizes_fail_cleanly() {
        let p = pool(u64::MAX, 1 << 20, 16);
        assert!(matches!(
            p.checkout("huge", usize::MAX),
            Err(PoolError::Budget(BudgetError::ExceedsBudget {
                requested: u64::MAX,
                ..
            }))
        ));
        assert!(p.checkout_many("two", &[usize::MAX / 2 + 1; 2]).is_err());
        assert_eq!(p.stats().bytes_pinned, 0);
    }

    #[test]
    fn a_failed_growth_puts_the_carved_buffers_back() {
        // Three pages are held by someone else for good; the page fits the
        // idle slab, the two pages need a growth the budget cannot grant.
        let p = pool(u64::MAX, 4 * PAGE as u64, 1);
        drop(p.checkout("warm", PAGE).unwrap());
        let _other = p.budget().reserve("params", 3 * PAGE as u64).unwrap();
        let err = p
            .checkout_many_timeout("job", &[PAGE, 2 * PAGE], std::time::Duration::ZERO)
            .unwrap_err();
        assert!(matches!(err, PoolError::Budget(_)), "{err}");
        let s = p.stats();
        assert_eq!(
            (s.bytes_in_use, s.buffers_in_use, s.regions_in_use),
            (0, 0, 0)
        );
    }
}
