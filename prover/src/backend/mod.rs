//! Compute backends: the quotient polynomial h (the NTT phase) and the
//! multi-exponentiations, behind one trait so the pipeline does not care
//! whether a partition runs on the CPU or on a GPU.
//!
//! The contract every backend honours is bit-exactness: the same inputs give
//! the same field elements and group elements as bellperson's CPU code, so
//! proofs are byte-identical across backends for fixed r, s.

use blstrs::{G1Affine, G1Projective, G2Affine, G2Projective, Scalar};
use fleet_wire::timing::{Phase, PhaseSplit};
use std::collections::BTreeMap;
use std::ops::Range;
use std::time::Instant;

pub mod cpu;
pub mod cuda;

/// Smallest domain the CUDA backend runs on the device (log2): below it a
/// launch costs more than the whole transform on the CPU, so the CPU
/// backend computes h.
pub const MIN_DEVICE_LOG_N: u32 = 10;
/// Largest domain the CUDA kernels index (log2), memory permitting.
pub const MAX_DEVICE_LOG_N: u32 = 30;

/// Which implementation ran a partition (the `backend` field of the timing record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    Cpu,
    Cuda,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Cpu => "cpu",
            BackendKind::Cuda => "cuda",
        }
    }

    /// Whether this kind of backend computes a, b, c of a domain of `m`
    /// off the host ([`Backend::abc_off_host`]): synthesis then stops after
    /// the witness and takes one domain buffer, not three, from the pool.
    pub fn abc_off_host(self, m: usize) -> bool {
        match self {
            BackendKind::Cpu => false,
            BackendKind::Cuda => {
                m.is_power_of_two()
                    && (MIN_DEVICE_LOG_N..=MAX_DEVICE_LOG_N).contains(&m.trailing_zeros())
            }
        }
    }
}

/// A backend failure; the partition fails with this reason, the daemon stays up.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("domain of {size} elements is not a power of two between 2 and 2^{max_log}")]
    BadDomain { size: usize, max_log: u32 },
    #[error("a/b/c lengths differ: a={a} b={b} c={c}")]
    LengthMismatch { a: usize, b: usize, c: usize },
    #[error("bases ({bases}) and scalars ({scalars}) differ in length")]
    MsmLength { bases: usize, scalars: usize },
    #[error("device {device}: {call} failed at {file}:{line}: {reason}")]
    Device {
        device: u32,
        call: String,
        file: &'static str,
        line: u32,
        reason: String,
    },
    #[error("device {device} is out of memory: need {need} bytes, {free} free")]
    DeviceMemory { device: u32, need: u64, free: u64 },
    #[error(transparent)]
    CompiledShape(#[from] crate::compiled::EvalShapeError),
}

/// What [`Backend::quotient_then_h_msm`] computes the quotient from; `a`
/// is the call's own argument in both cases.
pub enum QuotientFrom<'a> {
    /// a, b, c evaluations, as [`Backend::quotient`] takes them.
    Evaluations {
        b: &'a mut [Scalar],
        c: &'a mut [Scalar],
    },
    /// A witness and compiled constraints, as
    /// [`Backend::quotient_compiled`] takes them.
    Compiled {
        r1cs: &'a crate::compiled::CompiledR1cs,
        inputs: &'a [Scalar],
        aux: &'a [Scalar],
        b: &'a mut [Scalar],
        c: &'a mut [Scalar],
    },
}

/// [`Backend::quotient_then_h_msm`] through the host: the quotient into
/// `a`, then the h MSM over `a`'s first `h_bases.len()` coefficients.
pub fn quotient_then_h_msm_via_host<B: Backend + ?Sized>(
    backend: &B,
    from: QuotientFrom<'_>,
    a: &mut [Scalar],
    pinned: bool,
    h_bases: &G1Bases<'_>,
    times: &mut BackendTimes,
) -> Result<G1Projective, BackendError> {
    match from {
        QuotientFrom::Evaluations { b, c } => backend.quotient(a, b, c, pinned, times)?,
        QuotientFrom::Compiled {
            r1cs,
            inputs,
            aux,
            b,
            c,
        } => backend.quotient_compiled(r1cs, inputs, aux, a, b, c, pinned, times)?,
    }
    let h = a.get(..h_bases.len()).ok_or(BackendError::MsmLength {
        bases: h_bases.len(),
        scalars: a.len(),
    })?;
    times.measure(Phase::MsmH, |t| backend.msm_g1(h_bases, h, t))
}

/// The rule every MSM entry checks first: as many bases as scalars, and no
/// more of either than `max` (the device kernels' index range; `usize::MAX`
/// on the CPU).
/// a, b, c from compiled constraints on the host's cores, timed as
/// [`Phase::Abc`]: [`Backend::quotient_compiled`] where a, b, c are not
/// computed off the host.
pub fn abc_on_host(
    r1cs: &crate::compiled::CompiledR1cs,
    inputs: &[Scalar],
    aux: &[Scalar],
    [a, b, c]: [&mut [Scalar]; 3],
    times: &mut BackendTimes,
) -> Result<(), BackendError> {
    let t = Instant::now();
    crate::compiled::evaluate(r1cs, inputs, aux, a, b, c)?;
    times.add(Phase::Abc, t.elapsed().as_secs_f64() * 1e3);
    Ok(())
}

pub fn check_msm_len(bases: usize, scalars: usize, max: usize) -> Result<(), BackendError> {
    if bases != scalars {
        return Err(BackendError::MsmLength { bases, scalars });
    }
    if scalars > max {
        return Err(BackendError::MsmLength {
            bases: max,
            scalars,
        });
    }
    Ok(())
}

/// What a backend measured while running one call; merged into the
/// partition's timing record by the caller.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BackendTimes {
    pub phases_ms: BTreeMap<Phase, f64>,
    /// Device time and device wait of host-timed phases ([`Self::measure`]).
    pub split_ms: BTreeMap<Phase, PhaseSplit>,
    /// Bytes of every host-to-device copy of the call (a, b, c and the MSM
    /// scalars), and the device's milliseconds for those same copies, so
    /// that their quotient is a rate ([`fleet_wire::timing::gbps`]).
    pub h2d_bytes: u64,
    pub h2d_ms: f64,
    /// Time the device spent on this call's copies and kernels, from CUDA
    /// events on its streams (zero on the CPU backend).
    pub device_ms: f64,
    /// Host milliseconds spent waiting for the device's lock.
    pub device_wait_ms: f64,
    /// Calls that ran on a device: a phase with none has no device time,
    /// not a zero one.
    pub device_calls: u64,
}

impl BackendTimes {
    /// Adds `ms` to `phase` (phases can run more than once per partition).
    pub fn add(&mut self, phase: Phase, ms: f64) {
        *self.phases_ms.entry(phase).or_insert(0.0) += ms;
    }

    /// Runs `f`, adding its wall time to `phase` and, when it ran work on a
    /// device, the device time and the device wait it accumulated to the
    /// phase's split. The one way a host-timed phase gets its device time.
    pub fn measure<R>(&mut self, phase: Phase, f: impl FnOnce(&mut Self) -> R) -> R {
        let (device, wait, calls) = (self.device_ms, self.device_wait_ms, self.device_calls);
        let t = Instant::now();
        let r = f(self);
        self.add(phase, t.elapsed().as_secs_f64() * 1e3);
        if self.device_calls > calls {
            self.split_ms.entry(phase).or_default().add(&PhaseSplit {
                device: Some(self.device_ms - device),
                wait: Some(self.device_wait_ms - wait),
            });
        }
        r
    }

    /// Adds everything `other` measured.
    pub fn merge(&mut self, other: &BackendTimes) {
        for (p, v) in &other.phases_ms {
            self.add(*p, *v);
        }
        for (p, v) in &other.split_ms {
            self.split_ms.entry(*p).or_default().add(v);
        }
        self.h2d_bytes += other.h2d_bytes;
        self.h2d_ms += other.h2d_ms;
        self.device_ms += other.device_ms;
        self.device_wait_ms += other.device_wait_ms;
        self.device_calls += other.device_calls;
    }
}

/// Which query of a parameter set a base slice comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BaseQuery {
    H,
    L,
    A,
    BG1,
    BG2,
}

impl BaseQuery {
    pub fn as_str(self) -> &'static str {
        match self {
            BaseQuery::H => "h",
            BaseQuery::L => "l",
            BaseQuery::A => "a",
            BaseQuery::BG1 => "b_g1",
            BaseQuery::BG2 => "b_g2",
        }
    }
}

/// The bases of one MSM: `query[range]`. With `resident` (the parameter
/// file's checksum and the query) a device backend keeps the whole query
/// on the device and reuses it across proofs; without it the bases are
/// uploaded per call.
#[derive(Debug, Clone)]
pub struct Bases<'a, T> {
    pub query: &'a [T],
    pub range: Range<usize>,
    pub resident: Option<(&'a str, BaseQuery)>,
}

/// G1 bases (the h, l, a and b_g1 queries).
pub type G1Bases<'a> = Bases<'a, G1Affine>;
/// G2 bases (the b_g2 query).
pub type G2Bases<'a> = Bases<'a, G2Affine>;

impl<'a, T> Bases<'a, T> {
    /// Bases with no parameter set behind them (tests, benchmarks).
    pub fn slice(points: &'a [T]) -> Self {
        Self {
            query: points,
            range: 0..points.len(),
            resident: None,
        }
    }

    /// `query[range]` of parameter set `set` (None: not resident).
    pub fn of_query(
        query: &'a [T],
        range: Range<usize>,
        set: Option<&'a str>,
        which: BaseQuery,
    ) -> Self {
        Self {
            query,
            range,
            resident: set.map(|s| (s, which)),
        }
    }

    /// The bases this MSM uses.
    pub fn points(&self) -> &'a [T] {
        &self.query[self.range.clone()]
    }

    pub fn len(&self) -> usize {
        self.range.len()
    }

    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }
}

/// A parameter set's bases under the name a device backend keeps them by
/// (the parameter file's SHA-256), to make resident before its first proof.
#[derive(Debug, Clone, Copy)]
pub struct ParamBases<'a> {
    pub set: &'a str,
    pub g1: [(BaseQuery, &'a [G1Affine]); 4],
    pub b_g2: &'a [G2Affine],
}

impl<'a> ParamBases<'a> {
    /// Every query of `params`, keyed by `set` (the parameter file's checksum).
    pub fn of(set: &'a str, params: &'a bellperson::groth16::Parameters<blstrs::Bls12>) -> Self {
        ParamBases {
            set,
            g1: [
                (BaseQuery::H, &params.h[..]),
                (BaseQuery::L, &params.l[..]),
                (BaseQuery::A, &params.a[..]),
                (BaseQuery::BG1, &params.b_g1[..]),
            ],
            b_g2: &params.b_g2[..],
        }
    }
}

/// One compute device (or the CPU). Implementations are shared between worker
/// threads of one device, so they are `Send + Sync`.
pub trait Backend: Send + Sync {
    fn kind(&self) -> BackendKind;

    /// GPU ordinal for device backends.
    fn device(&self) -> Option<u32> {
        None
    }

    /// Computes h = (a·b − c) / Z, where a, b, c are evaluations over the
    /// radix-2 domain of size `a.len()` (the caller zero-pads them to that
    /// power of two). Follows bellperson's `EvaluationDomain` exactly: iFFT,
    /// coset FFT with `Scalar::MULTIPLICATIVE_GENERATOR`, a·b − c, divide by
    /// Z on the coset, coset iFFT. On return `a` holds h's coefficients.
    /// `pinned` says whether the buffers are page-locked (affects H2D only).
    fn quotient(
        &self,
        a: &mut [Scalar],
        b: &mut [Scalar],
        c: &mut [Scalar],
        pinned: bool,
        times: &mut BackendTimes,
    ) -> Result<(), BackendError>;

    /// Whether [`Backend::quotient_compiled`] computes a, b, c of a domain
    /// of `m` elements off the host, so that `b` and `c` need not be
    /// allocated or zeroed for it.
    fn abc_off_host(&self, _m: usize) -> bool {
        false
    }

    /// The quotient from a witness and a circuit's compiled constraints:
    /// a, b, c are computed where the backend computes them, then h as
    /// [`Backend::quotient`] computes it. `a` has the domain's length and
    /// holds h on return; `b` and `c` are zeroed buffers of the same length,
    /// or empty where [`Backend::abc_off_host`] said so. Here, on the host:
    /// sparse products on every core, then [`Backend::quotient`].
    #[allow(clippy::too_many_arguments)]
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
        abc_on_host(r1cs, inputs, aux, [a, b, c], times)?;
        self.quotient(a, b, c, pinned, times)
    }

    /// The quotient, then the h MSM: Σ h[i]·h_bases[i] over h's first
    /// `h_bases.len()` coefficients, timed as [`Phase::MsmH`]. A backend
    /// may run the MSM on h where it computed it, without the round trip
    /// through `a` (which then does not hold h on return); the result is
    /// the same group element.
    fn quotient_then_h_msm(
        &self,
        from: QuotientFrom<'_>,
        a: &mut [Scalar],
        pinned: bool,
        h_bases: &G1Bases<'_>,
        times: &mut BackendTimes,
    ) -> Result<G1Projective, BackendError> {
        quotient_then_h_msm_via_host(self, from, a, pinned, h_bases, times)
    }

    /// Σ scalars[i]·bases[i] in G1. Bases at infinity contribute nothing.
    fn msm_g1(
        &self,
        bases: &G1Bases<'_>,
        scalars: &[Scalar],
        times: &mut BackendTimes,
    ) -> Result<G1Projective, BackendError>;

    /// Uploads a parameter set's bases (and whatever the backend keeps
    /// with them) ahead of its first proof, so that proof does not pay for
    /// it. Nothing to do on the CPU backend.
    fn make_resident(&self, _bases: &ParamBases<'_>) -> Result<(), BackendError> {
        Ok(())
    }

    /// Σ scalars[i]·bases[i] in G2.
    fn msm_g2(
        &self,
        bases: &G2Bases<'_>,
        scalars: &[Scalar],
        times: &mut BackendTimes,
    ) -> Result<G2Projective, BackendError>;

    /// Frees what the device keeps between calls (workspaces, domain
    /// tables, resident bases), so that a call that ran out of device memory
    /// can be tried again; what it needs is made again on demand. Returns
    /// the bytes freed.
    fn release_cached(&self) -> u64 {
        0
    }
}

/// Whether a device error leaves the device usable. A sticky error (an
/// illegal address, an ECC error, a lost device, a launch failure) corrupts
/// the CUDA context for good: the device leaves the rotation. Running out of
/// device memory or launch resources does not: the caller frees what the
/// device holds and tries again. Anything not known to be recoverable is
/// taken as sticky.
pub fn is_recoverable(e: &BackendError) -> bool {
    match e {
        BackendError::DeviceMemory { .. } => true,
        BackendError::Device { reason, .. } => RECOVERABLE_DRIVER_ERRORS
            .iter()
            .any(|code| reason.contains(code)),
        _ => false,
    }
}

/// CUDA driver results after which the context stays usable.
const RECOVERABLE_DRIVER_ERRORS: [&str; 3] = [
    "CUDA_ERROR_OUT_OF_MEMORY",
    "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
    "CUDA_ERROR_NOT_READY",
];
