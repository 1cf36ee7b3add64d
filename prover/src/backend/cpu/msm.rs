//! Pippenger multi-exponentiation over G1 and G2 on all cores, with signed
//! window digits (half the buckets of the unsigned method) and zero digits
//! skipped, so the 0/1 values that dominate circuit witnesses cost one
//! addition in total instead of one per window.

use blstrs::Scalar;
use ff::{Field, PrimeField};
use group::prime::PrimeCurveAffine;
use group::{Curve, Group};
use rayon::prelude::*;

/// Largest window: digits are stored as i16, so |digit| ≤ 2^(c−1) must fit.
const MAX_WINDOW: u32 = 15;
/// Bits of a canonical scalar handled by the windows; 256 ≥ 255 + the carry
/// of the signed recoding, so the top digit never overflows (see `recode`).
const SCALAR_BITS: u32 = 256;
/// Points per chunk when a window is split across threads.
const MIN_CHUNK: usize = 1 << 10;

/// An affine point type whose projective form accumulates affine points
/// with mixed additions, and whose coordinates are reachable for batched
/// affine additions.
pub trait MsmAffine: PrimeCurveAffine<Scalar = Scalar> + Sync {
    /// The coordinate field.
    type F: Field + Send;
    fn add_to(&self, acc: &mut Self::Curve);
    fn sub_from(&self, acc: &mut Self::Curve);
    /// (x, y), or `None` at infinity.
    fn coords(&self) -> Option<(Self::F, Self::F)>;
    /// The point (x, y), which must be on the curve.
    fn from_coords(x: Self::F, y: Self::F) -> Self;
}

macro_rules! msm_affine {
    ($affine:ty, $proj:ty, $field:ty) => {
        impl MsmAffine for $affine {
            type F = $field;
            #[inline]
            fn add_to(&self, acc: &mut $proj) {
                *acc += self;
            }
            #[inline]
            fn sub_from(&self, acc: &mut $proj) {
                *acc -= self;
            }
            #[inline]
            fn coords(&self) -> Option<($field, $field)> {
                if bool::from(self.is_identity()) {
                    None
                } else {
                    Some((self.x(), self.y()))
                }
            }
            #[inline]
            fn from_coords(x: $field, y: $field) -> Self {
                <$affine>::from_raw_unchecked(x, y, false)
            }
        }
    };
}

msm_affine!(blstrs::G1Affine, blstrs::G1Projective, blstrs::Fp);
msm_affine!(blstrs::G2Affine, blstrs::G2Projective, blstrs::Fp2);

/// Σ scalars[i]·bases[i]. Lengths must match (checked by the caller).
pub fn msm<A>(bases: &[A], scalars: &[Scalar]) -> A::Curve
where
    A: MsmAffine,
{
    let n = bases.len().min(scalars.len());
    if n == 0 {
        return A::Curve::identity();
    }
    let c = window_bits(n);
    let windows = SCALAR_BITS.div_ceil(c) as usize;
    let (digits, used_windows) = recode(&scalars[..n], c, windows);
    if used_windows == 0 {
        return A::Curve::identity();
    }

    // Work units are (window, chunk of points); chunks only when there are
    // fewer windows than threads, so each unit stays long.
    let threads = rayon::current_num_threads();
    let chunks = (2 * threads)
        .div_ceil(used_windows)
        .min(n.div_ceil(MIN_CHUNK))
        .max(1);
    let chunk_len = n.div_ceil(chunks);
    let units: Vec<(usize, usize)> = (0..used_windows)
        .flat_map(|w| (0..chunks).map(move |k| (w, k)))
        .collect();
    let partial: Vec<(usize, A::Curve)> = units
        .into_par_iter()
        .map(|(w, k)| {
            let start = k * chunk_len;
            let end = (start + chunk_len).min(n);
            (
                w,
                window_sum(&bases[start..end], &digits, windows, w, start, c),
            )
        })
        .collect();

    let mut window_sums = vec![A::Curve::identity(); used_windows];
    for (w, s) in partial {
        window_sums[w] += s;
    }
    // Horner from the top window: acc = Σ_w 2^(w·c) · S_w.
    let mut acc = A::Curve::identity();
    for s in window_sums.iter().rev() {
        for _ in 0..c {
            acc = acc.double();
        }
        acc += s;
    }
    acc
}

/// The window size minimising the cost `windows · (k·n + 2^c)`: n bucket
/// additions, each costing k (about 0.55 of a mixed addition once batched
/// affine additions apply), plus two additions per bucket in the running-sum
/// reduction.
fn window_bits(n: usize) -> u32 {
    let cost = |c: u32| {
        let k = if c >= BATCH_MIN_WINDOW { 0.55 } else { 1.0 };
        f64::from(SCALAR_BITS.div_ceil(c)) * (k * n as f64 + f64::from(1u32 << c))
    };
    (1..=MAX_WINDOW)
        .min_by(|a, b| cost(*a).total_cmp(&cost(*b)))
        .unwrap_or(1)
}

/// Signed base-2^c digits of every scalar, point-major
/// (`digits[i·windows + w]`), each in [−2^(c−1), 2^(c−1)]; also the number of
/// low windows that hold any non-zero digit.
///
/// A raw window value at or above 2^(c−1) becomes value − 2^c with a carry
/// into the next window. The top window (bits ≥ c·(windows−1), with
/// c·windows ≥ 256 > 255 scalar bits) holds at most 2^(c−1) − 1 plus a carry,
/// so it is kept unsigned and never carries out.
fn recode(scalars: &[Scalar], c: u32, windows: usize) -> (Vec<i16>, usize) {
    let mut digits = vec![0i16; scalars.len() * windows];
    let half = 1i64 << (c - 1);
    let full = 1i64 << c;
    let mask = (1u64 << c) - 1;
    let used = digits
        .par_chunks_mut(windows * MIN_CHUNK)
        .zip(scalars.par_chunks(MIN_CHUNK))
        .map(|(out, scalars)| {
            let mut used = 0usize;
            for (d, s) in out.chunks_mut(windows).zip(scalars) {
                let repr = s.to_repr();
                let bytes = repr.as_ref();
                let mut limbs = [0u64; 4];
                for (l, b) in limbs.iter_mut().zip(bytes.chunks_exact(8)) {
                    let mut le = [0u8; 8];
                    le.copy_from_slice(b);
                    *l = u64::from_le_bytes(le);
                }
                let mut carry = 0i64;
                for (w, digit) in d.iter_mut().enumerate() {
                    let raw = bits(&limbs, w as u32 * c, mask) as i64 + carry;
                    let v = if raw >= half && w + 1 < windows {
                        carry = 1;
                        raw - full
                    } else {
                        carry = 0;
                        raw
                    };
                    // |v| ≤ 2^(c−1) ≤ 2^14 by construction.
                    *digit = v as i16;
                    if v != 0 {
                        used = used.max(w + 1);
                    }
                }
            }
            used
        })
        .max()
        .unwrap_or(0);
    (digits, used)
}

/// The `c` bits of the 256-bit little-endian `limbs` starting at `at`.
#[inline]
fn bits(limbs: &[u64; 4], at: u32, mask: u64) -> u64 {
    let limb = (at / 64) as usize;
    if limb >= 4 {
        return 0;
    }
    let shift = at % 64;
    let mut v = limbs[limb] >> shift;
    if shift > 0 && limb + 1 < 4 {
        v |= limbs[limb + 1] << (64 - shift);
    }
    v & mask
}

/// Σ digit_w(i)·bases[i] over one chunk of points, for window `w`.
fn window_sum<A>(
    bases: &[A],
    digits: &[i16],
    windows: usize,
    w: usize,
    start: usize,
    c: u32,
) -> A::Curve
where
    A: MsmAffine,
{
    let terms = window_terms(bases, digits, windows, w, start);
    if c >= BATCH_MIN_WINDOW {
        window_sum_batched(terms, c)
    } else {
        window_sum_projective(terms, c)
    }
}

/// The (base, digit) pairs of window `w` for the chunk of points starting at
/// `start`, zero digits left out: they touch no bucket.
fn window_terms<'a, A>(
    bases: &'a [A],
    digits: &'a [i16],
    windows: usize,
    w: usize,
    start: usize,
) -> impl Iterator<Item = (&'a A, i16)> {
    // Digits are point-major: window `w` of point `start + i` sits at
    // `(start + i) * windows + w`.
    bases
        .iter()
        .zip(digits.iter().skip(start * windows + w).step_by(windows))
        .filter(|(_, d)| **d != 0)
        .map(|(base, d)| (base, *d))
}

/// [`window_sum`] with projective buckets and mixed additions, over the
/// chunk's (base, non-zero digit) pairs.
fn window_sum_projective<'a, A: MsmAffine + 'a>(
    terms: impl Iterator<Item = (&'a A, i16)>,
    c: u32,
) -> A::Curve {
    let mut buckets = vec![A::Curve::identity(); 1usize << (c - 1)];
    for (base, d) in terms {
        if d > 0 {
            base.add_to(&mut buckets[(d - 1) as usize]);
        } else if d < 0 {
            base.sub_from(&mut buckets[(-d - 1) as usize]);
        }
    }
    // Running sum: Σ_k (k+1)·bucket[k].
    let mut running = A::Curve::identity();
    let mut sum = A::Curve::identity();
    for b in buckets.iter().rev() {
        running += b;
        sum += &running;
    }
    sum
}

/// Windows at least this wide accumulate buckets with batched affine
/// additions: with few buckets, conflicts within a batch would dominate.
const BATCH_MIN_WINDOW: u32 = 9;
/// Pending bucket additions per shared inversion.
const BATCH: usize = 512;

/// Bucket states of the batched accumulation.
const EMPTY: u8 = 0;
const SET: u8 = 1;
/// Holds a point and has an addition pending in the current batch.
const BUSY: u8 = 2;

/// Affine buckets updated in batches: each batch computes the slopes of up
/// to [`BATCH`] independent additions with one field inversion (Montgomery's
/// trick), so an addition costs about 6 field multiplications instead of the
/// 11 of a mixed projective addition. A point whose bucket already has an
/// addition pending goes into that bucket's projective overflow instead
/// (never waiting: with few distinct digits, as in a top window or for 0/1
/// witnesses, waiting would make the work quadratic). Additions where both x
/// agree (doubling, or a point and its negation) take the projective path.
struct AffineBuckets<A: MsmAffine> {
    x: Vec<A::F>,
    y: Vec<A::F>,
    state: Vec<u8>,
    /// Pending additions: bucket, and the point added.
    pending: Vec<(u32, A::F, A::F)>,
    /// x_point − x_bucket per pending addition, then their prefix products.
    denom: Vec<A::F>,
    prefix: Vec<A::F>,
    /// Projective sums of the points that met a busy bucket.
    overflow: Vec<A::Curve>,
    overflowed: Vec<bool>,
}

impl<A: MsmAffine> AffineBuckets<A> {
    fn new(n: usize) -> Self {
        AffineBuckets {
            x: vec![A::F::ZERO; n],
            y: vec![A::F::ZERO; n],
            state: vec![EMPTY; n],
            pending: Vec::with_capacity(BATCH),
            denom: Vec::with_capacity(BATCH),
            prefix: Vec::with_capacity(BATCH),
            overflow: Vec::new(),
            overflowed: Vec::new(),
        }
    }

    /// Adds (px, py) to bucket `b`, now or in the current batch.
    #[inline]
    fn add(&mut self, b: u32, px: A::F, py: A::F) {
        let i = b as usize;
        match self.state[i] {
            EMPTY => {
                self.x[i] = px;
                self.y[i] = py;
                self.state[i] = SET;
            }
            SET if self.x[i] == px => self.add_projective(i, px, py),
            SET => {
                self.denom.push(px - self.x[i]);
                self.pending.push((b, px, py));
                self.state[i] = BUSY;
                if self.pending.len() == BATCH {
                    self.flush();
                }
            }
            _ => {
                if self.overflow.is_empty() {
                    self.overflow = vec![A::Curve::identity(); self.state.len()];
                    self.overflowed = vec![false; self.state.len()];
                }
                A::from_coords(px, py).add_to(&mut self.overflow[i]);
                self.overflowed[i] = true;
            }
        }
    }

    /// The rare additions with equal x, done with group arithmetic.
    fn add_projective(&mut self, i: usize, px: A::F, py: A::F) {
        let mut sum = A::from_coords(self.x[i], self.y[i]).to_curve();
        A::from_coords(px, py).add_to(&mut sum);
        match sum.to_affine().coords() {
            Some((x, y)) => {
                self.x[i] = x;
                self.y[i] = y;
            }
            None => self.state[i] = EMPTY,
        }
    }

    /// Completes the pending additions with one inversion.
    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        self.prefix.clear();
        let mut acc = A::F::ONE;
        for d in &self.denom {
            acc *= d;
            self.prefix.push(acc);
        }
        // Every denominator is non-zero (equal x went the projective way), so
        // the product is invertible.
        let mut inv = Option::<A::F>::from(acc.invert()).unwrap_or(A::F::ZERO);
        for k in (0..self.pending.len()).rev() {
            let inv_k = if k > 0 { inv * self.prefix[k - 1] } else { inv };
            inv *= self.denom[k];
            let (b, px, py) = self.pending[k];
            let i = b as usize;
            let (bx, by) = (self.x[i], self.y[i]);
            let lambda = (py - by) * inv_k;
            let x3 = lambda.square() - bx - px;
            self.y[i] = lambda * (bx - x3) - by;
            self.x[i] = x3;
            self.state[i] = SET;
        }
        self.pending.clear();
        self.denom.clear();
    }

    /// Σ (i+1)·bucket[i] (affine part plus overflow) by a running sum.
    fn finish(mut self) -> A::Curve {
        self.flush();
        let mut running = A::Curve::identity();
        let mut sum = A::Curve::identity();
        for i in (0..self.state.len()).rev() {
            if self.state[i] != EMPTY {
                A::from_coords(self.x[i], self.y[i]).add_to(&mut running);
            }
            if self.overflowed.get(i).copied().unwrap_or(false) {
                running += &self.overflow[i];
            }
            sum += &running;
        }
        sum
    }
}

/// [`window_sum`] with batched affine bucket additions, over the chunk's
/// (base, non-zero digit) pairs.
fn window_sum_batched<'a, A: MsmAffine + 'a>(
    terms: impl Iterator<Item = (&'a A, i16)>,
    c: u32,
) -> A::Curve {
    let mut buckets = AffineBuckets::<A>::new(1usize << (c - 1));
    for (base, d) in terms {
        let Some((px, py)) = base.coords() else {
            continue;
        };
        let b = u32::from(d.unsigned_abs()) - 1;
        buckets.add(b, px, if d < 0 { -py } else { py });
    }
    buckets.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use blstrs::{G1Affine, G1Projective, G2Affine, G2Projective};
    use ff::Field;
    use group::Curve;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    fn naive<A: PrimeCurveAffine<Scalar = Scalar>>(bases: &[A], scalars: &[Scalar]) -> A::Curve {
        let mut acc = A::Curve::identity();
        for (b, s) in bases.iter().zip(scalars) {
            acc += b.to_curve() * s;
        }
        acc
    }

    fn g1_points(rng: &mut ChaCha20Rng, n: usize) -> Vec<G1Affine> {
        let p: Vec<G1Projective> = (0..n).map(|_| G1Projective::random(&mut *rng)).collect();
        let mut a = vec![G1Affine::identity(); n];
        G1Projective::batch_normalize(&p, &mut a);
        a
    }

    #[test]
    fn g1_msm_matches_naive_sum_with_edge_scalars_and_identity_bases() {
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        for n in [1usize, 2, 31, 100, 1500] {
            let mut bases = g1_points(&mut rng, n);
            let mut scalars: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
            scalars[0] = Scalar::ZERO;
            if n > 1 {
                scalars[1] = Scalar::ONE;
                bases[n - 1] = G1Affine::identity();
            }
            if n > 2 {
                scalars[2] = -Scalar::ONE;
            }
            assert_eq!(msm(&bases, &scalars), naive(&bases, &scalars), "n = {n}");
        }
    }

    #[test]
    fn msm_of_nothing_or_of_zeros_is_the_identity() {
        let mut rng = ChaCha20Rng::seed_from_u64(8);
        let empty: Vec<G1Affine> = Vec::new();
        assert_eq!(msm(&empty, &[]), G1Projective::identity());
        let bases = g1_points(&mut rng, 40);
        assert_eq!(msm(&bases, &[Scalar::ZERO; 40]), G1Projective::identity());
    }

    #[test]
    fn g2_msm_matches_naive_sum() {
        let mut rng = ChaCha20Rng::seed_from_u64(9);
        let n = 300;
        let p: Vec<G2Projective> = (0..n).map(|_| G2Projective::random(&mut rng)).collect();
        let mut bases = vec![G2Affine::identity(); n];
        G2Projective::batch_normalize(&p, &mut bases);
        let mut scalars: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
        scalars[5] = Scalar::ZERO;
        scalars[6] = Scalar::ONE;
        assert_eq!(
            msm(&bases, &scalars).to_affine(),
            naive(&bases, &scalars).to_affine()
        );
        // The batched affine path over Fp2, with every point twice.
        bases.extend_from_within(..);
        scalars.extend_from_within(..);
        let (digits, _) = recode(&scalars, 9, 29);
        for w in [0, 5] {
            assert_eq!(
                window_sum_batched(window_terms(&bases, &digits, 29, w, 0), 9),
                window_sum_projective(window_terms(&bases, &digits, 29, w, 0), 9)
            );
        }
    }

    #[test]
    fn batched_affine_buckets_match_projective_buckets_incl_doubling_and_negation() {
        let mut rng = ChaCha20Rng::seed_from_u64(11);
        let n = 3000;
        let mut bases = g1_points(&mut rng, 64);
        // Repeats (doubling in a bucket), negations (cancelling) and infinity.
        let mut more = Vec::new();
        for i in 0..n - 64 {
            let p = bases[i % 64];
            more.push(if i % 3 == 0 { -p } else { p });
        }
        bases.extend(more);
        bases[100] = G1Affine::identity();
        for c in [9u32, 12] {
            let windows = SCALAR_BITS.div_ceil(c) as usize;
            let mut scalars: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
            // Small equal scalars put equal points in one bucket.
            for s in scalars.iter_mut().take(600) {
                *s = Scalar::from(5u64);
            }
            let (digits, used) = recode(&scalars, c, windows);
            for w in [0, used - 1] {
                let terms = || window_terms(&bases, &digits, windows, w, 0);
                let batched = window_sum_batched(terms(), c);
                let projective = window_sum_projective(terms(), c);
                assert_eq!(batched, projective, "c = {c}, w = {w}");
            }
        }
        // And a whole MSM large enough to pick a batched window.
        let scalars: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
        assert!(window_bits(n) >= BATCH_MIN_WINDOW);
        assert_eq!(msm(&bases, &scalars), naive(&bases, &scalars));
    }

    #[test]
    fn recoded_digits_reconstruct_the_scalar() {
        let mut rng = ChaCha20Rng::seed_from_u64(10);
        let mut scalars: Vec<Scalar> = (0..50).map(|_| Scalar::random(&mut rng)).collect();
        scalars.push(-Scalar::ONE);
        for c in [1u32, 4, 13, 15] {
            let windows = SCALAR_BITS.div_ceil(c) as usize;
            let (digits, _) = recode(&scalars, c, windows);
            for (i, s) in scalars.iter().enumerate() {
                let mut acc = Scalar::ZERO;
                let base = Scalar::from(1u64 << c);
                for w in (0..windows).rev() {
                    acc *= base;
                    let d = digits[i * windows + w];
                    let mag = Scalar::from(d.unsigned_abs() as u64);
                    acc += if d < 0 { -mag } else { mag };
                    assert!(d.unsigned_abs() <= 1 << (c - 1), "c = {c}");
                }
                assert_eq!(acc, *s, "c = {c}");
            }
        }
    }
}
