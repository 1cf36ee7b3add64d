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

use std::marker::PhantomData;
use std::sync::Arc;

use blstrs::{G1Projective, G2Projective, Scalar};
use cudarc::driver::{result, CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use group::prime::PrimeCurveAffine;

use super::check::{self, check};
use super::kernels::{self, KernelUnit};
use super::memory::{upload_ordered, DeviceBuffer};
use super::msm::{DeviceGroup, G1, G2};
use super::{cuda_available, device_count, driver_version, CudaBackend};
use crate::backend::BackendError;
use crate::setup::fixed_base::{FastCurve, FixedBaseEngine, FixedBaseMul, FixedBaseTable};

/// Points per chunk unless told otherwise: 2^22 G2 points need about
/// 2.5 GB of device memory (scalars, XYZZ sums, affine results), small
/// beside any device that holds a large set's MSM, large enough that a
/// launch covers every SM many times over.
pub const DEFAULT_CHUNK: usize = 1 << 22;
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
        Ok(Self {
            device,
            ctx,
            stream,
            kernels: group_kernels,
            chunk: DEFAULT_CHUNK,
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
        Ok(DeviceTable {
            engine: self,
            table: buffer,
            window: table.window(),
            windows: table.windows(),
            group: PhantomData,
        })
    }
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

    /// `scalars[i] · P` into `out`, one chunk at a time through the three
    /// device buffers.
    fn run(&self, scalars: &[Scalar], out: &mut [D::Affine]) -> Result<(), BackendError> {
        let e = self.engine;
        let dev = e.device;
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
        let scalar_buf = DeviceBuffer::alloc(&e.ctx, dev, chunk * std::mem::size_of::<Scalar>())?;
        let xyzz_buf = DeviceBuffer::alloc(&e.ctx, dev, chunk * D::XYZZ_BYTES)?;
        let affine_buf = DeviceBuffer::alloc(&e.ctx, dev, chunk * D::AFFINE_BYTES)?;
        let (window, windows) = (self.window as u32, self.windows as u32);
        let (sp, tp, xp, ap) = (
            scalar_buf.ptr(),
            self.table.ptr(),
            xyzz_buf.ptr(),
            affine_buf.ptr(),
        );
        let k = self.kernels();
        for range in chunks(scalars.len(), chunk) {
            let n = range.len();
            let n32 = n as u32;
            // SAFETY: Scalar is repr(transparent) over blst_fr, four
            // plain limbs; the buffer holds `chunk` of them.
            check!(dev, "cuMemcpyHtoDAsync", unsafe {
                result::memcpy_htod_async(sp, &scalars[range.clone()], e.stream.cu_stream())
            })?;
            let mut launch = e.stream.launch_builder(&k.mul);
            launch
                .arg(&sp)
                .arg(&n32)
                .arg(&tp)
                .arg(&window)
                .arg(&windows)
                .arg(&xp);
            // SAFETY: (const fr*, u32, const ec_affine*, u32, u32,
            // ec_xyzz*) as fixed_base_mul_<g> takes; the buffers hold `n`
            // scalars and sums and the table every key the digits reach.
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
            // SAFETY: D::Affine is blst's affine struct of plain limbs, the
            // layout the kernel wrote (D::AFFINE_BYTES each, canonical
            // coordinates or all zeros); `out[range]` holds `n` of them.
            check!(dev, "cuMemcpyDtoHAsync", unsafe {
                result::memcpy_dtoh_async(&mut out[range], ap, e.stream.cu_stream())
            })?;
            check!(dev, "cuStreamSynchronize", e.stream.synchronize())?;
        }
        Ok(())
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
        let mut out = vec![<D::Affine as PrimeCurveAffine>::identity(); scalars.len()];
        self.run(scalars, &mut out)?;
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
