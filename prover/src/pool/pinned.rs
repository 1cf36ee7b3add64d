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

use parking_lot::{Condvar, Mutex};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::alloc::{page_size, pages_for, HostAllocator, Region};
use super::buf::PinnedBuf;
use super::slab::FreeList;
use super::PoolError;
use crate::budget::{BudgetError, MemoryBudget, Reservation};

/// Default slab size: large enough that a pool of hundreds of GiB is a few
/// hundred allocator calls, small enough that an idle slab is worth giving
/// back and that one slab per core pins in parallel.
pub const DEFAULT_SLAB_BYTES: u64 = 1 << 30;

/// Bounds of one pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolLimits {
    /// Most bytes the pool holds, idle and in use together.
    pub max_bytes: u64,
    /// Size of the slabs buffers are carved from (rounded up to a page).
    pub slab_bytes: u64,
    /// Slabs idle (no buffer out) longer than this are released by
    /// [`PinnedPool::shrink_idle`].
    pub idle_shrink_after: Duration,
    /// How long [`PinnedPool::checkout`] and [`PinnedPool::checkout_many`]
    /// wait for memory before failing.
    pub checkout_timeout: Duration,
}

impl Default for PoolLimits {
    fn default() -> Self {
        Self {
            max_bytes: u64::MAX,
            slab_bytes: DEFAULT_SLAB_BYTES,
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
    /// Bytes of all slabs the pool holds (idle and in use).
    pub bytes_pinned: u64,
    /// Bytes carved out as buffers now.
    pub bytes_in_use: u64,
    pub bytes_idle: u64,
    /// Slabs held (each one allocator region).
    pub regions: usize,
    /// Slabs with at least one buffer out.
    pub regions_in_use: usize,
    /// Buffers checked out now.
    pub buffers_in_use: usize,
    pub slab_bytes: u64,
    pub max_bytes: u64,
    /// Buffers carved from a slab already held.
    pub hits: u64,
    /// Buffers that needed a new slab.
    pub misses: u64,
    /// Slabs allocated (by checkouts and `preallocate`).
    pub grows: u64,
    /// Idle slabs released by `shrink_idle` / `shrink_to`.
    pub shrinks: u64,
    /// Idle slabs released to make room for a larger request.
    pub evictions: u64,
    /// Checkouts that had to wait for buffers to come back.
    pub waits: u64,
    /// Total time spent in the allocator's `alloc`, summed over threads.
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

/// One pinned allocator region and what is carved out of it.
struct Slab {
    id: u64,
    region: Region,
    reservation: Reservation,
    free: FreeList,
    /// Buffers carved out and not yet returned.
    buffers: usize,
    /// When the last buffer came back (or the slab was made).
    idle_since: Instant,
}

impl Slab {
    fn len(&self) -> u64 {
        self.region.len() as u64
    }

    fn idle(&self) -> bool {
        self.buffers == 0
    }
}

/// A range carved from a slab (under the lock).
#[derive(Debug, Clone, Copy)]
struct Carved {
    slab: u64,
    offset: usize,
    bytes: usize,
    /// Address of the range (the slab's base plus `offset`).
    addr: usize,
}

#[derive(Default)]
struct State {
    slabs: Vec<Slab>,
    next_slab: u64,
    /// Bytes of every slab held, idle or in use.
    held: u64,
    /// Bytes carved out as buffers.
    in_use: u64,
    buffers_in_use: usize,
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
    /// The best fit over every slab: (slab index, extent index).
    fn best_fit(&self, bytes: usize) -> Option<(usize, usize)> {
        self.slabs
            .iter()
            .enumerate()
            .filter_map(|(si, slab)| slab.free.best_fit(bytes).map(|(ei, len)| (len, si, ei)))
            .min_by_key(|(len, _, _)| *len)
            .map(|(_, si, ei)| (si, ei))
    }

    /// Carves `bytes` from extent `ei` of slab `si`; counted as in use only
    /// when the plan commits (see `commit`).
    fn carve(&mut self, si: usize, ei: usize, bytes: usize) -> Carved {
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
    fn uncarve(&mut self, c: &Carved) {
        if let Some(slab) = self.slabs.iter_mut().find(|s| s.id == c.slab) {
            slab.free.give(c.offset, c.bytes);
            slab.buffers -= 1;
        }
    }

    fn commit(&mut self, carved: &[Carved]) {
        self.in_use += carved.iter().map(|c| c.bytes as u64).sum::<u64>();
        self.buffers_in_use += carved.len();
    }

    /// Takes the idle slabs `take` accepts (visited largest first) off the
    /// books and out of the list.
    fn take_idle(&mut self, mut take: impl FnMut(&Slab) -> bool) -> Vec<Slab> {
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

    fn admit(&mut self, region: Region, reservation: Reservation, took: Duration) -> usize {
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
}

/// A checkout decided under the lock, carried out after it.
struct Plan {
    /// Per request, in request order: where it was carved, or none (it goes
    /// into the new slab).
    placed: Vec<Option<Carved>>,
    /// Bytes of the new slab; 0 when every request was placed.
    grow: u64,
    evicted: Vec<Slab>,
}

impl PinnedPool {
    pub fn new(
        allocator: Arc<dyn HostAllocator>,
        budget: Arc<MemoryBudget>,
        mut limits: PoolLimits,
    ) -> Self {
        let page = page_size();
        limits.slab_bytes = limits
            .slab_bytes
            .max(1)
            .checked_next_multiple_of(page as u64)
            .unwrap_or(DEFAULT_SLAB_BYTES);
        Self {
            inner: Arc::new(Inner {
                allocator,
                budget,
                limits,
                page,
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
        let total = self
            .inner
            .round(usize::try_from(bytes).unwrap_or(usize::MAX));
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
                match self.inner.pin_slab("preallocate", size, None) {
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
        let deadline = Instant::now().checked_add(timeout);

        let plan = self
            .inner
            .plan_or_wait(who, &rounded, total, start, deadline)?;
        self.inner
            .execute(who, sizes, &rounded, plan, start, deadline)
    }

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

fn saturating_sum(sizes: &[u64]) -> u64 {
    sizes.iter().fold(0u64, |a, b| a.saturating_add(*b))
}

/// Threads to pin or free `slabs` slabs with: one slab per thread, at most
/// one thread per core.
fn workers_for(slabs: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    slabs.min(cores).max(1)
}

impl Inner {
    /// Whole pages, by the one rule of [`pages_for`].
    fn round(&self, bytes: usize) -> u64 {
        pages_for(bytes)
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
    /// success the carved ranges are counted in use, the evicted slabs are
    /// off the books and the growth is counted as pending.
    fn plan(&self, st: &mut State, sizes: &[u64]) -> Option<Plan> {
        if let Some(plan) = self.plan_with(st, sizes, true) {
            return Some(plan);
        }
        // Carving some requests into idle slabs can leave too little room to
        // grow the rest (one idle slab of 4 pages, max 4 pages, requests
        // of 1 and 4 pages). When no buffer can come back to change that,
        // start over from nothing instead of waiting for nothing: the
        // request fits `max_bytes` (checked).
        if st.in_use == 0 && st.pending == 0 {
            return self.plan_with(st, sizes, false);
        }
        None
    }

    fn plan_with(&self, st: &mut State, sizes: &[u64], reuse: bool) -> Option<Plan> {
        let mut placed: Vec<Option<Carved>> = vec![None; sizes.len()];
        if reuse {
            let mut order: Vec<usize> = (0..sizes.len()).collect();
            order.sort_by_key(|&i| std::cmp::Reverse(sizes[i]));
            for i in order {
                let bytes = sizes[i] as usize;
                if let Some((si, ei)) = st.best_fit(bytes) {
                    placed[i] = Some(st.carve(si, ei, bytes));
                }
            }
        }
        let need: u64 = (0..sizes.len())
            .filter(|&i| placed[i].is_none())
            .map(|i| sizes[i])
            .sum();

        let mut evicted = Vec::new();
        let mut grow = 0;
        if need > 0 {
            let room = self.limits.max_bytes.saturating_sub(st.held + st.pending);
            // Slabs still idle could serve none of the unplaced requests.
            let spare: u64 = st.slabs.iter().filter(|s| s.idle()).map(Slab::len).sum();
            if room.saturating_add(spare) < need {
                for c in placed.iter().flatten() {
                    st.uncarve(c);
                }
                return None; // only buffers in use coming back can make room
            }
            // Idle slabs hold budget too: release them if the budget is
            // short, rather than wait on memory the pool itself sits on.
            let available = self.budget.available();
            let to_free = need
                .saturating_sub(room)
                .max(need.saturating_sub(available));
            let mut freed = 0u64;
            evicted = st.take_idle(|slab| {
                let take = freed < to_free;
                freed += if take { slab.len() } else { 0 };
                take
            });
            st.evictions += evicted.len() as u64;
            // A whole slab where max_bytes and the budget leave room for
            // one, so the next buffers are carved rather than pinned.
            let page = self.page as u64;
            let roomy = self
                .limits
                .slab_bytes
                .min(room + freed)
                .min(available.saturating_add(freed));
            grow = need.max(roomy / page * page);
            st.pending += grow;
        }
        let carved: Vec<Carved> = placed.iter().flatten().copied().collect();
        st.commit(&carved);
        st.hits += carved.len() as u64;
        st.misses += (sizes.len() - carved.len()) as u64;
        Some(Plan {
            placed,
            grow,
            evicted,
        })
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
            placed,
            grow,
            evicted,
        } = plan;
        if !evicted.is_empty() {
            let bytes: u64 = evicted.iter().map(Slab::len).sum();
            tracing::info!(
                who,
                regions = evicted.len(),
                bytes,
                "pool released idle slabs to make room"
            );
            self.free_all(evicted);
        }
        let grown = if grow > 0 {
            Some(self.pin_slab(who, grow, deadline))
        } else {
            None
        };

        let mut st = self.state.lock();
        st.pending -= grow;
        let mut placed = placed;
        match grown {
            None => {}
            Some(Ok((region, reservation, took))) => {
                let si = st.admit(region, reservation, took);
                let mut fresh = Vec::new();
                for (slot, &bytes) in placed.iter_mut().zip(rounded) {
                    if slot.is_none() {
                        // The slab was sized for all of them, and nobody
                        // else has seen it yet: the first extent fits.
                        let bytes = bytes as usize;
                        let c = st.carve(si, 0, bytes);
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
                for c in &carved {
                    st.uncarve(c);
                }
                st.in_use -= carved.iter().map(|c| c.bytes as u64).sum::<u64>();
                st.buffers_in_use -= carved.len();
                drop(st);
                self.returned.notify_all();
                return Err(err);
            }
        }
        drop(st);
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

    /// Reserves budget for and pins one slab of `size` bytes; the caller
    /// admits it. Checkouts (`deadline` given) may wait for the budget;
    /// preallocation (`None`) takes what is free now or fails, so it never
    /// queues ahead of jobs in the budget's line.
    fn pin_slab(
        &self,
        who: &str,
        size: u64,
        deadline: Option<Instant>,
    ) -> Result<(Region, Reservation, Duration), PoolError> {
        let label = format!("pool:{who}");
        let mut reservation = match deadline {
            Some(d) => self.reserve_for_growth(&label, size, d)?,
            None => self.budget.try_reserve(&label, size)?,
        };
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
        Ok((region, reservation, took))
    }

    /// The budget reservation for a new slab. When the budget is short,
    /// slabs idle in the pool hold part of it: they are released first, and
    /// while this waits, slabs whose last buffer comes back are released
    /// instead of kept (see `give_back`), since only the budget can wake
    /// this wait.
    fn reserve_for_growth(
        &self,
        label: &str,
        size: u64,
        deadline: Instant,
    ) -> Result<Reservation, BudgetError> {
        // Counted before trying, so no slab can turn idle and stay between a
        // failed try and the wait.
        self.state.lock().budget_blocked += 1;
        let result = match self.budget.try_reserve(label, size) {
            Ok(r) => Ok(r),
            Err(_) => {
                let short = size.saturating_sub(self.budget.available());
                let evicted = {
                    let mut st = self.state.lock();
                    let mut freed = 0u64;
                    let evicted = st.take_idle(|slab| {
                        let take = freed < short;
                        freed += if take { slab.len() } else { 0 };
                        take
                    });
                    st.evictions += evicted.len() as u64;
                    evicted
                };
                self.free_all(evicted);
                self.budget.reserve_timeout(
                    label,
                    size,
                    deadline.saturating_duration_since(Instant::now()),
                )
            }
        };
        self.state.lock().budget_blocked -= 1;
        result
    }

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
    fn free_all(&self, slabs: Vec<Slab>) {
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

    /// Called by a dropped [`PinnedBuf`].
    pub(crate) fn give_back(&self, slab: u64, offset: usize, bytes: usize, who: &str) {
        let mut st = self.state.lock();
        st.in_use -= bytes as u64;
        st.buffers_in_use -= 1;
        let blocked = st.budget_blocked > 0;
        let mut release = None;
        if let Some(si) = st.slabs.iter().position(|s| s.id == slab) {
            let s = &mut st.slabs[si];
            s.free.give(offset, bytes);
            s.buffers -= 1;
            if s.buffers == 0 {
                s.idle_since = Instant::now();
                if blocked {
                    // A growth waits on the budget, which this slab holds.
                    let gone = st.slabs.swap_remove(si);
                    st.held -= gone.len();
                    st.evictions += 1;
                    release = Some(gone);
                }
            }
        }
        tracing::debug!(who, bytes, in_use = st.in_use, "pinned buffer returned");
        drop(st);
        if let Some(gone) = release {
            self.free_all(vec![gone]);
        }
        self.returned.notify_all();
    }

    pub(crate) fn page_locked(&self) -> bool {
        self.allocator.page_locked()
    }
}

/// The plan carves exactly one range per request; reaching this would be a
/// bug in `plan`/`execute`, never an input error.
fn unreachable_plan() -> ! {
    unreachable!("pool plan placed fewer buffers than were requested")
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
    use super::*;
    use crate::pool::HeapAllocator;

    const PAGE: usize = 4096;

    fn pool(max_bytes: u64, budget: u64, slab_pages: u64) -> PinnedPool {
        PinnedPool::new(
            Arc::new(HeapAllocator),
            MemoryBudget::new(budget),
            PoolLimits {
                max_bytes,
                slab_bytes: slab_pages * PAGE as u64,
                idle_shrink_after: Duration::from_secs(60),
                checkout_timeout: Duration::from_secs(5),
            },
        )
    }

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
    fn a_request_larger_than_a_slab_gets_a_slab_of_its_own_size() {
        let p = pool(1 << 20, 1 << 20, 4);
        let big = p.checkout_many("job", &[6 * PAGE, 3 * PAGE]).unwrap();
        let s = p.stats();
        assert_eq!((s.regions, s.bytes_pinned), (1, 9 * PAGE as u64));
        drop(big);
        let small = p.checkout("next", PAGE).unwrap();
        assert_eq!(p.stats().grows, 1, "carved from the large slab");
        drop(small);
    }

    #[test]
    fn grows_by_evicting_idle_slabs_that_cannot_serve() {
        let p = pool(4 * PAGE as u64, 1 << 20, 2);
        let a = p.checkout("a", 2 * PAGE).unwrap();
        let b = p.checkout("b", 2 * PAGE).unwrap();
        assert_eq!(p.stats().regions, 2, "one 2-page slab each");
        drop((a, b));
        // 4 pages fit neither idle slab: both go, one slab of 4 comes.
        let whole = p.checkout("whole", 4 * PAGE).unwrap();
        let s = p.stats();
        assert_eq!(
            (s.evictions, s.regions, s.bytes_pinned),
            (2, 1, 4 * PAGE as u64)
        );
        assert_eq!(whole.capacity(), 4 * PAGE);
        assert_eq!(p.budget().stats().reserved, 4 * PAGE as u64);
    }

    #[test]
    fn starts_over_when_carving_leaves_no_room_and_nothing_can_come_back() {
        let p = pool(4 * PAGE as u64, 1 << 20, 2);
        p.preallocate(4 * PAGE as u64).unwrap();
        assert_eq!(p.stats().regions, 2);
        // The page fits an idle 2-page slab, the 3 pages fit none; carving
        // the page there leaves 2 idle pages, too few to make room for 3.
        let bufs = p
            .checkout_many_timeout("abc", &[PAGE, 3 * PAGE], Duration::from_secs(5))
            .unwrap();
        let caps: Vec<usize> = bufs.iter().map(|b| b.capacity()).collect();
        assert_eq!(caps, [PAGE, 3 * PAGE]);
        let s = p.stats();
        assert_eq!(
            (s.evictions, s.grows, s.regions, s.bytes_pinned),
            (2, 3, 1, 4 * PAGE as u64)
        );
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
        let deadline = Instant::now() + Duration::from_secs(20);
        while p.budget().stats().waiters == 0 {
            assert!(
                Instant::now() < deadline,
                "growth never waited on the budget"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(all);
        assert_eq!(waiter.join().unwrap().unwrap(), 3 * PAGE);
        let s = p.stats();
        assert_eq!(
            (s.regions, s.bytes_pinned, s.evictions),
            (1, 3 * PAGE as u64, 1)
        );
        assert_eq!(p.budget().stats().reserved, 3 * PAGE as u64);
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
    fn evicts_idle_slabs_when_the_budget_is_short() {
        // Pool limit above the budget: the budget is what binds.
        let p = pool(u64::MAX, 4 * PAGE as u64, 1);
        drop(p.checkout_many("small", &[PAGE, PAGE]).unwrap());
        assert_eq!(p.stats().regions, 1, "one slab for both, cut to the need");
        let _other = p.budget().reserve("params", PAGE as u64).unwrap();
        let big = p
            .checkout_timeout("big", 3 * PAGE, Duration::from_secs(5))
            .unwrap();
        assert_eq!(big.capacity(), 3 * PAGE);
        assert_eq!(p.stats().evictions, 1);
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
}
