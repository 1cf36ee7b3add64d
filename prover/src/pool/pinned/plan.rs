//! Deciding a checkout, under the lock: which requests are carved from
//! slabs already held (best fit, largest request first), how large a new
//! slab must be for the rest, and which idle slabs make room for it. The
//! slow part (freeing, pinning) is carried out after, without the lock.

use super::books::{Carved, Slab, State};
use super::limits::PoolLimits;
use crate::budget::MemoryBudget;
use crate::pool::pages::whole_pages_within;

/// A checkout decided under the lock, carried out after it.
pub(super) struct Plan {
    /// Per request, in request order: where it was carved, or none (it goes
    /// into the new slab).
    pub(super) placed: Vec<Option<Carved>>,
    /// Bytes of the new slab; 0 when every request was placed.
    pub(super) grow: u64,
    pub(super) evicted: Vec<Slab>,
}

/// Decides how to serve `sizes` (whole pages each) now, or `None` if it
/// must wait. On success the carved ranges are counted in use, the evicted
/// slabs are off the books and the growth is counted as pending.
pub(super) fn plan(
    st: &mut State,
    sizes: &[u64],
    limits: &PoolLimits,
    budget: &MemoryBudget,
) -> Option<Plan> {
    if let Some(plan) = plan_with(st, sizes, limits, budget, true) {
        return Some(plan);
    }
    // Carving some requests into idle slabs can leave too little room to
    // grow the rest (one idle slab of 4 pages, max 4 pages, requests
    // of 1 and 4 pages). When no buffer can come back to change that,
    // start over from nothing instead of waiting for nothing: the
    // request fits `max_bytes` (checked).
    if st.in_use == 0 && st.pending == 0 {
        return plan_with(st, sizes, limits, budget, false);
    }
    None
}

fn plan_with(
    st: &mut State,
    sizes: &[u64],
    limits: &PoolLimits,
    budget: &MemoryBudget,
    reuse: bool,
) -> Option<Plan> {
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
        let room = limits.max_bytes.saturating_sub(st.held + st.pending);
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
        let available = budget.available();
        let to_free = need
            .saturating_sub(room)
            .max(need.saturating_sub(available));
        evicted = st.evict_idle(to_free);
        let freed: u64 = evicted.iter().map(Slab::len).sum();
        // A whole slab where max_bytes and the budget leave room for
        // one, so the next buffers are carved rather than pinned.
        let roomy = limits
            .slab_bytes
            .min(room + freed)
            .min(available.saturating_add(freed));
        grow = need.max(whole_pages_within(roomy));
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

#[cfg(test)]
mod tests {
    use super::super::books::testing::{books, free, PAGE};
    use super::super::test_pool as pool;
    use super::*;
    use crate::pool::pages::REGION_ALIGN;

    #[test]
    fn a_plan_that_must_wait_leaves_the_books_as_it_found_them() {
        let mut st = books(&[4]);
        let busy = st.carve(0, 0, 2 * PAGE);
        st.commit(&[busy]);
        let limits = PoolLimits {
            max_bytes: 4 * PAGE as u64,
            ..PoolLimits::default()
        };
        let budget = MemoryBudget::new(1 << 30);
        // The page would fit the busy slab's free half; the 4 pages fit
        // nowhere, and nothing but the busy buffer coming back makes room.
        let sizes = [PAGE as u64, 4 * PAGE as u64];
        assert!(plan(&mut st, &sizes, &limits, &budget).is_none());
        assert_eq!(st.slabs[0].free.extents(), &[(2 * PAGE, 2 * PAGE)]);
        assert_eq!(
            (st.in_use, st.pending, st.hits, st.misses),
            (2 * PAGE as u64, 0, 0, 0)
        );
        free(st, Vec::new());
    }

    #[test]
    fn a_growth_is_a_whole_slab_cut_to_the_room_left() {
        let mut st = books(&[]);
        let limits = PoolLimits {
            max_bytes: 5 * PAGE as u64 + 100,
            slab_bytes: 16 * PAGE as u64,
            ..PoolLimits::default()
        };
        let budget = MemoryBudget::new(1 << 30);
        let plan = plan(&mut st, &[PAGE as u64], &limits, &budget).unwrap();
        assert_eq!(plan.grow, 5 * PAGE as u64, "whole pages under max_bytes");
        assert_eq!(plan.grow % REGION_ALIGN as u64, 0);
        assert_eq!((st.pending, st.misses), (5 * PAGE as u64, 1));
        free(st, plan.evicted);
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
            .checkout_many_timeout("abc", &[PAGE, 3 * PAGE], std::time::Duration::from_secs(5))
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
    fn evicts_idle_slabs_when_the_budget_is_short() {
        // Pool limit above the budget: the budget is what binds.
        let p = pool(u64::MAX, 4 * PAGE as u64, 1);
        drop(p.checkout_many("small", &[PAGE, PAGE]).unwrap());
        assert_eq!(p.stats().regions, 1, "one slab for both, cut to the need");
        let _other = p.budget().reserve("params", PAGE as u64).unwrap();
        let big = p
            .checkout_timeout("big", 3 * PAGE, std::time::Duration::from_secs(5))
            .unwrap();
        assert_eq!(big.capacity(), 3 * PAGE);
        assert_eq!(p.stats().evictions, 1);
    }
}
