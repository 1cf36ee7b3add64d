//! Human-written step parameters: durations as humantime strings (`30s`,
//! `2m 30s`) and sizes with binary or decimal units (`2GiB`, `512MiB`, `1GB`).

use serde::{de, Deserialize, Deserializer, Serializer};
use std::time::Duration;

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
    fn sizes_print_back_parseably() {
        for s in ["2GiB", "256MiB", "1.5GiB", "17B"] {
            assert_eq!(ByteSize::parse(s).unwrap().to_string(), s);
        }
    }
}
