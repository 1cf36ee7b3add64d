//! Turns driver results into [`BackendError::Device`] carrying the call, the
//! source file and line, so a GPU failure fails the partition with a precise
//! reason instead of panicking the daemon.

use crate::backend::BackendError;

/// Maps an `Err` from a driver call to [`BackendError::Device`] at the
/// caller's file and line: `check!(dev, "cuMemAlloc", expr)?`.
macro_rules! check {
    ($device:expr, $call:expr, $result:expr) => {
        $result.map_err(|e| {
            $crate::backend::cuda::check::device_error($device, $call, file!(), line!(), &e)
        })
    };
}
pub(crate) use check;

/// Builds the error for `check!`; also used where there is no `Result` to map.
pub(crate) fn device_error(
    device: u32,
    call: &str,
    file: &'static str,
    line: u32,
    err: &dyn std::fmt::Debug,
) -> BackendError {
    BackendError::Device {
        device,
        call: call.to_string(),
        file,
        line,
        reason: format!("{err:?}"),
    }
}
