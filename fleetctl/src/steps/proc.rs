//! What `/proc/<pid>/status` and `/proc/meminfo` say, parsed.

/// One process, from `/proc/<pid>/status` and `/proc/<pid>/exe`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcInfo {
    /// State letter (`S`, `R`, `Z`, ...).
    pub state: char,
    /// Empty when unreadable (zombies have no exe).
    pub exe: String,
    pub vm_lck: u64,
    pub rss_shmem: u64,
    /// Anonymous resident memory: where registered (`cuMemHostRegister`)
    /// pinned memory shows, being neither `Shmem` nor `Mlocked`.
    pub rss_anon: u64,
}

impl ProcInfo {
    pub fn zombie(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// The host's memory, bytes, straight from `/proc/meminfo`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemInfo {
    pub total: u64,
    pub available: u64,
    pub shmem: u64,
    pub mlocked: u64,
}

pub fn parse_proc_status(text: &str) -> Option<ProcInfo> {
    let mut info = ProcInfo::default();
    let mut seen = false;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            "State" => {
                seen = true;
                info.state = value.chars().next().unwrap_or('?');
            }
            "Exe" => info.exe = value.to_owned(),
            "VmLck" => info.vm_lck = kb(value),
            "RssShmem" => info.rss_shmem = kb(value),
            "RssAnon" => info.rss_anon = kb(value),
            _ => {}
        }
    }
    seen.then_some(info)
}

fn kb(value: &str) -> u64 {
    value
        .split_whitespace()
        .next()
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

pub fn parse_meminfo(text: &str) -> Option<MemInfo> {
    let mut m = MemInfo::default();
    let (mut total, mut avail) = (false, false);
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        match key {
            "MemTotal" => {
                total = true;
                m.total = kb(value)
            }
            "MemAvailable" => {
                avail = true;
                m.available = kb(value)
            }
            "Shmem" => m.shmem = kb(value),
            "Mlocked" => m.mlocked = kb(value),
            _ => {}
        }
    }
    (total && avail).then_some(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_status_reads_state_and_locked_memory() {
        let text = "Name:\tprover\nState:\tS (sleeping)\nVmLck:\t  2048 kB\nRssAnon:\t 4096 kB\nRssShmem:\t 1024 kB\nExe:\t/opt/p/releases/ab/prover\n";
        let info = parse_proc_status(text).unwrap();
        assert_eq!(info.state, 'S');
        assert_eq!(info.vm_lck, 2048 * 1024);
        assert_eq!(info.rss_shmem, 1024 * 1024);
        assert_eq!(info.rss_anon, 4096 * 1024);
        assert_eq!(info.exe, "/opt/p/releases/ab/prover");
        assert!(!info.zombie());
        assert!(parse_proc_status("State:\tZ (zombie)\nExe:\t\n")
            .unwrap()
            .zombie());
        assert_eq!(parse_proc_status(""), None);
    }

    #[test]
    fn meminfo_needs_total_and_available() {
        let text = "MemTotal:       16384 kB\nMemFree: 1 kB\nMemAvailable:    8192 kB\nShmem:  4 kB\nMlocked: 8 kB\n";
        let m = parse_meminfo(text).unwrap();
        assert_eq!(
            (m.total, m.available, m.shmem, m.mlocked),
            (16384 * 1024, 8192 * 1024, 4096, 8192)
        );
        assert_eq!(parse_meminfo("MemFree: 1 kB\n"), None);
    }
}
