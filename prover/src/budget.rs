//! One byte budget for the whole process.
//!
//! Every large allocation (pool regions, synthesis buffers, parameters) takes
//! a [`Reservation`] from the process's [`MemoryBudget`] first, so the
//! process never commits more memory than the host (or its cgroup) has and
//! the kernel's OOM killer never has to choose a victim.
//!
//! # Fairness
//! Blocking requests are served strictly first come, first served: each
//! waiter takes a ticket and only the oldest ticket may take memory. A large
//! request therefore cannot be starved by a stream of small ones; the price
//! is that small requests queued behind a large one wait too, even when they
//! would fit. `try_reserve` never jumps the queue: it fails while anyone is
//! waiting.

use crate::sys::cgroup;
use crate::sys::meminfo::{read_field, MEMINFO};
use parking_lot::{Condvar, Mutex};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why a reservation could not be made or changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error("{who}: {requested} bytes requested but the whole memory budget is {budget} bytes; it can never be granted")]
    ExceedsBudget {
        who: String,
        requested: u64,
        budget: u64,
    },
    #[error("{who}: {requested} bytes not available after waiting {waited:?} ({available} of {budget} bytes free)")]
    Timeout {
        who: String,
        requested: u64,
        waited: Duration,
        available: u64,
        budget: u64,
    },
    #[error("{who}: {requested} bytes not available now ({available} of {budget} bytes free, {waiters} waiting)")]
    WouldBlock {
        who: String,
        requested: u64,
        available: u64,
        budget: u64,
        waiters: usize,
    },
    #[error("{who}: cannot release or split {requested} bytes from a reservation of {held} bytes")]
    MoreThanHeld {
        who: String,
        requested: u64,
        held: u64,
    },
    #[error("cannot size the memory budget from {file}: {reason}")]
    Probe { file: PathBuf, reason: String },
    #[error("safety margin of {margin} bytes leaves nothing of {limit} bytes ({source_file})")]
    MarginTooLarge {
        margin: u64,
        limit: u64,
        source_file: PathBuf,
    },
}

/// A snapshot of the budget, for logs, the API and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetStats {
    pub total: u64,
    pub reserved: u64,
    pub available: u64,
    /// Blocking requests queued right now.
    pub waiters: usize,
    /// Highest `reserved` ever seen.
    pub peak: u64,
}

#[derive(Debug, Default)]
struct State {
    reserved: u64,
    peak: u64,
    next_ticket: u64,
    /// Tickets of blocked requests, oldest first.
    queue: VecDeque<u64>,
}

/// The process's memory budget. Shared as `Arc<MemoryBudget>`.
#[derive(Debug)]
pub struct MemoryBudget {
    total: u64,
    state: Mutex<State>,
    freed: Condvar,
}

impl MemoryBudget {
    /// A budget of exactly `total` bytes.
    pub fn new(total: u64) -> Arc<Self> {
        Arc::new(Self {
            total,
            state: Mutex::new(State::default()),
            freed: Condvar::new(),
        })
    }

    /// The host's memory (the lower of `MemTotal` and the cgroup's memory
    /// limit, when one is set) minus `safety_margin` bytes left for the
    /// kernel, the page cache and everything not budgeted.
    pub fn auto(safety_margin: u64) -> Result<Arc<Self>, BudgetError> {
        let (limit, source_file) = host_memory_limit()?;
        let total = limit.checked_sub(safety_margin).filter(|t| *t > 0).ok_or(
            BudgetError::MarginTooLarge {
                margin: safety_margin,
                limit,
                source_file: source_file.clone(),
            },
        )?;
        tracing::info!(
            total,
            limit,
            safety_margin,
            source = %source_file.display(),
            "memory budget sized"
        );
        Ok(Self::new(total))
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    /// Bytes not reserved right now (queued waiters may be about to take them).
    pub fn available(&self) -> u64 {
        self.total - self.state.lock().reserved
    }

    pub fn stats(&self) -> BudgetStats {
        let st = self.state.lock();
        BudgetStats {
            total: self.total,
            reserved: st.reserved,
            available: self.total - st.reserved,
            waiters: st.queue.len(),
            peak: st.peak,
        }
    }

    /// Reserves `bytes`, waiting as long as it takes for other reservations
    /// to be released. Fails at once if `bytes` exceeds the whole budget.
    pub fn reserve(self: &Arc<Self>, who: &str, bytes: u64) -> Result<Reservation, BudgetError> {
        self.reserve_inner(who, bytes, None)
    }

    /// Like [`reserve`](Self::reserve), but gives up after `timeout`.
    pub fn reserve_timeout(
        self: &Arc<Self>,
        who: &str,
        bytes: u64,
        timeout: Duration,
    ) -> Result<Reservation, BudgetError> {
        self.reserve_inner(who, bytes, Some(timeout))
    }

    /// Reserves `bytes` only if that is possible without waiting and nobody
    /// is queued ahead.
    pub fn try_reserve(
        self: &Arc<Self>,
        who: &str,
        bytes: u64,
    ) -> Result<Reservation, BudgetError> {
        self.check_fits(who, bytes)?;
        let mut st = self.state.lock();
        if st.queue.is_empty() && self.total - st.reserved >= bytes {
            Ok(self.grant(&mut st, who, bytes))
        } else {
            Err(BudgetError::WouldBlock {
                who: who.to_owned(),
                requested: bytes,
                available: self.total - st.reserved,
                budget: self.total,
                waiters: st.queue.len(),
            })
        }
    }

    /// Fails with [`BudgetError::ExceedsBudget`] if `bytes` is more than the
    /// whole budget, which no wait can grant; callers that plan before they
    /// reserve (the pool) check with this same rule.
    pub fn check_fits(&self, who: &str, bytes: u64) -> Result<(), BudgetError> {
        if bytes > self.total {
            return Err(BudgetError::ExceedsBudget {
                who: who.to_owned(),
                requested: bytes,
                budget: self.total,
            });
        }
        Ok(())
    }

    fn reserve_inner(
        self: &Arc<Self>,
        who: &str,
        bytes: u64,
        timeout: Option<Duration>,
    ) -> Result<Reservation, BudgetError> {
        self.check_fits(who, bytes)?;
        let start = Instant::now();
        let deadline = timeout.and_then(|t| start.checked_add(t));
        let mut st = self.state.lock();
        if st.queue.is_empty() && self.total - st.reserved >= bytes {
            return Ok(self.grant(&mut st, who, bytes));
        }
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        st.queue.push_back(ticket);
        tracing::debug!(
            who,
            bytes,
            available = self.total - st.reserved,
            ahead = st.queue.len() - 1,
            "memory reservation waiting"
        );
        loop {
            let head = st.queue.front() == Some(&ticket);
            if head && self.total - st.reserved >= bytes {
                st.queue.pop_front();
                let res = self.grant(&mut st, who, bytes);
                // The next ticket may fit in what is left.
                self.freed.notify_all();
                tracing::info!(
                    who,
                    bytes,
                    waited_ms = start.elapsed().as_secs_f64() * 1e3,
                    "memory reservation granted after waiting"
                );
                return Ok(res);
            }
            let timed_out = match deadline {
                Some(d) => self.freed.wait_until(&mut st, d).timed_out(),
                None => {
                    self.freed.wait(&mut st);
                    false
                }
            };
            if timed_out {
                let fits_now =
                    st.queue.front() == Some(&ticket) && self.total - st.reserved >= bytes;
                if fits_now {
                    continue;
                }
                st.queue.retain(|t| *t != ticket);
                // Whoever queued behind us may be the head now.
                self.freed.notify_all();
                return Err(BudgetError::Timeout {
                    who: who.to_owned(),
                    requested: bytes,
                    waited: start.elapsed(),
                    available: self.total - st.reserved,
                    budget: self.total,
                });
            }
        }
    }

    fn grant(self: &Arc<Self>, st: &mut State, who: &str, bytes: u64) -> Reservation {
        st.reserved += bytes;
        st.peak = st.peak.max(st.reserved);
        tracing::debug!(
            who,
            bytes,
            remaining = self.total - st.reserved,
            "memory reserved"
        );
        Reservation {
            budget: Arc::clone(self),
            who: who.to_owned(),
            bytes,
        }
    }

    fn release(&self, who: &str, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let mut st = self.state.lock();
        st.reserved -= bytes;
        tracing::debug!(
            who,
            bytes,
            remaining = self.total - st.reserved,
            "memory released"
        );
        if !st.queue.is_empty() {
            self.freed.notify_all();
        }
    }
}

/// Bytes held against a [`MemoryBudget`]; released when dropped.
#[derive(Debug)]
#[must_use = "dropping a reservation releases it at once"]
pub struct Reservation {
    budget: Arc<MemoryBudget>,
    who: String,
    bytes: u64,
}

impl Reservation {
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Who took the reservation (for logs).
    pub fn who(&self) -> &str {
        &self.who
    }

    pub fn budget(&self) -> &Arc<MemoryBudget> {
        &self.budget
    }

    /// Gives `bytes` back to the budget now, keeping the rest.
    pub fn release_partial(&mut self, bytes: u64) -> Result<(), BudgetError> {
        self.take(bytes)?;
        self.budget.release(&self.who, bytes);
        Ok(())
    }

    /// Moves `bytes` of this reservation into a new one (no budget traffic),
    /// e.g. to hand part of a job's memory to a buffer that outlives it.
    pub fn split(&mut self, bytes: u64) -> Result<Reservation, BudgetError> {
        self.take(bytes)?;
        Ok(Reservation {
            budget: Arc::clone(&self.budget),
            who: self.who.clone(),
            bytes,
        })
    }

    /// Folds `other` (of the same budget) into this reservation.
    pub fn merge(&mut self, mut other: Reservation) {
        if Arc::ptr_eq(&self.budget, &other.budget) {
            self.bytes += other.bytes;
            other.bytes = 0;
        }
        // A reservation of another budget is simply released by its drop.
    }

    fn take(&mut self, bytes: u64) -> Result<(), BudgetError> {
        if bytes > self.bytes {
            return Err(BudgetError::MoreThanHeld {
                who: self.who.clone(),
                requested: bytes,
                held: self.bytes,
            });
        }
        self.bytes -= bytes;
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.release(&self.who, self.bytes);
    }
}

/// The host's usable memory: `MemTotal`, lowered by the cgroup's memory limit
/// when one is set. Returns the limit and the file it came from.
fn host_memory_limit() -> Result<(u64, PathBuf), BudgetError> {
    let meminfo = Path::new(MEMINFO);
    let total = read_field(meminfo, "MemTotal")
        .map_err(|e| BudgetError::Probe {
            file: meminfo.to_owned(),
            reason: e.to_string(),
        })?
        .ok_or(BudgetError::Probe {
            file: meminfo.to_owned(),
            reason: "no MemTotal line".into(),
        })?;
    Ok(match cgroup::memory_limit() {
        Some((limit, file)) if limit < total => (limit, file),
        _ => (total, meminfo.to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::thread;

    #[test]
    fn reserve_and_drop_restore_available() {
        let budget = MemoryBudget::new(1000);
        let r = budget.reserve("t", 300).unwrap();
        assert_eq!(budget.available(), 700);
        assert_eq!(r.bytes(), 300);
        drop(r);
        let s = budget.stats();
        assert_eq!((s.reserved, s.available, s.peak), (0, 1000, 300));
    }

    #[test]
    fn larger_than_budget_fails_at_once() {
        let budget = MemoryBudget::new(1000);
        let start = Instant::now();
        let err = budget.reserve("params", 1001).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(1));
        assert_eq!(
            err,
            BudgetError::ExceedsBudget {
                who: "params".into(),
                requested: 1001,
                budget: 1000
            }
        );
        assert!(err.to_string().contains("can never be granted"));
    }

    #[test]
    fn try_reserve_fails_when_short_and_when_someone_waits() {
        let budget = MemoryBudget::new(100);
        let held = budget.reserve("a", 60).unwrap();
        assert!(matches!(
            budget.try_reserve("b", 50),
            Err(BudgetError::WouldBlock { available: 40, .. })
        ));
        let b2 = Arc::clone(&budget);
        let waiter = thread::spawn(move || b2.reserve_timeout("big", 90, Duration::from_secs(10)));
        let deadline = Instant::now() + Duration::from_secs(10);
        while budget.stats().waiters == 0 {
            assert!(Instant::now() < deadline, "waiter never queued");
            thread::yield_now();
        }
        // 10 bytes would fit, but the queued request comes first.
        assert!(matches!(
            budget.try_reserve("small", 10),
            Err(BudgetError::WouldBlock { waiters: 1, .. })
        ));
        drop(held);
        let big = waiter.join().unwrap().unwrap();
        assert_eq!(big.bytes(), 90);
    }

    #[test]
    fn timeout_gives_up_and_leaves_queue() {
        let budget = MemoryBudget::new(100);
        let _held = budget.reserve("a", 100).unwrap();
        let err = budget
            .reserve_timeout("b", 10, Duration::from_millis(50))
            .unwrap_err();
        match err {
            BudgetError::Timeout { waited, .. } => assert!(waited >= Duration::from_millis(50)),
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(budget.stats().waiters, 0);
    }

    #[test]
    fn release_partial_and_split_account_exactly() {
        let budget = MemoryBudget::new(1000);
        let mut r = budget.reserve("job", 600).unwrap();
        r.release_partial(100).unwrap();
        assert_eq!((r.bytes(), budget.available()), (500, 500));
        let part = r.split(200).unwrap();
        assert_eq!(
            (r.bytes(), part.bytes(), budget.available()),
            (300, 200, 500)
        );
        assert!(matches!(
            r.release_partial(301),
            Err(BudgetError::MoreThanHeld { held: 300, .. })
        ));
        drop(r);
        assert_eq!(budget.available(), 800);
        let mut part = part;
        part.merge(budget.reserve("other", 50).unwrap());
        assert_eq!(part.bytes(), 250);
        drop(part);
        assert_eq!(budget.available(), 1000);
    }

    #[test]
    fn waiters_served_in_arrival_order() {
        let budget = MemoryBudget::new(100);
        let held = budget.reserve("hold", 100).unwrap();
        let (granted_tx, granted) = mpsc::channel();
        let mut releases = Vec::new();
        let mut threads = Vec::new();
        for (i, bytes) in [80u64, 30, 10].into_iter().enumerate() {
            let b = Arc::clone(&budget);
            let granted_tx = granted_tx.clone();
            let (release_tx, release) = mpsc::channel::<()>();
            releases.push(release_tx);
            // Queue them one at a time so arrival order is known.
            let before = b.stats().waiters;
            threads.push(thread::spawn(move || {
                let r = b.reserve_timeout("w", bytes, Duration::from_secs(10));
                let ok = r.is_ok();
                granted_tx.send(i).unwrap();
                // Hold until told (or the test gave up).
                let _ = release.recv_timeout(Duration::from_secs(10));
                ok
            }));
            let deadline = Instant::now() + Duration::from_secs(10);
            while budget.stats().waiters == before {
                assert!(Instant::now() < deadline, "waiter {i} never queued");
                thread::yield_now();
            }
        }
        drop(held);
        assert_eq!(granted.recv_timeout(Duration::from_secs(10)), Ok(0));
        // 20 bytes are free: the 10 would fit, but the 30 queued before it.
        assert!(granted.recv_timeout(Duration::from_millis(100)).is_err());
        assert_eq!(budget.stats().waiters, 2);
        releases[0].send(()).unwrap();
        let mut rest: Vec<usize> = (0..2)
            .map(|_| granted.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        rest.sort_unstable();
        assert_eq!(rest, [1, 2]);
        for r in &releases[1..] {
            r.send(()).unwrap();
        }
        for t in threads {
            assert!(t.join().unwrap());
        }
        assert_eq!(budget.available(), 100);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn auto_is_below_memtotal_by_the_margin() {
        let mem_total = read_field(MEMINFO, "MemTotal").unwrap().unwrap();
        let budget = MemoryBudget::auto(1 << 20).unwrap();
        assert!(budget.total() <= mem_total - (1 << 20));
        assert!(matches!(
            MemoryBudget::auto(u64::MAX),
            Err(BudgetError::MarginTooLarge { .. })
        ));
    }
}
