//! First pass over a playbook file: deserialise with unknown keys refused
//! and errors at file:line:column with the expected form.

use crate::inventory::yaml::{self, YamlFileError};
use crate::steps::{params, StepSpec};
use serde::de::{self, Deserializer};
use serde::Deserialize;
use std::path::Path;

/// The shape of a playbook, shown under every parse error.
pub const EXPECTED_FORM: &str = "\
name: NAME
strategy:                      # optional
  canary: N                    # hosts first, alone (tagged `canary` first)
  batch: N | \"25%\"             # hosts per batch after the canary
  max_fail: N                  # failed hosts tolerated before the run halts
  rollback_on_failure: true    # roll a failed host back to its previous build
  max_serving_gap: 5s          # a host out of service longer fails (and rolls back)
  stage: 8                     # upload+prepare every host first, 8 at a time
steps:
  - upload: { keep_releases: 3, timeout: 5m }
  - prepare: { timeout: 10m }
  - drain: { timeout: 30s }
  - wait_release: {}
  - start: {}
  - verify: {}
  - smoke: {}
  - health: {}
  - rollback: {}";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPlaybook {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub strategy: RawStrategy,
    pub steps: Vec<StepSpec>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStrategy {
    #[serde(default, deserialize_with = "canary")]
    pub canary: Option<usize>,
    pub batch: Option<BatchSize>,
    #[serde(default, deserialize_with = "max_fail")]
    pub max_fail: Option<usize>,
    pub rollback_on_failure: Option<bool>,
    #[serde(default, deserialize_with = "max_serving_gap")]
    pub max_serving_gap: Option<std::time::Duration>,
    /// Hosts staged at once (upload and prepare of every host before the
    /// first batch drains); absent: each host is staged in its batch.
    #[serde(default, deserialize_with = "stage")]
    pub stage: Option<usize>,
}

/// Most hosts a strategy's count may name: more than any fleet (and the
/// `max_fail: 1000000` of the built-ins that never halt), and a bound, so
/// a count is never converted from a number that does not fit.
pub const MAX_HOSTS: u64 = 1_000_000;

/// An optional host count of `key`, 0 to [`MAX_HOSTS`].
fn opt_count<'de, D: Deserializer<'de>>(key: &str, d: D) -> Result<Option<usize>, D::Error> {
    let Some(n) = Option::<u64>::deserialize(d)? else {
        return Ok(None);
    };
    params::in_range(key, n, &(0..=MAX_HOSTS)).map_err(de::Error::custom)?;
    usize::try_from(n).map(Some).map_err(de::Error::custom)
}

fn canary<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    opt_count("canary", d)
}

fn max_fail<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    opt_count("max_fail", d)
}

fn stage<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    opt_count("stage", d)
}

/// The longest a host may be out of service: a humantime duration from
/// 1ms (a gap is never zero) to a day.
fn max_serving_gap<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<std::time::Duration>, D::Error> {
    let Some(text) = Option::<String>::deserialize(d)? else {
        return Ok(None);
    };
    let gap = humantime::parse_duration(&text).map_err(|e| {
        de::Error::custom(format!(
            "invalid duration {text:?}: {e} (write e.g. 3s, 1m 30s)"
        ))
    })?;
    let range = std::time::Duration::from_millis(1)..=std::time::Duration::from_secs(86_400);
    params::duration_in("max_serving_gap", gap, &range).map_err(de::Error::custom)?;
    Ok(Some(gap))
}

/// Hosts per batch: a count, or a percentage of the selected hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchSize {
    Count(usize),
    Percent(u32),
}

impl<'de> Deserialize<'de> for BatchSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(usize),
            Text(String),
        }
        let bad = |t: &str| {
            de::Error::custom(format!(
                "invalid batch {t:?}: expected a host count (1 to {MAX_HOSTS}) or a percentage \
                 (\"1%\" to \"100%\")"
            ))
        };
        match Raw::deserialize(d)? {
            Raw::Int(n) if n == 0 || n as u64 > MAX_HOSTS => Err(bad(&n.to_string())),
            Raw::Int(n) => Ok(BatchSize::Count(n)),
            Raw::Text(t) => {
                let trimmed = t.trim();
                if let Some(p) = trimmed.strip_suffix('%') {
                    match p.trim().parse::<u32>() {
                        Ok(p) if (1..=100).contains(&p) => Ok(BatchSize::Percent(p)),
                        _ => Err(bad(&t)),
                    }
                } else {
                    match trimmed.parse::<usize>() {
                        Ok(n) if n > 0 && n as u64 <= MAX_HOSTS => Ok(BatchSize::Count(n)),
                        _ => Err(bad(&t)),
                    }
                }
            }
        }
    }
}

/// A read or parse error of a playbook file.
pub type RawError = YamlFileError;

/// Parses playbook text; `path` is only used in messages.
pub fn parse(path: &Path, text: &str) -> Result<RawPlaybook, RawError> {
    yaml::parse(path, text, EXPECTED_FORM)
}

/// Reads and parses a playbook file.
pub fn read(path: &Path) -> Result<RawPlaybook, RawError> {
    parse(path, &yaml::read_text("playbook", path)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse(Path::new("pb.yaml"), text).unwrap_err().to_string()
    }

    #[test]
    fn unknown_step_is_reported_at_its_line_with_the_expected_form() {
        let e = err("name: x\nsteps:\n  - upload: {}\n  - reboot: {}\n");
        assert!(e.starts_with("pb.yaml:4:5: "), "{e}");
        assert!(e.contains("unknown variant `reboot`"), "{e}");
        assert!(e.contains("expected form:\n    name: NAME"), "{e}");
    }

    #[test]
    fn unknown_strategy_key_and_wrong_types() {
        let e = err("name: x\nstrategy:\n  canaries: 1\nsteps: []\n");
        assert!(e.starts_with("pb.yaml:3:3: "), "{e}");
        assert!(e.contains("unknown field `canaries`"), "{e}");
        let e = err("name: x\nstrategy: { max_fail: lots }\nsteps: []\n");
        assert!(e.starts_with("pb.yaml:2:"), "{e}");
        let e = err("name: x\nstrategy: { batch: \"150%\" }\nsteps: []\n");
        assert!(e.contains("invalid batch \"150%\""), "{e}");
        let e = err("name: x\nstrategy: { canary: 1000001 }\nsteps: []\n");
        assert!(e.starts_with("pb.yaml:2:"), "{e}");
        assert!(
            e.contains("`canary` must be from 0 to 1000000, not 1000001"),
            "{e}"
        );
        let e = err("name: x\nstrategy: { max_fail: 18446744073709551615 }\nsteps: []\n");
        assert!(
            e.contains("`max_fail` must be from 0 to 1000000, not 18446744073709551615"),
            "{e}"
        );
        let e = err("name: x\nstrategy: { stage: -1 }\nsteps: []\n");
        assert!(e.starts_with("pb.yaml:2:"), "{e}");
        let e = err("name: x\nstrategy: { batch: 1000001 }\nsteps: []\n");
        assert!(e.contains("invalid batch \"1000001\""), "{e}");
        let e = err("name: x\nstrategy: { max_serving_gap: 0s }\nsteps: []\n");
        assert!(
            e.contains("`max_serving_gap` must be from 1ms to 1day, not 0s"),
            "{e}"
        );
        let e = err("name: x\nsteps:\n  - drain: { timout: 3s }\n");
        assert!(e.starts_with("pb.yaml:3:"), "{e}");
        assert!(e.contains("timout"), "{e}");
        // A step parameter out of its bounds, at its line.
        let e = err("name: x\nsteps:\n  - health: {}\n  - drain: { timeout: 0s }\n");
        assert!(e.starts_with("pb.yaml:4:"), "{e}");
        assert!(
            e.contains("drain: `timeout` must be from 1s to 1day, not 0s"),
            "{e}"
        );
        let e = err("steps: []\n");
        assert!(e.contains("missing field `name`"), "{e}");
    }

    #[test]
    fn batches_parse_as_counts_or_percentages() {
        let p = parse(
            Path::new("p"),
            "name: x\nstrategy: { canary: 1, batch: \"25%\", max_fail: 2 }\nsteps: [ { health: {} } ]\n",
        )
        .unwrap();
        assert_eq!(p.strategy.batch, Some(BatchSize::Percent(25)));
        assert_eq!(p.strategy.canary, Some(1));
        assert_eq!(p.steps.len(), 1);
        let p = parse(
            Path::new("p"),
            "name: x\nstrategy: { batch: 3 }\nsteps: []\n",
        )
        .unwrap();
        assert_eq!(p.strategy.batch, Some(BatchSize::Count(3)));
    }
}
