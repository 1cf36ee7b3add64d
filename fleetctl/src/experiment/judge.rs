//! The judge: one metric's samples of both groups -> pass, marginal, fail or
//! NODATA with the reason; the metrics' outcomes -> the experiment's verdict.
//!
//! As in Kayenta's Mann-Whitney judge, a difference counts only when it is
//! both significant (p < 1 - confidence) and larger than the effect-size
//! tolerance; it fails the metric when it is a regression beyond
//! `max_regression`. Too few samples is NODATA, never a pass.

use super::definition::MetricSpec;
use super::metric::Effect;
use super::stats::{self, MannWhitney};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The outcome of one metric, or of the whole experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Pass,
    Marginal,
    Fail,
    /// Too few samples to judge.
    Nodata,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Marginal => "marginal",
            Verdict::Fail => "FAIL",
            Verdict::Nodata => "NODATA",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// Summary numbers of one group's samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GroupStats {
    pub n: usize,
    pub median: Option<f64>,
    pub mean: Option<f64>,
    pub p10: Option<f64>,
    pub p90: Option<f64>,
}

impl GroupStats {
    pub fn of(samples: &[f64]) -> GroupStats {
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        GroupStats {
            n: s.len(),
            median: stats::quantile(&s, 0.5),
            mean: stats::mean(&s),
            p10: stats::quantile(&s, 0.1),
            p90: stats::quantile(&s, 0.9),
        }
    }
}

/// One metric judged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Judgement {
    pub metric: String,
    pub unit: &'static str,
    pub critical: bool,
    pub must_improve: bool,
    pub higher_is_better: bool,
    pub canary: GroupStats,
    pub baseline: GroupStats,
    /// Mann-Whitney U of the canary sample against the baseline's.
    pub u: Option<f64>,
    pub z: Option<f64>,
    pub p: Option<f64>,
    /// Canary median over baseline median (for rates and durations).
    pub median_ratio: Option<f64>,
    /// How the change is measured and its value: a relative change of the
    /// medians, or the difference of the means (failure rate).
    pub effect: Effect,
    pub change: Option<f64>,
    /// The change counted in the bad direction (positive = worse).
    pub regression: Option<f64>,
    pub max_regression: f64,
    pub tolerance: f64,
    pub verdict: Verdict,
    pub reason: String,
}

fn pct(x: f64) -> String {
    format!("{:+.1}%", x * 100.0)
}

/// Judges one metric from both groups' samples.
pub fn judge(
    spec: &MetricSpec,
    canary: &[f64],
    baseline: &[f64],
    confidence: f64,
    min_samples: usize,
) -> Judgement {
    let m = spec.metric;
    let (cs, bs) = (GroupStats::of(canary), GroupStats::of(baseline));
    let mut j = Judgement {
        metric: m.name(),
        unit: m.unit(),
        critical: spec.critical,
        must_improve: spec.must_improve,
        higher_is_better: m.higher_is_better(),
        canary: cs,
        baseline: bs,
        u: None,
        z: None,
        p: None,
        median_ratio: None,
        effect: m.effect(),
        change: None,
        regression: None,
        max_regression: spec.max_regression,
        tolerance: spec.tolerance,
        verdict: Verdict::Nodata,
        reason: String::new(),
    };
    if cs.n < min_samples || bs.n < min_samples {
        j.reason = format!(
            "too few samples: canary {}, baseline {} (need {min_samples} each)",
            cs.n, bs.n
        );
        return j;
    }
    let Some(MannWhitney { u, z, p }) = stats::mann_whitney(canary, baseline) else {
        j.reason = "samples hold values that are not finite".into();
        return j;
    };
    (j.u, j.z, j.p) = (Some(u), Some(z), Some(p));
    if let (Some(c), Some(b)) = (cs.median, bs.median) {
        j.median_ratio = (b != 0.0).then(|| c / b);
    }
    let change = match m.effect() {
        Effect::MedianRatio => match (cs.median, bs.median) {
            (Some(c), Some(b)) if b != 0.0 => Some(c / b - 1.0),
            // From nothing to something is an unbounded relative change:
            // a wait that appears where the baseline has none.
            (Some(0.0), Some(_)) => Some(0.0),
            (Some(c), Some(_)) => Some(f64::INFINITY.copysign(c)),
            _ => None,
        },
        Effect::MeanDifference => match (cs.mean, bs.mean) {
            (Some(c), Some(b)) => Some(c - b),
            _ => None,
        },
    };
    let Some(change) = change else {
        j.reason = "no median to compare".into();
        return j;
    };
    let regression = if m.higher_is_better() {
        -change
    } else {
        change
    };
    (j.change, j.regression) = (Some(change), Some(regression));
    let alpha = 1.0 - confidence;
    let significant = p < alpha;
    let shown = match m.effect() {
        Effect::MedianRatio => format!("median {}", pct(change)),
        Effect::MeanDifference => format!("rate {:+.1} points", change * 100.0),
    };
    let sig = if significant {
        format!("p={p:.2e} < {alpha:.2}")
    } else {
        format!("p={p:.3}, not significant at {:.0}%", confidence * 100.0)
    };
    let worse_than_max = regression > spec.max_regression;
    let (verdict, why) = if significant && worse_than_max {
        (
            Verdict::Fail,
            format!("regression beyond max {:.1}%", spec.max_regression * 100.0),
        )
    } else if spec.must_improve {
        if significant && -regression > spec.tolerance {
            (Verdict::Pass, "improved, as required".to_owned())
        } else {
            (
                Verdict::Fail,
                format!(
                    "must improve by more than {:.1}%, and did not",
                    spec.tolerance * 100.0
                ),
            )
        }
    } else if significant && regression > spec.tolerance {
        (
            Verdict::Marginal,
            format!(
                "regression beyond the tolerance {:.1}%, within max {:.1}%",
                spec.tolerance * 100.0,
                spec.max_regression * 100.0
            ),
        )
    } else if worse_than_max {
        (
            Verdict::Marginal,
            "worse beyond max, but not significantly".to_owned(),
        )
    } else if significant && -regression > spec.tolerance {
        (Verdict::Pass, "improved".to_owned())
    } else {
        (Verdict::Pass, "no meaningful change".to_owned())
    };
    j.verdict = verdict;
    j.reason = format!("{shown}, {sig}: {why}");
    j
}

/// The experiment's verdict from its metrics: a critical metric that fails
/// fails it; a critical metric without data leaves it NODATA; anything
/// else short of a pass (a non-critical failure, a marginal, missing data)
/// makes it marginal.
pub fn overall(judgements: &[Judgement]) -> (Verdict, String) {
    let names = |pred: &dyn Fn(&Judgement) -> bool| -> Vec<&str> {
        judgements
            .iter()
            .filter(|j| pred(j))
            .map(|j| j.metric.as_str())
            .collect()
    };
    let failed = names(&|j| j.critical && j.verdict == Verdict::Fail);
    if !failed.is_empty() {
        return (
            Verdict::Fail,
            format!("critical metric(s) failed: {}", failed.join(", ")),
        );
    }
    let nodata = names(&|j| j.critical && j.verdict == Verdict::Nodata);
    if !nodata.is_empty() {
        return (
            Verdict::Nodata,
            format!("no data for critical metric(s): {}", nodata.join(", ")),
        );
    }
    let short = names(&|j| j.verdict != Verdict::Pass);
    if !short.is_empty() {
        return (
            Verdict::Marginal,
            format!("not a clean pass: {}", short.join(", ")),
        );
    }
    if judgements.is_empty() {
        return (Verdict::Nodata, "no metrics to judge".into());
    }
    (Verdict::Pass, "every metric passed".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::metric::Metric;
    use fleet_wire::timing::Phase;

    fn spec(metric: Metric) -> MetricSpec {
        MetricSpec {
            metric,
            max_regression: 0.05,
            tolerance: 0.02,
            must_improve: false,
            critical: true,
        }
    }

    /// 40 samples around `center` with a fixed spread (no randomness).
    fn around(center: f64) -> Vec<f64> {
        (0..40)
            .map(|i| center * (1.0 + ((i * 17 % 40) as f64 - 20.0) / 400.0))
            .collect()
    }

    const MSM: Metric = Metric::Phase(Phase::Msm);

    #[test]
    fn a_slower_canary_fails_a_duration() {
        let j = judge(&spec(MSM), &around(120.0), &around(100.0), 0.98, 10);
        assert_eq!(j.verdict, Verdict::Fail, "{j:?}");
        assert!(j.reason.contains("median +20.0%"), "{}", j.reason);
        assert!(j.reason.contains("beyond max 5.0%"), "{}", j.reason);
        assert!((j.median_ratio.unwrap() - 1.2).abs() < 1e-9);
    }

    #[test]
    fn the_same_distribution_passes() {
        let j = judge(&spec(MSM), &around(100.0), &around(100.0), 0.98, 10);
        assert_eq!(j.verdict, Verdict::Pass, "{j:?}");
        assert_eq!(j.p, Some(1.0));
        assert!(j.reason.contains("no meaningful change"), "{}", j.reason);
    }

    #[test]
    fn a_small_significant_regression_is_marginal() {
        let j = judge(&spec(MSM), &around(103.5), &around(100.0), 0.98, 10);
        assert_eq!(j.verdict, Verdict::Marginal, "{j:?}");
        assert!(j.reason.contains("within max"), "{}", j.reason);
    }

    #[test]
    fn direction_follows_the_metric() {
        // Higher is better for a rate: a higher canary is an improvement.
        let j = judge(
            &spec(Metric::H2dGbps),
            &around(120.0),
            &around(100.0),
            0.98,
            10,
        );
        assert_eq!(j.verdict, Verdict::Pass, "{j:?}");
        assert!(j.reason.contains("improved"), "{}", j.reason);
        let j = judge(
            &spec(Metric::H2dGbps),
            &around(80.0),
            &around(100.0),
            0.98,
            10,
        );
        assert_eq!(j.verdict, Verdict::Fail, "{j:?}");
    }

    #[test]
    fn must_improve_fails_without_an_improvement() {
        let mut s = spec(Metric::H2dGbps);
        s.must_improve = true;
        let j = judge(&s, &around(100.0), &around(100.0), 0.98, 10);
        assert_eq!(j.verdict, Verdict::Fail, "{j:?}");
        assert!(j.reason.contains("must improve"), "{}", j.reason);
        let j = judge(&s, &around(110.0), &around(100.0), 0.98, 10);
        assert_eq!(j.verdict, Verdict::Pass, "{j:?}");
    }

    #[test]
    fn a_wait_that_the_baseline_does_not_have_fails() {
        let j = judge(&spec(MSM), &around(100.0), &[0.0; 40], 0.98, 10);
        assert_eq!(j.verdict, Verdict::Fail, "{j:?}");
        assert_eq!((j.median_ratio, j.regression), (None, Some(f64::INFINITY)));
        assert!(j.reason.contains("median +inf%"), "{}", j.reason);
        let j = judge(&spec(MSM), &[0.0; 40], &[0.0; 40], 0.98, 10);
        assert_eq!(j.verdict, Verdict::Pass, "{j:?}");
    }

    #[test]
    fn too_few_samples_is_nodata_never_a_pass() {
        let j = judge(&spec(MSM), &[1.0, 2.0], &around(100.0), 0.98, 10);
        assert_eq!(j.verdict, Verdict::Nodata);
        assert!(j.reason.contains("canary 2, baseline 40"), "{}", j.reason);
        let j = judge(&spec(Metric::H2dGbps), &[], &[], 0.98, 10);
        assert_eq!(j.verdict, Verdict::Nodata);
    }

    #[test]
    fn failure_rates_compare_means() {
        let mut canary = vec![0.0; 40];
        canary[..12].iter_mut().for_each(|v| *v = 1.0);
        let j = judge(&spec(Metric::Failures), &canary, &[0.0; 40], 0.98, 10);
        assert_eq!(j.verdict, Verdict::Fail, "{j:?}");
        assert!(j.reason.contains("rate +30.0 points"), "{}", j.reason);
        let j = judge(&spec(Metric::Failures), &[0.0; 40], &[0.0; 40], 0.98, 10);
        assert_eq!(j.verdict, Verdict::Pass, "{j:?}");
    }

    #[test]
    fn the_overall_verdict_weighs_critical_metrics() {
        let mk = |metric: &str, critical, verdict| Judgement {
            metric: metric.into(),
            critical,
            verdict,
            ..judge(&spec(MSM), &[], &[], 0.98, 10)
        };
        use Verdict::*;
        assert_eq!(
            overall(&[mk("a", true, Pass), mk("b", false, Pass)]).0,
            Pass
        );
        assert_eq!(
            overall(&[mk("a", true, Pass), mk("b", false, Fail)]).0,
            Marginal
        );
        assert_eq!(overall(&[mk("a", false, Nodata)]).0, Marginal);
        assert_eq!(
            overall(&[mk("a", true, Nodata), mk("b", false, Fail)]).0,
            Nodata
        );
        let (v, why) = overall(&[mk("a", true, Fail), mk("b", true, Nodata)]);
        assert_eq!((v, why.as_str()), (Fail, "critical metric(s) failed: a"));
        assert_eq!(overall(&[]).0, Nodata);
    }
}
