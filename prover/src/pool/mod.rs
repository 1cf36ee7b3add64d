//! Pool of page-locked host buffers reused across jobs.
//!
//! Pinning memory is slow (an 8 GiB `cudaHostAlloc` takes seconds) but
//! copying to a device from pinned memory is an order of magnitude faster
//! than from pageable memory, so memory is pinned once in large slabs, kept,
//! and carved into buffers job after job. Every byte the pool holds, idle or in use, is a
//! [`Reservation`](crate::budget::Reservation) against the process's
//! [`MemoryBudget`](crate::budget::MemoryBudget).
//!
//! - [`alloc`]: where regions come from ([`MlockAllocator`], [`HeapAllocator`];
//!   a device runtime adds its own [`HostAllocator`]).
//! - [`mmap`]: huge-page backed anonymous mappings, faulted in on many threads.
//! - [`slab`]: one slab's free extents (best fit, coalescing).
//! - [`pinned`]: the pool itself: slabs, best-fit carving, growth,
//!   all-or-nothing checkout of several buffers, idle shrinking.
//! - [`buf`]: [`PinnedBuf`], the RAII guard of one checked-out region.
//! - [`vec`]: [`PinnedVec`], a fixed-capacity typed vector over a buffer.
//! - [`proc`]: what the kernel reports about locked memory.

pub mod alloc;
pub mod buf;
#[cfg(unix)]
pub mod mmap;
pub mod pinned;
pub mod proc;
pub mod slab;
pub mod vec;

pub use alloc::{
    page_size, pages_for, HeapAllocator, HostAllocator, MlockAllocator, Region, REGION_ALIGN,
};
pub use buf::PinnedBuf;
pub use pinned::{PinnedPool, PoolLimits, PoolStats, ShrinkReport, DEFAULT_SLAB_BYTES};
pub use proc::{host_mlocked_bytes, vm_locked_bytes};
pub use vec::{CapacityError, PinnedVec, PinnedVecError};

use crate::budget::BudgetError;
use std::time::Duration;

/// Why the pool could not hand out or make a buffer.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("{allocator} allocator: cannot allocate {bytes} bytes: {reason}")]
    Alloc {
        allocator: &'static str,
        bytes: usize,
        reason: String,
    },
    #[error(
        "mlock of {bytes} bytes refused ({reason}); RLIMIT_MEMLOCK is {limit}, {locked} bytes \
         already locked by this process. Fix: raise the limit (`ulimit -l unlimited`, or \
         `LimitMEMLOCK=infinity` in the systemd unit, or memlock in /etc/security/limits.conf), \
         or run as root"
    )]
    MemlockLimit {
        bytes: usize,
        limit: String,
        locked: u64,
        reason: String,
    },
    #[error("{who}: {requested} bytes requested but the pool may hold at most {max_bytes}; it can never be granted")]
    ExceedsLimit {
        who: String,
        requested: u64,
        max_bytes: u64,
    },
    #[error("{who}: {requested} bytes not available from the pool after waiting {waited:?} ({in_use} of {max_bytes} bytes in use)")]
    Timeout {
        who: String,
        requested: u64,
        waited: Duration,
        in_use: u64,
        max_bytes: u64,
    },
    #[error("pool budget: {0}")]
    Budget(#[from] BudgetError),
}
