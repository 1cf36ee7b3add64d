//! The CUDA backend: NVRTC-compiled kernels from kernels/, pinned uploads, device NTTs.
//!
//! Chosen at run time: [`cuda_available`] says whether the driver library
//! loads and a device answers; without it the caller falls back to the CPU
//! backend. Nothing here may call into cudarc's safe API before that check:
//! with dynamic loading a missing libcuda panics inside cudarc.
//!
//! - [`kernels`]: the embedded CUDA C sources and their NVRTC compilation.
//! - [`domain`]: per-size twiddle and coset tables.
//! - [`ntt`]: pass planning and the launch of one transform.
//! - [`quotient`]: the h phase with overlapped uploads.
//! - [`host_alloc`]: [`CudaHostAllocator`], the pinned pool's `cuMemHostAlloc` source.
//! - [`memory`]: owned device allocations.
//! - [`msm`]: the G1 and G2 multi-scalar multiplications (Pippenger on the device).
//! - [`resident`]: parameter bases kept on the device across proofs.
//! - [`staging`]: MSM scalars uploaded before the MSM holds the device.
//! - [`selftest`]: single field and curve operations, for tests against blstrs.
//! - [`fixed_base`]: parameter generation's fixed-base multiplications (`prover setup --backend cuda`).
//! - [`bench`]: H2D, NTT and MSM measurements for `scripts/gpu-check.sh`.
//!
//! Multi-exponentiations (G1 and G2) of at least [`MIN_DEVICE_MSM`] points
//! run on the device; smaller ones (the inputs' few points) run on the CPU.

pub mod abc;
pub mod bench;
pub(crate) mod check;
pub mod domain;
pub mod driver;
pub mod fixed_base;
pub mod host_alloc;
pub mod kernels;
pub mod memory;
pub mod msm;
pub mod ntt;
pub mod quotient;
pub mod resident;
pub mod selftest;
pub mod staging;
mod state;
pub mod workspace;

pub use driver::{device_arch, device_count, driver_present, driver_version};
pub use host_alloc::CudaHostAllocator;
use state::DeviceState;

use crate::backend::cpu::CpuBackend;
use crate::backend::{
    check_msm_len, Backend, BackendError, BackendKind, BackendTimes, BaseQuery, Bases, G1Bases,
    G2Bases, ParamBases, QuotientFrom,
};
use blstrs::{G1Projective, G2Projective, Scalar};
use check::check;
use cudarc::driver::{result, sys, CudaContext};
use cudarc::nvrtc::Ptx;
use domain::{scalar_bytes_mut, DomainTables};
use fleet_wire::timing::Phase;
use memory::DeviceBuffer;
use msm::{
    DeviceGroup, MsmDeviceTimes, MsmKernels, MsmPlan, MsmRun, MsmWorkspace, Scalars, TablePlan, G1,
    G2,
};
use parking_lot::{Mutex, MutexGuard};
use quotient::{NttKernels, Run, Workspace};
use resident::ResidentBases;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

pub use super::{MAX_DEVICE_LOG_N, MIN_DEVICE_LOG_N};
/// Smallest MSM run on the device: below it the launches and the
/// readbacks cost more than the CPU's Pippenger.
pub const MIN_DEVICE_MSM: usize = 1 << 10;
/// Largest MSM summed point by point on the calling thread.
pub const SERIAL_MSM_MAX: usize = 32;

/// Whether the CUDA backend can run here: the driver loads, at least one
/// device answers, and NVRTC loads to compile the kernels.
pub fn cuda_available() -> bool {
    device_count() > 0 && kernels::nvrtc_available()
}

/// Opens device `ordinal`, or logs why not (the caller then proves on the
/// CPU backend). Never panics, with or without a GPU.
pub fn open_or_log(ordinal: u32) -> Option<CudaBackend> {
    if !driver_present() {
        tracing::info!("CUDA driver library not found: using the CPU backend");
        return None;
    }
    if !kernels::nvrtc_available() {
        tracing::warn!(
            "libnvrtc (CUDA 13) not found, kernels cannot be compiled: using the CPU backend"
        );
        return None;
    }
    match CudaBackend::new(ordinal) {
        Ok(b) => Some(b),
        Err(e) => {
            tracing::warn!(device = ordinal, error = %e, "CUDA device unusable: using the CPU backend");
            None
        }
    }
}

/// How a device MSM picks its window.
#[derive(Debug, Clone, Copy)]
enum Window {
    /// A resident query's table of multiples, else [`msm::window_bits`].
    Auto,
    /// This window over the bases alone.
    Fixed(u32),
}

/// One GPU behind the [`Backend`] trait.
pub struct CudaBackend {
    ordinal: u32,
    ctx: Arc<CudaContext>,
    name: String,
    arch: String,
    kernels: NttKernels,
    /// G1's kernels, then G2's ([`DeviceGroup::UNIT`]).
    msm_kernels: [MsmKernels; 2],
    state: Mutex<DeviceState>,
    /// Outside `state`: an upload into a slot runs while another call holds it.
    slots: staging::ScalarSlots,
    cpu: CpuBackend,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("ordinal", &self.ordinal)
            .field("name", &self.name)
            .field("arch", &self.arch)
            .finish()
    }
}

/// h left on the device by [`CudaBackend::quotient_on_device`].
#[derive(Debug)]
pub struct DeviceH {
    pub buffer: DeviceBuffer,
    pub len: usize,
}

impl CudaBackend {
    /// Opens device `ordinal`, compiles the kernels for its architecture
    /// (cached per process) and creates its streams.
    pub fn new(ordinal: u32) -> Result<Self, BackendError> {
        let dev = ordinal;
        let unavailable = |reason: String| BackendError::Device {
            device: dev,
            call: "CudaBackend::new".into(),
            file: file!(),
            line: line!(),
            reason,
        };
        if !driver_present() {
            return Err(unavailable(
                "libcuda could not be loaded (no NVIDIA driver)".into(),
            ));
        }
        let count = device_count();
        if ordinal >= count {
            return Err(unavailable(format!(
                "no device {ordinal}: {count} CUDA device(s) present"
            )));
        }
        let ctx = check!(
            dev,
            "cuDevicePrimaryCtxRetain",
            CudaContext::new(ordinal as usize)
        )?;
        let name = check!(dev, "cuDeviceGetName", ctx.name())?;
        let (major, minor) = check!(dev, "cuDeviceGetAttribute", ctx.compute_capability())?;
        let arch = kernels::arch_for(major, minor);
        let target = kernels::Target {
            arch: arch.clone(),
            driver: driver_version(),
        };
        let t = Instant::now();
        let units: Vec<&kernels::KernelUnit> = kernels::BACKEND_UNITS.iter().collect();
        let compiled = kernels::compile_all(&units, &target);
        let compile_ms = t.elapsed().as_secs_f64() * 1e3;
        let mut images = Vec::with_capacity(compiled.len());
        for c in compiled {
            images.push(c.map_err(|e| unavailable(format!("compiling kernels for {arch}: {e}")))?);
        }
        let t = Instant::now();
        let mut modules = Vec::with_capacity(images.len());
        for image in &images {
            // Device code for this architecture: the driver maps it, there
            // is no PTX to translate.
            let cubin = image.cubin.as_ref().clone();
            modules.push(check!(
                dev,
                "cuModuleLoadData",
                ctx.load_module(Ptx::from_binary(cubin))
            )?);
        }
        // BACKEND_UNITS order: the NTT, the MSM index steps, G1's five
        // steps, G2's five.
        let ntt = &modules[0];
        let kernels = NttKernels {
            pass: check!(
                dev,
                "cuModuleGetFunction(ntt_pass)",
                ntt.load_function("ntt_pass")
            )?,
            expand_powers: check!(
                dev,
                "cuModuleGetFunction(expand_powers)",
                ntt.load_function("expand_powers")
            )?,
            abc: check!(
                dev,
                "cuModuleGetFunction(r1cs_abc)",
                ntt.load_function("r1cs_abc")
            )?,
        };
        let index = &modules[1];
        let multiprocessors = check!(
            dev,
            "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)",
            ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        )?;
        let multiprocessors = u32::try_from(multiprocessors).unwrap_or(0);
        let msm_kernels = MsmKernels::load(
            dev,
            index,
            &modules[2..7],
            G1::SUFFIX,
            multiprocessors,
            G1::SEGMENT_THREADS,
        )?;
        let msm_g2_kernels = MsmKernels::load(
            dev,
            index,
            &modules[7..12],
            G2::SUFFIX,
            multiprocessors,
            G2::SEGMENT_THREADS,
        )?;
        let load_ms = t.elapsed().as_secs_f64() * 1e3;
        tracing::info!(
            device = ordinal,
            %arch,
            compile_ms = format!("{compile_ms:.1}"),
            load_ms = format!("{load_ms:.1}"),
            units = %images
                .iter()
                .map(|c| format!("{}:{}", c.unit, c.origin.describe()))
                .collect::<Vec<_>>()
                .join(","),
            "kernels loaded"
        );
        let compute = check!(dev, "cuStreamCreate", ctx.new_stream())?;
        let copy = check!(dev, "cuStreamCreate", ctx.new_stream())?;
        let (_, total) = check!(dev, "cuMemGetInfo", ctx.mem_get_info())?;
        // Half the device for resident bases leaves the other half for the
        // NTT and MSM workspaces of the largest partitions.
        let bases_budget = total as u64 / 2;
        tracing::info!(device = ordinal, %name, %arch, bases_budget, "CUDA backend ready");
        Ok(Self {
            ordinal,
            ctx,
            name,
            arch,
            kernels,
            msm_kernels: [msm_kernels, msm_g2_kernels],
            state: Mutex::new(DeviceState {
                compute,
                copy,
                workspace: None,
                tables: HashMap::new(),
                msm: MsmWorkspace::default(),
                bases: ResidentBases::new(bases_budget),
                transient_bases: None,
                r1cs: abc::ResidentR1cs::default(),
            }),
            slots: staging::ScalarSlots::new(total),
            cpu: CpuBackend::new(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The device ordinal (also [`Backend::device`]).
    pub fn device_ordinal(&self) -> u32 {
        self.ordinal
    }

    /// Where the device sits on the PCI bus (to match it with NVML's view).
    pub fn pci_address(&self) -> Result<crate::sys::pci::PciAddress, BackendError> {
        use sys::CUdevice_attribute as A;
        let get = |a: A| -> Result<u32, BackendError> {
            let v = check!(self.ordinal, "cuDeviceGetAttribute", self.ctx.attribute(a))?;
            u32::try_from(v).map_err(|_| {
                check::device_error(
                    self.ordinal,
                    "cuDeviceGetAttribute",
                    file!(),
                    line!(),
                    &format!("negative PCI attribute {a:?}: {v}"),
                )
            })
        };
        Ok(crate::sys::pci::PciAddress {
            domain: get(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
            bus: get(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
            device: get(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
        })
    }

    /// `sm_XY` the kernels were compiled for.
    pub fn arch(&self) -> &str {
        &self.arch
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// (free, total) device memory in bytes.
    pub fn memory(&self) -> Result<(usize, usize), BackendError> {
        check!(self.ordinal, "cuMemGetInfo", self.ctx.mem_get_info())
    }

    fn log_n(&self, a: &[Scalar], b: &[Scalar], c: &[Scalar]) -> Result<u32, BackendError> {
        if a.len() != b.len() || a.len() != c.len() {
            return Err(BackendError::LengthMismatch {
                a: a.len(),
                b: b.len(),
                c: c.len(),
            });
        }
        let n = a.len();
        if n < 2 || !n.is_power_of_two() || n.trailing_zeros() > MAX_DEVICE_LOG_N {
            return Err(BackendError::BadDomain {
                size: n,
                max_log: MAX_DEVICE_LOG_N,
            });
        }
        Ok(n.trailing_zeros())
    }

    /// Makes sure the state has a workspace and tables for 2^log_n.
    fn prepare(&self, st: &mut DeviceState, log_n: u32) -> Result<Arc<DomainTables>, BackendError> {
        check!(self.ordinal, "cuCtxSetCurrent", self.ctx.bind_to_thread())?;
        if st.workspace.as_ref().map(|w| w.log_n) != Some(log_n) {
            // Free the old one first: two large workspaces may not fit together.
            st.workspace = None;
            st.workspace = Some(Workspace::new(&self.ctx, self.ordinal, log_n)?);
        }
        if let Some(t) = st.tables.get(&log_n) {
            return Ok(t.clone());
        }
        let t = Arc::new(DomainTables::new(
            &self.ctx,
            self.ordinal,
            log_n,
            &st.compute,
            &self.kernels.expand_powers,
        )?);
        st.tables.insert(log_n, t.clone());
        Ok(t)
    }

    /// Waits for both streams, best effort: on an error path the copy
    /// engine may still be reading the caller's host buffers.
    fn drain(&self, st: &DeviceState) {
        let _ = st.copy.synchronize();
        let _ = st.compute.synchronize();
    }

    /// Runs the h phase from host a, b, c; leaves h in logical vector 0 of the
    /// workspace with everything complete. Records times.
    fn h_from_host(
        &self,
        st: &mut DeviceState,
        a: &[Scalar],
        b: &[Scalar],
        c: &[Scalar],
        times: &mut BackendTimes,
    ) -> Result<(), BackendError> {
        let log_n = self.log_n(a, b, c)?;
        let tables = self.prepare(st, log_n)?;
        let mut run = Run {
            device: self.ordinal,
            ctx: &self.ctx,
            st,
            kernels: &self.kernels,
            tables: &tables,
        };
        let tl = run.enqueue_from_host([a, b, c])?;
        let dt = tl.read()?;
        dt.add_to(times);
        times.device_ms += dt.h2d_ms + dt.ntt_total_ms();
        times.h2d_bytes += 3 * std::mem::size_of_val(a) as u64;
        times.h2d_ms += dt.h2d_ms;
        times.add(Phase::H2d, dt.h2d_ms);
        Ok(())
    }

    /// Runs the h phase from a witness and compiled constraints: a, b, c
    /// computed on the device into the workspace (the matrices resident,
    /// the witness uploaded), then the transforms; h in logical vector 0
    /// with everything complete. Records times, the a/b/c part (the
    /// witness upload and the sparse products) from events.
    #[allow(clippy::too_many_arguments)]
    fn h_from_witness(
        &self,
        st: &mut DeviceState,
        r1cs: &crate::compiled::CompiledR1cs,
        inputs: &[Scalar],
        aux: &[Scalar],
        log_n: u32,
        boolean_paths: bool,
        times: &mut BackendTimes,
    ) -> Result<(), BackendError> {
        let dev = self.ordinal;
        let tables = self.prepare(st, log_n)?;
        let compute = st.compute.clone();
        let event = || {
            check!(
                dev,
                "cuEventCreate",
                self.ctx
                    .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            )
        };
        let (abc_start, uploaded, abc_end) = (event()?, event()?, event()?);
        let out = {
            let ws = st.workspace()?;
            [ws.ptr(0), ws.ptr(1), ws.ptr(2)]
        };
        check!(dev, "cuEventRecord", abc_start.record(&compute))?;
        let run = abc::AbcRun {
            device: dev,
            ctx: &self.ctx,
            stream: &compute,
            kernel: &self.kernels.abc,
            boolean_paths,
        };
        let up_bytes = st.r1cs.upload(&run, r1cs, inputs, aux)?;
        check!(dev, "cuEventRecord", uploaded.record(&compute))?;
        st.r1cs.launch(&run, r1cs, 1usize << log_n, out)?;
        check!(dev, "cuEventRecord", abc_end.record(&compute))?;
        let mut run = Run {
            device: dev,
            ctx: &self.ctx,
            st,
            kernels: &self.kernels,
            tables: &tables,
        };
        let tl = run.enqueue_on_device()?;
        let dt = tl.read()?;
        let abc_ms = f64::from(check!(
            dev,
            "cuEventElapsedTime",
            abc_start.elapsed_ms(&abc_end)
        )?);
        // The witness upload, for the record's copy figures (bytes and time
        // together); its time is inside `abc_device`, not `h2d`. A first
        // proof of a recording also uploads its matrices here.
        let upload_ms = f64::from(check!(
            dev,
            "cuEventElapsedTime",
            abc_start.elapsed_ms(&uploaded)
        )?);
        dt.add_to(times);
        times.add(Phase::AbcDevice, abc_ms);
        times.device_ms += abc_ms + dt.ntt_total_ms();
        times.h2d_bytes += up_bytes;
        times.h2d_ms += upload_ms;
        Ok(())
    }

    /// [`Backend::quotient_compiled`] on the device, with the boolean fast
    /// paths of the a/b/c kernel on or off (to measure them).
    #[allow(clippy::too_many_arguments)]
    pub fn quotient_compiled_with(
        &self,
        r1cs: &crate::compiled::CompiledR1cs,
        inputs: &[Scalar],
        aux: &[Scalar],
        a: &mut [Scalar],
        boolean_paths: bool,
        times: &mut BackendTimes,
    ) -> Result<(), BackendError> {
        let m = a.len();
        if !self.abc_off_host(m) {
            return Err(BackendError::BadDomain {
                size: m,
                max_log: MAX_DEVICE_LOG_N,
            });
        }
        let (mut st, start) = self.hold_for_h(times);
        let computed = self.h_from_witness(
            &mut st,
            r1cs,
            inputs,
            aux,
            m.trailing_zeros(),
            boolean_paths,
            times,
        );
        let out = self.h_to_host(&mut st, computed, a);
        times.add(Phase::NttKernels, start.elapsed().as_secs_f64() * 1e3);
        out
    }

    /// After an h computation: h (logical vector 0) copied into `a` where it
    /// succeeded; on any error both streams drained first, since the copy
    /// engine may still read the caller's host buffers.
    fn h_to_host(
        &self,
        st: &mut DeviceState,
        computed: Result<(), BackendError>,
        a: &mut [Scalar],
    ) -> Result<(), BackendError> {
        let out = computed.and_then(|()| {
            let ws = st.workspace()?;
            // SAFETY: h holds a.len() scalars; synchronous copy.
            check!(self.ordinal, "cuMemcpyDtoH", unsafe {
                result::memcpy_dtoh_sync(scalar_bytes_mut(a), ws.ptr(0))
            })
        });
        if out.is_err() {
            self.drain(st);
        }
        out
    }

    /// The quotient with h left on the device (for a device h-MSM): the
    /// returned buffer holds h's 2^log_n coefficients.
    pub fn quotient_on_device(
        &self,
        a: &[Scalar],
        b: &[Scalar],
        c: &[Scalar],
        times: &mut BackendTimes,
    ) -> Result<DeviceH, BackendError> {
        let mut st = self.state.lock();
        let out = self.h_from_host(&mut st, a, b, c, times);
        if out.is_err() {
            self.drain(&st);
        }
        out?;
        let ws = st.workspace.take().ok_or_else(|| {
            check::device_error(
                self.ordinal,
                "workspace",
                file!(),
                line!(),
                &"missing after h",
            )
        })?;
        let h_slot = ws.slot[0];
        let buffer = ws.bufs.into_iter().nth(h_slot).ok_or_else(|| {
            check::device_error(self.ordinal, "workspace", file!(), line!(), &"bad h slot")
        })?;
        Ok(DeviceH {
            buffer,
            len: a.len(),
        })
    }

    /// Device-resident h computation over a, b, c already uploaded by
    /// [`Self::upload_abc`]: the NTT phase alone, for measurements.
    pub fn ntt_phase_on_device(&self) -> Result<quotient::DeviceTimes, BackendError> {
        let mut st = self.state.lock();
        let log_n = st.workspace.as_ref().map(|w| w.log_n).ok_or_else(|| {
            check::device_error(
                self.ordinal,
                "workspace",
                file!(),
                line!(),
                &"call upload_abc first",
            )
        })?;
        let tables = self.prepare(&mut st, log_n)?;
        let mut run = Run {
            device: self.ordinal,
            ctx: &self.ctx,
            st: &mut st,
            kernels: &self.kernels,
            tables: &tables,
        };
        let tl = run.enqueue_on_device()?;
        tl.read()
    }

    /// Uploads a, b, c into the workspace (synchronously) for
    /// [`Self::ntt_phase_on_device`].
    pub fn upload_abc(&self, a: &[Scalar], b: &[Scalar], c: &[Scalar]) -> Result<(), BackendError> {
        let log_n = self.log_n(a, b, c)?;
        let mut st = self.state.lock();
        self.prepare(&mut st, log_n)?;
        let compute = st.compute.clone();
        let ws = st.workspace()?;
        for (v, host) in [a, b, c].into_iter().enumerate() {
            // The buffer holds 2^log_n scalars; the NTT reads it on `compute`.
            memory::upload_ordered(
                self.ordinal,
                &compute,
                ws.ptr(v),
                domain::scalar_bytes(host),
            )?;
        }
        Ok(())
    }

    /// Copies logical vector 0 (h after [`Self::ntt_phase_on_device`]) to `out`.
    pub fn download_h(&self, out: &mut [Scalar]) -> Result<(), BackendError> {
        let mut st = self.state.lock();
        check!(self.ordinal, "cuCtxSetCurrent", self.ctx.bind_to_thread())?;
        let ws = st.workspace()?;
        if out.len() != 1usize << ws.log_n {
            return Err(BackendError::LengthMismatch {
                a: out.len(),
                b: 1 << ws.log_n,
                c: 1 << ws.log_n,
            });
        }
        // SAFETY: sizes checked above; synchronous copy.
        check!(self.ordinal, "cuMemcpyDtoH", unsafe {
            result::memcpy_dtoh_sync(scalar_bytes_mut(out), ws.ptr(0))
        })
    }
}

impl CudaBackend {
    /// The device G1 MSM with window size `c` over the bases alone, no
    /// table of multiples (benchmarks sweep it; provers go through
    /// [`Backend::msm_g1`], which uses a resident query's table).
    pub fn msm_g1_with_window(
        &self,
        bases: &G1Bases<'_>,
        scalars: &[Scalar],
        c: u32,
    ) -> Result<(G1Projective, MsmDeviceTimes), BackendError> {
        self.msm_on_device::<G1>(bases, scalars, Window::Fixed(c))
    }

    /// The device G2 MSM with window size `c` (see `msm_g1_with_window`).
    pub fn msm_g2_with_window(
        &self,
        bases: &G2Bases<'_>,
        scalars: &[Scalar],
        c: u32,
    ) -> Result<(G2Projective, MsmDeviceTimes), BackendError> {
        self.msm_on_device::<G2>(bases, scalars, Window::Fixed(c))
    }

    /// The device G1 MSM as provers run it: a resident query's table of
    /// multiples, or [`msm::window_bits`] over the bases alone.
    pub fn msm_g1_auto(
        &self,
        bases: &G1Bases<'_>,
        scalars: &[Scalar],
    ) -> Result<(G1Projective, MsmDeviceTimes), BackendError> {
        self.msm_on_device::<G1>(bases, scalars, Window::Auto)
    }

    /// As `msm_g1_auto`, in G2.
    pub fn msm_g2_auto(
        &self,
        bases: &G2Bases<'_>,
        scalars: &[Scalar],
    ) -> Result<(G2Projective, MsmDeviceTimes), BackendError> {
        self.msm_on_device::<G2>(bases, scalars, Window::Auto)
    }

    fn msm_on_device<G: DeviceGroup>(
        &self,
        bases: &Bases<'_, G::Affine>,
        scalars: &[Scalar],
        window: Window,
    ) -> Result<(G::Projective, MsmDeviceTimes), BackendError> {
        let (out, _) = self.msm_waited::<G>(bases, Scalars::Host(scalars), window)?;
        Ok(out)
    }

    /// The device for one h computation, and when the hold began: the wait
    /// for it (another partition's call, or this partition's G2 MSM) is
    /// device wait, not part of the h phase.
    fn hold_for_h(&self, times: &mut BackendTimes) -> (MutexGuard<'_, DeviceState>, Instant) {
        let asked = Instant::now();
        let guard = self.state.lock();
        times.device_wait_ms += asked.elapsed().as_secs_f64() * 1e3;
        (guard, Instant::now())
    }

    /// As `msm_on_device`, also returning the milliseconds spent waiting for
    /// the device's lock (held by another MSM of the same partition, such as
    /// the G2 MSM's thread).
    fn msm_waited<G: DeviceGroup>(
        &self,
        bases: &Bases<'_, G::Affine>,
        scalars: Scalars<'_>,
        window: Window,
    ) -> Result<((G::Projective, MsmDeviceTimes), f64), BackendError> {
        check_msm_len(bases.len(), scalars.len(), msm::MAX_POINTS)?;
        let t = Instant::now();
        let mut guard = self.state.lock();
        let waited = t.elapsed().as_secs_f64() * 1e3;
        let st = &mut *guard;
        check!(self.ordinal, "cuCtxSetCurrent", self.ctx.bind_to_thread())?;
        let out = self.msm_locked::<G>(st, bases, scalars, window);
        if out.is_err() {
            self.drain(st);
        }
        Ok((out?, waited))
    }

    fn msm_locked<G: DeviceGroup>(
        &self,
        st: &mut DeviceState,
        bases: &Bases<'_, G::Affine>,
        scalars: Scalars<'_>,
        window: Window,
    ) -> Result<(G::Projective, MsmDeviceTimes), BackendError> {
        let stream = st.compute.clone();
        let run = MsmRun {
            device: self.ordinal,
            ctx: &self.ctx,
            stream: &stream,
            kernels: &self.msm_kernels[G::UNIT],
        };
        let resident = match bases.resident {
            Some((set, which)) => self.resident::<G>(st, &run, set, which, bases.query)?,
            None => None,
        };
        let n = scalars.len();
        let (ptr, plan) = match (resident, window) {
            (Some(r), Window::Auto) => (
                r.ptr + (bases.range.start * G::AFFINE_BYTES) as u64,
                MsmPlan::with_table(n, r.table, r.points),
            ),
            (Some(r), Window::Fixed(c)) => (
                r.ptr + (bases.range.start * G::AFFINE_BYTES) as u64,
                MsmPlan::new(n, c),
            ),
            (None, window) => {
                let points = G::affine_bytes(bases.points());
                let bytes = points.len();
                if st
                    .transient_bases
                    .as_ref()
                    .is_none_or(|b| b.bytes() < bytes)
                {
                    st.transient_bases = None;
                    st.transient_bases = Some(DeviceBuffer::alloc(&self.ctx, self.ordinal, bytes)?);
                }
                let buf = st.transient_bases.as_ref().map_or(0, |b| b.ptr());
                // `buf` holds at least `bytes`; the MSM reads it on `stream`.
                memory::upload_ordered(self.ordinal, &stream, buf, points)?;
                let c = match window {
                    Window::Fixed(c) => c,
                    Window::Auto => msm::window_bits(n),
                };
                (buf, MsmPlan::new(n, c))
            }
        };
        run.msm::<G>(&mut st.msm, ptr, scalars, plan)
    }

    /// The device copy of a query with its table of multiples, uploaded
    /// and filled first if it is not resident (`None`: over the budget).
    fn resident<G: DeviceGroup>(
        &self,
        st: &mut DeviceState,
        run: &MsmRun<'_>,
        set: &str,
        which: BaseQuery,
        query: &[G::Affine],
    ) -> Result<Option<resident::Resident>, BackendError> {
        let table = TablePlan::choose_within(
            query.len(),
            G::AFFINE_BYTES,
            st.bases.budget(),
            st.bases.free_bytes(),
        );
        let r = st.bases.get_or_upload(
            &self.ctx,
            self.ordinal,
            run.stream,
            resident::Query {
                set,
                which,
                bytes: G::affine_bytes(query),
                points: query.len(),
                table,
            },
        )?;
        if let Some(r) = r.filter(|r| r.fresh && r.table.rows > 1) {
            let t = Instant::now();
            if let Err(e) = run.precompute::<G>(r.ptr, r.points, r.table) {
                st.bases.remove(set, which);
                return Err(e);
            }
            tracing::info!(
                device = self.ordinal,
                set,
                query = which.as_str(),
                rows = r.table.rows,
                window = r.table.c,
                ms = format!("{:.1}", t.elapsed().as_secs_f64() * 1e3),
                "table of base multiples computed on the device"
            );
        }
        Ok(r)
    }

    /// The routing every MSM of a proof takes: a few points summed on the
    /// calling thread, small ones on the CPU backend, the rest on the device.
    fn msm_routed<G: DeviceGroup>(
        &self,
        bases: &Bases<'_, G::Affine>,
        scalars: &[Scalar],
        times: &mut BackendTimes,
        on_cpu: impl FnOnce(&mut BackendTimes) -> Result<G::Projective, BackendError>,
    ) -> Result<G::Projective, BackendError> {
        check_msm_len(bases.len(), scalars.len(), usize::MAX)?;
        if scalars.len() <= SERIAL_MSM_MAX {
            // The inputs' MSMs (a few points): a device launch or the CPU
            // backend's pool would cost more than the sum itself.
            return Ok(bases
                .points()
                .iter()
                .zip(scalars)
                .map(|(b, s)| Into::<G::Projective>::into(*b) * *s)
                .sum());
        }
        if scalars.len() < MIN_DEVICE_MSM || scalars.len() > msm::MAX_POINTS {
            return on_cpu(times);
        }
        // The upload starts before the wait for the device, so it overlaps
        // whatever holds it; without a slot the MSM uploads under its hold.
        let staged = self.slots.stage(&self.ctx, self.ordinal, scalars);
        let on_device = match &staged {
            Some(st) => {
                let (ptr, len, ready) = st.device()?;
                Scalars::Staged { ptr, len, ready }
            }
            None => Scalars::Host(scalars),
        };
        let ((sum, dt), waited) = self.msm_waited::<G>(bases, on_device, Window::Auto)?;
        // `dt.h2d_ms` is the part of the upload the device held still for
        // (all of it without a slot); the copy's own time gives the rate.
        let copy_ms = match &staged {
            Some(st) => st.copy_ms()?,
            None => dt.h2d_ms,
        };
        times.device_calls += 1;
        times.device_wait_ms += waited;
        times.device_ms += dt.h2d_ms + dt.kernels_ms;
        times.h2d_bytes += std::mem::size_of_val(scalars) as u64;
        times.h2d_ms += copy_ms;
        Ok(sum)
    }

    /// Drops everything the device state keeps between calls; the streams
    /// stay. Returns the device bytes that held.
    fn drop_cached(&self) -> u64 {
        // Buffers free through the context current on this thread.
        if let Err(e) = self.ctx.bind_to_thread() {
            tracing::warn!(
                device = self.ordinal,
                "cuCtxSetCurrent before freeing: {e:?}"
            );
            return 0;
        }
        let slots = self.slots.release();
        let mut st = self.state.lock();
        let before = st.bases.bytes() + st.msm.bytes() as u64 + slots;
        let budget = st.bases.budget();
        st.workspace = None;
        st.tables.clear();
        st.msm = MsmWorkspace::default();
        st.bases = ResidentBases::new(budget);
        st.transient_bases = None;
        st.r1cs = abc::ResidentR1cs::default();
        before
    }

    /// Bytes of parameter bases resident on the device, and the budget.
    pub fn resident_bases(&self) -> (u64, u64) {
        let st = self.state.lock();
        (st.bases.bytes(), st.bases.budget())
    }
}

impl DeviceH {
    /// Copies h to the host (synchronously).
    pub fn copy_to_host(&self, out: &mut [Scalar]) -> Result<(), BackendError> {
        let dev = self.buffer.device();
        if out.len() != self.len {
            return Err(BackendError::LengthMismatch {
                a: out.len(),
                b: self.len,
                c: self.len,
            });
        }
        // SAFETY: the buffer holds `len` scalars; synchronous copy.
        check!(dev, "cuMemcpyDtoH", unsafe {
            result::memcpy_dtoh_sync(scalar_bytes_mut(out), self.buffer.ptr())
        })
    }
}

impl Backend for CudaBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cuda
    }

    fn release_cached(&self) -> u64 {
        self.drop_cached()
    }

    fn device(&self) -> Option<u32> {
        Some(self.ordinal)
    }

    fn quotient(
        &self,
        a: &mut [Scalar],
        b: &mut [Scalar],
        c: &mut [Scalar],
        pinned: bool,
        times: &mut BackendTimes,
    ) -> Result<(), BackendError> {
        let log_n = self.log_n(a, b, c)?;
        if log_n < MIN_DEVICE_LOG_N {
            return self.cpu.quotient(a, b, c, pinned, times);
        }
        // `pinned` needs no branch: the driver DMAs straight from page-locked
        // memory and stages pageable memory through its own bounce buffers,
        // which is exactly the slow path the flag exists to measure.
        let (mut st, start) = self.hold_for_h(times);
        let computed = self.h_from_host(&mut st, a, b, c, times);
        let out = self.h_to_host(&mut st, computed, a);
        times.add(Phase::NttKernels, start.elapsed().as_secs_f64() * 1e3);
        out
    }

    fn abc_off_host(&self, m: usize) -> bool {
        BackendKind::Cuda.abc_off_host(m)
    }

    /// a, b, c on the device where the domain is large enough for the
    /// device's h phase; below, on the host as the CPU backend does it.
    fn quotient_compiled(
        &self,
        r1cs: &crate::compiled::CompiledR1cs,
        inputs: &[Scalar],
        aux: &[Scalar],
        a: &mut [Scalar],
        b: &mut [Scalar],
        c: &mut [Scalar],
        pinned: bool,
        times: &mut BackendTimes,
    ) -> Result<(), BackendError> {
        if !self.abc_off_host(a.len()) {
            crate::backend::abc_on_host(r1cs, inputs, aux, [&mut *a, &mut *b, &mut *c], times)?;
            return self.quotient(a, b, c, pinned, times);
        }
        self.quotient_compiled_with(r1cs, inputs, aux, a, true, times)
    }

    /// Where the h phase and the h MSM both run on the device, the MSM
    /// reads h from the NTT workspace under the same hold of the device:
    /// no copy of h to the host and back (2 × 512 MiB at 2^24), and no
    /// other partition's h phase in between to overwrite it.
    fn quotient_then_h_msm(
        &self,
        from: QuotientFrom<'_>,
        a: &mut [Scalar],
        pinned: bool,
        h_bases: &G1Bases<'_>,
        times: &mut BackendTimes,
    ) -> Result<G1Projective, BackendError> {
        let (m, n) = (a.len(), h_bases.len());
        let on_device = self.abc_off_host(m)
            && n <= m
            && n > SERIAL_MSM_MAX
            && (MIN_DEVICE_MSM..=msm::MAX_POINTS).contains(&n);
        if !on_device {
            return crate::backend::quotient_then_h_msm_via_host(
                self, from, a, pinned, h_bases, times,
            );
        }
        let (mut guard, start) = self.hold_for_h(times);
        let st = &mut *guard;
        let computed = match from {
            QuotientFrom::Evaluations { b, c } => self.h_from_host(st, a, b, c, times),
            QuotientFrom::Compiled {
                r1cs, inputs, aux, ..
            } => self.h_from_witness(st, r1cs, inputs, aux, m.trailing_zeros(), true, times),
        };
        times.add(Phase::NttKernels, start.elapsed().as_secs_f64() * 1e3);
        let out = computed.and_then(|()| {
            check!(self.ordinal, "cuCtxSetCurrent", self.ctx.bind_to_thread())?;
            // h is logical vector 0, complete (h_from_* waited for it).
            let h = Scalars::Device {
                ptr: st.workspace()?.ptr(0),
                len: n,
            };
            times.measure(Phase::MsmH, |t| {
                let (sum, dt) = self.msm_locked::<G1>(st, h_bases, h, Window::Auto)?;
                // The scalars' copy is device to device: device time, not
                // host-to-device traffic.
                t.device_calls += 1;
                t.device_ms += dt.h2d_ms + dt.kernels_ms;
                Ok(sum)
            })
        });
        if out.is_err() {
            self.drain(st);
        }
        out
    }

    /// On the device from [`MIN_DEVICE_MSM`] points, on the CPU below.
    fn msm_g1(
        &self,
        bases: &G1Bases<'_>,
        scalars: &[Scalar],
        times: &mut BackendTimes,
    ) -> Result<G1Projective, BackendError> {
        self.msm_routed::<G1>(bases, scalars, times, |t| {
            self.cpu.msm_g1(bases, scalars, t)
        })
    }

    fn make_resident(&self, bases: &ParamBases<'_>) -> Result<(), BackendError> {
        let mut guard = self.state.lock();
        let st = &mut *guard;
        check!(self.ordinal, "cuCtxSetCurrent", self.ctx.bind_to_thread())?;
        let stream = st.compute.clone();
        let run = |unit: usize| MsmRun {
            device: self.ordinal,
            ctx: &self.ctx,
            stream: &stream,
            kernels: &self.msm_kernels[unit],
        };
        for (which, query) in bases.g1 {
            if query.len() >= MIN_DEVICE_MSM {
                self.resident::<G1>(st, &run(G1::UNIT), bases.set, which, query)?;
            }
        }
        if bases.b_g2.len() >= MIN_DEVICE_MSM {
            self.resident::<G2>(st, &run(G2::UNIT), bases.set, BaseQuery::BG2, bases.b_g2)?;
        }
        Ok(())
    }

    /// As `msm_g1`, in G2.
    fn msm_g2(
        &self,
        bases: &G2Bases<'_>,
        scalars: &[Scalar],
        times: &mut BackendTimes,
    ) -> Result<G2Projective, BackendError> {
        self.msm_routed::<G2>(bases, scalars, times, |t| {
            self.cpu.msm_g2(bases, scalars, t)
        })
    }
}
