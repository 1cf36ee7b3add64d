//! The fixed-base multiplications of parameter generation on the device
//! (kernels/ec/fixed_base.cu): `prover setup --backend cuda`.
//!
//! The host builds each generator's table of affine multiples as the CPU
//! engine does ([`FixedBaseTable`]) and uploads it once; every call then
//! streams its scalars through the device in chunks of at most
//! [`CudaFixedBase::chunk`] points (device memory stays bounded whatever
//! the set's size), one thread per scalar walking the same signed digits,
//! and the points come back affine, laid out as blst lays them out, so the
//! host only copies bytes. Each result is an exact group element, so the
//! parameters equal the CPU engine's byte for byte.
//!
//! Scalars go up and points come down through two pinned stages in turn:
//! while the device works on one chunk, the host copies the chunk before
//! out of the other stage (on the engine's own copy threads: the copy is
//! also where the result's fresh pages are first touched), so the link runs
//! at its pinned speed and the host's copies hide behind the device's work.

use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::sync::Arc;

use blstrs::{G1Projective, G2Projective, Scalar};
use cudarc::driver::{result, CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use group::prime::PrimeCurveAffine;

use super::check::{self, check};
use super::kernels::{self, KernelUnit};
use super::memory::{upload_ordered, DeviceBuffer, PinnedStage};
use super::msm::{DeviceGroup, G1, G2};
use super::{cuda_available, device_count, driver_version, CudaBackend};
use crate::backend::BackendError;
use crate::setup::fixed_base::{FastCurve, FixedBaseEngine, FixedBaseMul, FixedBaseTable};

/// Points per chunk unless told otherwise: 2^20 G2 points need about
/// 0.6 GB of device memory (scalars, XYZZ sums, affine results) and two
/// pinned stages of 0.2 GB each on the host; a launch still covers every
/// SM many times over.
pub const DEFAULT_CHUNK: usize = 1 << 20;
/// Threads copying results out of the pinned stages: a chunk's copy
/// (96 MB of G1, 192 MB of G2, into pages touched for the first time)
/// must take less than the device's work on the next chunk.
const COPY_THREADS: usize = 4;
/// Threads per block: the curve code needs about 160 registers a thread
/// in G1 and 230 in G2.
const THREADS: u32 = 128;
/// Points one thread of the affine step converts with one inversion: an
/// inversion costs about 570 products, a point's share of it then about 36.
const AFFINE_RUN: usize = 16;

/// Threads of the affine step for `n` points: each converts at most
/// [`AFFINE_RUN`], strided so that neighbouring threads read neighbouring
/// points.
pub fn affine_threads(n: usize) -> usize {
    n.div_ceil(AFFINE_RUN)
}

/// The chunks `0..n` is cut into, `chunk` points each but the last.
pub fn chunks(n: usize, chunk: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let chunk = chunk.max(1);
    (0..n.div_ceil(chunk)).map(move |k| k * chunk..((k + 1) * chunk).min(n))
}

/// The two kernels of one group.
#[derive(Debug)]
struct GroupKernels {
    mul: CudaFunction,
    affine: CudaFunction,
}

/// One device's fixed-base kernels and the stream they run on.
#[derive(Debug)]
pub struct CudaFixedBase {
    device: u32,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// G1's kernels, then G2's ([`DeviceGroup::UNIT`]).
    kernels: [GroupKernels; 2],
    chunk: usize,
    /// Threads of the host's copies out of the stages: their own, so that
    /// the copies never queue behind the host's other parallel work (the
    /// QAP runs on the global pool while h is multiplied).
    copiers: Arc<rayon::ThreadPool>,
}

impl CudaFixedBase {
    /// Opens device `ordinal` for parameter generation alone (compiling
    /// only the fixed-base units, not the prover's). An error, never a
    /// panic, on a host without a usable GPU.
    pub fn open(ordinal: u32) -> Result<Self, BackendError> {
        let unavailable = |reason: String| BackendError::Device {
            device: ordinal,
            call: "CudaFixedBase::open".into(),
            file: file!(),
            line: line!(),
            reason,
        };
        if !cuda_available() {
            return Err(unavailable(format!(
                "no usable CUDA device ({} device(s), libnvrtc {})",
                device_count(),
                if kernels::nvrtc_available() {
                    "present"
                } else {
                    "missing"
                }
            )));
        }
        let count = device_count();
        if ordinal >= count {
            return Err(unavailable(format!(
                "no device {ordinal}: {count} CUDA device(s) present"
            )));
        }
        let ctx = check!(
            ordinal,
            "cuDevicePrimaryCtxRetain",
            CudaContext::new(ordinal as usize)
        )?;
        let (major, minor) = check!(ordinal, "cuDeviceGetAttribute", ctx.compute_capability())?;
        Self::with_context(ctx, ordinal, &kernels::arch_for(major, minor))
    }

    /// The kernels on a running backend's device and context.
    pub fn on(backend: &CudaBackend) -> Result<Self, BackendError> {
        Self::with_context(
            backend.context().clone(),
            backend.device_ordinal(),
            backend.arch(),
        )
    }

    fn with_context(ctx: Arc<CudaContext>, device: u32, arch: &str) -> Result<Self, BackendError> {
        let target = kernels::Target {
            arch: arch.to_string(),
            driver: driver_version(),
        };
        // In DeviceGroup::UNIT order: G1's, then G2's.
        let units: [&KernelUnit; 2] = [&kernels::FIXED_BASE_G1, &kernels::FIXED_BASE_G2];
        let suffixes = [G1::SUFFIX, G2::SUFFIX];
        let images = kernels::compile_all(&units, &target);
        let mut loaded = Vec::with_capacity(units.len());
        for ((unit, suffix), image) in units.iter().zip(suffixes).zip(images) {
            let image = image.map_err(|e| {
                check::device_error(device, "nvrtcCompileProgram", file!(), line!(), &e)
            })?;
            tracing::debug!(unit = unit.name, origin = %image.origin.describe(), "fixed-base kernels");
            let module = check!(
                device,
                "cuModuleLoadData",
                ctx.load_module(Ptx::from_binary(image.cubin.as_ref().clone()))
            )?;
            let load = |step: &str| {
                let name = format!("fixed_base_{step}_{suffix}");
                check!(device, "cuModuleGetFunction", module.load_function(&name))
            };
            loaded.push(GroupKernels {
                mul: load("mul")?,
                affine: load("affine")?,
            });
        }
        let group_kernels: [GroupKernels; 2] = loaded.try_into().map_err(|_| {
            check::device_error(
                device,
                "cuModuleLoadData",
                file!(),
                line!(),
                &"a fixed-base unit is missing",
            )
        })?;
        let stream = check!(device, "cuStreamCreate", ctx.new_stream())?;
        let copiers = rayon::ThreadPoolBuilder::new()
            .num_threads(COPY_THREADS)
            .thread_name(|i| format!("fixed-base-copy-{i}"))
            .build()
            .map_err(|e| {
                check::device_error(device, "spawning copy threads", file!(), line!(), &e)
            })?;
        Ok(Self {
            device,
            ctx,
            stream,
            kernels: group_kernels,
            chunk: DEFAULT_CHUNK,
            copiers: Arc::new(copiers),
        })
    }

    /// Points per chunk from now on (at least one): tests cut small
    /// batches into several chunks to cover the boundaries.
    pub fn with_chunk(mut self, points: usize) -> Self {
        self.chunk = points.max(1);
        self
    }

    /// Points per chunk.
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Uploads `table` for multiplications in group `D`.
    fn upload<D: DeviceGroup>(
        &self,
        table: &FixedBaseTable<D::Projective>,
    ) -> Result<DeviceTable<'_, D>, BackendError>
    where
        D::Projective: FastCurve<Affine = D::Affine>,
    {
        let multiples = table.multiples();
        let bytes = D::affine_bytes(multiples);
        let buffer = DeviceBuffer::alloc(&self.ctx, self.device, bytes.len().max(16))?;
        upload_ordered(self.device, &self.stream, buffer.ptr(), bytes)?;
        let chunk = self.chunk;
        let scalar_bytes = std::mem::size_of::<Scalar>();
        let stage = || -> Result<Stage, BackendError> {
            Ok(Stage {
                scalars: PinnedStage::alloc(&self.ctx, self.device, chunk * scalar_bytes)?,
                points: PinnedStage::alloc(&self.ctx, self.device, chunk * D::AFFINE_BYTES)?,
                done: check!(self.device, "cuEventCreate", self.ctx.new_event(None))?,
            })
        };
        let work = Work {
            scalars: DeviceBuffer::alloc(&self.ctx, self.device, chunk * scalar_bytes)?,
            xyzz: DeviceBuffer::alloc(&self.ctx, self.device, chunk * D::XYZZ_BYTES)?,
            affine: DeviceBuffer::alloc(&self.ctx, self.device, chunk * D::AFFINE_BYTES)?,
            stages: [stage()?, stage()?],
        };
        Ok(DeviceTable {
            engine: self,
            table: buffer,
            window: table.window(),
            windows: table.windows(),
            work: parking_lot::Mutex::new(work),
            group: PhantomData,
        })
    }
}

/// A pinned stage of the pipeline and the event that says when the
/// device is done with it.
#[derive(Debug)]
struct Stage {
    scalars: PinnedStage,
    points: PinnedStage,
    done: cudarc::driver::CudaEvent,
}

/// The device buffers of one chunk and the two host stages used in turn.
#[derive(Debug)]
struct Work {
    scalars: DeviceBuffer,
    xyzz: DeviceBuffer,
    affine: DeviceBuffer,
    stages: [Stage; 2],
}

/// Copies `src` into `dst` (of the same length) on `pool`'s threads.
fn copy_parallel(pool: &rayon::ThreadPool, dst: &mut [MaybeUninit<u8>], src: &[u8]) {
    use rayon::prelude::*;
    const PIECE: usize = 4 << 20;
    assert_eq!(
        dst.len(),
        src.len(),
        "copy between slices of different lengths"
    );
    pool.install(|| {
        dst.par_chunks_mut(PIECE)
            .zip(src.par_chunks(PIECE))
            .for_each(|(d, s)| {
                // SAFETY: both pieces have the same length (same slices cut
                // at the same size) and do not overlap (one is borrowed
                // mutably).
                unsafe { std::ptr::copy_nonoverlapping(s.as_ptr(), d.as_mut_ptr().cast(), s.len()) }
            })
    });
}

/// `bytes` as room to write into.
fn as_uninit(bytes: &mut [u8]) -> &mut [MaybeUninit<u8>] {
    // SAFETY: MaybeUninit<u8> has u8's layout, and only initialised
    // bytes are ever written through the result.
    unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast(), bytes.len()) }
}

impl FixedBaseEngine for CudaFixedBase {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn g1(
        &self,
        table: FixedBaseTable<G1Projective>,
    ) -> Result<Box<dyn FixedBaseMul<G1Projective> + '_>, BackendError> {
        Ok(Box::new(self.upload::<G1>(&table)?))
    }

    fn g2(
        &self,
        table: FixedBaseTable<G2Projective>,
    ) -> Result<Box<dyn FixedBaseMul<G2Projective> + '_>, BackendError> {
        Ok(Box::new(self.upload::<G2>(&table)?))
    }
}

/// One generator's table on the device.
#[derive(Debug)]
pub struct DeviceTable<'a, D: DeviceGroup> {
    engine: &'a CudaFixedBase,
    table: DeviceBuffer,
    window: usize,
    windows: usize,
    /// One call at a time walks the table through these.
    work: parking_lot::Mutex<Work>,
    // The group is a marker only: the table is shared between threads
    // whatever it is.
    group: PhantomData<fn() -> D>,
}

/// What one kernel launch of `threads` threads takes.
fn grid(threads: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((threads as u32).div_ceil(THREADS).max(1), 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl<D: DeviceGroup> DeviceTable<'_, D>
where
    D::Projective: FastCurve<Affine = D::Affine>,
{
    fn kernels(&self) -> &GroupKernels {
        &self.engine.kernels[D::UNIT]
    }

    /// Launches the multiplication of the chunk in `work.scalars` (`n`
    /// points) and its conversion to affine into `work.affine`.
    fn launch(&self, work: &Work, n: usize) -> Result<(), BackendError> {
        let e = self.engine;
        let dev = e.device;
        let n32 = n as u32;
        let (window, windows) = (self.window as u32, self.windows as u32);
        let (sp, tp, xp, ap) = (
            work.scalars.ptr(),
            self.table.ptr(),
            work.xyzz.ptr(),
            work.affine.ptr(),
        );
        let k = self.kernels();
        let mut launch = e.stream.launch_builder(&k.mul);
        launch
            .arg(&sp)
            .arg(&n32)
            .arg(&tp)
            .arg(&window)
            .arg(&windows)
            .arg(&xp);
        // SAFETY: (const fr*, u32, const ec_affine*, u32, u32, ec_xyzz*) as
        // fixed_base_mul_<g> takes; the buffers hold `n` scalars and sums and
        // the table every key the digits reach.
        check!(dev, "cuLaunchKernel(fixed_base_mul)", unsafe {
            launch.launch(grid(n))
        })?;
        let threads = affine_threads(n);
        let threads32 = threads as u32;
        let mut launch = e.stream.launch_builder(&k.affine);
        launch.arg(&xp).arg(&n32).arg(&threads32).arg(&ap);
        // SAFETY: (const ec_xyzz*, u32, u32, ec_affine*) as
        // fixed_base_affine_<g> takes; both buffers hold `n` points.
        check!(dev, "cuLaunchKernel(fixed_base_affine)", unsafe {
            launch.launch(grid(threads))
        })?;
        Ok(())
    }

    /// `scalars[i] · P` into `out` (room for `scalars.len()` points), one
    /// chunk at a time: chunk `k` goes up, is multiplied and comes down
    /// through stage `k mod 2` while the host copies chunk `k − 1` out of
    /// the other stage.
    fn run(&self, scalars: &[Scalar], out: &mut [MaybeUninit<u8>]) -> Result<(), BackendError> {
        let e = self.engine;
        let dev = e.device;
        let mut guard = self.work.lock();
        let work = &mut *guard;
        let chunk = e.chunk.min(scalars.len());
        if chunk == 0 {
            return Ok(());
        }
        // The kernels index points and table entries with 32 bits.
        let limit = u32::MAX as usize;
        if chunk > limit || self.table.bytes() / D::AFFINE_BYTES > limit {
            return Err(BackendError::MsmLength {
                bases: limit,
                scalars: chunk,
            });
        }
        let width = D::AFFINE_BYTES;
        let scalar_bytes = std::mem::size_of::<Scalar>();
        let ranges: Vec<_> = chunks(scalars.len(), chunk).collect();
        // Waits for the chunk at `ranges[k]` and copies it out of its stage.
        let finish =
            |work: &Work, out: &mut [MaybeUninit<u8>], k: usize| -> Result<(), BackendError> {
                let range = &ranges[k];
                let stage = &work.stages[k % 2];
                check!(dev, "cuEventSynchronize", stage.done.synchronize())?;
                copy_parallel(
                    &e.copiers,
                    &mut out[range.start * width..range.end * width],
                    &stage.points.as_slice()[..range.len() * width],
                );
                Ok(())
            };
        for (k, range) in ranges.iter().enumerate() {
            let n = range.len();
            {
                let stage = &mut work.stages[k % 2];
                // SAFETY: Scalar is repr(transparent) over blst_fr, four
                // plain limbs, so its bytes are the limbs the kernel reads.
                let bytes = unsafe {
                    std::slice::from_raw_parts(
                        scalars[range.clone()].as_ptr().cast::<u8>(),
                        n * scalar_bytes,
                    )
                };
                // The stage's last chunk (k − 2) was copied out at k − 1.
                copy_parallel(
                    &e.copiers,
                    as_uninit(&mut stage.scalars.as_mut_slice()[..bytes.len()]),
                    bytes,
                );
                // SAFETY: the stage is pinned and outlives the copy (the
                // event below is waited on before it is written again);
                // the device buffer holds `chunk` scalars.
                check!(dev, "cuMemcpyHtoDAsync", unsafe {
                    result::memcpy_htod_async(
                        work.scalars.ptr(),
                        &stage.scalars.as_slice()[..bytes.len()],
                        e.stream.cu_stream(),
                    )
                })?;
            }
            self.launch(work, n)?;
            let stage = &mut work.stages[k % 2];
            // SAFETY: the stage holds `chunk` points; the device buffer was
            // written by the launches just before in this stream.
            check!(dev, "cuMemcpyDtoHAsync", unsafe {
                result::memcpy_dtoh_async(
                    &mut stage.points.as_mut_slice()[..n * width],
                    work.affine.ptr(),
                    e.stream.cu_stream(),
                )
            })?;
            check!(dev, "cuEventRecord", stage.done.record(&e.stream))?;
            if k > 0 {
                finish(work, out, k - 1)?;
            }
        }
        finish(work, out, ranges.len() - 1)
    }
}

impl<D: DeviceGroup> FixedBaseMul<D::Projective> for DeviceTable<'_, D>
where
    D::Projective: FastCurve<Affine = D::Affine>,
    D::Affine: PrimeCurveAffine,
{
    fn multiply(&self, scalars: &[Scalar]) -> Result<Vec<D::Affine>, BackendError> {
        debug_assert_eq!(std::mem::size_of::<D::Affine>(), D::AFFINE_BYTES);
        check!(
            self.engine.device,
            "cuCtxSetCurrent",
            self.engine.ctx.bind_to_thread()
        )?;
        let n = scalars.len();
        // Left uninitialised: the copies out of the stages write every
        // byte, and touching the pages twice costs as much as the copies.
        let mut out: Vec<D::Affine> = Vec::with_capacity(n);
        let spare = out.spare_capacity_mut();
        // SAFETY: the spare capacity is `n` points of writable memory, seen
        // as as many bytes, none of them read before written.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(
                spare.as_mut_ptr().cast::<MaybeUninit<u8>>(),
                n * D::AFFINE_BYTES,
            )
        };
        self.run(scalars, bytes)?;
        // SAFETY: `run` returned Ok, so every one of the `n` points was
        // copied from the device: blst's affine layout, canonical limbs
        // (all zeros for the identity), which D::Affine is.
        unsafe { out.set_len(n) };
        Ok(out)
    }

    fn window(&self) -> usize {
        self.window
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_every_point_once_in_order() {
        for (n, chunk) in [(0, 4), (1, 4), (4, 4), (5, 4), (4097, 1000), (7, 1), (3, 0)] {
            let ranges: Vec<_> = chunks(n, chunk).collect();
            let flat: Vec<usize> = ranges.iter().flat_map(|r| r.clone()).collect();
            assert_eq!(flat, (0..n).collect::<Vec<_>>(), "n {n} chunk {chunk}");
            assert!(ranges
                .iter()
                .all(|r| !r.is_empty() && r.len() <= chunk.max(1)));
        }
    }

    #[test]
    fn affine_runs_cover_every_point_within_the_run_length() {
        for n in [1, 2, 15, 16, 17, 1000, 1 << 22] {
            let t = affine_threads(n);
            // Thread i converts i, i + t, ...: ⌈(n − i) / t⌉ points.
            assert!(n.div_ceil(t) <= AFFINE_RUN, "n {n}");
            assert!(t <= n);
            assert!(t * AFFINE_RUN >= n);
        }
    }
}
