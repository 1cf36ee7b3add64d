//! Measurements behind `scripts/gpu-check.sh`: H2D bandwidth from pinned
//! pool memory against pageable heap memory (idle, and with a
//! synthesis-like memory load on other cores), and the NTT phase per size
//! with the data already on the device. Device time is read from events.

use super::check::check;
use super::domain::scalar_bytes_mut;
use super::memory::DeviceBuffer;
use super::quotient::{DeviceTimes, H2D_CHUNK};
use super::{CudaBackend, CudaHostAllocator};
use crate::backend::BackendError;
use crate::pool::HostAllocator;
use blstrs::Scalar;
use cudarc::driver::{result, sys};
use rand_core::{RngCore, SeedableRng};
use rayon::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Random field elements, fast: any four limbs below r are a valid
/// Montgomery representation, and clearing the top two bits keeps them
/// below r (r > 2^254).
pub fn random_scalars(n: usize, seed: u64) -> Vec<Scalar> {
    let mut v = vec![Scalar::from(0u64); n];
    let bytes = scalar_bytes_mut(&mut v);
    bytes
        .par_chunks_mut(1 << 20)
        .enumerate()
        .for_each(|(i, chunk)| {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
                seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            );
            rng.fill_bytes(chunk);
            for limb in chunk.chunks_exact_mut(32) {
                limb[31] &= 0x3f;
            }
        });
    v
}

/// Threads that stream memory (copy 256 MiB back and forth) until dropped:
/// the memory-bus pressure synthesis puts on a host.
pub struct MemoryLoad {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl MemoryLoad {
    pub fn start(threads: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..threads)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut src = vec![1u8; 256 << 20];
                    let mut dst = vec![0u8; 256 << 20];
                    while !stop.load(Ordering::Relaxed) {
                        dst.copy_from_slice(&src);
                        std::mem::swap(&mut src, &mut dst);
                    }
                    std::hint::black_box(&dst);
                })
            })
            .collect();
        Self { stop, threads }
    }
}

impl Drop for MemoryLoad {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Host memory for one bandwidth run: pinned from the pool's allocator, or
/// ordinary (touched) heap memory.
enum HostBuf {
    Pinned(CudaHostAllocator, Option<crate::pool::Region>),
    Heap(Vec<u8>),
}

impl HostBuf {
    fn bytes(&self) -> &[u8] {
        match self {
            // SAFETY: the region is live and `len` bytes long while self lives.
            HostBuf::Pinned(_, Some(r)) => unsafe {
                std::slice::from_raw_parts(r.as_ptr(), r.len())
            },
            HostBuf::Pinned(_, None) => &[],
            HostBuf::Heap(v) => v,
        }
    }
}

impl Drop for HostBuf {
    fn drop(&mut self) {
        if let HostBuf::Pinned(alloc, region) = self {
            if let Some(r) = region.take() {
                // SAFETY: from `alloc.alloc`, no longer used.
                unsafe { alloc.free(r) };
            }
        }
    }
}

/// Median H2D rate (GB/s, 10^9 bytes) of `reps` copies of `bytes` in
/// [`H2D_CHUNK`] async chunks on one stream.
pub fn h2d_gbps(
    backend: &CudaBackend,
    bytes: usize,
    pinned: bool,
    reps: usize,
) -> Result<f64, BackendError> {
    let dev = backend.device_ordinal();
    let host = if pinned {
        let alloc = CudaHostAllocator::new(dev)?;
        let region = alloc.alloc(bytes).map_err(|e| {
            super::check::device_error(dev, "cuMemHostAlloc", file!(), line!(), &e.to_string())
        })?;
        // SAFETY: fresh region of `bytes` bytes; fill so no page is special.
        unsafe { std::ptr::write_bytes(region.as_ptr(), 0x5a, bytes) };
        HostBuf::Pinned(alloc, Some(region))
    } else {
        HostBuf::Heap(vec![0x5au8; bytes])
    };
    let ctx = backend.context();
    let dst = DeviceBuffer::alloc(ctx, dev, bytes)?;
    let stream = check!(dev, "cuStreamCreate", ctx.new_stream())?;
    let start = check!(
        dev,
        "cuEventCreate",
        ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
    )?;
    let end = check!(
        dev,
        "cuEventCreate",
        ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
    )?;
    let mut rates = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        check!(dev, "cuEventRecord", start.record(&stream))?;
        for (i, chunk) in host.bytes().chunks(H2D_CHUNK).enumerate() {
            // SAFETY: dst holds `bytes`; host outlives the synchronize below.
            check!(dev, "cuMemcpyHtoDAsync", unsafe {
                result::memcpy_htod_async(
                    dst.ptr() + (i * H2D_CHUNK) as u64,
                    chunk,
                    stream.cu_stream(),
                )
            })?;
        }
        check!(dev, "cuEventRecord", end.record(&stream))?;
        let ms = check!(dev, "cuEventElapsedTime", start.elapsed_ms(&end))? as f64;
        rates.push(bytes as f64 / (ms * 1e6));
    }
    check!(dev, "cuStreamSynchronize", stream.synchronize())?;
    Ok(median(&mut rates))
}

/// Median of a non-empty list (0 when empty).
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// NTT phase at 2^log_n with random a, b, c on the device: one warm-up, then
/// the run with the median total of `reps`.
pub fn ntt_phase(
    backend: &CudaBackend,
    log_n: u32,
    reps: usize,
) -> Result<DeviceTimes, BackendError> {
    let n = 1usize << log_n;
    let a = random_scalars(n, 1);
    let b = random_scalars(n, 2);
    let c = random_scalars(n, 3);
    backend.upload_abc(&a, &b, &c)?;
    drop((a, b, c));
    backend.ntt_phase_on_device()?;
    let mut runs = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        runs.push(backend.ntt_phase_on_device()?);
    }
    runs.sort_by(|x, y| x.ntt_total_ms().total_cmp(&y.ntt_total_ms()));
    Ok(runs[runs.len() / 2])
}

/// `n` distinct affine points, fast: runs of P, P + Q, P + 2Q, … from a
/// random start P and step Q per chunk (one addition per point), then one
/// batch normalisation. Random enough for MSM timing and checks; the
/// tests add identities and repeated points on purpose.
pub fn random_bases(n: usize, seed: u64) -> Vec<blstrs::G1Affine> {
    random_points::<blstrs::G1Projective>(n, seed)
}

/// [`random_bases`] in G2.
pub fn random_g2_bases(n: usize, seed: u64) -> Vec<blstrs::G2Affine> {
    random_points::<blstrs::G2Projective>(n, seed)
}

fn random_points<P>(n: usize, seed: u64) -> Vec<P::AffineRepr>
where
    P: group::Curve + Send + Sync,
    P::AffineRepr: Default + Clone + Send + Sync,
{
    const CHUNK: usize = 1 << 14;
    let mut proj = vec![P::identity(); n];
    proj.par_chunks_mut(CHUNK)
        .enumerate()
        .for_each(|(i, chunk)| {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(
                seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            );
            let step = P::random(&mut rng);
            let mut p = P::random(&mut rng);
            for slot in chunk.iter_mut() {
                *slot = p;
                p += step;
            }
        });
    let mut out = vec![P::AffineRepr::default(); n];
    out.par_chunks_mut(CHUNK)
        .zip(proj.par_chunks(CHUNK))
        .for_each(|(o, p)| P::batch_normalize(p, o));
    out
}

/// Scalars shaped like a circuit's aux assignment: about half zero, a
/// quarter one, a tenth small (below 2^16), the rest uniform.
pub fn witness_like_scalars(n: usize, seed: u64) -> Vec<Scalar> {
    let mut v = random_scalars(n, seed);
    v.par_chunks_mut(1 << 16)
        .enumerate()
        .for_each(|(i, chunk)| {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed.rotate_left(17) ^ i as u64);
            for s in chunk.iter_mut() {
                let roll = rng.next_u32() % 100;
                if roll < 50 {
                    *s = Scalar::from(0u64);
                } else if roll < 75 {
                    *s = Scalar::from(1u64);
                } else if roll < 85 {
                    *s = Scalar::from(u64::from(rng.next_u32() & 0xffff));
                }
            }
        });
    v
}

/// Device times of one G1 MSM configuration: median over `reps` runs
/// (after one warm-up run that also makes the bases resident).
#[derive(Debug, Clone, Copy)]
pub struct MsmTiming {
    pub c: u32,
    /// Kernels only: bases and scalars already on the device.
    pub kernels_ms: f64,
    /// Scalar upload + kernels (what a proof pays).
    pub with_upload_ms: f64,
    /// The stages of the median run (sort, bucket sums, reduction).
    pub stages: super::msm::MsmDeviceTimes,
}

pub fn msm_g1(
    gpu: &CudaBackend,
    set: &str,
    bases: &[blstrs::G1Affine],
    scalars: &[Scalar],
    c: u32,
    reps: usize,
) -> Result<MsmTiming, BackendError> {
    use crate::backend::{BaseQuery, G1Bases};
    let b = G1Bases::of_query(bases, 0..scalars.len(), Some(set), BaseQuery::H);
    msm_timing(c, reps, || Ok(gpu.msm_g1_with_window(&b, scalars, c)?.1))
}

/// As [`msm_g1`], in G2 (resident as the set's b_g2 query).
pub fn msm_g2(
    gpu: &CudaBackend,
    set: &str,
    bases: &[blstrs::G2Affine],
    scalars: &[Scalar],
    c: u32,
    reps: usize,
) -> Result<MsmTiming, BackendError> {
    use crate::backend::{BaseQuery, G2Bases};
    let b = G2Bases::of_query(bases, 0..scalars.len(), Some(set), BaseQuery::BG2);
    msm_timing(c, reps, || Ok(gpu.msm_g2_with_window(&b, scalars, c)?.1))
}

/// The G1 MSM as provers run it (the resident query's table of multiples).
pub fn msm_g1_table(
    gpu: &CudaBackend,
    set: &str,
    bases: &[blstrs::G1Affine],
    scalars: &[Scalar],
    reps: usize,
) -> Result<MsmTiming, BackendError> {
    use crate::backend::{BaseQuery, G1Bases};
    let b = G1Bases::of_query(bases, 0..scalars.len(), Some(set), BaseQuery::H);
    msm_timing(0, reps, || Ok(gpu.msm_g1_auto(&b, scalars)?.1))
}

/// As [`msm_g1_table`], in G2.
pub fn msm_g2_table(
    gpu: &CudaBackend,
    set: &str,
    bases: &[blstrs::G2Affine],
    scalars: &[Scalar],
    reps: usize,
) -> Result<MsmTiming, BackendError> {
    use crate::backend::{BaseQuery, G2Bases};
    let b = G2Bases::of_query(bases, 0..scalars.len(), Some(set), BaseQuery::BG2);
    msm_timing(0, reps, || Ok(gpu.msm_g2_auto(&b, scalars)?.1))
}

/// A warm-up call, then the median of `reps` calls.
fn msm_timing(
    c: u32,
    reps: usize,
    mut call: impl FnMut() -> Result<super::msm::MsmDeviceTimes, BackendError>,
) -> Result<MsmTiming, BackendError> {
    call()?;
    let mut runs = Vec::with_capacity(reps);
    for _ in 0..reps.max(1) {
        runs.push(call()?);
    }
    runs.sort_by(|x, y| x.kernels_ms.total_cmp(&y.kernels_ms));
    let stages = runs[runs.len() / 2];
    let mut total: Vec<f64> = runs.iter().map(|t| t.kernels_ms + t.h2d_ms).collect();
    total.sort_by(f64::total_cmp);
    Ok(MsmTiming {
        c,
        kernels_ms: stages.kernels_ms,
        with_upload_ms: total[total.len() / 2],
        stages,
    })
}
