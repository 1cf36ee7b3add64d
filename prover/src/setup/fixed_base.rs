//! Fixed-base windowed scalar multiplication with batch normalisation, parallel over chunks.
//!
//! Every element of a Groth16 CRS is a multiple of one of two generators, so
//! we precompute `d · 2^(w·j) · P` for every window `j` and signed digit `d`
//! (`1 ≤ d ≤ 2^(w−1)`) once; a scalar multiplication is then one mixed
//! addition per window and no doublings, where a wNAF multiplication (what
//! bellperson's generator does) spends ~255 doublings. Results are converted
//! to affine with one field inversion per chunk (Montgomery's trick) instead
//! of one per point.
//!
//! [`FixedBaseEngine`] is where the multiplications run: [`CpuFixedBase`]
//! walks the tables here; the CUDA backend's
//! (`backend::cuda::fixed_base`) uploads the same tables and walks them
//! with the same digits on the device.

use std::ops::{AddAssign, Mul, Neg};

use blstrs::{G1Affine, G1Projective, G2Affine, G2Projective, Scalar};
use ff::{Field, PrimeField};
use group::prime::PrimeCurveAffine;
use group::Group;
use rayon::prelude::*;

use crate::backend::BackendError;

/// Points per parallel work item: large enough to amortise the inversion.
const CHUNK: usize = 1024;
/// Bits in a BLS12-381 scalar representation walked by the windows.
const SCALAR_BITS: usize = 256;
/// Upper bound on one table's size: lookups are random, and a table that
/// outgrows the last-level cache trades its saved additions for misses.
const MAX_TABLE_BYTES: usize = 16 << 20;

/// A projective curve point type we can multiply and normalise in bulk.
pub trait FastCurve:
    Group<Scalar = Scalar>
    + Send
    + Sync
    + for<'a> AddAssign<&'a Self::Affine>
    + Mul<Scalar, Output = Self>
{
    type Affine: PrimeCurveAffine + Copy + Send + Sync + Neg<Output = Self::Affine>;

    /// Converts `points` to affine into `out` with one inversion in total.
    fn batch_to_affine(points: &[Self], out: &mut [Self::Affine]);
}

/// Montgomery's batch inversion over Jacobian coordinates (`x = X/Z²`, `y = Y/Z³`,
/// blst's representation). Points with `Z = 0` become the affine identity.
fn jacobian_to_affine<P, A, F: Field>(
    points: &[P],
    out: &mut [A],
    coords: impl Fn(&P) -> (F, F, F),
    make: impl Fn(F, F) -> A,
    identity: A,
) where
    A: Copy,
{
    let mut prefix = Vec::with_capacity(points.len());
    let mut acc = F::ONE;
    for p in points {
        let (_, _, z) = coords(p);
        prefix.push(acc);
        if !bool::from(z.is_zero()) {
            acc *= z;
        }
    }
    // `acc` is a product of non-zero field elements, hence invertible.
    let mut inv = Option::<F>::from(acc.invert()).unwrap_or(F::ONE);
    for ((p, before), out) in points.iter().zip(prefix).zip(out.iter_mut()).rev() {
        let (x, y, z) = coords(p);
        if bool::from(z.is_zero()) {
            *out = identity;
            continue;
        }
        let z_inv = inv * before;
        inv *= z;
        let z_inv2 = z_inv.square();
        *out = make(x * z_inv2, y * z_inv2 * z_inv);
    }
}

impl FastCurve for G1Projective {
    type Affine = G1Affine;

    fn batch_to_affine(points: &[Self], out: &mut [G1Affine]) {
        jacobian_to_affine(
            points,
            out,
            |p| (p.x(), p.y(), p.z()),
            |x, y| G1Affine::from_raw_unchecked(x, y, false),
            G1Affine::identity(),
        )
    }
}

impl FastCurve for G2Projective {
    type Affine = G2Affine;

    fn batch_to_affine(points: &[Self], out: &mut [G2Affine]) {
        jacobian_to_affine(
            points,
            out,
            |p| (p.x(), p.y(), p.z()),
            |x, y| G2Affine::from_raw_unchecked(x, y, false),
            G2Affine::identity(),
        )
    }
}

/// Precomputed multiples of one base point.
pub struct FixedBaseTable<G: FastCurve> {
    window: usize,
    windows: usize,
    /// `table[j · half + d − 1] = d · 2^(w·j) · P`, `half = 2^(w−1)`.
    table: Vec<G::Affine>,
}

/// Window width minimising table construction plus `num_scalars` multiplications.
pub fn choose_window(num_scalars: usize, affine_bytes: usize) -> usize {
    let cost = |w: usize| {
        let windows = SCALAR_BITS.div_ceil(w);
        // Building a table entry costs about two additions (sum + normalise).
        num_scalars.saturating_mul(windows) + windows * (1usize << (w - 1)) * 2
    };
    (2..=20usize)
        .filter(|&w| {
            SCALAR_BITS.div_ceil(w) * (1usize << (w - 1)) * affine_bytes <= MAX_TABLE_BYTES
        })
        .min_by_key(|&w| cost(w))
        .unwrap_or(2)
}

impl<G: FastCurve> FixedBaseTable<G> {
    /// A table for `base`, with a window sized for about `num_scalars` multiplications.
    pub fn new(base: G, num_scalars: usize) -> Self {
        let window = choose_window(num_scalars, std::mem::size_of::<G::Affine>());
        Self::with_window(base, window)
    }

    pub fn with_window(base: G, window: usize) -> Self {
        let window = window.clamp(2, 24);
        let windows = SCALAR_BITS.div_ceil(window);
        let half = 1usize << (window - 1);
        let mut window_bases = Vec::with_capacity(windows);
        let mut b = base;
        for _ in 0..windows {
            window_bases.push(b);
            for _ in 0..window {
                b = b.double();
            }
        }
        let mut table = vec![G::Affine::identity(); windows * half];
        let chunk = half.min(CHUNK);
        table
            .par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(c, out)| {
                let start = c * chunk;
                let (j, d0) = (start / half, start % half + 1);
                let step = window_bases[j];
                let mut p = step * Scalar::from(d0 as u64);
                let mut points = Vec::with_capacity(out.len());
                for _ in 0..out.len() {
                    points.push(p);
                    p += step;
                }
                G::batch_to_affine(&points, out);
            });
        FixedBaseTable {
            window,
            windows,
            table,
        }
    }

    pub fn window(&self) -> usize {
        self.window
    }

    /// Number of windows (`⌈256 / window⌉`).
    pub fn windows(&self) -> usize {
        self.windows
    }

    /// The multiples, `windows() · 2^(window − 1)` of them, in the order
    /// [`FixedBaseTable::mul`] indexes them.
    pub fn multiples(&self) -> &[G::Affine] {
        &self.table
    }

    /// `scalar · P`, one mixed addition per non-zero signed digit.
    pub fn mul(&self, scalar: &Scalar) -> G {
        let repr = scalar.to_repr();
        let mut limbs = [0u64; 4];
        for (limb, bytes) in limbs.iter_mut().zip(repr.as_ref().chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(bytes);
            *limb = u64::from_le_bytes(b);
        }
        let w = self.window;
        let half = 1u64 << (w - 1);
        let mask = (1u64 << w) - 1;
        let mut acc = G::identity();
        let mut carry = 0u64;
        for j in 0..self.windows {
            let digit = bits(&limbs, j * w, mask) + carry;
            // Signed digits in (−2^(w−1), 2^(w−1)]: a scalar below 2^255 never
            // carries out of the top window because windows·w ≥ 256.
            if digit > half {
                carry = 1;
                // digit == 2^w (all ones plus a carry) is a zero digit.
                let d = (1u64 << w) - digit;
                if d != 0 {
                    acc += &-self.table[j * half as usize + d as usize - 1];
                }
            } else {
                carry = 0;
                if digit != 0 {
                    acc += &self.table[j * half as usize + digit as usize - 1];
                }
            }
        }
        acc
    }

    /// `out[i] = scalars[i] · P` in affine form, in parallel.
    pub fn mul_batch(&self, scalars: &[Scalar], out: &mut [G::Affine]) {
        out.par_chunks_mut(CHUNK)
            .zip(scalars.par_chunks(CHUNK))
            .for_each(|(out, scalars)| {
                let points: Vec<G> = scalars.iter().map(|s| self.mul(s)).collect();
                G::batch_to_affine(&points, out);
            });
    }

    /// `scalars[i] · P` in affine form, in parallel.
    pub fn mul_all(&self, scalars: &[Scalar]) -> Vec<G::Affine> {
        let mut out = vec![G::Affine::identity(); scalars.len()];
        self.mul_batch(scalars, &mut out);
        out
    }
}

/// Multiplies many scalars by one fixed base into affine points: the one
/// operation every group element of a setup comes from. `Sync`: the h
/// query is multiplied on a thread of its own while the QAP is evaluated.
pub trait FixedBaseMul<G: FastCurve>: Sync {
    /// `scalars[i] · P` for each `i` (the identity for a zero scalar).
    fn multiply(&self, scalars: &[Scalar]) -> Result<Vec<G::Affine>, BackendError>;
    /// Window width of the table the multiplications walk.
    fn window(&self) -> usize;
}

impl<G: FastCurve> FixedBaseMul<G> for FixedBaseTable<G> {
    fn multiply(&self, scalars: &[Scalar]) -> Result<Vec<G::Affine>, BackendError> {
        Ok(self.mul_all(scalars))
    }

    fn window(&self) -> usize {
        self.window
    }
}

/// Where a setup's fixed-base multiplications run: takes each generator's
/// table and hands back the multiplier for it.
pub trait FixedBaseEngine {
    /// `cpu` or `cuda`, for logs and tables.
    fn name(&self) -> &'static str;
    fn g1(
        &self,
        table: FixedBaseTable<G1Projective>,
    ) -> Result<Box<dyn FixedBaseMul<G1Projective> + '_>, BackendError>;
    fn g2(
        &self,
        table: FixedBaseTable<G2Projective>,
    ) -> Result<Box<dyn FixedBaseMul<G2Projective> + '_>, BackendError>;
}

/// The multiplications on this host's cores (rayon).
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuFixedBase;

impl FixedBaseEngine for CpuFixedBase {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn g1(
        &self,
        table: FixedBaseTable<G1Projective>,
    ) -> Result<Box<dyn FixedBaseMul<G1Projective> + '_>, BackendError> {
        Ok(Box::new(table))
    }

    fn g2(
        &self,
        table: FixedBaseTable<G2Projective>,
    ) -> Result<Box<dyn FixedBaseMul<G2Projective> + '_>, BackendError> {
        Ok(Box::new(table))
    }
}

/// Scalars that put every window digit of a `window`-bit table walk at its
/// edges: every window holding 0, 1, `2^(w−1) − 1`, `2^(w−1)` (the largest
/// positive digit), `2^(w−1) + 1` (the first negative one) and `2^w − 1`
/// (−1, carrying), windows alternating between the two sides of the sign
/// boundary (carries in and out of every window), and 0, 1, 2, −1 (r − 1,
/// the top window's largest value). Bits from 254 up are cleared, so each
/// pattern is below r. For tests of every implementation of the walk.
pub fn edge_scalars(window: usize) -> Vec<Scalar> {
    let w = window.clamp(2, 24);
    let half = 1u64 << (w - 1);
    let all = (1u64 << w) - 1;
    let repeat = |digits: &dyn Fn(usize) -> u64| -> Scalar {
        let mut limbs = [0u64; 4];
        for j in 0..SCALAR_BITS.div_ceil(w) {
            let d = digits(j);
            for b in 0..w {
                let bit = j * w + b;
                if bit < 254 && (d >> b) & 1 == 1 {
                    limbs[bit / 64] |= 1 << (bit % 64);
                }
            }
        }
        let mut repr = [0u8; 32];
        for (k, l) in limbs.iter().enumerate() {
            repr[8 * k..8 * k + 8].copy_from_slice(&l.to_le_bytes());
        }
        // Below 2^254 < r: always a canonical encoding.
        Option::from(Scalar::from_repr(repr)).unwrap_or(Scalar::ZERO)
    };
    let mut out = vec![Scalar::ZERO, Scalar::ONE, Scalar::from(2u64), -Scalar::ONE];
    for d in [0, 1, half - 1, half, half + 1, all] {
        out.push(repeat(&|_| d));
    }
    out.push(repeat(&|j| if j % 2 == 0 { half } else { half + 1 }));
    out.push(repeat(&|j| if j % 2 == 0 { all } else { half }));
    out.push(repeat(&|j| if j % 2 == 0 { half + 1 } else { all }));
    out
}

/// Bits `[start, start + w)` of a 256-bit little-endian number (`mask = 2^w − 1`).
fn bits(limbs: &[u64; 4], start: usize, mask: u64) -> u64 {
    let (limb, shift) = (start / 64, start % 64);
    if limb >= 4 {
        return 0;
    }
    let mut v = limbs[limb] >> shift;
    if shift != 0 && limb + 1 < 4 {
        v |= limbs[limb + 1] << (64 - shift);
    }
    v & mask
}

#[cfg(test)]
mod tests {
    use super::*;
    use group::Curve;
    use rand_chacha::rand_core::SeedableRng;
    use rand_chacha::ChaCha20Rng;

    #[test]
    fn batch_to_affine_matches_to_affine_including_identity() {
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let mut points: Vec<G1Projective> =
            (0..9).map(|_| G1Projective::random(&mut rng)).collect();
        points[4] = G1Projective::identity();
        let mut out = vec![G1Affine::identity(); points.len()];
        G1Projective::batch_to_affine(&points, &mut out);
        for (p, a) in points.iter().zip(&out) {
            assert_eq!(p.to_affine(), *a);
        }
        let points: Vec<G2Projective> = (0..5).map(|_| G2Projective::random(&mut rng)).collect();
        let mut out = vec![G2Affine::identity(); points.len()];
        G2Projective::batch_to_affine(&points, &mut out);
        for (p, a) in points.iter().zip(&out) {
            assert_eq!(p.to_affine(), *a);
        }
    }

    #[test]
    fn table_multiplication_matches_plain_multiplication() {
        let mut rng = ChaCha20Rng::seed_from_u64(2);
        let base = G1Projective::random(&mut rng);
        let mut scalars: Vec<Scalar> = (0..40).map(|_| Scalar::random(&mut rng)).collect();
        scalars.extend([
            Scalar::ZERO,
            Scalar::ONE,
            -Scalar::ONE,
            Scalar::from(u64::MAX),
        ]);
        for window in [2, 3, 5, 8, 11] {
            let table = FixedBaseTable::with_window(base, window);
            let got = table.mul_all(&scalars);
            for (s, g) in scalars.iter().zip(&got) {
                assert_eq!((base * s).to_affine(), *g, "window {window}");
            }
        }
        let base2 = G2Projective::random(&mut rng);
        let table = FixedBaseTable::new(base2, scalars.len());
        for (s, g) in scalars.iter().zip(table.mul_all(&scalars)) {
            assert_eq!((base2 * s).to_affine(), g);
        }
    }

    #[test]
    fn edge_digits_match_plain_multiplication_in_both_groups() {
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let base = G1Projective::random(&mut rng);
        let base2 = G2Projective::random(&mut rng);
        for window in [2, 3, 4, 7, 8, 13, 14, 16] {
            let scalars = edge_scalars(window);
            assert!(scalars.len() >= 13, "window {window}");
            let table = FixedBaseTable::with_window(base, window);
            let engine = CpuFixedBase;
            let got = engine
                .g1(table)
                .and_then(|t| t.multiply(&scalars))
                .expect("cpu never fails");
            for (s, g) in scalars.iter().zip(&got) {
                assert_eq!((base * s).to_affine(), *g, "window {window}, scalar {s:?}");
            }
            if window <= 8 {
                let table = FixedBaseTable::with_window(base2, window);
                for (s, g) in scalars.iter().zip(table.mul_all(&scalars)) {
                    assert_eq!((base2 * s).to_affine(), g, "G2 window {window}");
                }
            }
        }
    }

    #[test]
    fn edge_scalars_hold_the_digit_they_name_in_every_low_window() {
        let w = 8;
        let repr = edge_scalars(w)[4 + 3].to_repr();
        // Pattern 2^(w-1) = 0x80 in every byte below bit 254.
        assert!(repr.as_ref()[..31].iter().all(|b| *b == 0x80));
        let repr = edge_scalars(w)[4 + 5].to_repr();
        assert!(repr.as_ref()[..31].iter().all(|b| *b == 0xff));
        assert_eq!(repr.as_ref()[31], 0x3f, "bits 254 and 255 cleared");
    }

    #[test]
    fn window_grows_with_the_number_of_scalars_and_respects_the_memory_cap() {
        let small = choose_window(16, 96);
        let large = choose_window(1 << 24, 96);
        assert!(small < large, "{small} vs {large}");
        let w = choose_window(1 << 30, 192);
        assert!(SCALAR_BITS.div_ceil(w) * (1 << (w - 1)) * 192 <= MAX_TABLE_BYTES);
    }
}
