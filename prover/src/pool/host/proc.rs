//! What the kernel reports about locked memory: the process's `VmLck` and
//! the host's `Mlocked`, the signals an operator (or a rollout step waiting
//! for a stopped daemon to let go of its memory) reads from outside.

use crate::sys::meminfo::{read_field, MEMINFO};

/// This process's locked memory (`VmLck` of `/proc/self/status`) in bytes;
/// 0 where the file cannot be read.
pub fn vm_locked_bytes() -> u64 {
    read_field("/proc/self/status", "VmLck")
        .ok()
        .flatten()
        .unwrap_or(0)
}

/// The host's locked memory (`Mlocked` of `/proc/meminfo`) in bytes; 0
/// where the file cannot be read.
pub fn host_mlocked_bytes() -> u64 {
    read_field(MEMINFO, "Mlocked").ok().flatten().unwrap_or(0)
}
