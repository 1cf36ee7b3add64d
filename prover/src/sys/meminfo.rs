//! `/proc/meminfo` and `/proc/<pid>/status`: `Name:   123 kB` lines, read
//! by one rule. A `kB` value becomes bytes, a value without a unit (the
//! `HugePages_*` counts) stays as it is, and a line with any other unit or a
//! value that overflows is left out rather than misread.

use std::collections::HashMap;
use std::path::Path;

/// The host's memory file.
pub const MEMINFO: &str = "/proc/meminfo";

/// One line's value, or `None` when it is not a well-formed field.
fn value(rest: &str) -> Option<u64> {
    let mut parts = rest.split_whitespace();
    let n: u64 = parts.next()?.parse().ok()?;
    match (parts.next(), parts.next()) {
        (Some("kB"), None) => n.checked_mul(1024),
        (None, None) => Some(n),
        _ => None,
    }
}

/// The field `name` of such a text.
pub fn field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?.strip_prefix(':')?;
        value(rest)
    })
}

/// Every well-formed field of such a text.
pub fn fields(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let (key, rest) = line.split_once(':')?;
            Some((key.trim().to_string(), value(rest)?))
        })
        .collect()
}

/// Reads one field of a file such as [`MEMINFO`] or `/proc/self/status`.
pub fn read_field(file: impl AsRef<Path>, name: &str) -> std::io::Result<Option<u64>> {
    Ok(field(&std::fs::read_to_string(file)?, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kb_becomes_bytes_counts_stay_counts_other_units_are_refused() {
        let text = "MemTotal:       24683656 kB\nMlocked:           13628 kB\nHugePages_Total: 0\nName:\tprover\nOdd: 5 MB\n";
        assert_eq!(field(text, "MemTotal"), Some(24683656 * 1024));
        assert_eq!(field(text, "Mlocked"), Some(13628 * 1024));
        assert_eq!(field(text, "HugePages_Total"), Some(0));
        assert_eq!(field(text, "Mem"), None);
        assert_eq!(field(text, "Odd"), None);
        let all = fields(text);
        assert_eq!(all["MemTotal"], 24683656 * 1024);
        assert_eq!(all["HugePages_Total"], 0);
        assert!(!all.contains_key("Name") && !all.contains_key("Odd"));
        assert_eq!(field("Big: 18446744073709551615 kB", "Big"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn live_files_have_the_fields_the_prover_reads() {
        // A renamed or missing field would silently read as absent.
        for name in ["MemTotal", "MemAvailable", "Mlocked", "Shmem"] {
            assert!(read_field(MEMINFO, name).unwrap().is_some(), "{name}");
        }
        for name in ["VmRSS", "VmLck"] {
            assert!(
                read_field("/proc/self/status", name).unwrap().is_some(),
                "{name}"
            );
        }
    }
}
