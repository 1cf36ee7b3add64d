//! [`MlockAllocator`]: anonymous mappings locked into RAM with `mlock`,
//! page-locked without any device runtime; and the error that tells an
//! operator which limit refused the lock and how to raise it.

use super::region::{HostAllocator, Region};
use crate::pool::error::PoolError;

/// Anonymous private mappings locked into RAM with `mlock`: page-locked
/// without any device runtime, huge-page backed where the kernel allows.
/// The host shows them as `Mlocked` in `/proc/meminfo`, the process as
/// `VmLck` in `/proc/<pid>/status`.
#[derive(Debug, Default, Clone, Copy)]
pub struct MlockAllocator;

impl HostAllocator for MlockAllocator {
    fn name(&self) -> &'static str {
        "mlock"
    }

    fn page_locked(&self) -> bool {
        true
    }

    #[cfg(unix)]
    fn alloc(&self, bytes: usize) -> Result<Region, PoolError> {
        use super::mmap::{fault_in, map_anonymous, unmap};
        // Huge-page backed and without a copy in forked children (see
        // `map_anonymous`). Faulting it in from several threads first
        // leaves `mlock` only the locking: it would otherwise fault every
        // page in itself, on one thread. Both make the region resident and
        // locked before this returns (the pool's allocation time).
        let region = map_anonymous(self.name(), bytes)?;
        let len = region.len();
        fault_in(&region);
        // SAFETY: the region is the mapping just made.
        if unsafe { libc::mlock(region.as_ptr().cast(), len) } != 0 {
            let err = std::io::Error::last_os_error();
            // SAFETY: the mapping just made, which nothing uses.
            unsafe { unmap(region) };
            return Err(mlock_error(len, err));
        }
        Ok(region)
    }

    #[cfg(unix)]
    unsafe fn free(&self, region: Region) {
        // SAFETY: the caller guarantees the region is one of our mappings.
        unsafe { super::mmap::unmap(region) };
    }

    #[cfg(not(unix))]
    fn alloc(&self, _bytes: usize) -> Result<Region, PoolError> {
        Err(PoolError::Unsupported {
            allocator: self.name(),
        })
    }

    #[cfg(not(unix))]
    unsafe fn free(&self, _region: Region) {}
}

/// What a refused `mlock` of `len` bytes means: a limit (naming it, what
/// is locked already, and the fix) or another failure of the call.
#[cfg(unix)]
fn mlock_error(len: usize, err: std::io::Error) -> PoolError {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    let have_limit = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) } == 0;
    let fmt = |v: libc::rlim_t| {
        if v == libc::RLIM_INFINITY {
            "unlimited".to_string()
        } else {
            format!("{v} bytes")
        }
    };
    let limit_text = if have_limit {
        format!("soft {}, hard {}", fmt(limit.rlim_cur), fmt(limit.rlim_max))
    } else {
        "unknown".into()
    };
    match err.raw_os_error() {
        Some(libc::EPERM) | Some(libc::ENOMEM) | Some(libc::EAGAIN) => PoolError::MemlockLimit {
            bytes: len,
            limit: limit_text,
            locked: super::proc::vm_locked_bytes(),
            source: err,
        },
        _ => PoolError::Os {
            allocator: "mlock",
            call: "mlock",
            bytes: len,
            source: err,
        },
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use crate::pool::pages::page_size;
    use std::error::Error as _;

    #[test]
    fn mlock_regions_are_aligned_zeroed_and_writable() {
        super::super::region::check_contract(&MlockAllocator);
        assert!(MlockAllocator.page_locked());
    }

    #[test]
    fn mlock_rounds_to_pages() {
        let region = MlockAllocator.alloc(1).unwrap();
        assert_eq!(region.len(), page_size());
        // SAFETY: from this allocator, no longer used.
        unsafe { MlockAllocator.free(region) };
    }

    #[test]
    fn memlock_refusal_names_the_limit_and_the_fix() {
        let err = mlock_error(1 << 30, std::io::Error::from_raw_os_error(libc::EPERM));
        assert!(matches!(err, PoolError::MemlockLimit { bytes, .. } if bytes == 1 << 30));
        let text = err.to_string();
        assert!(text.contains("RLIMIT_MEMLOCK is soft"), "{text}");
        assert!(
            text.contains("ulimit -l") && text.contains("LimitMEMLOCK"),
            "{text}"
        );
        let other = mlock_error(4096, std::io::Error::from_raw_os_error(libc::EINVAL));
        assert!(matches!(
            other,
            PoolError::Os {
                allocator: "mlock",
                call: "mlock",
                ..
            }
        ));
    }

    #[test]
    fn a_refused_lock_keeps_the_os_error_as_its_source() {
        for errno in [libc::EPERM, libc::EINVAL] {
            let err = mlock_error(4096, std::io::Error::from_raw_os_error(errno));
            let source = err
                .source()
                .and_then(|s| s.downcast_ref::<std::io::Error>())
                .unwrap_or_else(|| panic!("no io::Error source in {err:?}"));
            assert_eq!(source.raw_os_error(), Some(errno));
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_locked_region_shows_in_the_process_and_host_counts() {
        use super::super::proc::{host_mlocked_bytes, vm_locked_bytes};
        let bytes = 8 * page_size();
        let region = MlockAllocator.alloc(bytes).unwrap();
        let (process, host) = (vm_locked_bytes(), host_mlocked_bytes());
        // SAFETY: from this allocator, no longer used.
        unsafe { MlockAllocator.free(region) };
        assert!(process >= bytes as u64, "VmLck {process} < {bytes}");
        assert!(host >= bytes as u64, "Mlocked {host} < {bytes}");
    }
}
