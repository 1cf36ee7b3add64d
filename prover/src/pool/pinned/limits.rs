//! What a pool is told ([`PoolLimits`]) and what it tells ([`PoolStats`],
//! [`ShrinkReport`]): the plain types the daemon's config and API carry.

use serde::{Deserialize, Serialize};
use std::time::Duration;

use crate::pool::pages::whole_pages;

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
    /// [`PinnedPool::shrink_idle`](super::PinnedPool::shrink_idle).
    pub idle_shrink_after: Duration,
    /// How long [`PinnedPool::checkout`](super::PinnedPool::checkout) and
    /// [`PinnedPool::checkout_many`](super::PinnedPool::checkout_many) wait
    /// for memory before failing.
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

impl PoolLimits {
    /// The limits a pool works with: `slab_bytes` in whole pages, by the
    /// pool's one rounding rule, or [`DEFAULT_SLAB_BYTES`] where it cannot
    /// be rounded.
    pub(super) fn in_whole_pages(mut self) -> Self {
        self.slab_bytes = usize::try_from(self.slab_bytes)
            .ok()
            .and_then(whole_pages)
            .map_or(DEFAULT_SLAB_BYTES, |b| b as u64);
        self
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::pages::page_size;

    fn slab(bytes: u64) -> u64 {
        PoolLimits {
            slab_bytes: bytes,
            ..PoolLimits::default()
        }
        .in_whole_pages()
        .slab_bytes
    }

    #[test]
    fn slabs_are_whole_pages_rounded_up() {
        let page = page_size() as u64;
        assert_eq!(slab(0), page, "a slab is never empty");
        assert_eq!(slab(1), page);
        assert_eq!(slab(5 * page - 1), 5 * page);
        assert_eq!(slab(DEFAULT_SLAB_BYTES), DEFAULT_SLAB_BYTES);
    }

    #[test]
    fn a_slab_size_that_cannot_be_rounded_falls_back_to_the_default() {
        assert_eq!(slab(u64::MAX), DEFAULT_SLAB_BYTES);
    }
}
