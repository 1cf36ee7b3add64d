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

/// The CUDA driver's version (13000 for 13.0), `None` without a driver.
/// Needs no device and no `cuInit`.
pub fn driver_version() -> Option<i32> {
    if !driver_present() {
        return None;
    }
    let mut v = 0;
    // SAFETY: the library is present; the call only writes the int.
    let rc = unsafe { sys::cuDriverGetVersion(&mut v) };
    (rc == sys::cudaError_enum::CUDA_SUCCESS).then_some(v)
}

/// The architecture (`sm_XY`) of device `ordinal`, read without creating
/// a context (a running daemon's device is not disturbed); `None` without
/// a driver or such a device.
pub fn device_arch(ordinal: u32) -> Option<String> {
    use sys::CUdevice_attribute as A;
    if ordinal >= device_count() {
        return None;
    }
    let dev = result::device::get(i32::try_from(ordinal).ok()?).ok()?;
    // SAFETY: `dev` is a valid device handle; the calls only read attributes.
    let major = unsafe {
        result::device::get_attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
    }
    .ok()?;
    // SAFETY: as above.
    let minor = unsafe {
        result::device::get_attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
    }
    .ok()?;
    Some(super::kernels::arch_for(major, minor))
}
