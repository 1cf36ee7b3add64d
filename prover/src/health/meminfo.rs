//! Memory facts for the probe: the host's `/proc/meminfo` (with sysinfo's
//! view as a cross-check) and a process's `/proc/<pid>/status`, both read
//! by [`crate::sys::meminfo`].

use crate::sys::meminfo::{fields, MEMINFO};
use fleet_wire::health::Memory;

/// The host's memory.
pub fn host_memory() -> Memory {
    let mut m = Memory::default();
    match std::fs::read_to_string(MEMINFO) {
        Ok(text) => {
            let f = fields(&text);
            m.total_bytes = f.get("MemTotal").copied();
            m.available_bytes = f.get("MemAvailable").copied();
            m.free_bytes = f.get("MemFree").copied();
            m.shmem_bytes = f.get("Shmem").copied();
            m.mlocked_bytes = f.get("Mlocked").copied();
            m.hugepages_total = f.get("HugePages_Total").copied();
            m.hugepages_free = f.get("HugePages_Free").copied();
            m.hugepage_size_bytes = f.get("Hugepagesize").copied();
        }
        Err(e) => m.error = Some(format!("{MEMINFO}: {e}")),
    }
    match sysinfo::System::new() {
        Ok(mut sys) => {
            sys.refresh_memory();
            m.sysinfo_total_bytes = Some(sys.total_memory()).filter(|t| *t > 0);
            m.sysinfo_available_bytes = m.sysinfo_total_bytes.map(|_| sys.available_memory());
        }
        Err(e) => m
            .error
            .get_or_insert_with(String::new)
            .push_str(&format!("sysinfo: {e}")),
    }
    m
}

/// `VmRSS`, `VmLck`, `VmPin` of a process, in bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcMemory {
    pub rss: Option<u64>,
    pub locked: Option<u64>,
    pub pinned: Option<u64>,
}

pub fn process_memory(pid: u32) -> Result<ProcMemory, String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    let f = fields(&text);
    Ok(ProcMemory {
        rss: f.get("VmRSS").copied(),
        locked: f.get("VmLck").copied(),
        pinned: f.get("VmPin").copied(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_memory_is_readable() {
        let m = process_memory(std::process::id()).unwrap();
        assert!(m.rss.unwrap_or(0) > 0);
        assert!(m.locked.is_some());
    }
}
