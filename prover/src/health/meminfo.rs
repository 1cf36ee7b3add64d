//! Memory facts from `/proc`: the host's `/proc/meminfo` (with sysinfo's view
//! as a cross-check) and a process's `/proc/<pid>/status`.

use fleet_wire::health::Memory;
use std::collections::HashMap;

/// Parses `Key:   123 kB` lines into bytes (`HugePages_*` are counts, kept as is).
pub fn parse_kb_fields(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let (key, rest) = line.split_once(':')?;
            let mut parts = rest.split_whitespace();
            let n: u64 = parts.next()?.parse().ok()?;
            let bytes = match parts.next() {
                Some("kB") => n.checked_mul(1024)?,
                _ => n,
            };
            Some((key.trim().to_string(), bytes))
        })
        .collect()
}

/// The host's memory.
pub fn host_memory() -> Memory {
    let mut m = Memory::default();
    match std::fs::read_to_string("/proc/meminfo") {
        Ok(text) => {
            let f = parse_kb_fields(&text);
            m.total_bytes = f.get("MemTotal").copied();
            m.available_bytes = f.get("MemAvailable").copied();
            m.free_bytes = f.get("MemFree").copied();
            m.shmem_bytes = f.get("Shmem").copied();
            m.mlocked_bytes = f.get("Mlocked").copied();
            m.hugepages_total = f.get("HugePages_Total").copied();
            m.hugepages_free = f.get("HugePages_Free").copied();
            m.hugepage_size_bytes = f.get("Hugepagesize").copied();
        }
        Err(e) => m.error = Some(format!("/proc/meminfo: {e}")),
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
    let f = parse_kb_fields(&text);
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
    fn kb_fields_become_bytes_and_counts_stay_counts() {
        let f = parse_kb_fields("MemTotal:  2048 kB\nHugePages_Total:   4\nName:\tprover\n");
        assert_eq!(f["MemTotal"], 2 << 20);
        assert_eq!(f["HugePages_Total"], 4);
        assert!(!f.contains_key("Name"));
    }

    #[test]
    fn own_process_memory_is_readable() {
        let m = process_memory(std::process::id()).unwrap();
        assert!(m.rss.unwrap_or(0) > 0);
        assert!(m.locked.is_some());
    }
}
