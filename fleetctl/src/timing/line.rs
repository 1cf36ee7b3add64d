//! Which lines of a host's timing log the store keeps: a line of at most
//! [`MAX_LINE`] bytes that is a timing record (a JSON object with a `kind`).
//! `collect` applies this rule to every line it fetches and `report` reads
//! with the same bound, so one hostile or damaged line costs a count and a
//! note saying where it was, never the report of the whole fleet.

pub use crate::input::MAX_LINE;
use serde::{Deserialize, Serialize};

/// A line left out, and where it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedLine {
    /// The host (inventory name).
    pub host: String,
    /// The file on the host, as its timing log path names it.
    pub file: String,
    /// Line number in that file, from 1.
    pub line: u64,
    /// The line's length, its newline included.
    pub bytes: u64,
    pub reason: String,
}

/// What a line is, for the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A record: kept.
    Record,
    /// Only white space: dropped, not worth a note.
    Blank,
    /// Left out, with the reason.
    Skip(String),
}

/// Only the fields that make a line a record; serde reads past the rest
/// without keeping it, and still checks that the whole line is JSON.
#[derive(Deserialize)]
struct Probe {
    #[allow(dead_code)]
    kind: String,
}

/// Longest reason kept from a parser's message: serde echoes a string it
/// did not expect whole, and the line is not ours to repeat.
const REASON_MAX: usize = 160;

/// `why`, cut to [`REASON_MAX`] bytes (at a character boundary).
pub fn bounded_reason(why: &str) -> String {
    if why.len() <= REASON_MAX {
        return why.to_owned();
    }
    let mut end = REASON_MAX;
    while !why.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &why[..end])
}

/// The reason given for a line past [`MAX_LINE`].
pub fn too_long(bytes: u64) -> String {
    format!("line of {bytes} bytes, longer than the {MAX_LINE} a timing record may have")
}

/// Whether the store keeps `line` (its newline may be included). The test
/// for a record is a light one on purpose: a record of a kind this reader
/// does not know (a newer prover) is still kept for a newer report.
pub fn verdict(line: &[u8]) -> Verdict {
    if line.len() > MAX_LINE {
        return Verdict::Skip(too_long(line.len() as u64));
    }
    if line.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Blank;
    }
    match serde_json::from_slice::<Probe>(line) {
        Ok(_) => Verdict::Record,
        Err(e) => Verdict::Skip(bounded_reason(&format!("not a timing record: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_kept_and_the_rest_named() {
        assert_eq!(verdict(b"{\"kind\":\"proof\",\"v\":9}\n"), Verdict::Record);
        assert_eq!(verdict(b"{\"kind\":\"from-the-future\"}"), Verdict::Record);
        assert_eq!(verdict(b"  \n"), Verdict::Blank);
        for bad in [
            &b"not json\n"[..],
            b"{\"v\":1}\n",
            b"[1,2]\n",
            b"{\"kind\":\"p\"",
        ] {
            assert!(
                matches!(verdict(bad), Verdict::Skip(ref r) if r.starts_with("not a timing record")),
                "{bad:?}"
            );
        }
        let long = vec![b' '; MAX_LINE + 1];
        assert_eq!(verdict(&long), Verdict::Skip(too_long(MAX_LINE as u64 + 1)));
    }

    #[test]
    fn a_reason_never_repeats_a_long_line() {
        let line = format!("\"{}\"\n", "s".repeat(10_000));
        let Verdict::Skip(r) = verdict(line.as_bytes()) else {
            panic!("a string is no record")
        };
        assert!(r.len() <= REASON_MAX + 4, "{}", r.len());
        assert_eq!(
            bounded_reason("é".repeat(200).as_str()).chars().last(),
            Some('…')
        );
    }
}
