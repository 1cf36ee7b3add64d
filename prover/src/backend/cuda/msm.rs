//! Multi-scalar multiplication in G1 and G2 on the device (kernels/msm/):
//! Pippenger with signed c-bit windows, a counting sort of (point, window)
//! pairs into buckets, bucket sums in levels of bounded work per thread,
//! running-sum bucket reduction per chunk, and the windows combined on the
//! host (a few hundred doublings, microseconds).
//!
//! Every result is an exact group element, so the affine encoding equals
//! the CPU backend's whatever order the device added the points in.

use super::check::check;
use super::memory::DeviceBuffer;
use crate::backend::BackendError;
use blstrs::{Fp, Fp2, G1Affine, G1Projective, G2Affine, G2Projective, Scalar};
use cudarc::driver::{
    result, sys, CudaContext, CudaEvent, CudaFunction, CudaModule, CudaStream, LaunchConfig,
    PushKernelArg,
};
use ff::Field;
use group::Group;
use std::sync::Arc;

/// A group the device MSM runs in: how its points are laid out on the
/// device and how a device result becomes a blstrs point.
pub trait DeviceGroup {
    type Affine: Copy + Send + Sync + Into<Self::Projective>;
    type Projective: Group<Scalar = Scalar> + Copy;
    /// Suffix of the group's kernels (`msm_accumulate_segments_g1`).
    const SUFFIX: &'static str;
    /// Which of the backend's MSM units holds the group's kernels.
    const UNIT: usize;
    /// Block size of the level-1 bucket sums, the kernel where the time
    /// goes: G1's needs 164 registers a thread, so 128-thread blocks fit
    /// three to an SM where 256-thread blocks fit one (2^24: 135.8 against
    /// 141.0 ms); G2's, with its Fp2 products inlined, needs 255 (one
    /// 256-thread block an SM).
    const SEGMENT_THREADS: u32;
    /// 32-bit words of one coordinate (12 for Fp, 24 for Fp2).
    const FIELD_WORDS: usize;
    /// Bytes of one affine base (blst_p1_affine / blst_p2_affine).
    const AFFINE_BYTES: usize = 8 * Self::FIELD_WORDS;
    /// Bytes of one XYZZ point (`ec_xyzz<F>`).
    const XYZZ_BYTES: usize = 16 * Self::FIELD_WORDS;
    /// The affine bases as the device stores them.
    fn affine_bytes(points: &[Self::Affine]) -> &[u8];
    /// One XYZZ point from the device (`4 * FIELD_WORDS` words).
    fn from_xyzz(words: &[u32]) -> Self::Projective;
}

/// BLS12-381 G1 (coordinates in Fp).
#[derive(Debug)]
pub struct G1;
/// BLS12-381 G2 (coordinates in Fp2).
#[derive(Debug)]
pub struct G2;

impl DeviceGroup for G1 {
    type Affine = G1Affine;
    type Projective = G1Projective;
    const SUFFIX: &'static str = "g1";
    const UNIT: usize = 0;
    const SEGMENT_THREADS: u32 = 128;
    const FIELD_WORDS: usize = 12;
    fn affine_bytes(points: &[G1Affine]) -> &[u8] {
        affine_bytes(points)
    }
    fn from_xyzz(words: &[u32]) -> G1Projective {
        let f = |k: usize| fp_from_words(&words[12 * k..12 * k + 12]);
        let (x, y, zz, zzz) = (f(0), f(1), f(2), f(3));
        if bool::from(zz.is_zero()) {
            return G1Projective::identity();
        }
        let (x, y, z) = xyzz_to_jacobian(x, y, zz, zzz);
        G1Projective::from_raw_unchecked(x, y, z)
    }
}

impl DeviceGroup for G2 {
    type Affine = G2Affine;
    type Projective = G2Projective;
    const SUFFIX: &'static str = "g2";
    const UNIT: usize = 1;
    const SEGMENT_THREADS: u32 = 256;
    const FIELD_WORDS: usize = 24;
    fn affine_bytes(points: &[G2Affine]) -> &[u8] {
        // SAFETY: G2Affine is repr(transparent) over blst_p2_affine, a
        // repr(C) pair of blst_fp2 (each [u64; 6] twice); any initialised
        // value is valid as bytes.
        unsafe {
            std::slice::from_raw_parts(points.as_ptr().cast::<u8>(), std::mem::size_of_val(points))
        }
    }
    fn from_xyzz(words: &[u32]) -> G2Projective {
        let f = |k: usize| {
            Fp2::new(
                fp_from_words(&words[24 * k..24 * k + 12]),
                fp_from_words(&words[24 * k + 12..24 * k + 24]),
            )
        };
        let (x, y, zz, zzz) = (f(0), f(1), f(2), f(3));
        if bool::from(zz.is_zero()) {
            return G2Projective::identity();
        }
        let (x, y, z) = xyzz_to_jacobian(x, y, zz, zzz);
        G2Projective::from_raw_unchecked(x, y, z)
    }
}

/// XYZZ (x = X/ZZ, y = Y/ZZZ) as blst's Jacobian (x = X/Z², y = Y/Z³):
/// Z = ZZ·ZZZ keeps both, with X·ZZ·ZZZ² and Y·ZZ³·ZZZ².
fn xyzz_to_jacobian<F: Field>(x: F, y: F, zz: F, zzz: F) -> (F, F, F) {
    let zzz2 = zzz.square();
    let zz2 = zz.square();
    (x * zz * zzz2, y * zz2 * zz * zzz2, zz * zzz)
}

/// Bytes of one affine G1 base on the device.
pub const AFFINE_BYTES: usize = G1::AFFINE_BYTES;
/// Largest point count one call accepts: entries are u32 indices with a
/// sign bit, and points × windows must fit a u32 offset.
pub const MAX_POINTS: usize = 1 << 27;
/// Window sizes the kernels support (digits index 2^(c-1) buckets).
pub const MIN_WINDOW: u32 = 4;
pub const MAX_WINDOW: u32 = 22;

const THREADS: u32 = 256;
const SCAN_ELEMS: usize = 1024;
const WINDOW_THREADS: u32 = 128;
/// Most blocks one window's chunk sums are split over (the first round of
/// `msm_window_sum`).
const MAX_WINDOW_PARTS: u32 = 256;
/// Buckets one thread of `msm_bucket_reduce` walks.
const REDUCE_CHUNK: u32 = 32;
/// Entries per task after level 1 (partial sums are XYZZ, full additions).
const LATER_LEVEL_TASK: u32 = 32;

/// Window size for `n` points: chosen from the sweep in docs/BENCHMARKS.md
/// (H200, uniform random scalars; with level-1 segments 16 is best from
/// 2^18 up, 2^24 included: 135.8 against 143.4 ms at 17 and 152.7 at 18);
/// fewer windows cost fewer additions per point, more buckets cost more in
/// the reduction.
pub fn window_bits(n: usize) -> u32 {
    let log = n.max(1).ilog2();
    match log {
        0..=9 => 8,
        10..=13 => 11,
        14..=17 => 13,
        _ => 16,
    }
}

/// Signed digits of a 255-bit scalar: ceil(256 / c) windows leave room for
/// the carry out of the top window.
pub fn windows_of(c: u32) -> u32 {
    256u32.div_ceil(c)
}

/// Most rows a table of multiples may have (`MSM_MAX_ROWS` in msm.cu: the
/// precomputation keeps a base's rows in local memory).
pub const MAX_TABLE_ROWS: u32 = 16;

/// A table of multiples of one query's bases, kept with them on the
/// device: row g holds 2^(c·sets·g) times every base, so the windows
/// g·sets + j of all rows share bucket set j. With `sets` bucket sets
/// instead of one per window, windows can be wider at the same reduction
/// cost: fewer windows, fewer additions per point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TablePlan {
    pub c: u32,
    pub sets: u32,
    pub rows: u32,
}

impl TablePlan {
    /// The table for a query of `points` bases of `point_bytes` each, when
    /// all resident bases share `budget` bytes: at most a sixth of it per
    /// query, so a parameter set's four G1 queries and its G2 one (with
    /// fewer rows, being twice their size) fit in it together, at most
    /// [`MAX_TABLE_ROWS`] rows, and entries (point index + row offset)
    /// below 2^31. The window minimises the measured
    /// cost: about 0.5 ns per (point, window) entry against 3 ns per bucket
    /// in the reduction (H200, 2^24: 251M entries in 133 ms, 2M buckets in
    /// 7 ms), i.e. one bucket costs six entries.
    pub fn choose(points: usize, point_bytes: usize, budget: u64) -> Self {
        Self::choose_within(points, point_bytes, budget, budget)
    }

    /// [`TablePlan::choose`] where only `free` bytes of the budget are
    /// unused: the table's rows must fit in them too, so a table never
    /// evicts resident bases (another set's, or its own set's when the set
    /// is larger than the budget). Under memory pressure tables shrink to
    /// the bases alone and a query moving in and out costs its upload, not
    /// also a table computed again (568 ms per G1 query at 2^22); the
    /// first set on an empty device is unaffected (its queries take at
    /// most a sixth each, so a sixth is always still free).
    pub fn choose_within(points: usize, point_bytes: usize, budget: u64, free: u64) -> Self {
        let bytes = (points.max(1) * point_bytes) as u64;
        let by_memory = ((budget / 6).min(free) / bytes).min(u64::from(MAX_TABLE_ROWS)) as u32;
        let by_index = ((1u64 << 31) / points.max(1) as u64).min(u64::from(MAX_TABLE_ROWS)) as u32;
        let max_rows = by_memory.min(by_index).max(1);
        if max_rows == 1 {
            // No room for a second row: the bases alone, at the window
            // measured for them.
            let c = window_bits(points);
            return Self {
                c,
                sets: windows_of(c),
                rows: 1,
            };
        }
        let cost = |c: u32| {
            let windows = windows_of(c);
            let sets = windows.div_ceil(max_rows);
            let entries = points as u64 * u64::from(windows);
            let buckets = u64::from(sets) << (c - 1);
            (entries + 6 * buckets, sets, windows.div_ceil(sets))
        };
        let c = (MIN_WINDOW..=MAX_WINDOW)
            .min_by_key(|&c| cost(c).0)
            .unwrap_or(MIN_WINDOW);
        let (_, sets, rows) = cost(c);
        Self { c, sets, rows }
    }

    /// Device bytes of the table (rows × the bases' bytes).
    pub fn bytes(&self, points: usize, point_bytes: usize) -> usize {
        self.rows as usize * points * point_bytes
    }
}

/// The shape of one MSM: window size, window count, bucket keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsmPlan {
    pub n: usize,
    pub c: u32,
    pub windows: u32,
    /// Buckets per bucket set (digit magnitudes 1..=2^(c-1)).
    pub buckets: u32,
    /// Bucket sets: `windows` without a table of multiples; with one,
    /// window g·sets + j goes to set j with the bases of table row g.
    pub sets: u32,
    /// Points per table row (0 without a table).
    pub stride: u32,
}

impl MsmPlan {
    /// A plan over the bases alone: one bucket set per window.
    pub fn new(n: usize, c: u32) -> Self {
        let c = c.clamp(MIN_WINDOW, MAX_WINDOW);
        let windows = windows_of(c);
        Self {
            n,
            c,
            windows,
            buckets: 1 << (c - 1),
            sets: windows,
            stride: 0,
        }
    }

    /// A plan over a table of multiples built for `table`, `stride` points
    /// a row.
    pub fn with_table(n: usize, table: TablePlan, stride: usize) -> Self {
        let mut p = Self::new(n, table.c);
        if table.rows > 1 {
            p.sets = table.sets;
            p.stride = stride as u32;
        }
        p
    }

    pub fn keys(&self) -> usize {
        self.sets as usize * self.buckets as usize
    }

    /// Upper bound of (point, window) entries.
    fn entries(&self) -> usize {
        self.n * self.windows as usize
    }

    /// Entries per level-1 segment: enough segments to fill the device
    /// (about a million threads) without making each too short, then
    /// shortened until the segments fill whole waves of the device's
    /// `slots` resident threads (0: unknown, left as is). Every thread
    /// does the same number of additions, so a last wave 70 % full cost
    /// 30 % of a wave with the device mostly idle (at 2^24, 21 waves).
    fn first_task(&self, slots: u32) -> u32 {
        let entries = self.entries();
        let base = ((entries >> 20) as u32).clamp(16, 256);
        if slots == 0 {
            return base;
        }
        let waves = entries.div_ceil(base as usize).div_ceil(slots as usize);
        let even = entries.div_ceil(waves * slots as usize);
        // even <= base, since base segments fit in `waves` waves.
        (even as u32).clamp(16, base)
    }
}

/// One group's MSM kernels: the sort steps (shared by both groups), and
/// the group's own steps.
#[derive(Debug)]
pub struct MsmKernels {
    canonical: CudaFunction,
    count: CudaFunction,
    max: CudaFunction,
    scan_local: CudaFunction,
    scan_sums: CudaFunction,
    scan_add: CudaFunction,
    task_counts: CudaFunction,
    precompute: CudaFunction,
    segment_counts: CudaFunction,
    acc_segments: CudaFunction,
    acc_partials: CudaFunction,
    bucket_reduce: CudaFunction,
    window_sum: CudaFunction,
    scatter: CudaFunction,
    /// Level-1 threads resident at once on the device (multiprocessors ×
    /// blocks of the segment kernel each × block size); 0 if unknown.
    segment_slots: u32,
}

impl MsmKernels {
    /// Loads the sort steps from `index` (the MSM index unit) and the
    /// group steps with suffix `suffix` (see [`DeviceGroup::SUFFIX`]) from
    /// `steps`, the group's five units in `kernels::MSM_G1` order.
    /// `multiprocessors` and `segment_threads` (the level-1 block size)
    /// size the level-1 segments to whole waves.
    pub fn load(
        device: u32,
        index: &Arc<CudaModule>,
        steps: &[Arc<CudaModule>],
        suffix: &str,
        multiprocessors: u32,
        segment_threads: u32,
    ) -> Result<Self, BackendError> {
        let [segments, partials, reduce, window, precompute] = steps else {
            return Err(super::check::device_error(
                device,
                "MsmKernels::load",
                file!(),
                line!(),
                &format!("expected 5 group step modules, got {}", steps.len()),
            ));
        };
        let load = |module: &Arc<CudaModule>, name: &str| {
            check!(
                device,
                &format!("cuModuleGetFunction({name})"),
                module.load_function(name)
            )
        };
        let f = |name: &str| load(index, name);
        let g = |module, step: &str| load(module, &format!("{step}_{suffix}"));
        let acc_segments = g(segments, "msm_accumulate_segments")?;
        let per_sm = check!(
            device,
            "cuOccupancyMaxActiveBlocksPerMultiprocessor",
            acc_segments.occupancy_max_active_blocks_per_multiprocessor(segment_threads, 0, None)
        )?;
        let segment_slots = multiprocessors
            .saturating_mul(per_sm)
            .saturating_mul(segment_threads);
        Ok(Self {
            canonical: f("msm_canonical")?,
            count: f("msm_count")?,
            max: f("msm_max")?,
            scan_local: f("msm_scan_local")?,
            scan_sums: f("msm_scan_sums")?,
            scan_add: f("msm_scan_add")?,
            task_counts: f("msm_task_counts")?,
            segment_counts: f("msm_segment_counts")?,
            precompute: g(precompute, "msm_precompute")?,
            acc_segments,
            acc_partials: g(partials, "msm_accumulate_partials")?,
            bucket_reduce: g(reduce, "msm_bucket_reduce")?,
            window_sum: g(window, "msm_window_sum")?,
            scatter: f("msm_scatter")?,
            segment_slots,
        })
    }
}

/// One device allocation that grows on demand and is reused across calls.
#[derive(Debug, Default)]
struct Scratch(Option<DeviceBuffer>);

impl Scratch {
    fn ensure(
        &mut self,
        ctx: &Arc<CudaContext>,
        device: u32,
        bytes: usize,
    ) -> Result<sys::CUdeviceptr, BackendError> {
        let bytes = bytes.max(16);
        if self.0.as_ref().is_none_or(|b| b.bytes() < bytes) {
            // Free first: the old and the new one may not fit together.
            self.0 = None;
            self.0 = Some(DeviceBuffer::alloc(ctx, device, bytes)?);
        }
        Ok(self.0.as_ref().map_or(0, |b| b.ptr()))
    }
}

/// Device scratch of the MSM, kept between calls (one MSM at a time per
/// device state).
#[derive(Debug, Default)]
pub struct MsmWorkspace {
    scalars: Scratch,
    counts: Scratch,
    bucket_off: Scratch,
    cursor: Scratch,
    entries: Scratch,
    tasks: [Scratch; 2],
    task_off: [Scratch; 2],
    partials: [Scratch; 2],
    chunks: Scratch,
    windows: Scratch,
    sums: Scratch,
    max: Scratch,
}

impl MsmWorkspace {
    /// Device bytes this workspace holds now.
    pub fn bytes(&self) -> usize {
        let all = [
            &self.scalars,
            &self.counts,
            &self.bucket_off,
            &self.cursor,
            &self.entries,
            &self.tasks[0],
            &self.tasks[1],
            &self.task_off[0],
            &self.task_off[1],
            &self.partials[0],
            &self.partials[1],
            &self.chunks,
            &self.windows,
            &self.sums,
            &self.max,
        ];
        all.iter()
            .map(|s| s.0.as_ref().map_or(0, |b| b.bytes()))
            .sum()
    }
}

/// Where an MSM's scalars are.
#[derive(Debug, Clone, Copy)]
pub enum Scalars<'a> {
    Host(&'a [Scalar]),
    /// `len` scalars at `ptr` in this device's memory, written by work
    /// already ordered before the MSM's stream (or finished) and kept by
    /// the caller until the MSM returns.
    Device {
        ptr: sys::CUdeviceptr,
        len: usize,
    },
    /// `len` scalars at `ptr` that the MSM may rewrite in place (a staging
    /// slot, [`super::staging`]), complete once `ready` has fired.
    Staged {
        ptr: sys::CUdeviceptr,
        len: usize,
        ready: &'a CudaEvent,
    },
}

impl Scalars<'_> {
    pub fn len(&self) -> usize {
        match self {
            Scalars::Host(s) => s.len(),
            Scalars::Device { len, .. } | Scalars::Staged { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What one device MSM measured (CUDA events on its stream).
#[derive(Debug, Clone, Copy, Default)]
pub struct MsmDeviceTimes {
    /// Scalar upload (a device-to-device copy for [`Scalars::Device`], ~0
    /// for [`Scalars::Staged`]: the wait for a copy on another stream).
    pub h2d_ms: f64,
    /// Everything from the canonical-form kernel to the window sums.
    pub kernels_ms: f64,
    /// Of which: digits, counting sort into buckets (canonical form to scatter).
    pub sort_ms: f64,
    /// Of which: bucket sums, all levels.
    pub accumulate_ms: f64,
    /// Of which: bucket reduction and window sums.
    pub reduce_ms: f64,
}

fn grid(n: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n as u32).div_ceil(threads).max(1), 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// One MSM call: device, context, stream and kernels.
pub struct MsmRun<'a> {
    pub device: u32,
    pub ctx: &'a Arc<CudaContext>,
    pub stream: &'a Arc<CudaStream>,
    pub kernels: &'a MsmKernels,
}

macro_rules! launch {
    ($run:expr, $func:expr, $name:literal, $cfg:expr, $($arg:expr),+ $(,)?) => {{
        let mut b = $run.stream.launch_builder($func);
        $( b.arg($arg); )+
        // SAFETY: the argument list matches the kernel's signature in
        // kernels/msm/msm.cu (device pointers as u64, counts as u32), and
        // every buffer was sized by the caller for the plan.
        check!($run.device, concat!("cuLaunchKernel(", $name, ")"), unsafe { b.launch($cfg) })
            .map(|_| ())
    }};
}

impl MsmRun<'_> {
    fn event(&self) -> Result<CudaEvent, BackendError> {
        check!(
            self.device,
            "cuEventCreate",
            self.ctx
                .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
        )
    }

    fn record(&self, ev: &CudaEvent) -> Result<(), BackendError> {
        check!(self.device, "cuEventRecord", ev.record(self.stream))
    }

    fn memset(&self, ptr: sys::CUdeviceptr, bytes: usize) -> Result<(), BackendError> {
        // SAFETY: `ptr` holds at least `bytes` (sized by the caller).
        check!(self.device, "cuMemsetD8Async", unsafe {
            result::memset_d8_async(ptr, 0, bytes, self.stream.cu_stream())
        })
    }

    /// Exclusive prefix sum of `len` u32 at `data`, in place.
    fn scan(
        &self,
        data: sys::CUdeviceptr,
        len: usize,
        sums: sys::CUdeviceptr,
    ) -> Result<(), BackendError> {
        let blocks = len.div_ceil(SCAN_ELEMS);
        let n = len as u32;
        let m = blocks as u32;
        let cfg = LaunchConfig {
            grid_dim: (m, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        launch!(
            self,
            &self.kernels.scan_local,
            "msm_scan_local",
            cfg,
            &data,
            &n,
            &sums
        )?;
        let one = LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        launch!(
            self,
            &self.kernels.scan_sums,
            "msm_scan_sums",
            one,
            &sums,
            &m
        )?;
        launch!(
            self,
            &self.kernels.scan_add,
            "msm_scan_add",
            grid(len, THREADS),
            &data,
            &n,
            &sums
        )
    }

    /// Fills rows 1.. of a table of multiples whose row 0 (the `stride`
    /// bases) is on the device at `table`, and waits for it.
    pub fn precompute<G: DeviceGroup>(
        &self,
        table: sys::CUdeviceptr,
        stride: usize,
        plan: TablePlan,
    ) -> Result<(), BackendError> {
        if plan.rows < 2 || stride == 0 {
            return Ok(());
        }
        let (stride32, shift, rows) = (stride as u32, plan.c * plan.sets, plan.rows);
        // 128 threads: the kernel keeps a base's rows in local memory.
        launch!(
            self,
            &self.kernels.precompute,
            "msm_precompute",
            grid(stride, 128),
            &table,
            &stride32,
            &shift,
            &rows
        )?;
        check!(
            self.device,
            "cuStreamSynchronize",
            self.stream.synchronize()
        )
    }

    /// Σ scalars[i]·bases[i] with `bases` already on the device (`n`
    /// affine points at `bases`) and the scalars (Montgomery form, as
    /// blstrs holds them) in host memory or already on the device.
    pub fn msm<G: DeviceGroup>(
        &self,
        ws: &mut MsmWorkspace,
        bases: sys::CUdeviceptr,
        scalars: Scalars<'_>,
        plan: MsmPlan,
    ) -> Result<(G::Projective, MsmDeviceTimes), BackendError> {
        let (dev, ctx) = (self.device, self.ctx);
        let n = plan.n;
        debug_assert_eq!(n, scalars.len());
        if n == 0 {
            return Ok((G::Projective::identity(), MsmDeviceTimes::default()));
        }
        let xyzz_bytes = G::XYZZ_BYTES;
        let keys = plan.keys();
        let u32s = |k: usize| k * std::mem::size_of::<u32>();
        let first_task = plan.first_task(self.kernels.segment_slots);
        let max_tasks = plan.entries() / first_task as usize + keys + 1;
        let per_window = (plan.buckets / REDUCE_CHUNK.min(plan.buckets)) as usize;
        let chunk = REDUCE_CHUNK.min(plan.buckets);

        let scalar_bytes = n * std::mem::size_of::<Scalar>();
        let scal = match scalars {
            Scalars::Staged { ptr, .. } => ptr,
            Scalars::Host(_) | Scalars::Device { .. } => {
                ws.scalars.ensure(ctx, dev, scalar_bytes)?
            }
        };
        let counts = ws.counts.ensure(ctx, dev, u32s(keys + 1))?;
        let bucket_off = ws.bucket_off.ensure(ctx, dev, u32s(keys + 1))?;
        let cursor = ws.cursor.ensure(ctx, dev, u32s(keys + 1))?;
        let entries = ws.entries.ensure(ctx, dev, u32s(plan.entries()))?;
        let tasks = [
            ws.tasks[0].ensure(ctx, dev, u32s(keys + 1))?,
            ws.tasks[1].ensure(ctx, dev, u32s(keys + 1))?,
        ];
        let task_off = [
            ws.task_off[0].ensure(ctx, dev, u32s(keys + 1))?,
            ws.task_off[1].ensure(ctx, dev, u32s(keys + 1))?,
        ];
        let partials = [
            ws.partials[0].ensure(ctx, dev, max_tasks * xyzz_bytes)?,
            ws.partials[1].ensure(ctx, dev, max_tasks * xyzz_bytes)?,
        ];
        let chunks = ws
            .chunks
            .ensure(ctx, dev, plan.sets as usize * per_window * xyzz_bytes)?;
        let window_out = ws
            .windows
            .ensure(ctx, dev, plan.sets as usize * xyzz_bytes)?;
        let sums = ws
            .sums
            .ensure(ctx, dev, u32s((keys + 1).div_ceil(SCAN_ELEMS)))?;
        let max_ptr = ws.max.ensure(ctx, dev, u32s(1))?;

        let t0 = self.event()?;
        let t1 = self.event()?;
        let t_sorted = self.event()?;
        let t_summed = self.event()?;
        let t2 = self.event()?;
        self.record(&t0)?;
        match scalars {
            // SAFETY: `scal` holds n scalars; the copy is awaited below (the
            // max readback synchronises the stream) before `scalars` can go.
            Scalars::Host(host) => check!(dev, "cuMemcpyHtoDAsync", unsafe {
                result::memcpy_htod_async(
                    scal,
                    super::domain::scalar_bytes(host),
                    self.stream.cu_stream(),
                )
            })?,
            // A copy, not the buffer itself: the canonical-form kernel
            // rewrites its input in place.
            // SAFETY: both hold n scalars; the source's owner keeps it
            // until this stream has passed the copy (see `Scalars::Device`).
            Scalars::Device { ptr, .. } => check!(dev, "cuMemcpyDtoDAsync", unsafe {
                result::memcpy_dtod_async(scal, ptr, scalar_bytes, self.stream.cu_stream())
            })?,
            // Uploaded on another stream: this one waits on the device, and
            // the upload is timed by whoever started it.
            Scalars::Staged { ready, .. } => {
                check!(dev, "cuStreamWaitEvent", self.stream.wait(ready))?
            }
        }
        self.record(&t1)?;

        let (n32, c, windows, buckets) = (n as u32, plan.c, plan.windows, plan.buckets);
        let (sets, stride) = (plan.sets, plan.stride);
        let keys32 = keys as u32;
        launch!(
            self,
            &self.kernels.canonical,
            "msm_canonical",
            grid(n, THREADS),
            &scal,
            &n32
        )?;
        self.memset(counts, u32s(keys + 1))?;
        self.memset(max_ptr, u32s(1))?;
        launch!(
            self,
            &self.kernels.count,
            "msm_count",
            grid(n, THREADS),
            &scal,
            &n32,
            &c,
            &windows,
            &sets,
            &counts
        )?;
        let max_cfg = LaunchConfig {
            grid_dim: (((keys as u32).div_ceil(THREADS)).clamp(1, 1024), 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        launch!(
            self,
            &self.kernels.max,
            "msm_max",
            max_cfg,
            &counts,
            &keys32,
            &max_ptr
        )?;
        check!(
            dev,
            "cuMemcpyDtoDAsync",
            // SAFETY: both hold keys + 1 u32.
            unsafe {
                result::memcpy_dtod_async(
                    bucket_off,
                    counts,
                    u32s(keys + 1),
                    self.stream.cu_stream(),
                )
            }
        )?;
        self.scan(bucket_off, keys + 1, sums)?;
        // SAFETY: as above.
        check!(dev, "cuMemcpyDtoDAsync", unsafe {
            result::memcpy_dtod_async(cursor, bucket_off, u32s(keys + 1), self.stream.cu_stream())
        })?;
        launch!(
            self,
            &self.kernels.scatter,
            "msm_scatter",
            grid(n, THREADS),
            &scal,
            &n32,
            &c,
            &windows,
            &sets,
            &stride,
            &cursor,
            &entries
        )?;
        self.record(&t_sorted)?;
        let mut largest = [0u32; 1];
        check!(dev, "cuStreamSynchronize", self.stream.synchronize())?;
        // SAFETY: one u32, the stream is idle.
        check!(dev, "cuMemcpyDtoH", unsafe {
            result::memcpy_dtoh_sync(&mut largest[..], max_ptr)
        })?;

        // Level 1: the sorted entries in segments of `first_task`, each
        // bucket getting one partial per segment it overlaps.
        let mut per_task = first_task;
        launch!(
            self,
            &self.kernels.segment_counts,
            "msm_segment_counts",
            grid(keys + 1, THREADS),
            &bucket_off,
            &counts,
            &keys32,
            &per_task,
            &tasks[0]
        )?;
        // SAFETY: both hold keys + 1 u32.
        check!(dev, "cuMemcpyDtoDAsync", unsafe {
            result::memcpy_dtod_async(
                task_off[0],
                tasks[0],
                u32s(keys + 1),
                self.stream.cu_stream(),
            )
        })?;
        self.scan(task_off[0], keys + 1, sums)?;
        let mut bound = max_tasks;
        launch!(
            self,
            &self.kernels.acc_segments,
            "msm_accumulate_segments",
            grid(
                plan.entries().div_ceil(per_task as usize),
                G::SEGMENT_THREADS
            ),
            &bases,
            &entries,
            &bucket_off,
            &keys32,
            &task_off[0],
            &per_task,
            &partials[0]
        )?;
        // A bucket of m entries overlaps at most ceil((m - 1) / S) + 1 segments.
        let mut left = match largest[0] {
            0 | 1 => largest[0],
            m => (m - 1).div_ceil(per_task) + 1,
        };
        let mut cur = 0usize;
        while left > 1 {
            let next = 1 - cur;
            per_task = LATER_LEVEL_TASK;
            launch!(
                self,
                &self.kernels.task_counts,
                "msm_task_counts",
                grid(keys + 1, THREADS),
                &tasks[cur],
                &keys32,
                &per_task,
                &tasks[next]
            )?;
            // SAFETY: both hold keys + 1 u32.
            check!(dev, "cuMemcpyDtoDAsync", unsafe {
                result::memcpy_dtod_async(
                    task_off[next],
                    tasks[next],
                    u32s(keys + 1),
                    self.stream.cu_stream(),
                )
            })?;
            self.scan(task_off[next], keys + 1, sums)?;
            bound = bound / per_task as usize + keys + 1;
            launch!(
                self,
                &self.kernels.acc_partials,
                "msm_accumulate_partials",
                grid(bound, THREADS),
                &partials[cur],
                &task_off[cur],
                &tasks[cur],
                &task_off[next],
                &keys32,
                &per_task,
                &partials[next]
            )?;
            cur = next;
            left = left.div_ceil(per_task);
        }
        self.record(&t_summed)?;

        launch!(
            self,
            &self.kernels.bucket_reduce,
            "msm_bucket_reduce",
            grid(sets as usize * per_window, 64),
            &partials[cur],
            &task_off[cur],
            &tasks[cur],
            &buckets,
            &sets,
            &chunk,
            &chunks
        )?;
        // A window of many chunks is summed by `parts` blocks first, into
        // the free partials buffer, then by one block.
        let wcfg = |blocks: u32| LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (WINDOW_THREADS, 1, 1),
            shared_mem_bytes: WINDOW_THREADS * xyzz_bytes as u32,
        };
        let per_window32 = per_window as u32;
        let parts = per_window32
            .div_ceil(WINDOW_THREADS)
            .clamp(1, MAX_WINDOW_PARTS);
        let one = 1u32;
        if parts > 1 {
            let staged = partials[1 - cur];
            launch!(
                self,
                &self.kernels.window_sum,
                "msm_window_sum",
                wcfg(sets * parts),
                &chunks,
                &per_window32,
                &parts,
                &staged
            )?;
            launch!(
                self,
                &self.kernels.window_sum,
                "msm_window_sum",
                wcfg(sets),
                &staged,
                &parts,
                &one,
                &window_out
            )?;
        } else {
            launch!(
                self,
                &self.kernels.window_sum,
                "msm_window_sum",
                wcfg(sets),
                &chunks,
                &per_window32,
                &one,
                &window_out
            )?;
        }
        self.record(&t2)?;
        let mut raw = vec![0u32; sets as usize * 4 * G::FIELD_WORDS];
        check!(dev, "cuStreamSynchronize", self.stream.synchronize())?;
        // SAFETY: `raw` is exactly `sets` XYZZ points; the stream is idle.
        check!(dev, "cuMemcpyDtoH", unsafe {
            result::memcpy_dtoh_sync(&mut raw[..], window_out)
        })?;
        let between = |a: &CudaEvent, b: &CudaEvent| {
            check!(dev, "cuEventElapsedTime", a.elapsed_ms(b)).map(f64::from)
        };
        let times = MsmDeviceTimes {
            h2d_ms: between(&t0, &t1)?,
            kernels_ms: between(&t1, &t2)?,
            sort_ms: between(&t1, &t_sorted)?,
            accumulate_ms: between(&t_sorted, &t_summed)?,
            reduce_ms: between(&t_summed, &t2)?,
        };
        Ok((combine_windows::<G>(&raw, plan.c), times))
    }
}

/// Twelve 32-bit device words as blstrs' six Montgomery limbs.
fn fp_from_words(w: &[u32]) -> Fp {
    let mut l = [0u64; 6];
    for (k, limb) in l.iter_mut().enumerate() {
        *limb = u64::from(w[2 * k]) | (u64::from(w[2 * k + 1]) << 32);
    }
    Fp::from_raw_unchecked(l)
}

/// A G1 XYZZ point from the device as a blst point (see [`DeviceGroup::from_xyzz`]).
pub fn xyzz_to_projective(words: &[u32; 48]) -> G1Projective {
    G1::from_xyzz(words)
}

/// Σ 2^(c·w) · W_w by Horner's rule from the top window; `raw` holds the
/// windows' XYZZ sums one after the other.
fn combine_windows<G: DeviceGroup>(raw: &[u32], c: u32) -> G::Projective {
    let mut acc = G::Projective::identity();
    for w in raw.chunks_exact(4 * G::FIELD_WORDS).rev() {
        for _ in 0..c {
            acc = acc.double();
        }
        acc += G::from_xyzz(w);
    }
    acc
}

/// The bytes of affine bases as the device stores them.
pub fn affine_bytes(points: &[G1Affine]) -> &[u8] {
    // SAFETY: G1Affine is repr(transparent) over blst_p1_affine, a repr(C)
    // pair of [u64; 6]; any initialised value is valid as bytes.
    unsafe {
        std::slice::from_raw_parts(points.as_ptr().cast::<u8>(), std::mem::size_of_val(points))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use group::prime::PrimeCurveAffine;
    use group::Curve;

    #[test]
    fn level_one_segments_fill_whole_waves() {
        // The H200's G1 plan at 2^24: 13 windows; 132 multiprocessors of
        // three 128-thread blocks.
        let plan = MsmPlan::new(1 << 24, 20);
        let entries = plan.entries();
        let slots = 132 * 3 * 128;
        let base = plan.first_task(0);
        assert_eq!(base, (entries >> 20) as u32);
        let waves = entries.div_ceil(base as usize).div_ceil(slots);
        let s = plan.first_task(slots as u32);
        assert!(s <= base && s >= 16, "{s}");
        // The same number of waves, the last one (nearly) full.
        let threads = entries.div_ceil(s as usize);
        assert_eq!(threads.div_ceil(slots), waves);
        assert!(
            threads >= (waves - 1) * slots + slots * 95 / 100,
            "{threads}"
        );
        // Every entry still belongs to a segment.
        assert!(threads * s as usize >= entries);
        // Small MSMs keep the floor of 16 entries a segment.
        let small = MsmPlan::new(1 << 10, 11);
        assert_eq!(small.first_task(slots as u32), 16);
        // Whatever the device, segments stay within 16..=256.
        for slots in [1u32, 127, 50_688, 1 << 20, u32::MAX] {
            for log in [10, 16, 20, 24, 27] {
                let p = MsmPlan::new(1 << log, 16);
                let s = p.first_task(slots);
                assert!((16..=256).contains(&s), "2^{log} with {slots} slots: {s}");
            }
        }
    }

    #[test]
    fn affine_layout_is_96_bytes_of_montgomery_limbs() {
        assert_eq!(std::mem::size_of::<G1Affine>(), AFFINE_BYTES);
        let g = G1Affine::generator();
        let bytes = affine_bytes(std::slice::from_ref(&g));
        let words: Vec<u32> = bytes
            .chunks(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(fp_from_words(&words[0..12]), g.x());
        assert_eq!(fp_from_words(&words[12..24]), g.y());
        assert!(affine_bytes(&[G1Affine::identity()])
            .iter()
            .all(|b| *b == 0));
    }

    /// x's Montgomery words, read through the affine layout.
    fn words_of(x: Fp) -> Vec<u32> {
        let p = G1Affine::from_raw_unchecked(x, x, false);
        affine_bytes(std::slice::from_ref(&p))[..48]
            .chunks(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    #[test]
    fn xyzz_conversion_keeps_the_point() {
        // P = 7·G in XYZZ with ZZ = λ², ZZZ = λ³ for an arbitrary λ.
        let p = (G1Projective::generator() * Scalar::from(7u64)).to_affine();
        let lambda = Fp::from(123_456_789u64);
        let (zz, zzz) = (lambda.square(), lambda.square() * lambda);
        let mut w = [0u32; 48];
        for (i, v) in [p.x() * zz, p.y() * zzz, zz, zzz].into_iter().enumerate() {
            w[12 * i..12 * i + 12].copy_from_slice(&words_of(v));
        }
        assert_eq!(xyzz_to_projective(&w).to_affine(), p);
        let inf = [0u32; 48];
        assert!(bool::from(xyzz_to_projective(&inf).is_identity()));
    }

    #[test]
    fn g2_layout_and_xyzz_conversion_keep_the_point() {
        assert_eq!(std::mem::size_of::<G2Affine>(), G2::AFFINE_BYTES);
        let p = (G2Projective::generator() * Scalar::from(11u64)).to_affine();
        let bytes = G2::affine_bytes(std::slice::from_ref(&p));
        let words: Vec<u32> = bytes
            .chunks(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(fp_from_words(&words[0..12]), p.x().c0());
        assert_eq!(fp_from_words(&words[12..24]), p.x().c1());
        assert_eq!(fp_from_words(&words[24..36]), p.y().c0());
        assert_eq!(fp_from_words(&words[36..48]), p.y().c1());
        // P in XYZZ with ZZ = λ², ZZZ = λ³ for an arbitrary λ in Fp2.
        let lambda = Fp2::new(Fp::from(3u64), Fp::from(5u64));
        let (zz, zzz) = (lambda.square(), lambda.square() * lambda);
        let mut w = [0u32; 96];
        for (i, v) in [p.x() * zz, p.y() * zzz, zz, zzz].into_iter().enumerate() {
            w[24 * i..24 * i + 12].copy_from_slice(&words_of(v.c0()));
            w[24 * i + 12..24 * i + 24].copy_from_slice(&words_of(v.c1()));
        }
        assert_eq!(G2::from_xyzz(&w).to_affine(), p);
        assert!(bool::from(G2::from_xyzz(&[0u32; 96]).is_identity()));
    }

    #[test]
    fn windows_combine_by_horner() {
        // W_0 = G, W_1 = 2G with c = 3: G + 8·2G = 17G.
        let g = G1Projective::generator().to_affine();
        let g2 = (G1Projective::generator() * Scalar::from(2u64)).to_affine();
        let mut raw = vec![0u32; 2 * 48];
        let one = Fp::from(1u64);
        for (slot, p) in raw.chunks_exact_mut(48).zip([g, g2]) {
            for (i, v) in [p.x(), p.y(), one, one].into_iter().enumerate() {
                slot[12 * i..12 * i + 12].copy_from_slice(&words_of(v));
            }
        }
        let want = G1Projective::generator() * Scalar::from(17u64);
        assert_eq!(combine_windows::<G1>(&raw, 3), want);
    }

    #[test]
    fn plans_cover_a_scalar_with_its_carry() {
        for c in MIN_WINDOW..=MAX_WINDOW {
            let p = MsmPlan::new(1 << 20, c);
            assert!(p.windows * c >= 256, "c={c}");
            assert_eq!(p.keys(), p.windows as usize * (1usize << (c - 1)));
        }
        assert!(window_bits(1 << 24) >= window_bits(1 << 16));
    }

    #[test]
    fn tables_cover_every_window_within_memory_and_index_bounds() {
        let budget = 64u64 << 30;
        for log in [10u32, 16, 20, 22, 24, 26, 27] {
            for point_bytes in [G1::AFFINE_BYTES, G2::AFFINE_BYTES] {
                let n = 1usize << log;
                let t = TablePlan::choose(n, point_bytes, budget);
                let windows = windows_of(t.c);
                assert!(t.sets * t.rows >= windows, "2^{log}: {t:?}");
                assert!(
                    t.sets * (t.rows - 1) < windows,
                    "2^{log}: a row unused: {t:?}"
                );
                assert!((1..=MAX_TABLE_ROWS).contains(&t.rows));
                assert!((MIN_WINDOW..=MAX_WINDOW).contains(&t.c));
                if t.rows > 1 {
                    assert!(
                        t.bytes(n, point_bytes) as u64 <= budget / 6,
                        "2^{log}: {t:?}"
                    );
                    assert!((n as u64) * u64::from(t.rows) <= 1 << 31, "2^{log}: {t:?}");
                }
                let p = MsmPlan::with_table(n, t, n);
                assert_eq!(p.keys(), t.sets as usize * (1usize << (t.c - 1)));
            }
        }
        // Only the free part of the budget counts: a table never evicts.
        let n = 1usize << 22;
        let whole = TablePlan::choose(n, G1::AFFINE_BYTES, budget);
        assert!(whole.rows > 2, "{whole:?}");
        assert_eq!(
            TablePlan::choose_within(n, G1::AFFINE_BYTES, budget, budget),
            whole
        );
        let bases = (n * G1::AFFINE_BYTES) as u64;
        let two = TablePlan::choose_within(n, G1::AFFINE_BYTES, budget, 2 * bases + 1);
        assert_eq!(two.rows, 2, "{two:?}");
        for free in [0, bases - 1, bases, 2 * bases - 1] {
            let t = TablePlan::choose_within(n, G1::AFFINE_BYTES, budget, free);
            assert_eq!(t, TablePlan::choose(n, G1::AFFINE_BYTES, 0), "free {free}");
            assert_eq!(t.rows, 1);
        }
        // No memory for a second row: the plain plan, one set per window.
        let t = TablePlan::choose(1 << 24, G1::AFFINE_BYTES, 1 << 30);
        assert_eq!(t.rows, 1);
        assert_eq!(
            MsmPlan::with_table(1 << 24, t, 1 << 24),
            MsmPlan::new(1 << 24, t.c)
        );
    }
}
