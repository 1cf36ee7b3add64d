//! First pass over an experiment definition: deserialise with unknown keys
//! refused, every number bounded, errors at file:line:column with the
//! expected form (the same reader as playbooks and inventories).

use super::metric::Metric;
use crate::inventory::yaml::{self, YamlFileError};
use crate::playbook::raw::RawStrategy;
use crate::steps::params::duration;
use serde::de::{self, Deserializer};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The shape of a definition, shown under every parse error.
pub const EXPECTED_FORM: &str = "\
name: NAME
description: TEXT                # optional
candidate:                       # optional
  config: FILE                   # prover.toml shipped with the candidate
hosts:
  canary: N | PATTERN            # a count from the selection (tagged `canary` first) or a --limit pattern
  baseline: N | PATTERN          # a count from the rest of the selection, or a pattern
workload:                        # exactly one of submit / observe
  submit: { circuit: chain, size: 1024, partitions: 1, jobs: 20 | duration: 2m, concurrency: 1, timeout: 120s }
  observe: { duration: 10m }
analysis:                        # optional
  confidence: 98%                # of the Mann-Whitney U test
  tolerance: 3%                  # effect size below which a difference is no change
  max_regression: 10%            # default for every metric
  min_samples: 10                # per group; fewer is NODATA
  metrics:
    - { metric: total, max_regression: 5%, critical: true }
    - { metric: h2d_gbps, must_improve: true }
verdict:                         # optional: promote | restore | keep per verdict
  pass: promote
  marginal: keep
  fail: restore
  nodata: restore
promote:                         # optional: the rollout to the rest of the selection
  strategy: { batch: 3, max_fail: 0 }";

/// Upper bounds of the numbers a definition may hold: past these a value is
/// a typo, and each is converted to a machine type only after this check.
pub const MAX_JOBS: u64 = 100_000;
pub const MAX_CONCURRENCY: u64 = 64;
pub const MAX_PARTITIONS: u64 = fleet_wire::api::MAX_PARTITIONS as u64;
pub const MIN_SIZE: u64 = *fleet_wire::api::CIRCUIT_SIZES.start();
pub const MAX_SIZE: u64 = *fleet_wire::api::CIRCUIT_SIZES.end();
pub const MAX_MIN_SAMPLES: u64 = 1_000_000;
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);
pub const MAX_HOSTS: u64 = 100_000;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawExperiment {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub candidate: RawCandidate,
    pub hosts: RawHosts,
    pub workload: RawWorkload,
    #[serde(default)]
    pub analysis: RawAnalysis,
    #[serde(default)]
    pub verdict: RawVerdictActions,
    #[serde(default)]
    pub promote: RawPromote,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCandidate {
    pub config: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHosts {
    pub canary: HostPick,
    pub baseline: HostPick,
}

/// Which hosts form a group: a count picked from the selection, or a
/// `--limit`-style pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPick {
    Count(usize),
    Pattern(String),
}

impl<'de> Deserialize<'de> for HostPick {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) if (1..=MAX_HOSTS).contains(&n) => Ok(HostPick::Count(n as usize)),
            Raw::Int(n) => Err(de::Error::custom(format!(
                "invalid host count {n}: expected 1 ..= {MAX_HOSTS}, or a pattern like \"tag:canary\""
            ))),
            Raw::Text(t) if t.trim().is_empty() => Err(de::Error::custom(
                "empty host pattern: expected a count or a pattern like \"h01,h02\"",
            )),
            Raw::Text(t) => Ok(HostPick::Pattern(t.trim().to_owned())),
        }
    }
}

/// Exactly one of the two is set (checked when the definition is resolved;
/// a map rather than a YAML enum, which would want `!submit` tags).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWorkload {
    pub submit: Option<RawSubmit>,
    pub observe: Option<RawObserve>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSubmit {
    #[serde(default = "default_circuit")]
    pub circuit: String,
    #[serde(deserialize_with = "size")]
    pub size: u64,
    #[serde(default = "one", deserialize_with = "partitions")]
    pub partitions: u32,
    #[serde(default, deserialize_with = "jobs")]
    pub jobs: Option<u32>,
    #[serde(default, deserialize_with = "opt_duration")]
    pub duration: Option<Duration>,
    #[serde(default = "one", deserialize_with = "concurrency")]
    pub concurrency: u32,
    #[serde(default, deserialize_with = "opt_duration")]
    pub timeout: Option<Duration>,
}

fn default_circuit() -> String {
    "chain".into()
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawObserve {
    #[serde(deserialize_with = "bounded_duration")]
    pub duration: Duration,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAnalysis {
    #[serde(default, deserialize_with = "opt_percent")]
    pub confidence: Option<f64>,
    #[serde(default, deserialize_with = "opt_percent")]
    pub tolerance: Option<f64>,
    #[serde(default, deserialize_with = "opt_percent")]
    pub max_regression: Option<f64>,
    #[serde(default, deserialize_with = "min_samples")]
    pub min_samples: Option<usize>,
    #[serde(default)]
    pub metrics: Vec<RawMetric>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetric {
    pub metric: Metric,
    #[serde(default, deserialize_with = "opt_percent")]
    pub max_regression: Option<f64>,
    #[serde(default, deserialize_with = "opt_percent")]
    pub tolerance: Option<f64>,
    #[serde(default)]
    pub must_improve: bool,
    #[serde(default)]
    pub critical: bool,
}

/// What to do with the canaries once the verdict is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Roll the candidate out to the rest of the selection.
    Promote,
    /// Put the canaries back on the release they ran before.
    Restore,
    /// Leave the canaries on the candidate for a person to decide.
    Keep,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawVerdictActions {
    pub pass: Option<Action>,
    pub marginal: Option<Action>,
    pub fail: Option<Action>,
    pub nodata: Option<Action>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPromote {
    #[serde(default)]
    pub strategy: RawStrategy,
}

fn bounded<'de, D: Deserializer<'de>>(d: D, what: &str, lo: u64, hi: u64) -> Result<u64, D::Error> {
    let n = u64::deserialize(d)?;
    if (lo..=hi).contains(&n) {
        Ok(n)
    } else {
        Err(de::Error::custom(format!(
            "invalid {what} {n}: expected {lo} ..= {hi}"
        )))
    }
}

fn size<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    bounded(d, "size", MIN_SIZE, MAX_SIZE)
}

fn partitions<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    // Bounded by MAX_PARTITIONS, so the conversion cannot truncate.
    bounded(d, "partitions", 1, MAX_PARTITIONS).map(|n| n as u32)
}

fn concurrency<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    bounded(d, "concurrency", 1, MAX_CONCURRENCY).map(|n| n as u32)
}

fn jobs<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    bounded(d, "jobs", 1, MAX_JOBS).map(|n| Some(n as u32))
}

fn min_samples<'de, D: Deserializer<'de>>(d: D) -> Result<Option<usize>, D::Error> {
    // Fewer than 3 per group leaves the normal approximation meaningless.
    bounded(d, "min_samples", 3, MAX_MIN_SAMPLES).map(|n| Some(n as usize))
}

fn bounded_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let t = duration::deserialize(d)?;
    if t.is_zero() || t > MAX_DURATION {
        return Err(de::Error::custom(format!(
            "invalid duration {}: expected more than 0 and at most 24h",
            humantime::format_duration(t)
        )));
    }
    Ok(t)
}

fn opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    bounded_duration(d).map(Some)
}

/// A percentage written as `"5%"` (0 ..= 1000%), returned as a fraction.
/// A bare number is refused: `5` could mean 5% or 500%.
pub fn parse_percent(text: &str) -> Result<f64, String> {
    let bad = || format!("invalid percentage {text:?}: expected a number and %, like \"5%\"");
    let n = text.trim().strip_suffix('%').ok_or_else(bad)?;
    let v: f64 = n.trim().parse().map_err(|_| bad())?;
    if !v.is_finite() || !(0.0..=1000.0).contains(&v) {
        return Err(format!(
            "invalid percentage {text:?}: expected 0% ..= 1000%"
        ));
    }
    Ok(v / 100.0)
}

fn opt_percent<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Text(String),
        Num(f64),
    }
    match Raw::deserialize(d)? {
        Raw::Text(t) => parse_percent(&t).map(Some).map_err(de::Error::custom),
        Raw::Num(n) => Err(de::Error::custom(format!(
            "invalid percentage {n}: write it with %, like \"{n}%\""
        ))),
    }
}

/// A read or parse error of a definition file.
pub type RawError = YamlFileError;

/// Parses definition text; `path` is only used in messages.
pub fn parse(path: &Path, text: &str) -> Result<RawExperiment, RawError> {
    yaml::parse(path, text, EXPECTED_FORM)
}

/// Reads and parses a definition file.
pub fn read(path: &Path) -> Result<RawExperiment, RawError> {
    parse(path, &yaml::read_text("experiment", path)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse(Path::new("x.yaml"), text).unwrap_err().to_string()
    }

    const OK: &str = "name: t\nhosts: { canary: 1, baseline: \"h02,h03\" }\nworkload:\n  submit: { size: 1024, jobs: 20 }\n";

    #[test]
    fn a_minimal_definition_parses() {
        let r = parse(Path::new("x.yaml"), OK).unwrap();
        assert_eq!(r.hosts.canary, HostPick::Count(1));
        assert_eq!(r.hosts.baseline, HostPick::Pattern("h02,h03".into()));
        let s = r.workload.submit.unwrap();
        assert_eq!(
            (s.circuit.as_str(), s.size, s.jobs, s.concurrency),
            ("chain", 1024, Some(20), 1)
        );
    }

    #[test]
    fn unknown_keys_are_refused_at_their_line() {
        let e = err(&format!("{OK}analysis:\n  confidense: 99%\n"));
        assert!(e.starts_with("x.yaml:6:3: "), "{e}");
        assert!(e.contains("unknown field `confidense`"), "{e}");
        assert!(e.contains("expected form:\n    name: NAME"), "{e}");
        let e = err("name: t\nhosts: { canary: 1, baseline: 1 }\nworkload:\n  replay: {}\n");
        assert!(e.starts_with("x.yaml:4:3: "), "{e}");
        assert!(e.contains("replay"), "{e}");
    }

    #[test]
    fn numbers_are_bounded_before_use() {
        let e = err(&OK.replace("jobs: 20", "jobs: 1000000000000"));
        assert!(
            e.starts_with("x.yaml:4:") && e.contains("invalid jobs"),
            "{e}"
        );
        let e = err(&OK.replace("size: 1024", "size: 4"));
        assert!(
            e.contains("invalid size 4: expected 16 ..= 134217728"),
            "{e}"
        );
        let e = err(&OK.replace("canary: 1", "canary: 0"));
        assert!(
            e.starts_with("x.yaml:2:") && e.contains("invalid host count 0"),
            "{e}"
        );
        let e = err(&OK.replace("jobs: 20", "jobs: 20, concurrency: 65"));
        assert!(e.contains("invalid concurrency 65"), "{e}");
        let e = err(&format!("{OK}analysis: {{ min_samples: 1 }}\n"));
        assert!(e.contains("invalid min_samples 1"), "{e}");
        let e = err(&OK.replace("jobs: 20", "duration: 48h"));
        assert!(e.contains("at most 24h"), "{e}");
    }

    #[test]
    fn percentages_need_their_sign_and_a_range() {
        assert_eq!(parse_percent("5%"), Ok(0.05));
        assert_eq!(parse_percent(" 98 % "), Ok(0.98));
        assert!(parse_percent("5").is_err());
        assert!(parse_percent("-1%").is_err());
        assert!(parse_percent("2000%").is_err());
        let e = err(&format!("{OK}analysis: {{ tolerance: 5 }}\n"));
        assert!(e.contains("write it with %"), "{e}");
        let e = err(&format!(
            "{OK}analysis:\n  metrics:\n    - {{ metric: msn }}\n"
        ));
        assert!(
            e.starts_with("x.yaml:7:") && e.contains("unknown metric `msn`"),
            "{e}"
        );
    }
}
