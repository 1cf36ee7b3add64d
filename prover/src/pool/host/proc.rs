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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::pool::host::{HostAllocator, MlockAllocator};

    #[test]
    fn a_locked_region_shows_in_the_process_and_host_counts() {
        let bytes = 8 * crate::pool::page_size();
        let region = MlockAllocator.alloc(bytes).unwrap();
        let (process, host) = (vm_locked_bytes(), host_mlocked_bytes());
        // SAFETY: from this allocator, no longer used.
        unsafe { MlockAllocator.free(region) };
        assert!(process >= bytes as u64, "VmLck {process} < {bytes}");
        assert!(host >= bytes as u64, "Mlocked {host} < {bytes}");
    }
}
