//! What the kernel reports about locked memory: the process's `VmLck` and
//! the host's `Mlocked`, the signals an operator (or a rollout step waiting
//! for a stopped daemon to let go of its memory) reads from outside.

use crate::budget::meminfo_field;

/// This process's locked memory (`VmLck` of `/proc/self/status`) in bytes;
/// 0 where the file cannot be read.
pub fn vm_locked_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|text| meminfo_field(&text, "VmLck"))
        .unwrap_or(0)
}

/// The host's locked memory (`Mlocked` of `/proc/meminfo`) in bytes; 0
/// where the file cannot be read.
pub fn host_mlocked_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| meminfo_field(&text, "Mlocked"))
        .unwrap_or(0)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn live_files_have_the_fields() {
        // A renamed or missing field would silently read as 0 above.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        assert!(meminfo_field(&status, "VmLck").is_some());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
        assert!(meminfo_field(&meminfo, "Mlocked").is_some());
    }
}
