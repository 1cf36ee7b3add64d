//! [`PoolError`]: why the pool could not make or hand out a buffer, for
//! every part of the pool and for the allocators a device runtime adds.

use std::time::Duration;

use crate::budget::BudgetError;

/// Why the pool could not hand out or make a buffer.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// An allocator that reports its failures as text (a device driver's
    /// status, the heap returning null).
    #[error("{allocator} allocator: cannot allocate {bytes} bytes: {reason}")]
    Alloc {
        allocator: &'static str,
        bytes: usize,
        reason: String,
    },
    /// A system call behind an allocator failed.
    #[error("{allocator} allocator: cannot allocate {bytes} bytes: {call}: {source}")]
    Os {
        allocator: &'static str,
        call: &'static str,
        bytes: usize,
        #[source]
        source: std::io::Error,
    },
    /// A size no allocator could ever serve on this host.
    #[error("{allocator} allocator: cannot allocate {bytes} bytes: {why}")]
    TooLarge {
        allocator: &'static str,
        bytes: u64,
        why: &'static str,
    },
    /// The allocator does not exist on this platform.
    #[error("{allocator} allocator: not available on this platform")]
    Unsupported { allocator: &'static str },
    #[error(
        "mlock of {bytes} bytes refused ({source}); RLIMIT_MEMLOCK is {limit}, {locked} bytes \
         already locked by this process. Fix: raise the limit (`ulimit -l unlimited`, or \
         `LimitMEMLOCK=infinity` in the systemd unit, or memlock in /etc/security/limits.conf), \
         or run as root"
    )]
    MemlockLimit {
        bytes: usize,
        limit: String,
        locked: u64,
        #[source]
        source: std::io::Error,
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
