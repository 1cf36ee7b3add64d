//! The h phase on one device: uploads of a, b, c from host memory on the
//! copy stream, in chunks, overlapped with the transforms of the vector
//! before (ordered by events, never by host waits), then the transforms,
//! a·b − c over Z, the coset inverse transform, and h back to the host.
//!
//! Order of work: for a and b, an iNTT whose last pass also multiplies by
//! g^i/n (so the coset NTT needs no separate shift), then the NTT; the last
//! pass of b's NTT writes a ← a·b/Z(g) (on the coset Z is the constant
//! g^n − 1). c only gets its iNTT, scaled by 1/(n·Z(g)): the coset iNTT
//! undoes a coset NTT, so interpolating (a·b − c)/Z(g) over the coset is
//! the coset iNTT of a·b/Z(g) minus c's coefficients over Z(g), and c's
//! coset NTT would only be undone again. The coset iNTT of a, whose last
//! pass multiplies by g^-i/n and takes c off, leaves h. Six transforms, no
//! other pass over memory. Every value equals bellperson's (exact field
//! arithmetic; the same identity runs on the CPU backend).

use super::check::check;
use super::domain::{scalar_bytes, DomainTables};
use super::ntt::{self, Direction, Post};
use super::state::DeviceState;
pub use super::workspace::Workspace;
use crate::backend::{BackendError, BackendTimes};
use blstrs::Scalar;
use cudarc::driver::{result, sys, CudaContext, CudaEvent, CudaFunction, CudaStream};
use fleet_wire::timing::Phase;
use std::sync::Arc;

/// Bytes per asynchronous H2D copy: big enough to run at line rate, small
/// enough that the copy engine interleaves with other streams' copies.
pub const H2D_CHUNK: usize = 64 << 20;

/// Per-phase device times of one h computation, from events.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeviceTimes {
    pub intt_ms: f64,
    pub coset_ntt_ms: f64,
    /// Zero since a·b over Z is fused into b's coset NTT and c's part into
    /// the coset iNTT (counted there); kept so the record's phase stays
    /// present.
    pub mul_sub_ms: f64,
    pub coset_intt_ms: f64,
    /// H2D of a, b, c: from the first chunk's start to the last chunk's end.
    pub h2d_ms: f64,
}

impl DeviceTimes {
    pub fn ntt_total_ms(&self) -> f64 {
        self.intt_ms + self.coset_ntt_ms + self.mul_sub_ms + self.coset_intt_ms
    }

    pub fn add_to(&self, times: &mut BackendTimes) {
        times.add(Phase::NttIfft, self.intt_ms);
        times.add(Phase::NttCosetFft, self.coset_ntt_ms);
        times.add(Phase::NttMulSubDivZ, self.mul_sub_ms);
        times.add(Phase::NttCosetIfft, self.coset_intt_ms);
    }
}

/// Events with timing enabled (the default flags), one per boundary.
fn timing_event(device: u32, ctx: &Arc<CudaContext>) -> Result<CudaEvent, BackendError> {
    check!(
        device,
        "cuEventCreate",
        ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
    )
}

fn record(device: u32, ev: &CudaEvent, stream: &CudaStream) -> Result<(), BackendError> {
    check!(device, "cuEventRecord", ev.record(stream))
}

fn elapsed(device: u32, start: &CudaEvent, end: &CudaEvent) -> Result<f64, BackendError> {
    check!(device, "cuEventElapsedTime", start.elapsed_ms(end)).map(f64::from)
}

/// Kernels of the ntt unit.
#[derive(Debug)]
pub struct NttKernels {
    pub pass: CudaFunction,
    pub expand_powers: CudaFunction,
    /// a, b, c from compiled constraints (`kernels/r1cs/abc.cu`).
    pub abc: CudaFunction,
}

/// Enqueues the chunked upload of `src` into `dst` on `stream`.
fn upload(
    device: u32,
    stream: &CudaStream,
    dst: sys::CUdeviceptr,
    src: &[u8],
) -> Result<(), BackendError> {
    for (i, chunk) in src.chunks(H2D_CHUNK).enumerate() {
        let at = dst + (i * H2D_CHUNK) as u64;
        // SAFETY: `dst` has room for all of `src`; the caller keeps `src`
        // alive and unmoved until the stream has been synchronised.
        check!(device, "cuMemcpyHtoDAsync", unsafe {
            result::memcpy_htod_async(at, chunk, stream.cu_stream())
        })?;
    }
    Ok(())
}

/// Everything one h computation needs from the device state.
pub struct Run<'a> {
    pub device: u32,
    pub ctx: &'a Arc<CudaContext>,
    pub st: &'a mut DeviceState,
    pub kernels: &'a NttKernels,
    pub tables: &'a DomainTables,
}

impl Run<'_> {
    /// Uploads a, b, c (each enqueued right before the previous vector's
    /// transforms, so a pageable copy blocking the host still overlaps the
    /// device work already queued) and computes h into logical vector 0.
    /// Does not synchronise: the caller waits (or leaves h on the device).
    pub fn enqueue_from_host(&mut self, host: [&[Scalar]; 3]) -> Result<Timeline, BackendError> {
        let tl = Timeline::new(self.device, self.ctx)?;
        record(self.device, &tl.h2d_start, &self.st.copy)?;
        let uploaded: Vec<CudaEvent> = (0..3)
            .map(|_| check!(self.device, "cuEventCreate", self.ctx.new_event(None)))
            .collect::<Result<_, _>>()?;
        for v in 0..3 {
            let dst = self.st.workspace()?.ptr(v);
            upload(self.device, &self.st.copy, dst, scalar_bytes(host[v]))?;
            record(self.device, &uploaded[v], &self.st.copy)?;
            if v == 2 {
                record(self.device, &tl.h2d_end, &self.st.copy)?;
            }
            check!(
                self.device,
                "cuStreamWaitEvent",
                self.st.compute.wait(&uploaded[v])
            )?;
            self.vector_transforms(v, &tl)?;
        }
        self.finish_h(&tl)?;
        Ok(tl)
    }

    /// The same computation on a, b, c already on the device (benchmarks,
    /// a future device-side synthesis).
    pub fn enqueue_on_device(&mut self) -> Result<Timeline, BackendError> {
        let tl = Timeline::new(self.device, self.ctx)?;
        record(self.device, &tl.h2d_start, &self.st.compute)?;
        record(self.device, &tl.h2d_end, &self.st.compute)?;
        for v in 0..3 {
            self.vector_transforms(v, &tl)?;
        }
        self.finish_h(&tl)?;
        Ok(tl)
    }

    /// Transforms logical vector v in place (as far as the slots say).
    fn transform(&mut self, v: usize, dir: Direction, post: Post) -> Result<(), BackendError> {
        let ws = self.st.workspace()?;
        let (src, scratch) = (ws.ptr(v), ws.ptr(3));
        let out = ntt::transform(
            self.device,
            &self.st.compute,
            &self.kernels.pass,
            self.tables,
            src,
            scratch,
            dir,
            post,
        )?;
        if out == scratch {
            self.st.workspace()?.swap_with_scratch(v);
        }
        Ok(())
    }

    /// The transforms of logical vector v: evaluations over H ->
    /// evaluations over the coset gH for a (v = 0) and b (v = 1), whose
    /// coset NTT's last pass also computes a ← a·b/Z(g); for c (v = 2)
    /// only its coefficients over Z(g).
    fn vector_transforms(&mut self, v: usize, tl: &Timeline) -> Result<(), BackendError> {
        record(self.device, &tl.intt[v].0, &self.st.compute)?;
        if v == 2 {
            self.transform(v, Direction::Inverse, Post::Const(self.tables.c_scale))?;
            record(self.device, &tl.intt[v].1, &self.st.compute)?;
            record(self.device, &tl.coset[v], &self.st.compute)?;
            return Ok(());
        }
        self.transform(v, Direction::Inverse, Post::Table(self.tables.to_coset))?;
        record(self.device, &tl.intt[v].1, &self.st.compute)?;
        let post = if v == 1 {
            Post::MulScaleInto {
                a: self.st.workspace()?.ptr(0),
                k: self.tables.z_inv,
            }
        } else {
            Post::None
        };
        self.transform(v, Direction::Forward, post)?;
        record(self.device, &tl.coset[v], &self.st.compute)?;
        Ok(())
    }

    /// The coset iNTT of a·b/Z(g) less c's coefficients over Z(g): h.
    fn finish_h(&mut self, tl: &Timeline) -> Result<(), BackendError> {
        record(self.device, &tl.mul_sub, &self.st.compute)?;
        let sub = self.st.workspace()?.ptr(2);
        self.transform(
            0,
            Direction::Inverse,
            Post::TableSub {
                table: self.tables.from_coset,
                sub,
            },
        )?;
        record(self.device, &tl.done, &self.st.compute)?;
        Ok(())
    }
}

/// The events of one h computation, read after the work completed.
pub struct Timeline {
    pub h2d_start: CudaEvent,
    pub h2d_end: CudaEvent,
    /// Per vector: (iNTT start, iNTT end = coset NTT start).
    pub intt: Vec<(CudaEvent, CudaEvent)>,
    /// Per vector: coset NTT end.
    pub coset: Vec<CudaEvent>,
    pub mul_sub: CudaEvent,
    pub done: CudaEvent,
    device: u32,
}

impl Timeline {
    fn new(device: u32, ctx: &Arc<CudaContext>) -> Result<Self, BackendError> {
        let ev = || timing_event(device, ctx);
        Ok(Self {
            h2d_start: ev()?,
            h2d_end: ev()?,
            intt: (0..3)
                .map(|_| Ok((ev()?, ev()?)))
                .collect::<Result<_, BackendError>>()?,
            coset: (0..3).map(|_| ev()).collect::<Result<_, _>>()?,
            mul_sub: ev()?,
            done: ev()?,
            device,
        })
    }

    /// Blocks until h is complete and reads the phase times.
    pub fn read(&self) -> Result<DeviceTimes, BackendError> {
        let d = self.device;
        check!(d, "cuEventSynchronize", self.done.synchronize())?;
        let mut t = DeviceTimes {
            h2d_ms: elapsed(d, &self.h2d_start, &self.h2d_end)?,
            ..Default::default()
        };
        for v in 0..3 {
            t.intt_ms += elapsed(d, &self.intt[v].0, &self.intt[v].1)?;
            t.coset_ntt_ms += elapsed(d, &self.intt[v].1, &self.coset[v])?;
        }
        t.mul_sub_ms = elapsed(d, &self.coset[2], &self.mul_sub)?;
        t.coset_intt_ms = elapsed(d, &self.mul_sub, &self.done)?;
        Ok(t)
    }
}
