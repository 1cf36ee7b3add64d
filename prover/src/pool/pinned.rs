//! The pool: keeps host regions between jobs and hands them out again.
//!
//! Policy, in the order a checkout tries it:
//! 1. **Reuse**, best fit: the smallest idle region at least as large as the
//!    request (largest requests are matched first when several are asked for
//!    together).
//! 2. **Grow**: allocate a new region (after a budget reservation) while the
//!    pool stays within `max_bytes`; idle regions that cannot serve the
//!    request are released, largest first, to make room under `max_bytes`
//!    or the budget.
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
//! Slow calls (allocating, freeing) never run with the lock held.

use parking_lot::{Condvar, Mutex};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::alloc::{page_size, HostAllocator, Region};
use super::buf::PinnedBuf;
use super::PoolError;
use crate::budget::{BudgetError, MemoryBudget, Reservation};

/// Bounds of one pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolLimits {
    /// Most bytes the pool holds, idle and in use together.
    pub max_bytes: u64,
    /// Idle regions older than this are released by
    /// [`PinnedPool::shrink_idle`].
    pub idle_shrink_after: Duration,
    /// How long [`PinnedPool::checkout`], [`PinnedPool::checkout_many`] and
    /// [`PinnedPool::preallocate`] wait for memory before failing.
    pub checkout_timeout: Duration,
}

impl Default for PoolLimits {
    fn default() -> Self {
        Self {
            max_bytes: u64::MAX,
            idle_shrink_after: Duration::from_secs(600),
            checkout_timeout: Duration::from_secs(120),
        }
    }
}

/// A snapshot of the pool, for logs, the API and metrics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolStats {
    pub allocator: String,
    pub page_locked: bool,
    /// Bytes of all regions the pool holds (idle and in use).
    pub bytes_pinned: u64,
    pub bytes_in_use: u64,
    pub bytes_idle: u64,
    pub regions: usize,
    pub regions_in_use: usize,
    pub max_bytes: u64,
    /// Buffers served from an idle region.
    pub hits: u64,
    /// Buffers that needed a new region.
    pub misses: u64,
    /// Regions allocated (by checkouts and `preallocate`).
    pub grows: u64,
    /// Idle regions released by `shrink_idle` / `shrink_to`.
    pub shrinks: u64,
    /// Idle regions released to make room for a larger request.
    pub evictions: u64,
    /// Checkouts that had to wait for buffers to come back.
    pub waits: u64,
    /// Total time spent in the allocator's `alloc`.
    pub alloc_time_ms: f64,
}

/// What a shrink released.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShrinkReport {
    pub regions: usize,
    pub bytes: u64,
}

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

pub(crate) struct Inner {
    allocator: Arc<dyn HostAllocator>,
    budget: Arc<MemoryBudget>,
    limits: PoolLimits,
    page: usize,
    state: Mutex<State>,
    returned: Condvar,
}

struct Idle {
    region: Region,
    reservation: Reservation,
    since: Instant,
}

#[derive(Default)]
struct State {
    idle: Vec<Idle>,
    /// Bytes of every region held, idle or in use.
    held: u64,
    in_use: u64,
    regions: usize,
    regions_in_use: usize,
    /// Bytes being allocated right now, counted against `max_bytes` already.
    pending: u64,
    /// Growths waiting for (or about to try) a budget reservation.
    budget_blocked: usize,
    next_ticket: u64,
    queue: VecDeque<u64>,
    hits: u64,
    misses: u64,
    grows: u64,
    shrinks: u64,
    evictions: u64,
    waits: u64,
    alloc_time: Duration,
}

impl State {
    /// Takes evicted regions (already out of `idle`) off the books.
    fn forget(&mut self, evicted: &[Idle]) {
        self.held -= evicted.iter().map(|i| i.region.len() as u64).sum::<u64>();
        self.regions -= evicted.len();
        self.evictions += evicted.len() as u64;
    }
}

/// A checkout decided under the lock, carried out after it.
struct Plan {
    /// Per request, in request order: an idle region to reuse, or none (grow).
    reuse: Vec<Option<Idle>>,
    grow_bytes: u64,
    evicted: Vec<Idle>,
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
                limits,
                page: page_size(),
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
            regions: st.regions,
            regions_in_use: st.regions_in_use,
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

    /// Allocates idle regions of the given sizes up front (at daemon start),
    /// so the first jobs do not pay for pinning. Returns the time it took.
    pub fn preallocate(&self, sizes: &[usize]) -> Result<Duration, PoolError> {
        let start = Instant::now();
        let sizes: Vec<u64> = sizes.iter().map(|s| self.inner.round(*s)).collect();
        let total = saturating_sum(&sizes);
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
        let result = self
            .inner
            .grow("preallocate", &sizes, start, self.deadline(None));
        let mut st = self.inner.state.lock();
        st.pending -= total;
        let outcome = match result {
            Ok(new) => {
                let now = Instant::now();
                for (region, reservation) in new {
                    st.idle.push(Idle {
                        region,
                        reservation,
                        since: now,
                    });
                }
                let took = start.elapsed();
                tracing::info!(
                    allocator = self.inner.allocator.name(),
                    bytes = total,
                    regions = sizes.len(),
                    ms = took.as_secs_f64() * 1e3,
                    "pinned pool allocated {total} bytes in {:.0} ms",
                    took.as_secs_f64() * 1e3
                );
                Ok(took)
            }
            Err((made, err)) => {
                let now = Instant::now();
                for (region, reservation) in made {
                    st.idle.push(Idle {
                        region,
                        reservation,
                        since: now,
                    });
                }
                Err(err)
            }
        };
        drop(st);
        self.inner.returned.notify_all();
        outcome
    }

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
        bufs.pop().ok_or_else(|| PoolError::Alloc {
            allocator: self.inner.allocator.name(),
            bytes,
            reason: "checkout produced no buffer".into(),
        })
    }

    /// Several buffers at once (a job's a, b, c), all or nothing, waiting up
    /// to the pool's `checkout_timeout`. Buffers come back in request order.
    pub fn checkout_many(&self, who: &str, sizes: &[usize]) -> Result<Vec<PinnedBuf>, PoolError> {
        self.checkout_many_timeout(who, sizes, self.inner.limits.checkout_timeout)
    }

    /// [`checkout_many`](Self::checkout_many) with an explicit timeout.
    pub fn checkout_many_timeout(
        &self,
        who: &str,
        sizes: &[usize],
        timeout: Duration,
    ) -> Result<Vec<PinnedBuf>, PoolError> {
        let start = Instant::now();
        let rounded: Vec<u64> = sizes.iter().map(|s| self.inner.round(*s)).collect();
        let total = saturating_sum(&rounded);
        self.inner.check_never_fits(who, total)?;
        let deadline = self.deadline(Some(timeout));

        let plan = self
            .inner
            .plan_or_wait(who, &rounded, total, start, deadline)?;
        self.inner
            .execute(who, sizes, &rounded, plan, start, deadline)
    }

    /// Releases idle regions that have been idle at least
    /// `idle_shrink_after` at `now`, largest first. The daemon calls this
    /// periodically; nothing runs in the background.
    pub fn shrink_idle(&self, now: Instant) -> ShrinkReport {
        let after = self.inner.limits.idle_shrink_after;
        self.inner.shrink("idle", |st| {
            pick_largest_first(&mut st.idle, |idle| {
                now.saturating_duration_since(idle.since) >= after
            })
        })
    }

    /// Releases idle regions, largest first, until the pool holds at most
    /// `target` bytes (or nothing idle is left). `shrink_to(0)` releases
    /// every idle region, e.g. at shutdown.
    pub fn shrink_to(&self, target: u64) -> ShrinkReport {
        self.inner.shrink("target", |st| {
            let mut held = st.held;
            pick_largest_first(&mut st.idle, |idle| {
                if held <= target {
                    return false;
                }
                held -= idle.region.len() as u64;
                true
            })
        })
    }

    fn deadline(&self, timeout: Option<Duration>) -> Option<Instant> {
        let timeout = timeout.unwrap_or(self.inner.limits.checkout_timeout);
        Instant::now().checked_add(timeout)
    }
}

fn saturating_sum(sizes: &[u64]) -> u64 {
    sizes.iter().fold(0u64, |a, b| a.saturating_add(*b))
}

/// Removes the idle regions `keep_going` accepts, visiting (and returning)
/// them largest first.
fn pick_largest_first(idle: &mut Vec<Idle>, mut take: impl FnMut(&Idle) -> bool) -> Vec<Idle> {
    idle.sort_by_key(|i| std::cmp::Reverse(i.region.len()));
    let mut picked = Vec::new();
    let mut kept = Vec::with_capacity(idle.len());
    for region in idle.drain(..) {
        if take(&region) {
            picked.push(region);
        } else {
            kept.push(region);
        }
    }
    *idle = kept;
    picked
}

impl Inner {
    /// Whole pages; a size that cannot be rounded saturates, so it fails
    /// the "can never fit" check instead of overflowing.
    fn round(&self, bytes: usize) -> u64 {
        bytes
            .max(1)
            .checked_next_multiple_of(self.page)
            .map_or(u64::MAX, |b| b as u64)
    }

    fn check_never_fits(&self, who: &str, total: u64) -> Result<(), PoolError> {
        if total > self.limits.max_bytes {
            return Err(PoolError::ExceedsLimit {
                who: who.to_owned(),
                requested: total,
                max_bytes: self.limits.max_bytes,
            });
        }
        if total > self.budget.total() {
            return Err(BudgetError::ExceedsBudget {
                who: who.to_owned(),
                requested: total,
                budget: self.budget.total(),
            }
            .into());
        }
        Ok(())
    }

    /// Takes a ticket and waits until this request is first in line and can
    /// be planned.
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
                if let Some(plan) = self.plan(&mut st, sizes) {
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
                    if let Some(plan) = self.plan(&mut st, sizes) {
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

    /// Decides how to serve `sizes` now, or `None` if it must wait. On
    /// success the chosen and evicted regions are already out of the idle
    /// list and the growth is counted as pending.
    fn plan(&self, st: &mut State, sizes: &[u64]) -> Option<Plan> {
        if let Some(plan) = self.plan_with(st, sizes, true) {
            return Some(plan);
        }
        // Reusing some idle regions can leave too little room to grow the
        // rest (idle [4 pages], max 4, request [1, 3]). When no buffer can
        // come back to change that, start over from scratch instead of
        // waiting for nothing: the request fits `max_bytes` (checked).
        if st.in_use == 0 && st.pending == 0 {
            return self.plan_with(st, sizes, false);
        }
        None
    }

    fn plan_with(&self, st: &mut State, sizes: &[u64], reuse_idle: bool) -> Option<Plan> {
        st.idle.sort_by_key(|i| i.region.len());
        let mut chosen: Vec<Option<usize>> = vec![None; sizes.len()];
        let mut used = vec![false; st.idle.len()];
        let mut order: Vec<usize> = (0..sizes.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(sizes[i]));
        for &req in order.iter().filter(|_| reuse_idle) {
            // Idle is sorted ascending: the first adequate unused one is the best fit.
            let fit = st
                .idle
                .iter()
                .enumerate()
                .find(|(j, idle)| !used[*j] && idle.region.len() as u64 >= sizes[req])
                .map(|(j, _)| j);
            if let Some(j) = fit {
                used[j] = true;
                chosen[req] = Some(j);
            }
        }
        let grow_bytes: u64 = (0..sizes.len())
            .filter(|&i| chosen[i].is_none())
            .map(|i| sizes[i])
            .sum();

        let mut evict: Vec<usize> = Vec::new();
        if grow_bytes > 0 {
            let over_max =
                (st.held + st.pending + grow_bytes).saturating_sub(self.limits.max_bytes);
            let spare: Vec<usize> = (0..st.idle.len()).rev().filter(|j| !used[*j]).collect();
            let spare_bytes: u64 = spare.iter().map(|&j| st.idle[j].region.len() as u64).sum();
            if spare_bytes < over_max {
                return None; // only buffers in use coming back can make room
            }
            // Idle regions hold budget too: release them if the budget is
            // short, rather than wait on memory the pool itself sits on.
            let short = grow_bytes.saturating_sub(self.budget.available());
            let to_free = over_max.max(short);
            let mut freed = 0u64;
            for j in spare {
                if freed >= to_free {
                    break;
                }
                freed += st.idle[j].region.len() as u64;
                evict.push(j);
            }
        }

        // Remove by descending index so swap_remove never moves an index still to come.
        let mut remove: Vec<usize> = chosen
            .iter()
            .flatten()
            .copied()
            .chain(evict.iter().copied())
            .collect();
        remove.sort_unstable_by(|a, b| b.cmp(a));
        let mut taken: Vec<(usize, Idle)> = remove
            .into_iter()
            .map(|j| (j, st.idle.swap_remove(j)))
            .collect();
        let mut reuse: Vec<Option<Idle>> = Vec::with_capacity(sizes.len());
        for slot in &chosen {
            reuse.push(slot.and_then(|j| {
                taken
                    .iter()
                    .position(|(k, _)| *k == j)
                    .map(|p| taken.swap_remove(p).1)
            }));
        }
        let mut evicted: Vec<Idle> = taken.into_iter().map(|(_, idle)| idle).collect();
        evicted.sort_by_key(|i| std::cmp::Reverse(i.region.len()));

        let reused_bytes: u64 = reuse.iter().flatten().map(|i| i.region.len() as u64).sum();
        st.forget(&evicted);
        st.pending += grow_bytes;
        st.in_use += reused_bytes;
        st.regions_in_use += reuse.iter().flatten().count();
        st.hits += reuse.iter().flatten().count() as u64;
        st.misses += reuse.iter().filter(|r| r.is_none()).count() as u64;
        Some(Plan {
            reuse,
            grow_bytes,
            evicted,
        })
    }

    /// Carries out a plan without the lock: frees evicted regions, grows,
    /// and wraps everything into buffers; on failure puts every region back.
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
            reuse,
            grow_bytes,
            evicted,
        } = plan;
        if !evicted.is_empty() {
            let bytes: u64 = evicted.iter().map(|i| i.region.len() as u64).sum();
            tracing::info!(
                who,
                regions = evicted.len(),
                bytes,
                "pool released idle regions to make room"
            );
            self.free_all(evicted);
        }
        let grow_sizes: Vec<u64> = reuse
            .iter()
            .zip(rounded)
            .filter(|(r, _)| r.is_none())
            .map(|(_, s)| *s)
            .collect();
        let grown = if grow_sizes.is_empty() {
            Ok(Vec::new())
        } else {
            self.grow(who, &grow_sizes, start, deadline)
        };

        let mut st = self.state.lock();
        st.pending -= grow_bytes;
        match grown {
            Ok(new) => {
                let new_bytes: u64 = new.iter().map(|(r, _)| r.len() as u64).sum();
                st.in_use += new_bytes;
                st.regions_in_use += new.len();
                drop(st);
                let mut new = new.into_iter();
                let mut bufs = Vec::with_capacity(sizes.len());
                for (slot, &len) in reuse.into_iter().zip(sizes) {
                    let (region, reservation) = match slot {
                        Some(idle) => (idle.region, idle.reservation),
                        None => match new.next() {
                            Some(pair) => pair,
                            None => unreachable_plan(),
                        },
                    };
                    bufs.push(PinnedBuf::new(
                        Arc::clone(self),
                        region,
                        reservation,
                        len,
                        who,
                    ));
                }
                tracing::debug!(
                    who,
                    buffers = bufs.len(),
                    bytes = rounded.iter().sum::<u64>(),
                    grown = grow_bytes,
                    "pinned buffers checked out"
                );
                Ok(bufs)
            }
            Err((made, err)) => {
                let now = Instant::now();
                for idle in reuse.into_iter().flatten() {
                    st.in_use -= idle.region.len() as u64;
                    st.regions_in_use -= 1;
                    st.idle.push(Idle { since: now, ..idle });
                }
                // Regions made before the failure are kept for the next job.
                for (region, reservation) in made {
                    st.idle.push(Idle {
                        region,
                        reservation,
                        since: now,
                    });
                }
                drop(st);
                self.returned.notify_all();
                Err(err)
            }
        }
    }

    /// Allocates one region per size, each after its budget reservation.
    /// Regions are added to `held`/`regions`; on failure returns those made
    /// so far with the error.
    #[allow(clippy::type_complexity)]
    fn grow(
        &self,
        who: &str,
        sizes: &[u64],
        start: Instant,
        deadline: Option<Instant>,
    ) -> Result<Vec<(Region, Reservation)>, (Vec<(Region, Reservation)>, PoolError)> {
        let mut made = Vec::with_capacity(sizes.len());
        for &size in sizes {
            match self.grow_one(who, size, start, deadline) {
                Ok(pair) => made.push(pair),
                Err(e) => return Err((made, e)),
            }
        }
        Ok(made)
    }

    fn grow_one(
        &self,
        who: &str,
        size: u64,
        start: Instant,
        deadline: Option<Instant>,
    ) -> Result<(Region, Reservation), PoolError> {
        let label = format!("pool:{who}");
        let mut reservation = self.reserve_for_growth(&label, size, deadline)?;
        let bytes = usize::try_from(size).map_err(|_| PoolError::Alloc {
            allocator: self.allocator.name(),
            bytes: usize::MAX,
            reason: format!("{size} bytes do not fit this platform's address space"),
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
        let mut st = self.state.lock();
        st.held += region.len() as u64;
        st.regions += 1;
        st.grows += 1;
        st.alloc_time += took;
        let held = st.held;
        drop(st);
        tracing::info!(
            who,
            allocator = self.allocator.name(),
            bytes = region.len(),
            held,
            alloc_ms = took.as_secs_f64() * 1e3,
            since_request_ms = start.elapsed().as_secs_f64() * 1e3,
            "pinned pool grew"
        );
        Ok((region, reservation))
    }

    /// The budget reservation for a new region. When the budget is short,
    /// regions idle in the pool hold part of it: they are released first,
    /// and while this waits, buffers coming back are released instead of
    /// kept (see `give_back`), since only the budget can wake this wait.
    fn reserve_for_growth(
        &self,
        label: &str,
        size: u64,
        deadline: Option<Instant>,
    ) -> Result<Reservation, BudgetError> {
        // Counted before trying, so no buffer can slip back into the idle
        // list between a failed try and the wait.
        self.state.lock().budget_blocked += 1;
        let result = match self.budget.try_reserve(label, size) {
            Ok(r) => Ok(r),
            Err(_) => {
                let short = size.saturating_sub(self.budget.available());
                let evicted = {
                    let mut st = self.state.lock();
                    let mut freed = 0u64;
                    let evicted = pick_largest_first(&mut st.idle, |idle| {
                        let take = freed < short;
                        freed += if take { idle.region.len() as u64 } else { 0 };
                        take
                    });
                    st.forget(&evicted);
                    evicted
                };
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

    fn shrink(&self, why: &str, pick: impl FnOnce(&mut State) -> Vec<Idle>) -> ShrinkReport {
        let mut st = self.state.lock();
        let picked = pick(&mut st);
        let bytes: u64 = picked.iter().map(|i| i.region.len() as u64).sum();
        st.held -= bytes;
        st.regions -= picked.len();
        st.shrinks += picked.len() as u64;
        let held = st.held;
        drop(st);
        let report = ShrinkReport {
            regions: picked.len(),
            bytes,
        };
        if report.regions > 0 {
            self.free_all(picked);
            tracing::info!(
                why,
                regions = report.regions,
                bytes,
                held,
                "pinned pool shrank"
            );
            // Room under max_bytes may let a waiter grow now.
            self.returned.notify_all();
        }
        report
    }

    /// Frees regions in the order given (each releases its reservation after).
    fn free_all(&self, regions: Vec<Idle>) {
        for idle in regions {
            // SAFETY: every region in the pool came from this allocator, and
            // an idle one is referenced by nothing.
            unsafe { self.allocator.free(idle.region) };
            drop(idle.reservation);
        }
    }

    /// Called by a dropped [`PinnedBuf`].
    pub(crate) fn give_back(&self, region: Region, reservation: Reservation, who: &str) {
        let mut st = self.state.lock();
        st.in_use -= region.len() as u64;
        st.regions_in_use -= 1;
        tracing::debug!(
            who,
            bytes = region.len(),
            in_use = st.in_use,
            "pinned buffer returned"
        );
        let idle = Idle {
            region,
            reservation,
            since: Instant::now(),
        };
        if st.budget_blocked > 0 {
            // A growth waits on the budget, which this region holds.
            st.forget(std::slice::from_ref(&idle));
            drop(st);
            self.free_all(vec![idle]);
        } else {
            st.idle.push(idle);
            drop(st);
        }
        self.returned.notify_all();
    }

    pub(crate) fn page_locked(&self) -> bool {
        self.allocator.page_locked()
    }
}

/// The plan grows exactly one region per empty slot; reaching this would be
/// a bug in `plan`/`execute`, never an input error.
fn unreachable_plan() -> ! {
    unreachable!("pool plan grew fewer regions than it had empty slots")
}

impl Drop for Inner {
    fn drop(&mut self) {
        let idle = std::mem::take(&mut self.state.get_mut().idle);
        self.free_all(idle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::HeapAllocator;

    const PAGE: usize = 4096;

    fn pool(max_bytes: u64, budget: u64) -> PinnedPool {
        PinnedPool::new(
            Arc::new(HeapAllocator),
            MemoryBudget::new(budget),
            PoolLimits {
                max_bytes,
                idle_shrink_after: Duration::from_secs(60),
                checkout_timeout: Duration::from_secs(5),
            },
        )
    }

    #[test]
    fn buffers_come_back_in_request_order_with_requested_lengths() {
        let p = pool(1 << 20, 1 << 20);
        let bufs = p.checkout_many("job", &[100, 3 * PAGE, PAGE]).unwrap();
        let lens: Vec<usize> = bufs.iter().map(|b| b.len()).collect();
        assert_eq!(lens, [100, 3 * PAGE, PAGE]);
        let caps: Vec<usize> = bufs.iter().map(|b| b.capacity()).collect();
        assert_eq!(caps, [PAGE, 3 * PAGE, PAGE]);
        let s = p.stats();
        assert_eq!(
            (s.bytes_in_use, s.bytes_pinned, s.regions_in_use),
            (5 * PAGE as u64, 5 * PAGE as u64, 3)
        );
        drop(bufs);
        let s = p.stats();
        assert_eq!(
            (s.bytes_in_use, s.bytes_idle, s.regions),
            (0, 5 * PAGE as u64, 3)
        );
        assert_eq!(p.budget().stats().reserved, 5 * PAGE as u64);
    }

    #[test]
    fn grows_by_evicting_idle_regions_that_cannot_serve() {
        let p = pool(4 * PAGE as u64, 1 << 20);
        drop(p.checkout_many("small", &[PAGE, PAGE, PAGE, PAGE]).unwrap());
        assert_eq!(p.stats().bytes_idle, 4 * PAGE as u64);
        // A 3-page request fits no idle region; three of them must go.
        let big = p
            .checkout_timeout("big", 3 * PAGE, Duration::from_secs(5))
            .unwrap();
        let s = p.stats();
        assert_eq!(
            (s.evictions, s.regions, s.bytes_pinned),
            (3, 2, 4 * PAGE as u64)
        );
        assert_eq!(big.capacity(), 3 * PAGE);
        assert_eq!(p.budget().stats().reserved, 4 * PAGE as u64);
    }

    #[test]
    fn starts_over_when_reuse_leaves_no_room_and_nothing_can_come_back() {
        let p = pool(4 * PAGE as u64, 1 << 20);
        p.preallocate(&[4 * PAGE]).unwrap();
        let abc = p
            .checkout_many_timeout("abc", &[PAGE, 3 * PAGE], Duration::from_secs(5))
            .unwrap();
        let caps: Vec<usize> = abc.iter().map(|b| b.capacity()).collect();
        assert_eq!(caps, [PAGE, 3 * PAGE]);
        let s = p.stats();
        assert_eq!(
            (s.evictions, s.grows, s.bytes_pinned),
            (1, 3, 4 * PAGE as u64)
        );
    }

    #[test]
    fn growth_blocked_on_the_budget_gets_the_memory_of_a_returned_buffer() {
        // The budget, not max_bytes, binds; the pool itself holds all of it.
        let p = pool(u64::MAX, 4 * PAGE as u64);
        let all = p.checkout("first", 4 * PAGE).unwrap();
        let p2 = p.clone();
        let waiter = std::thread::spawn(move || {
            p2.checkout_timeout("second", PAGE, Duration::from_secs(20))
                .map(|b| b.capacity())
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        while p.budget().stats().waiters == 0 {
            assert!(
                Instant::now() < deadline,
                "growth never waited on the budget"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(all);
        assert_eq!(waiter.join().unwrap().unwrap(), PAGE);
        let s = p.stats();
        assert_eq!(
            (s.regions, s.bytes_pinned, s.evictions),
            (1, PAGE as u64, 1)
        );
        assert_eq!(p.budget().stats().reserved, PAGE as u64);
    }

    #[test]
    fn absurd_sizes_fail_cleanly() {
        let p = pool(u64::MAX, 1 << 20);
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
    fn evicts_idle_regions_when_the_budget_is_short() {
        // Pool limit above the budget: the budget is what binds.
        let p = pool(u64::MAX, 4 * PAGE as u64);
        drop(p.checkout_many("small", &[PAGE, PAGE]).unwrap());
        let _other = p.budget().reserve("params", PAGE as u64).unwrap();
        let big = p
            .checkout_timeout("big", 3 * PAGE, Duration::from_secs(5))
            .unwrap();
        assert_eq!(big.capacity(), 3 * PAGE);
        assert_eq!(p.stats().evictions, 2);
    }

    #[test]
    fn preallocated_regions_serve_checkouts_without_growing() {
        let p = pool(1 << 20, 1 << 20);
        p.preallocate(&[2 * PAGE, PAGE]).unwrap();
        assert_eq!(p.stats().grows, 2);
        let b = p.checkout_many("job", &[PAGE, 2 * PAGE]).unwrap();
        let s = p.stats();
        assert_eq!((s.grows, s.hits, s.misses), (2, 2, 0));
        assert_eq!(b[1].capacity(), 2 * PAGE);
        assert!(matches!(
            p.preallocate(&[1 << 20]),
            Err(PoolError::ExceedsLimit { .. })
        ));
    }
}
