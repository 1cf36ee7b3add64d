//! The wall clock as Unix time, the one source of every timestamp the prover
//! writes (timing records, probe documents, job ids, parameter sidecars).
//! A clock before 1970 reads as 0 rather than failing.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now as Unix microseconds.
pub fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Now as Unix milliseconds.
pub fn unix_millis() -> u64 {
    unix_micros() / 1000
}

/// Now as Unix seconds.
pub fn unix_secs() -> u64 {
    unix_micros() / 1_000_000
}
