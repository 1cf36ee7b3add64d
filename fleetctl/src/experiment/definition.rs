//! An experiment definition, resolved: defaults applied, rules that span
//! fields checked, paths made relative to the definition's folder.

use super::metric::Metric;
use super::raw::{self, Action, HostPick, RawExperiment, RawWorkload};
use crate::playbook::Strategy;
use fleet_wire::timing::Phase;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Defaults of the analysis (Kayenta's judge defaults to 98% as well).
pub const DEFAULT_CONFIDENCE: f64 = 0.98;
pub const DEFAULT_TOLERANCE: f64 = 0.03;
pub const DEFAULT_MAX_REGRESSION: f64 = 0.10;
pub const DEFAULT_MIN_SAMPLES: usize = 10;
/// How long one submitted job may take when the definition sets no timeout.
pub const DEFAULT_JOB_TIMEOUT: Duration = Duration::from_secs(120);

/// A definition ready to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Definition {
    pub name: String,
    pub description: Option<String>,
    /// Where it was read from.
    pub source: String,
    /// The config shipped with the candidate; `None` keeps each host's
    /// `config_file`.
    pub candidate_config: Option<PathBuf>,
    pub canary: HostPick,
    pub baseline: HostPick,
    pub workload: Workload,
    pub analysis: AnalysisSpec,
    pub actions: Actions,
    /// The rollout strategy of `promote`.
    pub promote: Strategy,
}

/// What load the experiment measures.
#[derive(Debug, Clone, PartialEq)]
pub enum Workload {
    /// Jobs submitted through each host's daemon API, on canaries and
    /// baselines at the same time.
    Submit(Submit),
    /// The hosts' own traffic, for a while.
    Observe { duration: Duration },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Submit {
    pub circuit: String,
    pub size: u64,
    pub partitions: u32,
    pub amount: Amount,
    /// Jobs in flight per host.
    pub concurrency: u32,
    /// Longest one job may take.
    pub timeout: Duration,
}

/// How much work each host gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    Jobs(u32),
    Duration(Duration),
}

/// How the groups are compared.
#[derive(Debug, Clone, PartialEq)]
pub struct AnalysisSpec {
    /// Of the two-sided test: a difference counts when p < 1 - confidence.
    pub confidence: f64,
    pub min_samples: usize,
    pub metrics: Vec<MetricSpec>,
}

/// One metric's thresholds.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricSpec {
    pub metric: Metric,
    /// A significant change worse than this fails the metric.
    pub max_regression: f64,
    /// A change smaller than this is no change (the effect-size tolerance).
    pub tolerance: f64,
    /// Passes only on a significant improvement beyond the tolerance.
    pub must_improve: bool,
    /// A failure of this metric fails the experiment (others make it marginal).
    pub critical: bool,
}

/// The action per verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Actions {
    pub pass: Action,
    pub marginal: Action,
    pub fail: Action,
    pub nodata: Action,
}

impl Default for Actions {
    fn default() -> Self {
        Actions {
            pass: Action::Promote,
            marginal: Action::Keep,
            fail: Action::Restore,
            nodata: Action::Restore,
        }
    }
}

/// A definition that parsed but does not make sense.
#[derive(Debug, thiserror::Error)]
pub enum DefinitionError {
    #[error(transparent)]
    Raw(#[from] raw::RawError),
    #[error("{source_name}: {problem}")]
    Invalid {
        source_name: String,
        problem: String,
    },
}

/// The metrics judged when a definition names none: the partition's wall
/// time and the failure rate decide; the proof's time is reported beside them.
fn default_metrics(tolerance: f64, max_regression: f64) -> Vec<MetricSpec> {
    [
        (Metric::Phase(Phase::Total), true),
        (Metric::ProofMs, false),
        (Metric::Failures, true),
    ]
    .into_iter()
    .map(|(metric, critical)| MetricSpec {
        metric,
        max_regression,
        tolerance,
        must_improve: false,
        critical,
    })
    .collect()
}

impl Definition {
    /// Applies defaults and checks the rules that span fields; relative
    /// paths are taken from `dir` (the definition's folder).
    pub fn resolve(
        raw: RawExperiment,
        source: String,
        dir: &Path,
    ) -> Result<Definition, DefinitionError> {
        let invalid = |problem: String| DefinitionError::Invalid {
            source_name: source.clone(),
            problem,
        };
        if raw.name.trim().is_empty() {
            return Err(invalid("`name` is empty".into()));
        }
        let workload = match raw.workload {
            RawWorkload {
                observe: Some(o),
                submit: None,
            } => Workload::Observe {
                duration: o.duration,
            },
            RawWorkload {
                submit: None,
                observe: None,
            }
            | RawWorkload {
                submit: Some(_),
                observe: Some(_),
            } => return Err(invalid(
                "workload: give exactly one of `submit` (drive jobs) and `observe` (real traffic)"
                    .into(),
            )),
            RawWorkload {
                submit: Some(s),
                observe: None,
            } => {
                let amount =
                    match (s.jobs, s.duration) {
                        (Some(n), None) => Amount::Jobs(n),
                        (None, Some(d)) => Amount::Duration(d),
                        _ => return Err(invalid(
                            "workload.submit: give exactly one of `jobs` (per host) and `duration`"
                                .into(),
                        )),
                    };
                if s.circuit.trim().is_empty() {
                    return Err(invalid("workload.submit.circuit is empty".into()));
                }
                Workload::Submit(Submit {
                    circuit: s.circuit,
                    size: s.size,
                    partitions: s.partitions,
                    amount,
                    concurrency: s.concurrency,
                    timeout: s.timeout.unwrap_or(DEFAULT_JOB_TIMEOUT),
                })
            }
        };
        let a = raw.analysis;
        let confidence = a.confidence.unwrap_or(DEFAULT_CONFIDENCE);
        if !(0.5..=0.9999).contains(&confidence) {
            return Err(invalid(format!(
                "analysis.confidence {:.2}%: expected 50% ..= 99.99%",
                confidence * 100.0
            )));
        }
        let tolerance = a.tolerance.unwrap_or(DEFAULT_TOLERANCE);
        let max_regression = a.max_regression.unwrap_or(DEFAULT_MAX_REGRESSION);
        let metrics = if a.metrics.is_empty() {
            default_metrics(tolerance, max_regression)
        } else {
            let mut out: Vec<MetricSpec> = Vec::new();
            for m in a.metrics {
                if out.iter().any(|o| o.metric == m.metric) {
                    return Err(invalid(format!(
                        "analysis.metrics: `{}` is listed twice",
                        m.metric
                    )));
                }
                out.push(MetricSpec {
                    metric: m.metric,
                    max_regression: m.max_regression.unwrap_or(max_regression),
                    tolerance: m.tolerance.unwrap_or(tolerance),
                    must_improve: m.must_improve,
                    critical: m.critical,
                });
            }
            out
        };
        for m in &metrics {
            if m.tolerance > m.max_regression {
                return Err(invalid(format!(
                    "metric `{}`: tolerance {:.1}% is above max_regression {:.1}%: a change could fail without ever counting as a change",
                    m.metric,
                    m.tolerance * 100.0,
                    m.max_regression * 100.0
                )));
            }
        }
        let d = Actions::default();
        let v = raw.verdict;
        let actions = Actions {
            pass: v.pass.unwrap_or(d.pass),
            marginal: v.marginal.unwrap_or(d.marginal),
            fail: v.fail.unwrap_or(d.fail),
            nodata: v.nodata.unwrap_or(d.nodata),
        };
        if actions.fail == Action::Promote || actions.nodata == Action::Promote {
            return Err(invalid(
                "verdict: `fail` and `nodata` cannot `promote` a candidate that was not shown to work"
                    .into(),
            ));
        }
        // The rollout's own defaults, less the canary: the experiment was it.
        let defaults = Strategy {
            canary: 0,
            ..crate::playbook::builtin("rollout")
                .and_then(|b| b.load())
                .map(|p| p.strategy)
                .unwrap_or_default()
        };
        let promote = Strategy::from_raw(&raw.promote.strategy, &defaults);
        Ok(Definition {
            name: raw.name,
            description: raw.description,
            source,
            candidate_config: raw.candidate.config.map(|c| dir.join(c)),
            canary: raw.hosts.canary,
            baseline: raw.hosts.baseline,
            workload,
            analysis: AnalysisSpec {
                confidence,
                min_samples: a.min_samples.unwrap_or(DEFAULT_MIN_SAMPLES),
                metrics,
            },
            actions,
            promote,
        })
    }
}

/// Reads and resolves a definition file.
pub fn load(path: &Path) -> Result<Definition, DefinitionError> {
    let raw = raw::read(path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    Definition::resolve(raw, path.display().to_string(), dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::playbook::BatchSize;

    fn resolve(text: &str) -> Result<Definition, DefinitionError> {
        let raw = raw::parse(Path::new("x.yaml"), text)?;
        Definition::resolve(raw, "x.yaml".into(), Path::new("/defs"))
    }

    const OK: &str = "name: t\ncandidate: { config: c.toml }\nhosts: { canary: 1, baseline: 2 }\nworkload:\n  submit: { size: 1024, jobs: 20 }\n";

    #[test]
    fn defaults_fill_in_and_paths_follow_the_definition() {
        let d = resolve(OK).unwrap();
        assert_eq!(
            d.candidate_config.as_deref(),
            Some(Path::new("/defs/c.toml"))
        );
        assert_eq!(d.analysis.confidence, DEFAULT_CONFIDENCE);
        assert_eq!(d.analysis.min_samples, DEFAULT_MIN_SAMPLES);
        let names: Vec<String> = d.analysis.metrics.iter().map(|m| m.metric.name()).collect();
        assert_eq!(names, ["total", "proof_ms", "failures"]);
        assert_eq!(d.actions, Actions::default());
        assert_eq!(d.promote.canary, 0);
        let Workload::Submit(s) = &d.workload else {
            panic!("submit")
        };
        assert_eq!(
            (s.amount, s.timeout),
            (Amount::Jobs(20), DEFAULT_JOB_TIMEOUT)
        );
    }

    #[test]
    fn per_metric_thresholds_override_the_analysis_ones() {
        let d = resolve(&format!(
            "{OK}analysis:\n  confidence: 99%\n  max_regression: 20%\n  metrics:\n    - {{ metric: msm, max_regression: 5%, critical: true }}\n    - {{ metric: h2d_gbps, must_improve: true }}\n"
        ))
        .unwrap();
        let m = &d.analysis.metrics;
        assert_eq!(d.analysis.confidence, 0.99);
        assert_eq!((m[0].max_regression, m[0].critical), (0.05, true));
        assert_eq!((m[1].max_regression, m[1].must_improve), (0.20, true));
    }

    #[test]
    fn the_example_definition_resolves() {
        let text = include_str!("../../../experiments/instrumented-canary.yaml");
        let raw = raw::parse(Path::new("instrumented-canary.yaml"), text).unwrap();
        let d =
            Definition::resolve(raw, "instrumented-canary.yaml".into(), Path::new(".")).unwrap();
        assert_eq!(d.canary, HostPick::Count(2));
        assert_eq!(d.analysis.metrics.len(), 5);
        assert_eq!(d.promote.batch, BatchSize::Count(3));
    }

    #[test]
    fn rules_across_fields_are_checked() {
        let e = resolve(&OK.replace("jobs: 20", "jobs: 20, duration: 1m"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("exactly one of `jobs`"), "{e}");
        let e = resolve(&format!(
            "{OK}analysis: {{ tolerance: 20%, max_regression: 5% }}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("tolerance 20.0% is above max_regression 5.0%"),
            "{e}"
        );
        let e = resolve(&OK.replace("workload:\n", "workload:\n  observe: { duration: 1m }\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("exactly one of `submit`"), "{e}");
        let e = resolve(&format!("{OK}verdict: {{ fail: promote }}\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot `promote`"), "{e}");
        let e = resolve(&format!("{OK}analysis: {{ confidence: 20% }}\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("50% ..= 99.99%"), "{e}");
        let e = resolve(&format!(
            "{OK}analysis:\n  metrics: [ {{ metric: msm }}, {{ metric: msm }} ]\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("listed twice"), "{e}");
    }
}
