//! Where the pool's memory comes from: [`Region`]s made by a
//! [`HostAllocator`], and what the kernel reports about the locked ones.
//!
//! - [`region`]: the [`Region`] type and the [`HostAllocator`] contract
//!   (a device runtime's pinned allocator implements it too).
//! - [`mmap`]: huge-page backed anonymous mappings, faulted in on many
//!   threads; what both allocators here (and device registration) map.
//! - [`heap`]: [`HeapAllocator`], pageable memory.
//! - [`mlock`]: [`MlockAllocator`], page-locked memory without a driver.
//! - [`proc`]: locked memory as the kernel counts it (`VmLck`, `Mlocked`).

pub mod heap;
pub mod mlock;
#[cfg(unix)]
pub mod mmap;
pub mod proc;
pub mod region;

pub use heap::HeapAllocator;
pub use mlock::MlockAllocator;
pub use proc::{host_mlocked_bytes, vm_locked_bytes};
pub use region::{HostAllocator, Region};
