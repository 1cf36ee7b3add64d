//! Whether the CUDA driver loads and how many devices answer: the checks
//! every CUDA entry makes before calling into cudarc.

use cudarc::driver::{result, sys};

/// Whether the CUDA driver library loads (no device query). Safe to call anywhere.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda by its usual names.
    unsafe { sys::is_culib_present() }
}

/// Number of CUDA devices, 0 when there is no driver or it fails to start.
pub fn device_count() -> u32 {
    if !driver_present() {
        return 0;
    }
    if result::init().is_err() {
        return 0;
    }
    result::device::get_count().map_or(0, |n| n.max(0) as u32)
}
