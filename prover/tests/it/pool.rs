//! Pinned pool and memory budget from the outside: slabs and carving, best
//! fit, coalescing, all-or-nothing checkout, concurrency, shrink order,
//! budget waits, and the kernel's view of mlocked memory.

use parking_lot::Mutex;
use prover::budget::{BudgetError, MemoryBudget};
use prover::pool::{
    vm_locked_bytes, HeapAllocator, HostAllocator, MlockAllocator, PinnedPool, PinnedVec,
    PoolError, PoolLimits, Region,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

const PAGE: usize = 4096;
/// Slab size of the test pools unless a test says otherwise.
const SLAB_PAGES: usize = 16;
/// Every wait in this file is bounded by this.
const BOUND: Duration = Duration::from_secs(20);

/// Tests that lock memory change this process's `VmLck`; they run one at a
/// time so a delta measured in one is not disturbed by another.
static MLOCK_TESTS: Mutex<()> = Mutex::new(());

/// Wraps a real allocator and records what the pool asks of it.
struct Counting<A> {
    inner: A,
    allocs: AtomicU64,
    frees: AtomicU64,
    freed_sizes: Mutex<Vec<usize>>,
}

impl<A: HostAllocator> Counting<A> {
    fn new(inner: A) -> Arc<Self> {
        Arc::new(Self {
            inner,
            allocs: AtomicU64::new(0),
            frees: AtomicU64::new(0),
            freed_sizes: Mutex::new(Vec::new()),
        })
    }

    fn allocs(&self) -> u64 {
        self.allocs.load(Ordering::SeqCst)
    }

    fn frees(&self) -> u64 {
        self.frees.load(Ordering::SeqCst)
    }
}

impl<A: HostAllocator> HostAllocator for Counting<A> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn page_locked(&self) -> bool {
        self.inner.page_locked()
    }

    fn alloc(&self, bytes: usize) -> Result<Region, PoolError> {
        let region = self.inner.alloc(bytes)?;
        self.allocs.fetch_add(1, Ordering::SeqCst);
        Ok(region)
    }

    unsafe fn free(&self, region: Region) {
        self.frees.fetch_add(1, Ordering::SeqCst);
        self.freed_sizes.lock().push(region.len());
        // SAFETY: forwarded unchanged from the pool, which upholds the contract.
        unsafe { self.inner.free(region) }
    }
}

/// Spins (yielding) until `cond` holds; fails the test after [`BOUND`].
fn wait_for(cond: impl Fn() -> bool, what: &str) {
    let deadline = Instant::now() + BOUND;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(1));
    }
}

fn limits(max_bytes: u64) -> PoolLimits {
    slab_limits(max_bytes, SLAB_PAGES * PAGE)
}

fn slab_limits(max_bytes: u64, slab: usize) -> PoolLimits {
    PoolLimits {
        max_bytes,
        slab_bytes: slab as u64,
        idle_shrink_after: Duration::from_secs(3600),
        checkout_timeout: BOUND,
    }
}

fn heap_pool(max_bytes: u64, budget: u64) -> (PinnedPool, Arc<Counting<HeapAllocator>>) {
    let alloc = Counting::new(HeapAllocator);
    let pool = PinnedPool::new(alloc.clone(), MemoryBudget::new(budget), limits(max_bytes));
    (pool, alloc)
}

#[test]
fn reuse_does_not_reallocate() {
    let (pool, alloc) = heap_pool(1 << 20, 1 << 20);
    for job in 0..50u8 {
        let mut bufs = pool
            .checkout_many("job", &[3 * PAGE, 2 * PAGE, PAGE])
            .unwrap();
        for buf in &mut bufs {
            buf.fill(job);
        }
    }
    let s = pool.stats();
    assert_eq!(alloc.allocs(), 1, "one slab for all three, made once");
    assert_eq!((s.grows, s.misses, s.hits), (1, 3, 147));
    assert_eq!(s.bytes_pinned, (SLAB_PAGES * PAGE) as u64);
    assert_eq!(s.bytes_in_use, 0);
    assert_eq!(alloc.frees(), 0);
}

#[test]
fn best_fit_picks_the_smallest_adequate_hole() {
    let alloc = Counting::new(HeapAllocator);
    let pool = PinnedPool::new(
        alloc.clone(),
        MemoryBudget::new(1 << 20),
        slab_limits(1 << 20, 17 * PAGE),
    );
    // One 17-page slab carved front to back: holes of 8, 3 and 4 pages
    // once a, b and c are back, with one page kept out between each.
    let a = pool.checkout("a", 8 * PAGE).unwrap();
    let base = a.as_ptr() as usize;
    let _x = pool.checkout("x", PAGE).unwrap();
    let b = pool.checkout("b", 3 * PAGE).unwrap();
    let _y = pool.checkout("y", PAGE).unwrap();
    let c = pool.checkout("c", 4 * PAGE).unwrap();
    let at = |buf: &prover::pool::PinnedBuf| (buf.as_ptr() as usize - base) / PAGE;
    assert_eq!((at(&b), at(&c)), (9, 13));
    drop((a, b, c));
    let buf = pool.checkout("job", 2 * PAGE + 1).unwrap();
    assert_eq!(
        (at(&buf), buf.capacity(), buf.len()),
        (9, 3 * PAGE, 2 * PAGE + 1)
    );
    // Together: the largest request is placed first, each in its best fit.
    let many = pool.checkout_many("job", &[PAGE, 4 * PAGE]).unwrap();
    assert_eq!((at(&many[0]), at(&many[1])), (0, 13));
    assert_eq!(alloc.allocs(), 1, "all carved from the one slab");
    assert_eq!(pool.stats().hits, 2 + 5 - 1 + 1);
}

#[test]
fn returned_buffers_coalesce_so_a_whole_slab_serves_again() {
    let alloc = Counting::new(HeapAllocator);
    let pool = PinnedPool::new(alloc.clone(), MemoryBudget::new(1 << 20), limits(1 << 20));
    let bufs: Vec<_> = (0..SLAB_PAGES)
        .map(|i| pool.checkout(&format!("b{i}"), PAGE).unwrap())
        .collect();
    assert_eq!(pool.stats().regions, 1);
    // Back in an order that leaves holes until the very last.
    let (even, odd): (Vec<_>, Vec<_>) = bufs.into_iter().enumerate().partition(|(i, _)| i % 2 == 0);
    drop(even);
    drop(odd);
    let whole = pool.checkout("whole", SLAB_PAGES * PAGE).unwrap();
    assert_eq!(whole.capacity(), SLAB_PAGES * PAGE);
    assert_eq!(alloc.allocs(), 1, "the coalesced slab served it");
}

#[test]
fn many_buffers_need_few_slabs_and_every_byte_is_budgeted() {
    const SLAB: usize = 64;
    const BUFFERS: usize = 1000;
    let alloc = Counting::new(HeapAllocator);
    let budget = MemoryBudget::new(8 << 20);
    let pool = PinnedPool::new(
        alloc.clone(),
        budget.clone(),
        slab_limits(4 << 20, SLAB * PAGE),
    );
    let bufs: Vec<_> = (0..BUFFERS)
        .map(|i| pool.checkout("many", PAGE / (1 + i % 2)).unwrap())
        .collect();
    let s = pool.stats();
    assert!(
        s.regions <= BUFFERS.div_ceil(SLAB),
        "{} slabs for {BUFFERS} one-page buffers",
        s.regions
    );
    assert_eq!(s.buffers_in_use, BUFFERS);
    assert_eq!(
        (s.bytes_in_use, alloc.allocs()),
        ((BUFFERS * PAGE) as u64, s.regions as u64)
    );
    assert_eq!(budget.stats().reserved, s.bytes_pinned);
    drop(bufs);
    assert_eq!(
        budget.stats().reserved,
        s.bytes_pinned,
        "idle slabs stay budgeted"
    );
    pool.shrink_to(0);
    assert_eq!(
        (budget.stats().reserved, alloc.frees()),
        (0, s.regions as u64)
    );
}

#[test]
fn checkout_many_is_all_or_nothing() {
    let (pool, _) = heap_pool(4 * PAGE as u64, 1 << 20);
    let held = pool.checkout("other", 2 * PAGE).unwrap();
    let before = pool.stats();
    // 1 + 2 pages would fit one by one only partly: nothing may be taken.
    let err = pool
        .checkout_many_timeout("abc", &[PAGE, 2 * PAGE, PAGE], Duration::from_millis(100))
        .unwrap_err();
    assert!(matches!(err, PoolError::Timeout { requested, .. } if requested == 4 * PAGE as u64));
    let after = pool.stats();
    assert_eq!(after.bytes_in_use, before.bytes_in_use);
    assert_eq!(after.bytes_pinned, before.bytes_pinned);
    drop(held);
    let abc = pool
        .checkout_many_timeout("abc", &[PAGE, 2 * PAGE, PAGE], BOUND)
        .unwrap();
    assert_eq!(abc.len(), 3);
    assert_eq!(pool.stats().bytes_in_use, 4 * PAGE as u64);
}

#[test]
fn two_jobs_wanting_abc_never_deadlock() {
    // Room for one job's a, b, c plus one buffer: taken one at a time, two
    // jobs could each hold two buffers and wait forever for a third.
    let (pool, _) = heap_pool(4 * PAGE as u64, 1 << 20);
    let start = Instant::now();
    let jobs: Vec<_> = (0..2)
        .map(|j| {
            let pool = pool.clone();
            thread::spawn(move || {
                for _ in 0..200 {
                    let mut abc = pool.checkout_many(&format!("job{j}"), &[PAGE; 3])?;
                    for buf in &mut abc {
                        buf.fill(j);
                    }
                    assert!(abc.iter().all(|b| b.iter().all(|x| *x == j)));
                }
                Ok::<(), PoolError>(())
            })
        })
        .collect();
    for job in jobs {
        job.join().unwrap().unwrap();
    }
    assert!(start.elapsed() < BOUND);
    assert_eq!(pool.stats().bytes_in_use, 0);
}

#[test]
fn concurrent_checkouts_keep_buffers_exclusive_and_books_balanced() {
    const THREADS: usize = 16;
    const ROUNDS: usize = 100;
    let max = 24 * PAGE as u64;
    let (pool, alloc) = heap_pool(max, 1 << 24);
    let start = Instant::now();
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let pool = pool.clone();
            thread::spawn(move || {
                let mark = t as u8 + 1;
                for round in 0..ROUNDS {
                    let pages = 1 + (t + round) % 4;
                    let mut bufs = if round % 3 == 0 {
                        pool.checkout_many("many", &[pages * PAGE, PAGE])?
                    } else {
                        vec![pool.checkout("one", pages * PAGE - 7)?]
                    };
                    for buf in &mut bufs {
                        buf.fill(mark);
                    }
                    thread::yield_now();
                    for buf in &bufs {
                        // Another thread writing the same region would show here.
                        assert!(buf.iter().all(|b| *b == mark), "buffer shared");
                    }
                    let s = pool.stats();
                    assert!(s.bytes_pinned <= max, "pool above max_bytes: {s:?}");
                    assert!(s.bytes_in_use <= s.bytes_pinned);
                }
                Ok::<(), PoolError>(())
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap().unwrap();
    }
    assert!(start.elapsed() < BOUND, "took {:?}", start.elapsed());
    let s = pool.stats();
    assert_eq!(s.bytes_in_use, 0);
    assert_eq!(s.regions_in_use, 0);
    assert_eq!(
        s.hits + s.misses,
        (THREADS * ROUNDS + THREADS * ROUNDS.div_ceil(3)) as u64
    );
    assert_eq!(alloc.allocs() - alloc.frees(), s.regions as u64);
    assert_eq!(s.grows, alloc.allocs());
    // Every byte held is a budget reservation, and nothing else is.
    assert_eq!(pool.budget().stats().reserved, s.bytes_pinned);
}

#[test]
fn request_beyond_budget_or_limit_fails_at_once() {
    let budget = MemoryBudget::new(1 << 20);
    let start = Instant::now();
    let err = budget.reserve("params", 2 << 20).unwrap_err();
    assert!(
        matches!(err, BudgetError::ExceedsBudget { requested, budget, .. }
        if requested == 2 << 20 && budget == 1 << 20)
    );
    assert!(err.to_string().contains("params"));

    let pool = PinnedPool::new(Arc::new(HeapAllocator), budget.clone(), limits(u64::MAX));
    let err = pool.checkout("a", 2 << 20).unwrap_err();
    assert!(matches!(
        err,
        PoolError::Budget(BudgetError::ExceedsBudget { .. })
    ));
    let small = PinnedPool::new(Arc::new(HeapAllocator), budget, limits(PAGE as u64));
    let err = small.checkout_many("abc", &[PAGE, PAGE]).unwrap_err();
    assert!(
        matches!(err, PoolError::ExceedsLimit { requested, max_bytes, .. }
        if requested == 2 * PAGE as u64 && max_bytes == PAGE as u64)
    );
    assert!(err.to_string().contains("can never be granted"));
    // The pool's timeout is BOUND; failing fast means not waiting on it.
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[test]
fn budget_waiter_wakes_when_memory_is_released() {
    let budget = MemoryBudget::new(1000);
    let held = budget.reserve("synthesis", 800).unwrap();
    let (tx, rx) = mpsc::channel();
    let b = budget.clone();
    let waiter = thread::spawn(move || {
        let start = Instant::now();
        let r = b.reserve_timeout("params", 500, BOUND);
        tx.send(start.elapsed()).unwrap();
        r
    });
    wait_for(|| budget.stats().waiters == 1, "the waiter to queue");
    // Not granted while the memory is held.
    assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
    drop(held);
    let waited = rx.recv_timeout(BOUND).unwrap();
    assert!(waited >= Duration::from_millis(100) && waited < BOUND);
    assert_eq!(waiter.join().unwrap().unwrap().bytes(), 500);
    assert_eq!(budget.stats().reserved, 0);
}

#[test]
fn partial_release_wakes_a_waiter_that_now_fits() {
    let budget = MemoryBudget::new(1000);
    let mut job = budget.reserve("job", 1000).unwrap();
    let b = budget.clone();
    let waiter = thread::spawn(move || b.reserve_timeout("next", 400, BOUND));
    wait_for(|| budget.stats().waiters == 1, "the waiter to queue");
    job.release_partial(300).unwrap();
    assert_eq!(budget.stats().waiters, 1, "300 bytes do not fit 400");
    job.release_partial(100).unwrap();
    let next = waiter.join().unwrap().unwrap();
    assert_eq!((job.bytes(), next.bytes()), (600, 400));
    assert_eq!(budget.available(), 0);
}

#[test]
fn pool_waiter_wakes_when_a_buffer_comes_back() {
    let (pool, alloc) = heap_pool(2 * PAGE as u64, 1 << 20);
    let held = pool.checkout("first", 2 * PAGE).unwrap();
    let p = pool.clone();
    let waiter = thread::spawn(move || {
        let start = Instant::now();
        p.checkout_timeout("second", PAGE, BOUND)
            .map(|b| (b.capacity(), start.elapsed()))
    });
    wait_for(|| pool.stats().waits == 1, "the checkout to block");
    drop(held);
    let (capacity, waited) = waiter.join().unwrap().unwrap();
    assert_eq!(capacity, PAGE);
    assert!(waited < BOUND);
    assert_eq!(alloc.allocs(), 1, "served by the returned slab");
}

#[test]
fn pool_waiters_are_served_in_order_and_a_timed_out_one_leaves_the_line() {
    // The rule needs the small checkout queued while the big one still
    // waits. The small one's thread exists before the big one's clock
    // starts, so only a wake-up stands between them; a host slow enough to
    // lose even that race is told apart from a broken rule and the case is
    // run again with a longer timeout.
    for timeout_ms in [400, 1_600, 6_400] {
        if queue_behind_a_head_that_times_out(Duration::from_millis(timeout_ms)) {
            return;
        }
    }
    panic!(
        "in every run the small checkout was served without queueing behind the big one: \
         it jumps the queue (or the host never ran a woken thread within 6.4 s)"
    );
}

/// One run of the case above with the big checkout's `timeout`; false when
/// the big checkout timed out before the small one had queued (the run
/// showed nothing, either way).
fn queue_behind_a_head_that_times_out(timeout: Duration) -> bool {
    let (pool, _) = heap_pool(4 * PAGE as u64, 1 << 20);
    let hold = pool.checkout("long job", 3 * PAGE).unwrap();
    let (go, gate) = mpsc::channel::<()>();
    let (done_tx, done) = mpsc::channel();
    let p = pool.clone();
    let small = thread::spawn(move || {
        gate.recv().unwrap();
        let buf = p.checkout_timeout("small", PAGE, BOUND);
        done_tx.send(()).unwrap();
        buf.map(|b| b.capacity())
    });
    let p = pool.clone();
    let big = thread::spawn(move || {
        p.checkout_timeout("big", 4 * PAGE, timeout)
            .map(|b| b.capacity())
    });
    wait_for(|| pool.stats().waits == 1, "the big checkout to block");
    go.send(()).unwrap();
    // `waits` counts a checkout once it was checked and refused: one page
    // is free, so the small one being refused is the first-come rule.
    wait_for(
        || pool.stats().waits == 2 || small.is_finished(),
        "the small checkout to block or finish",
    );
    if pool.stats().waits == 1 {
        // Served without queueing: the big one had given up already, or the
        // small one jumped the queue (then every run ends here, and the
        // test fails).
        assert!(matches!(
            big.join().unwrap(),
            Err(PoolError::Timeout { .. })
        ));
        assert_eq!(small.join().unwrap().unwrap(), PAGE);
        return false;
    }
    assert!(matches!(
        big.join().unwrap(),
        Err(PoolError::Timeout { requested, .. }) if requested == 4 * PAGE as u64
    ));
    // Once the big one gave up, the small one goes without anything returned.
    done.recv_timeout(BOUND).unwrap();
    assert_eq!(small.join().unwrap().unwrap(), PAGE);
    drop(hold);
    true
}

#[test]
fn shrink_releases_whole_idle_slabs_largest_first() {
    // One-page slabs: every request gets a slab of exactly its size.
    let alloc = Counting::new(HeapAllocator);
    let pool = PinnedPool::new(
        alloc.clone(),
        MemoryBudget::new(1 << 20),
        slab_limits(1 << 20, PAGE),
    );
    let idle: Vec<_> = [PAGE, 3 * PAGE]
        .iter()
        .map(|b| pool.checkout("job", *b).unwrap())
        .collect();
    let in_use = pool.checkout("job", 5 * PAGE).unwrap();
    let two = pool.checkout("job", 2 * PAGE).unwrap();
    drop((idle, two));
    assert_eq!(pool.stats().regions, 4);

    // Down to 8 of 11 pages held: the 3-page slab alone is enough.
    let r = pool.shrink_to(8 * PAGE as u64);
    assert_eq!((r.regions, r.bytes), (1, 3 * PAGE as u64));
    assert_eq!(*alloc.freed_sizes.lock(), [3 * PAGE]);

    // Not idle long enough yet: nothing goes.
    assert_eq!(pool.shrink_idle(Instant::now()).regions, 0);
    let later = Instant::now() + Duration::from_secs(7200);
    let r = pool.shrink_idle(later);
    assert_eq!((r.regions, r.bytes), (2, 3 * PAGE as u64));
    // Those two are freed on two threads at once, in either order.
    let mut freed = alloc.freed_sizes.lock().clone();
    freed[1..].sort_unstable();
    assert_eq!(freed, [3 * PAGE, PAGE, 2 * PAGE]);
    // The slab in use is untouched.
    let s = pool.stats();
    assert_eq!(
        (s.regions, s.bytes_pinned, s.shrinks),
        (1, 5 * PAGE as u64, 3)
    );
    assert_eq!(pool.budget().stats().reserved, 5 * PAGE as u64);
    drop(in_use);
    assert_eq!(pool.shrink_to(0).bytes, 5 * PAGE as u64);
    assert_eq!(pool.budget().stats().reserved, 0);
}

#[test]
fn a_slab_with_one_buffer_out_is_not_given_back() {
    let (pool, alloc) = heap_pool(1 << 20, 1 << 20);
    let small = pool.checkout("small", PAGE).unwrap();
    let big = pool.checkout("big", 8 * PAGE).unwrap();
    drop(big);
    assert_eq!(pool.shrink_to(0).regions, 0, "mostly free is not free");
    assert_eq!(alloc.frees(), 0);
    drop(small);
    let r = pool.shrink_to(0);
    assert_eq!((r.regions, r.bytes), (1, (SLAB_PAGES * PAGE) as u64));
}

#[test]
fn buffers_move_between_threads_and_return_home() {
    let (pool, _) = heap_pool(1 << 20, 1 << 20);
    let mut buf = pool.checkout("job", PAGE).unwrap();
    buf[0] = 42;
    let back = thread::spawn(move || {
        assert_eq!(buf[0], 42);
        drop(buf);
    });
    back.join().unwrap();
    assert_eq!(pool.stats().bytes_in_use, 0);
}

#[test]
fn dropping_the_pool_frees_every_region_once_buffers_return() {
    let alloc = Counting::new(HeapAllocator);
    let budget = MemoryBudget::new(1 << 20);
    let pool = PinnedPool::new(alloc.clone(), budget.clone(), limits(1 << 20));
    // A whole slab and a partial one.
    pool.preallocate((SLAB_PAGES * PAGE + 2 * PAGE) as u64)
        .unwrap();
    assert_eq!(pool.stats().regions, 2);
    let buf = pool.checkout("late", PAGE).unwrap();
    drop(pool);
    assert_eq!(alloc.frees(), 0, "a buffer out keeps the pool alive");
    drop(buf);
    assert_eq!(alloc.frees(), 2);
    assert_eq!(budget.stats().reserved, 0);
}

#[test]
fn pinned_vec_holds_field_elements_padded_to_the_domain() {
    use ff::Field;
    let (pool, _) = heap_pool(1 << 20, 1 << 20);
    let n: usize = 100;
    let domain = n.next_power_of_two();
    let mut a = PinnedVec::<blstrs::Scalar>::with_capacity(&pool, "a", domain).unwrap();
    for i in 0..n as u64 {
        a.push(blstrs::Scalar::from(i)).unwrap();
    }
    a.resize(domain, blstrs::Scalar::ZERO).unwrap();
    assert_eq!(a.len(), domain);
    assert_eq!(a[n - 1], blstrs::Scalar::from(n as u64 - 1));
    assert!(a[n..].iter().all(|x| bool::from(x.is_zero())));
    assert!(a.push(blstrs::Scalar::ONE).is_err(), "capacity is fixed");
}

#[cfg(target_os = "linux")]
#[test]
fn mlock_pool_bytes_show_as_vm_lck() {
    let _one_at_a_time = MLOCK_TESTS.lock();
    let base = vm_locked_bytes();
    let budget = MemoryBudget::new(64 << 20);
    let pool = PinnedPool::new(
        Arc::new(MlockAllocator),
        budget,
        slab_limits(32 << 20, 4 << 20),
    );
    assert!(pool.page_locked());
    // Slabs of 4 and 2 MiB, pinned on two threads.
    pool.preallocate(6 << 20).unwrap();
    assert_eq!(vm_locked_bytes() - base, 6 << 20);
    // 3 and 1 MiB are carved from the 4 and 2 MiB slabs; 5 MiB grows the pool.
    let bufs = pool
        .checkout_many("abc", &[1 << 20, 3 << 20, 5 << 20])
        .unwrap();
    let s = pool.stats();
    assert_eq!((s.bytes_pinned, s.grows, s.hits), (11 << 20, 3, 2));
    assert_eq!(vm_locked_bytes() - base, s.bytes_pinned);
    drop(bufs);
    assert_eq!(
        vm_locked_bytes() - base,
        s.bytes_pinned,
        "idle regions stay locked"
    );
    pool.shrink_to(0);
    assert_eq!(vm_locked_bytes(), base);
}

#[cfg(target_os = "linux")]
#[test]
fn mlock_regions_are_reused_not_relocked() {
    let _one_at_a_time = MLOCK_TESTS.lock();
    let base = vm_locked_bytes();
    let alloc = Counting::new(MlockAllocator);
    let pool = PinnedPool::new(alloc.clone(), MemoryBudget::new(64 << 20), limits(32 << 20));
    for _ in 0..20 {
        let mut buf = pool.checkout("job", 1 << 20).unwrap();
        assert!(buf.page_locked());
        buf.fill(1);
    }
    assert_eq!(alloc.allocs(), 1);
    assert_eq!(vm_locked_bytes() - base, 1 << 20);
    drop(pool);
    assert_eq!(
        vm_locked_bytes(),
        base,
        "dropping the pool unlocks everything"
    );
}
