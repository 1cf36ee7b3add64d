//! Radix-2 FFTs over the BLS12-381 scalar field on all cores, with the same
//! domain constants as bellperson's `EvaluationDomain` (so every output
//! element is identical: the transform is exact field arithmetic).

use crate::backend::BackendError;
use blstrs::Scalar;
use ff::{Field, PrimeField};
use rayon::prelude::*;

/// Below this many elements a pass runs on one thread: splitting costs more
/// than it saves.
const PAR_MIN: usize = 1 << 12;

/// Layers whose butterflies stay within a block of this many elements run
/// block by block, so a block (128 KiB) stays in cache across those layers
/// instead of streaming the whole vector once per layer.
const CACHE_BLOCK: usize = 1 << 12;

/// The constants of one radix-2 evaluation domain, derived exactly as
/// bellperson derives them.
#[derive(Debug, Clone)]
pub struct Domain {
    pub log_n: u32,
    pub n: usize,
    /// Primitive n-th root of unity: `ROOT_OF_UNITY` squared `S - log_n` times.
    pub omega: Scalar,
    pub omega_inv: Scalar,
    /// 1/n.
    pub minv: Scalar,
    /// The coset shift g = `MULTIPLICATIVE_GENERATOR` and its inverse.
    pub g: Scalar,
    pub g_inv: Scalar,
    /// 1 / Z(g) where Z(x) = x^n − 1 vanishes on the domain.
    pub z_inv_on_coset: Scalar,
}

impl Domain {
    /// The domain of exactly `n` elements (`n` a power of two below 2^S).
    pub fn new(n: usize) -> Result<Self, BackendError> {
        let bad = BackendError::BadDomain {
            size: n,
            max_log: Scalar::S - 1,
        };
        if n == 0 || !n.is_power_of_two() {
            return Err(bad);
        }
        let log_n = n.trailing_zeros();
        if log_n >= Scalar::S {
            return Err(bad);
        }
        let mut omega = Scalar::ROOT_OF_UNITY;
        for _ in log_n..Scalar::S {
            omega = omega.square();
        }
        let g = Scalar::MULTIPLICATIVE_GENERATOR;
        // n, omega and g are all non-zero field elements, so the inverses exist;
        // `unwrap_or` keeps the arithmetic total without a panic path.
        let omega_inv = Option::from(omega.invert()).unwrap_or(Scalar::ZERO);
        let minv = Option::from(Scalar::from(n as u64).invert()).unwrap_or(Scalar::ZERO);
        let g_inv = Option::from(g.invert()).unwrap_or(Scalar::ZERO);
        let z = g.pow_vartime([n as u64]) - Scalar::ONE;
        let z_inv_on_coset = Option::from(z.invert()).unwrap_or(Scalar::ZERO);
        Ok(Domain {
            log_n,
            n,
            omega,
            omega_inv,
            minv,
            g,
            g_inv,
            z_inv_on_coset,
        })
    }
}

/// In-place DFT with root `omega`: natural order in, natural order out
/// (`a[k] ← Σ_j a[j]·omega^{jk}`). `a.len()` must be `2^log_n`.
pub fn fft(a: &mut [Scalar], omega: Scalar, log_n: u32) {
    let n = a.len();
    debug_assert_eq!(n, 1usize << log_n);
    if n <= 1 {
        return;
    }
    bit_reverse(a, log_n);
    let twiddles = twiddles(omega, n / 2);

    // Small layers: all butterflies of span < CACHE_BLOCK inside each block.
    let block = CACHE_BLOCK.min(n);
    let run_block = |chunk: &mut [Scalar]| {
        let mut half = 1;
        while half < chunk.len() {
            let stride = n / (2 * half);
            for pair in chunk.chunks_mut(2 * half) {
                butterflies(pair, half, &twiddles, stride, 0);
            }
            half *= 2;
        }
    };
    if n >= PAR_MIN {
        a.par_chunks_mut(block).for_each(run_block);
    } else {
        a.chunks_mut(block).for_each(run_block);
    }

    // Large layers: few long blocks, so split each block's butterflies.
    let mut half = block;
    while half < n {
        let stride = n / (2 * half);
        if n / (2 * half) >= rayon::current_num_threads() * 2 {
            a.par_chunks_mut(2 * half)
                .for_each(|pair| butterflies(pair, half, &twiddles, stride, 0));
            half *= 2;
            continue;
        }
        for pair in a.chunks_mut(2 * half) {
            let (lo, hi) = pair.split_at_mut(half);
            let piece = (half / (rayon::current_num_threads() * 4)).max(PAR_MIN / 2);
            lo.par_chunks_mut(piece)
                .zip(hi.par_chunks_mut(piece))
                .enumerate()
                .for_each(|(k, (lo, hi))| {
                    butterfly_halves(lo, hi, &twiddles, stride, k * piece);
                });
        }
        half *= 2;
    }
}

/// The butterflies of one block `pair` of `2·half` elements.
#[inline]
fn butterflies(pair: &mut [Scalar], half: usize, tw: &[Scalar], stride: usize, j0: usize) {
    let (lo, hi) = pair.split_at_mut(half);
    butterfly_halves(lo, hi, tw, stride, j0);
}

#[inline]
fn butterfly_halves(lo: &mut [Scalar], hi: &mut [Scalar], tw: &[Scalar], stride: usize, j0: usize) {
    for (j, (x, y)) in lo.iter_mut().zip(hi.iter_mut()).enumerate() {
        let t = *y * tw[(j0 + j) * stride];
        *y = *x - t;
        *x += t;
    }
}

/// `omega^j` for `j < half`.
fn twiddles(omega: Scalar, half: usize) -> Vec<Scalar> {
    let mut tw = vec![Scalar::ZERO; half];
    let piece = (half / rayon::current_num_threads()).max(PAR_MIN);
    tw.par_chunks_mut(piece).enumerate().for_each(|(k, chunk)| {
        let mut w = omega.pow_vartime([(k * piece) as u64]);
        for t in chunk {
            *t = w;
            w *= omega;
        }
    });
    tw
}

/// Swaps `a[i]` and `a[rev(i)]` for all `i`.
fn bit_reverse(a: &mut [Scalar], log_n: u32) {
    let shift = usize::BITS - log_n;
    for i in 0..a.len() {
        let r = i.reverse_bits() >> shift;
        if i < r {
            a.swap(i, r);
        }
    }
}

/// `f(i, &mut a[i], c · g^i)` for every i, in parallel pieces (each piece
/// starts its powers with one exponentiation).
fn for_each_power(
    a: &mut [Scalar],
    c: Scalar,
    g: Scalar,
    f: impl Fn(usize, &mut Scalar, Scalar) + Sync,
) {
    let piece = (a.len() / (rayon::current_num_threads() * 4)).max(PAR_MIN);
    a.par_chunks_mut(piece).enumerate().for_each(|(k, chunk)| {
        let mut u = c * g.pow_vartime([(k * piece) as u64]);
        for (j, v) in chunk.iter_mut().enumerate() {
            f(k * piece + j, v, u);
            u *= g;
        }
    });
}

/// `a[i] ← a[i] · c · g^i`: bellperson's `distribute_powers(g)` with a
/// constant factor folded in (the 1/n of an inverse FFT), one pass instead of two.
pub fn scale_by_powers(a: &mut [Scalar], c: Scalar, g: Scalar) {
    for_each_power(a, c, g, |_, v, u| *v *= u);
}

/// `a[i] ← a[i] · c · g^i − sub[i] · k`: [`scale_by_powers`] with a scaled
/// vector taken off in the same pass.
pub fn scale_by_powers_sub(a: &mut [Scalar], c: Scalar, g: Scalar, sub: &[Scalar], k: Scalar) {
    for_each_power(a, c, g, |i, v, u| *v = *v * u - sub[i] * k);
}

/// `a[i] ← a[i] · b[i] · k`.
pub fn mul_scale(a: &mut [Scalar], b: &[Scalar], k: Scalar) {
    let piece = (a.len() / (rayon::current_num_threads() * 4)).max(PAR_MIN);
    a.par_chunks_mut(piece)
        .zip(b.par_chunks(piece))
        .for_each(|(a, b)| {
            for (a, b) in a.iter_mut().zip(b) {
                *a = *a * b * k;
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    fn naive_dft(a: &[Scalar], omega: Scalar) -> Vec<Scalar> {
        let n = a.len();
        (0..n)
            .map(|k| {
                let wk = omega.pow_vartime([k as u64]);
                let mut acc = Scalar::ZERO;
                let mut w = Scalar::ONE;
                for x in a {
                    acc += *x * w;
                    w *= wk;
                }
                acc
            })
            .collect()
    }

    #[test]
    fn fft_matches_naive_dft_at_small_sizes() {
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        for log_n in 0..7 {
            let n = 1 << log_n;
            let d = Domain::new(n).unwrap();
            let v: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
            let mut got = v.clone();
            fft(&mut got, d.omega, log_n);
            assert_eq!(got, naive_dft(&v, d.omega), "n = {n}");
        }
    }

    #[test]
    fn fft_then_inverse_is_identity_across_the_cache_block_boundary() {
        let mut rng = ChaCha20Rng::seed_from_u64(2);
        for log_n in [11, 12, 13, 14] {
            let n = 1 << log_n;
            let d = Domain::new(n).unwrap();
            let v: Vec<Scalar> = (0..n).map(|_| Scalar::random(&mut rng)).collect();
            let mut w = v.clone();
            fft(&mut w, d.omega, log_n);
            fft(&mut w, d.omega_inv, log_n);
            w.iter_mut().for_each(|x| *x *= d.minv);
            assert_eq!(w, v, "n = {n}");
        }
    }

    #[test]
    fn domain_rejects_sizes_that_are_not_powers_of_two() {
        assert!(Domain::new(0).is_err());
        assert!(Domain::new(12).is_err());
        assert_eq!(Domain::new(1 << 10).unwrap().log_n, 10);
    }

    #[test]
    fn scale_by_powers_multiplies_by_c_times_g_to_the_i() {
        let n = PAR_MIN * 2 + 3;
        let mut a = vec![Scalar::ONE; n];
        let c = Scalar::from(5u64);
        let g = Scalar::from(7u64);
        scale_by_powers(&mut a, c, g);
        for i in [0, 1, PAR_MIN - 1, PAR_MIN, n - 1] {
            assert_eq!(a[i], c * g.pow_vartime([i as u64]), "i = {i}");
        }
    }
}
