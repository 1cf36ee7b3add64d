//! The statistics of the judge: the Mann-Whitney U test (rank sums, tie
//! correction, normal approximation with continuity correction, two-sided
//! p-value), medians and quantiles. Pure functions over plain samples.
//!
//! The normal approximation is what Kayenta's judge and scipy's
//! `mannwhitneyu(..., method="asymptotic")` use; the tails come from
//! `statrs` rather than a hand-written erfc.

use statrs::distribution::{ContinuousCDF, Normal};

/// The result of one two-sided Mann-Whitney U test of `x` against `y`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MannWhitney {
    /// U of the first sample (`x`): how often an x exceeds a y, ties half.
    pub u: f64,
    /// The standardised statistic, continuity-corrected; its sign says
    /// which sample tends to be larger (positive: x).
    pub z: f64,
    /// Two-sided p-value of "x and y come from the same distribution".
    pub p: f64,
}

/// Average ranks (1-based) of `values`, ties sharing the mean of their
/// ranks, and the tie term `sum(t^3 - t)` over groups of `t` equal values.
fn ranks(values: &[f64]) -> (Vec<f64>, f64) {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let mut ranks = vec![0.0; values.len()];
    let mut ties = 0.0;
    let mut i = 0;
    while i < order.len() {
        let mut j = i + 1;
        while j < order.len() && values[order[j]] == values[order[i]] {
            j += 1;
        }
        // Positions i..j (0-based) hold equal values: ranks i+1 ..= j.
        let mean = (i + 1 + j) as f64 / 2.0;
        for &k in &order[i..j] {
            ranks[k] = mean;
        }
        let t = (j - i) as f64;
        ties += t * t * t - t;
        i = j;
    }
    (ranks, ties)
}

/// Two-sided Mann-Whitney U test; `None` when a sample is empty or holds a
/// value that is not finite. When every value is equal the samples cannot
/// be told apart: p = 1.
pub fn mann_whitney(x: &[f64], y: &[f64]) -> Option<MannWhitney> {
    if x.is_empty() || y.is_empty() || x.iter().chain(y).any(|v| !v.is_finite()) {
        return None;
    }
    let (n1, n2) = (x.len() as f64, y.len() as f64);
    let n = n1 + n2;
    let all: Vec<f64> = x.iter().chain(y).copied().collect();
    let (r, ties) = ranks(&all);
    let r1: f64 = r[..x.len()].iter().sum();
    let u1 = r1 - n1 * (n1 + 1.0) / 2.0;
    let mu = n1 * n2 / 2.0;
    let var = n1 * n2 / 12.0 * ((n + 1.0) - ties / (n * (n - 1.0)));
    if var <= 0.0 {
        return Some(MannWhitney {
            u: u1,
            z: 0.0,
            p: 1.0,
        });
    }
    let sd = var.sqrt();
    let d = u1 - mu;
    // Continuity correction: half a step towards the mean, never past it.
    let z = d.signum() * (d.abs() - 0.5).max(0.0) / sd;
    // `Normal::new(0, 1)` cannot fail: the parameters are valid constants.
    let std = Normal::new(0.0, 1.0).ok()?;
    let p = (2.0 * std.sf(z.abs())).min(1.0);
    Some(MannWhitney { u: u1, z, p })
}

/// The `q` quantile (0..=1) by linear interpolation between closest ranks
/// (numpy's default); `None` for an empty sample.
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let frac = pos - lo as f64;
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * frac)
}

/// The median of an unsorted sample.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    quantile(&v, 0.5)
}

/// The arithmetic mean.
pub fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values computed once with scipy 1.17.1:
    //   python3 -c 'from scipy.stats import mannwhitneyu as m
    //   x = [10.0 + (i*7%13)*0.1 for i in range(30)]   # X of the test
    //   y = [10.6 + (i*5%11)*0.1 for i in range(25)]   # Y of the test
    //   r = m(x, y, alternative="two-sided", method="asymptotic", use_continuity=True)
    //   print(repr(float(r.statistic)), repr(float(r.pvalue)))'
    // with x and y set to each test's two samples.

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1e-300)
    }

    #[test]
    fn distinct_samples_match_scipy() {
        let x = [19.0, 22.0, 16.0, 29.0, 24.0];
        let y = [20.0, 11.0, 17.0, 12.0];
        let r = mann_whitney(&x, &y).unwrap();
        assert_eq!(r.u, SCIPY_A.0);
        assert!(close(r.p, SCIPY_A.1, 1e-9), "{r:?}");
        assert!(r.z > 0.0, "x tends larger: {r:?}");
    }

    #[test]
    fn tied_samples_match_scipy() {
        let x = [1.0, 2.0, 2.0, 3.0, 3.0, 3.0, 4.0, 5.0];
        let y = [3.0, 3.0, 4.0, 4.0, 5.0, 5.0, 6.0, 7.0, 7.0];
        let r = mann_whitney(&x, &y).unwrap();
        assert_eq!(r.u, SCIPY_B.0);
        assert!(close(r.p, SCIPY_B.1, 1e-9), "{r:?}");
        assert!(r.z < 0.0);
    }

    #[test]
    fn shifted_samples_are_significant_and_match_scipy() {
        let x: Vec<f64> = (0..30).map(|i| 10.0 + (i * 7 % 13) as f64 * 0.1).collect();
        let y: Vec<f64> = (0..25).map(|i| 10.6 + (i * 5 % 11) as f64 * 0.1).collect();
        let r = mann_whitney(&x, &y).unwrap();
        assert_eq!(r.u, SCIPY_C.0);
        assert!(close(r.p, SCIPY_C.1, 1e-9), "{r:?}");
        assert!(r.p < 0.02);
    }

    #[test]
    fn identical_constant_samples_cannot_be_told_apart() {
        let r = mann_whitney(&[2.0; 5], &[2.0; 7]).unwrap();
        assert_eq!((r.z, r.p), (0.0, 1.0));
        assert!(mann_whitney(&[], &[1.0]).is_none());
        assert!(mann_whitney(&[f64::NAN], &[1.0]).is_none());
    }

    #[test]
    fn medians_and_quantiles_interpolate() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.25), Some(2.0));
        assert_eq!(median(&[]), None);
        assert_eq!(mean(&[1.0, 2.0, 6.0]), Some(3.0));
    }

    /// (U of x, two-sided p), from the scipy command above.
    const SCIPY_A: (f64, f64) = (17.0, 0.11134688653314041);
    const SCIPY_B: (f64, f64) = (11.0, 0.01630200829707017);
    const SCIPY_C: (f64, f64) = (127.0, 2.7633214473315794e-05);
}
