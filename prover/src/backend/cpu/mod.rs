//! The CPU backend: radix-2 FFTs and Pippenger multi-exponentiation on all cores.
//!
//! The quotient gives bellperson's h with one transform fewer: c's coset
//! FFT and the inverse that would undo it are skipped (see `quotient`), and
//! element-wise passes are fused into neighbours (the 1/n of each inverse
//! FFT with the coset shift that follows it); field arithmetic is exact, so
//! no value changes (test below, and the proofs' byte-identity tests).

pub mod fft;
pub mod msm;

use crate::backend::{
    check_msm_len, Backend, BackendError, BackendKind, BackendTimes, G1Bases, G2Bases,
};
use blstrs::{G1Projective, G2Projective, Scalar};
use fleet_wire::timing::Phase;
use std::time::Instant;

/// Runs on a dedicated rayon pool when built with [`CpuBackend::with_threads`],
/// otherwise on the global one.
#[derive(Debug, Default)]
pub struct CpuBackend {
    pool: Option<rayon::ThreadPool>,
}

/// Could not build the backend's thread pool.
#[derive(Debug, thiserror::Error)]
#[error("cpu backend: cannot start {threads} worker threads: {source}")]
pub struct CpuPoolError {
    threads: usize,
    #[source]
    source: rayon::ThreadPoolBuildError,
}

impl CpuBackend {
    /// Uses rayon's global pool (all cores unless `RAYON_NUM_THREADS` says otherwise).
    pub fn new() -> Self {
        CpuBackend { pool: None }
    }

    /// Uses its own pool of `threads` workers, so a daemon can bound the
    /// cores that CPU proving takes from synthesis.
    pub fn with_threads(threads: usize) -> Result<Self, CpuPoolError> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("cpu-backend-{i}"))
            .build()
            .map_err(|source| CpuPoolError { threads, source })?;
        Ok(CpuBackend { pool: Some(pool) })
    }

    fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        match &self.pool {
            Some(p) => p.install(f),
            None => f(),
        }
    }
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

impl Backend for CpuBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cpu
    }

    fn quotient(
        &self,
        a: &mut [Scalar],
        b: &mut [Scalar],
        c: &mut [Scalar],
        _pinned: bool,
        times: &mut BackendTimes,
    ) -> Result<(), BackendError> {
        if a.len() != b.len() || a.len() != c.len() {
            return Err(BackendError::LengthMismatch {
                a: a.len(),
                b: b.len(),
                c: c.len(),
            });
        }
        let d = fft::Domain::new(a.len())?;
        self.run(|| {
            let start = Instant::now();

            let t = Instant::now();
            for v in [&mut *a, &mut *b, &mut *c] {
                fft::fft(v, d.omega_inv, d.log_n);
            }
            times.add(Phase::NttIfft, ms_since(t));

            // iFFT's 1/n and the coset shift g^i in one pass, then the FFT;
            // a and b only. On the coset Z is the constant g^n − 1 and the
            // coset iFFT undoes the coset FFT, so (a·b − c)/Z interpolated
            // over the coset is the coset iFFT of a·b/Z minus c's
            // coefficients over Z: c's coset FFT would only be undone again.
            let t = Instant::now();
            for v in [&mut *a, &mut *b] {
                fft::scale_by_powers(v, d.minv, d.g);
                fft::fft(v, d.omega, d.log_n);
            }
            times.add(Phase::NttCosetFft, ms_since(t));

            let t = Instant::now();
            fft::mul_scale(a, b, d.z_inv_on_coset);
            times.add(Phase::NttMulSubDivZ, ms_since(t));

            // Taken off: c's coefficients over Z, its iFFT's 1/n and 1/Z
            // in one factor.
            let t = Instant::now();
            fft::fft(a, d.omega_inv, d.log_n);
            fft::scale_by_powers_sub(a, d.minv, d.g_inv, c, d.minv * d.z_inv_on_coset);
            times.add(Phase::NttCosetIfft, ms_since(t));

            times.add(Phase::NttKernels, ms_since(start));
        });
        Ok(())
    }

    fn msm_g1(
        &self,
        bases: &G1Bases<'_>,
        scalars: &[Scalar],
        _times: &mut BackendTimes,
    ) -> Result<G1Projective, BackendError> {
        let bases = bases.points();
        check_msm_len(bases.len(), scalars.len(), usize::MAX)?;
        Ok(self.run(|| msm::msm(bases, scalars)))
    }

    fn msm_g2(
        &self,
        bases: &G2Bases<'_>,
        scalars: &[Scalar],
        _times: &mut BackendTimes,
    ) -> Result<G2Projective, BackendError> {
        let bases = bases.points();
        check_msm_len(bases.len(), scalars.len(), usize::MAX)?;
        Ok(self.run(|| msm::msm(bases, scalars)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ff::Field;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    /// bellperson's sequence: three iFFTs, three coset FFTs, (a·b − c)/Z,
    /// the coset iFFT.
    fn seven_transforms(a: &[Scalar], b: &[Scalar], c: &[Scalar]) -> Vec<Scalar> {
        let d = fft::Domain::new(a.len()).unwrap();
        let mut v = [a.to_vec(), b.to_vec(), c.to_vec()];
        for x in &mut v {
            fft::fft(x, d.omega_inv, d.log_n);
            fft::scale_by_powers(x, d.minv, d.g);
            fft::fft(x, d.omega, d.log_n);
        }
        let [mut h, b, c] = v;
        for i in 0..h.len() {
            h[i] = (h[i] * b[i] - c[i]) * d.z_inv_on_coset;
        }
        fft::fft(&mut h, d.omega_inv, d.log_n);
        fft::scale_by_powers(&mut h, d.minv, d.g_inv);
        h
    }

    #[test]
    fn quotient_with_six_transforms_equals_the_seven_step_one_for_any_a_b_c() {
        // Random a, b, c: no constraint system is satisfied, so the identity
        // is checked where a·b − c does not vanish on the domain too.
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        for log_n in [1u32, 3, 10, 13] {
            let n = 1usize << log_n;
            let mut gen = || (0..n).map(|_| Scalar::random(&mut rng)).collect::<Vec<_>>();
            let (mut a, mut b, mut c) = (gen(), gen(), gen());
            let want = seven_transforms(&a, &b, &c);
            let mut times = BackendTimes::default();
            CpuBackend::new()
                .quotient(&mut a, &mut b, &mut c, false, &mut times)
                .unwrap();
            assert!(a == want, "h differs at 2^{log_n}");
        }
    }
}
