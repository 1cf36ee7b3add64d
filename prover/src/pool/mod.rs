//! Pool of page-locked host buffers reused across jobs.
//!
//! Pinning memory is slow (an 8 GiB `cudaHostAlloc` takes seconds) but
//! copying to a device from pinned memory is an order of magnitude faster
//! than from pageable memory, so memory is pinned once in large slabs, kept,
//! and carved into buffers job after job. Every byte the pool holds, idle or
//! in use, is a [`Reservation`](crate::budget::Reservation) against the
//! process's [`MemoryBudget`](crate::budget::MemoryBudget).
//!
//! Layout, in the order memory flows through it:
//! - [`pages`]: the size rules every part shares (whole pages, alignment).
//! - [`host`]: where regions come from: [`HostAllocator`] and [`Region`],
//!   [`HeapAllocator`], [`MlockAllocator`] over huge-page [`mmap`]pings
//!   faulted in on many threads (a device runtime adds its own allocator),
//!   and what the kernel reports about locked memory.
//! - [`pinned`]: the pool itself, [`PinnedPool`]: slabs, best-fit carving,
//!   growth under the budget, all-or-nothing checkout of several buffers,
//!   shrinking.
//! - [`buf`]: [`PinnedBuf`], the guard of one checked-out range, which
//!   hands itself back to the pool on drop.
//! - [`vec`](mod@vec): [`PinnedVec`], a fixed-capacity typed vector over a buffer.
//! - [`error`]: [`PoolError`], shared by all of them.

pub mod buf;
pub mod error;
pub mod host;
pub mod pages;
pub mod pinned;
pub mod vec;

#[cfg(unix)]
pub use host::mmap;

pub use buf::PinnedBuf;
pub use error::PoolError;
pub use host::{
    host_mlocked_bytes, vm_locked_bytes, HeapAllocator, HostAllocator, MlockAllocator, Region,
};
pub use pages::{page_size, pages_for, pages_for_all, REGION_ALIGN};
pub use pinned::{PinnedPool, PoolLimits, PoolStats, ShrinkReport, DEFAULT_SLAB_BYTES};
pub use vec::{CapacityError, PinnedVec, PinnedVecError};
