//! Human-written step parameters: durations as humantime strings (`30s`,
//! `2m 30s`) and sizes with binary or decimal units (`2GiB`, `512MiB`, `1GB`),
//! and the bounds every one of them is held to ([`Check`]).

use serde::{de, Deserialize, Deserializer, Serializer};
use std::fmt::Display;
use std::ops::RangeInclusive;
use std::time::Duration;

/// A step's parameters, checked against their bounds when the playbook is
/// read, so a bad value is an error at its line, not a failure mid-run.
pub trait Check {
    /// `Err` names the key, its bounds and the value written.
    fn check(&self) -> Result<(), String>;
}

/// Deadlines of a step or of one command in it. Past a day, a deadline is
/// a typo (`300h` for `300s`), and `Instant + Duration` would panic long
/// before `humantime`'s largest value.
pub const TIMEOUTS: RangeInclusive<Duration> = Duration::from_secs(1)..=Duration::from_secs(86_400);
/// Poll intervals: below 10 ms a poll would spin over ssh; above a
/// minute a step would sleep past what it waits for.
pub const POLLS: RangeInclusive<Duration> = Duration::from_millis(10)..=Duration::from_secs(60);
/// Pauses and grace periods (settle, kill_wait, wait): none at all is
/// allowed.
pub const WAITS: RangeInclusive<Duration> = Duration::ZERO..=Duration::from_secs(86_400);
/// Memory margins and tolerances: no host has 64 TiB.
pub const MEMORY: RangeInclusive<ByteSize> = ByteSize(0)..=ByteSize(64 << 40);

/// `value` of `key` within `range` (inclusive), or the message saying so;
/// the one bounds check behind every step parameter.
pub fn in_range<T: PartialOrd + Display>(
    key: &str,
    value: T,
    range: &RangeInclusive<T>,
) -> Result<(), String> {
    in_range_shown(key, value, range, |v| v.to_string())
}

/// [`in_range`] for a duration, shown as a playbook writes it (`30s`, `1day`).
pub fn duration_in(
    key: &str,
    value: Duration,
    range: &RangeInclusive<Duration>,
) -> Result<(), String> {
    in_range_shown(key, value, range, |d| {
        humantime::format_duration(*d).to_string()
    })
}

fn in_range_shown<T: PartialOrd>(
    key: &str,
    value: T,
    range: &RangeInclusive<T>,
    shown: impl Fn(&T) -> String,
) -> Result<(), String> {
    if range.contains(&value) {
        return Ok(());
    }
    Err(format!(
        "`{key}` must be from {} to {}, not {}",
        shown(range.start()),
        shown(range.end()),
        shown(&value)
    ))
}

/// A byte count written by a human.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub const fn mib(n: u64) -> ByteSize {
        ByteSize(n << 20)
    }

    pub const fn gib(n: u64) -> ByteSize {
        ByteSize(n << 30)
    }

    /// Parses `1234`, `64KiB`, `2GiB`, `1.5 GiB`, `1GB`, `512M`.
    pub fn parse(text: &str) -> Result<ByteSize, String> {
        let t = text.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let value: f64 = num.parse().map_err(|_| {
            format!("invalid size {text:?}: expected a number and a unit like 2GiB")
        })?;
        let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kib" => 1 << 10,
            "m" | "mib" => 1 << 20,
            "g" | "gib" => 1 << 30,
            "t" | "tib" => 1 << 40,
            "kb" => 1_000,
            "mb" => 1_000_000,
            "gb" => 1_000_000_000,
            "tb" => 1_000_000_000_000,
            other => return Err(format!("invalid size {text:?}: unknown unit {other:?} (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)")),
        };
        let bytes = value * mult as f64;
        if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
            return Err(format!("invalid size {text:?}: out of range"));
        }
        Ok(ByteSize(bytes.round() as u64))
    }
}

impl std::fmt::Display for ByteSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = self.0;
        for (unit, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] {
            if b >= 1 << shift {
                let v = b as f64 / (1u64 << shift) as f64;
                return if b.is_multiple_of(1 << shift) {
                    write!(f, "{}{unit}", b >> shift)
                } else {
                    write!(f, "{v:.1}{unit}")
                };
            }
        }
        write!(f, "{b}B")
    }
}

impl serde::Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ByteSize, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bytes(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Bytes(b) => Ok(ByteSize(b)),
            Raw::Text(t) => ByteSize::parse(&t).map_err(de::Error::custom),
        }
    }
}

/// `#[serde(with = "duration")]` for humantime strings.
pub mod duration {
    use super::*;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(|e| {
            de::Error::custom(format!(
                "invalid duration {text:?}: {e} (write e.g. 30s, 2m, 1m 30s)"
            ))
        })
    }
}

/// Short form of a duration for messages.
pub fn show(d: Duration) -> String {
    if d.as_secs() >= 1 || d.is_zero() {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_binary_and_decimal_units() {
        assert_eq!(ByteSize::parse("2GiB").unwrap(), ByteSize::gib(2));
        assert_eq!(ByteSize::parse("512 MiB").unwrap(), ByteSize::mib(512));
        assert_eq!(ByteSize::parse("1.5GiB").unwrap(), ByteSize(3 << 29));
        assert_eq!(ByteSize::parse("1GB").unwrap(), ByteSize(1_000_000_000));
        assert_eq!(ByteSize::parse("4096").unwrap(), ByteSize(4096));
        assert!(ByteSize::parse("2 parsecs")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(ByteSize::parse("GiB").is_err());
    }

    #[test]
    fn bounds_name_the_key_its_range_and_the_value() {
        assert_eq!(
            duration_in("timeout", Duration::ZERO, &TIMEOUTS).unwrap_err(),
            "`timeout` must be from 1s to 1day, not 0s"
        );
        assert_eq!(
            duration_in("poll", Duration::from_millis(1), &POLLS).unwrap_err(),
            "`poll` must be from 10ms to 1m, not 1ms"
        );
        duration_in("timeout", Duration::from_secs(86_400), &TIMEOUTS).unwrap();
        duration_in("settle", Duration::ZERO, &WAITS).unwrap();
        assert_eq!(
            in_range("margin", ByteSize(1 << 50), &MEMORY).unwrap_err(),
            "`margin` must be from 0B to 64TiB, not 1024TiB"
        );
        assert_eq!(
            in_range("keep_releases", 1001, &(0..=1000)).unwrap_err(),
            "`keep_releases` must be from 0 to 1000, not 1001"
        );
    }

    #[test]
    fn sizes_print_back_parseably() {
        for s in ["2GiB", "256MiB", "1.5GiB", "17B"] {
            assert_eq!(ByteSize::parse(s).unwrap().to_string(), s);
        }
    }
}
