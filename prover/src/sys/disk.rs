//! Free space of a file system, as an unprivileged writer may use it.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Bytes an unprivileged process may still write on the file system that
/// holds `path` (`statvfs`: available blocks times the fragment size).
pub fn available_bytes(path: &Path) -> io::Result<u64> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path holds a NUL byte"))?;
    // SAFETY: `c` is a valid NUL-terminated string; `st` is written by the
    // call before it is read, and only read when the call succeeded.
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let st = unsafe { st.assume_init() };
    // The field widths differ between targets; both fit in u64 here.
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    let (blocks, fragment) = (u64::from(st.f_bavail), u64::from(st.f_frsize));
    Ok(blocks.saturating_mul(fragment))
}

/// Whether this process may create files in the folder `dir` (`access`
/// with `W_OK`: a read-only mount or missing permission says no; root on a
/// writable mount says yes, as its writes would succeed).
pub fn writable(dir: &Path) -> bool {
    let Ok(c) = CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated string; access only reads it.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_real_folder_has_some_space_and_a_missing_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(super::available_bytes(dir.path()).unwrap() > 0);
        assert!(super::available_bytes(&dir.path().join("missing")).is_err());
        assert!(super::writable(dir.path()));
        assert!(!super::writable(&dir.path().join("missing")));
    }
}
