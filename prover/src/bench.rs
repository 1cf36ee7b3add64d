//! prover bench: our prover against bellperson on the same circuit and parameters.
//!
//! For each circuit and size: the same witness, the same parameters and the
//! same (r, s) go through our prover on the CPU backend (and, with `cuda`,
//! on the CUDA backend, synthesising into a pinned pool as the daemon does)
//! and through `bellperson::groth16::create_proof`. Totals include
//! synthesis; "prove" times are what follows synthesis (NTT phase, MSMs,
//! assembly). The CUDA backend runs once before it is timed, so the kernels
//! are compiled and the bases resident, as in a running daemon. Wall
//! times are the fastest of `repeat` runs; memory is the peak resident set
//! above the resident set at the start of the run (`VmHWM` after resetting it
//! through `/proc/self/clear_refs`), so the parameters, loaded before, are not
//! counted for either prover. The two proofs must be byte-identical, and
//! every proof of ours is also checked by bellperson's verifier.
//!
//! At the sizes users prove (2^26 and up) the CPU backend takes minutes a
//! proof: `cpu: false` leaves it out, and the CUDA proofs are then judged
//! by the verifier (and against bellperson's bytes where it runs). With
//! `cuda`, missing TEST-ONLY parameters are generated on the GPU.

use crate::backend::cpu::CpuBackend;
use crate::backend::cuda::fixed_base::CudaFixedBase;
use crate::backend::cuda::{CudaBackend, CudaHostAllocator};
use crate::backend::{Backend, BackendError, BackendTimes};
use crate::budget::MemoryBudget;
use crate::circuit::{self, CircuitError, CircuitKind, SplitWitness};
use crate::compiled::{self, CompiledR1cs};
use crate::params::{ParamStore, ParamsError, TestParams, DEFAULT_SEED};
use crate::pool::{PinnedPool, PoolLimits};
use crate::prove::{self, partition_randomness, ProveError};
use crate::setup::fixed_base::{CpuFixedBase, FixedBaseEngine};
use crate::synthesis;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};
use fleet_wire::timing::Phase;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub circuits: Vec<CircuitKind>,
    pub log_sizes: Vec<u32>,
    pub params_dir: PathBuf,
    pub repeat: u32,
    /// Also run bellperson.
    pub baseline: bool,
    /// Also run the CUDA backend on device 0.
    pub cuda: bool,
    /// Run the CPU backend (the reference for the CUDA proof's bytes).
    pub cpu: bool,
    /// Generate TEST-ONLY parameters for sizes `params_dir` lacks.
    pub test_params: bool,
    /// Generate TEST-ONLY parameters in memory for every size, never
    /// written nor read from `params_dir`.
    pub params_in_memory: bool,
    /// Also prove with synthesis from compiled constraints.
    pub compiled: bool,
}

/// Why the benchmark stopped.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("bench: the CUDA backend")]
    Cuda(#[source] BackendError),
    #[error("bench: the pinned pool for the CUDA backend")]
    CudaPool(#[source] BackendError),
    #[error("bench: the GPU parameter generator")]
    CudaSetup(#[source] BackendError),
    #[error("bench: leaving out the CPU backend needs the CUDA backend (--cuda)")]
    NothingToRun,
    #[error(
        "bench: size 2^{log_size} is out of range: the bundled circuits take 2^{} to 2^{}",
        circuit::MIN_LOG_SIZE,
        circuit::MAX_LOG_SIZE
    )]
    LogSize { log_size: u32 },
    #[error("bench {circuit} 2^{log_size}: {source}")]
    Circuit {
        circuit: CircuitKind,
        log_size: u32,
        #[source]
        source: CircuitError,
    },
    #[error("bench {circuit} 2^{log_size}: parameters: {source}")]
    Params {
        circuit: CircuitKind,
        log_size: u32,
        #[source]
        source: ParamsError,
    },
    #[error("bench {circuit} 2^{log_size}: our prover: {source}")]
    Prove {
        circuit: CircuitKind,
        log_size: u32,
        #[source]
        source: ProveError,
    },
    #[error("bench {circuit} 2^{log_size}: compiling the constraints: {source}")]
    Compile {
        circuit: CircuitKind,
        log_size: u32,
        #[source]
        source: compiled::CompileError,
    },
    #[error("bench {circuit} 2^{log_size}: bellperson: {source}")]
    Baseline {
        circuit: CircuitKind,
        log_size: u32,
        #[source]
        source: bellperson::SynthesisError,
    },
}

/// One measured circuit and size.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRow {
    pub circuit: String,
    pub log_size: u32,
    /// Evaluation domain of the parameters.
    pub domain: usize,
    /// The CPU backend (absent where it was left out).
    pub ours_ms: Option<f64>,
    /// Of `ours_ms`: after synthesis (NTT phase, MSMs, assembly).
    pub ours_prove_ms: Option<f64>,
    /// The CUDA backend, synthesis included, and after synthesis.
    pub cuda_ms: Option<f64>,
    pub cuda_prove_ms: Option<f64>,
    /// Of the CUDA proof: the device's own time for its copies and kernels
    /// (CUDA events), not host timestamps.
    pub cuda_device_ms: Option<f64>,
    /// Whether the CUDA proof had the CPU backend's bytes (bellperson's
    /// where the CPU backend was left out).
    pub cuda_identical: Option<bool>,
    /// Whether every proof of ours that ran passed bellperson's verifier.
    pub verified: bool,
    /// CPU seconds (user + system, all threads) our run consumed: robust
    /// where other processes share the cores.
    pub ours_cpu_s: Option<f64>,
    pub ours_peak_bytes: Option<u64>,
    pub bellperson_ms: Option<f64>,
    pub bellperson_cpu_s: Option<f64>,
    pub bellperson_peak_bytes: Option<u64>,
    /// bellperson time / our time (above 1: we are faster).
    pub speedup: Option<f64>,
    /// Whether both proofs had the same bytes.
    pub identical: Option<bool>,
    pub threads: usize,
    /// Synthesis the bellperson way (every linear combination built and
    /// evaluated; the same work as bellperson's `ProvingAssignment`), ms:
    /// the CPU backend's run, or the CUDA one's where the CPU was left out.
    pub synthesis_ms: f64,
    /// Recording the constraints once (not part of any proof), ms.
    pub compile_ms: Option<f64>,
    /// Synthesis from compiled constraints: the witness pass (in pieces on
    /// every core where the circuit comes in pieces) and a, b, c.
    pub witness_ms: Option<f64>,
    /// The witness pass of the whole circuit on one thread, as the checked
    /// first proofs of a shape run it.
    pub witness_whole_ms: Option<f64>,
    /// a, b, c: on the host's cores, or on the device (CUDA events, the
    /// witness upload included) where the compiled proofs ran there.
    pub abc_ms: Option<f64>,
    /// Terms of A, B, C and bytes the recording takes in memory.
    pub nnz: Option<usize>,
    pub compiled_bytes: Option<usize>,
    /// Whole proofs with compiled synthesis: CPU backend, CUDA backend.
    pub compiled_ms: Option<f64>,
    pub cuda_compiled_ms: Option<f64>,
    /// Whether every compiled-synthesis proof had the CPU backend's bytes.
    pub compiled_identical: Option<bool>,
}

/// Resets the kernel's peak-RSS mark to the current RSS; false when the
/// kernel does not offer it.
fn reset_peak() -> bool {
    // Return freed heap pages first, so memory the previous run freed but the
    // allocator kept does not hide this run's growth.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory back to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// (`VmRSS`, `VmHWM`) in bytes.
fn rss_and_peak() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// CPU seconds (user + system) this process has used so far.
fn cpu_seconds() -> Option<f64> {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return None;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(tv(ru.ru_utime) + tv(ru.ru_stime))
}

/// One measured run.
struct Measured {
    ms: f64,
    /// Of `ms`: after synthesis.
    prove_ms: f64,
    cpu_s: Option<f64>,
    peak: Option<u64>,
}

/// Runs `f`, returning its result with wall ms, CPU seconds and peak RSS
/// growth (bytes).
fn measure<R>(f: impl FnOnce() -> R) -> (R, Measured) {
    measure_split(|_| f())
}

/// [`measure`] of a run that marks, through its argument, when synthesis ended.
fn measure_split<R>(f: impl FnOnce(&mut Option<Instant>) -> R) -> (R, Measured) {
    let can_reset = reset_peak();
    let before = rss_and_peak().map(|(rss, _)| rss);
    let cpu_before = cpu_seconds();
    let t = Instant::now();
    let mut synthesised = None;
    let r = f(&mut synthesised);
    let prove_ms = synthesised.map_or(0.0, |s| s.elapsed().as_secs_f64() * 1e3);
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let cpu_s = cpu_seconds().zip(cpu_before).map(|(a, b)| a - b);
    let peak = match (can_reset, before, rss_and_peak()) {
        (true, Some(before), Some((_, hwm))) => Some(hwm.saturating_sub(before)),
        _ => None,
    };
    (
        r,
        Measured {
            ms,
            prove_ms,
            cpu_s,
            peak,
        },
    )
}

fn proof_bytes(p: &bellperson::groth16::Proof<blstrs::Bls12>) -> Vec<u8> {
    let mut v = Vec::with_capacity(192);
    // Writing to a Vec cannot fail.
    let _ = p.write(&mut v);
    v
}

/// What one of our proofs reports besides its bytes.
struct OurRun {
    proof: bellperson::groth16::Proof<blstrs::Bls12>,
    synthesis_ms: f64,
    parts: Option<synthesis::SynthesisParts>,
    device_ms: f64,
}

/// Synthesises (from `compiled` constraints where given) and proves on
/// `backend`, marking when synthesis ended.
fn our_proof(
    backend: &dyn Backend,
    key: &dyn prove::ProvingKey,
    circuit: impl SplitWitness,
    compiled: Option<&Arc<CompiledR1cs>>,
    pool: &PinnedPool,
    (r, s): (blstrs::Scalar, blstrs::Scalar),
    synthesised: &mut Option<Instant>,
) -> Result<OurRun, ProveError> {
    let shape = prove::shape_of_key(key);
    let syn = match compiled {
        // Unchecked, as a daemon runs after its first proofs of a shape;
        // the proof's bytes are compared with the CPU backend's below. A
        // backend that computes a, b, c off the host gets the witness alone.
        Some(r1cs) if backend.abc_off_host(shape.domain_size()) => {
            synthesis::synthesize_witness_split(circuit, r1cs, &shape, pool, false)?
        }
        Some(r1cs) => synthesis::synthesize_compiled_split(circuit, r1cs, &shape, pool, false)?,
        None => synthesis::synthesize(circuit, &shape, pool)?,
    };
    *synthesised = Some(Instant::now());
    let (synthesis_ms, parts) = (syn.synthesis_ms, syn.parts);
    let mut times = BackendTimes::default();
    let proof = prove::prove_synthesized(backend, key, syn, r, s, &mut times)?;
    // a, b, c computed on the device: their time is the device's (events,
    // the witness upload included), not the host's.
    let parts = parts.map(|mut p| {
        if let Some(&ms) = times.phases_ms.get(&Phase::AbcDevice) {
            p.abc_ms = ms;
        }
        p
    });
    Ok(OurRun {
        proof,
        synthesis_ms,
        parts,
        device_ms: times.device_ms,
    })
}

/// A kept run: its measurement, proof bytes, synthesis and device time.
struct Kept {
    m: Measured,
    bytes: Vec<u8>,
    synthesis_ms: f64,
    parts: Option<synthesis::SynthesisParts>,
    device_ms: f64,
}

/// The fastest of `runs`, by whole-proof wall time; and whether every
/// run's proof passed the verifier.
struct Best {
    run: Option<Kept>,
    verified: bool,
}

impl Default for Best {
    fn default() -> Self {
        Best {
            run: None,
            verified: true,
        }
    }
}

impl Best {
    fn offer(&mut self, m: Measured, run: &OurRun, verified: bool) {
        self.verified &= verified;
        if self.run.as_ref().is_none_or(|best| m.ms < best.m.ms) {
            let bytes = proof_bytes(&run.proof);
            self.run = Some(Kept {
                m,
                bytes,
                synthesis_ms: run.synthesis_ms,
                parts: run.parts,
                device_ms: run.device_ms,
            });
        }
    }

    fn ms(&self) -> Option<f64> {
        self.run.as_ref().map(|r| r.m.ms)
    }

    fn bytes(&self) -> Option<&[u8]> {
        self.run.as_ref().map(|r| r.bytes.as_slice())
    }
}

/// The CUDA backend on device 0 and a pinned pool on it.
fn open_cuda() -> Result<(CudaBackend, PinnedPool, Arc<CudaFixedBase>), BenchError> {
    let backend = CudaBackend::new(0).map_err(BenchError::Cuda)?;
    let fixed_base = CudaFixedBase::open(0).map_err(BenchError::CudaSetup)?;
    let alloc = CudaHostAllocator::new(0).map_err(BenchError::CudaPool)?;
    let pool = PinnedPool::new(
        Arc::new(alloc),
        MemoryBudget::new(u64::MAX),
        PoolLimits::default(),
    );
    Ok((backend, pool, Arc::new(fixed_base)))
}

/// TEST-ONLY parameters for `kind`/`size` made in memory (on the GPU
/// when `fixed_base` is given), logged with the time they took.
fn in_memory_params(
    kind: CircuitKind,
    size: usize,
    fixed_base: Option<&Arc<CudaFixedBase>>,
) -> Result<Arc<crate::params::Params>, ParamsError> {
    let engine: &dyn FixedBaseEngine = match fixed_base {
        Some(f) => f.as_ref(),
        None => &CpuFixedBase,
    };
    let circuit = circuit::shape_circuit(kind, size)?;
    tracing::warn!(circuit = %kind, size, engine = engine.name(), "generating parameters in memory: {}", crate::setup::TEST_ONLY_WARNING);
    let started = Instant::now();
    let params = crate::setup::generate_on(&circuit, DEFAULT_SEED, engine)
        .map_err(|source| ParamsError::Generate { kind, size, source })?;
    tracing::info!(
        circuit = %kind,
        size,
        seconds = started.elapsed().as_secs_f64(),
        "bench: TEST-ONLY parameters generated in memory"
    );
    Ok(Arc::new(params))
}

/// Runs the benchmark, logging each row as it finishes.
pub fn run(cfg: &BenchConfig) -> Result<Vec<BenchRow>, BenchError> {
    let threads = rayon::current_num_threads();
    let backend = CpuBackend::new();
    if !cfg.cpu && !cfg.cuda {
        return Err(BenchError::NothingToRun);
    }
    // Before anything starts (and before `1 << log_size`, which would wrap
    // in a release build): every size is one the bundled circuits accept.
    if let Some(&log_size) = cfg
        .log_sizes
        .iter()
        .find(|l| !(circuit::MIN_LOG_SIZE..=circuit::MAX_LOG_SIZE).contains(l))
    {
        return Err(BenchError::LogSize { log_size });
    }
    let cuda = cfg.cuda.then(open_cuda).transpose()?;
    let mut rows = Vec::new();
    for &kind in &cfg.circuits {
        for &log_size in &cfg.log_sizes {
            let size = 1usize << log_size;
            let ctx_params = |source| BenchError::Params {
                circuit: kind,
                log_size,
                source,
            };
            let test_params = if cfg.test_params {
                TestParams::Generate { seed: DEFAULT_SEED }
            } else {
                TestParams::Refuse
            };
            let params = if cfg.params_in_memory {
                in_memory_params(kind, size, cuda.as_ref().map(|(.., f)| f)).map_err(ctx_params)?
            } else {
                let mut store = ParamStore::open(&cfg.params_dir)
                    .map_err(ctx_params)?
                    .with_test_params(test_params);
                if let Some((.., fixed_base)) = &cuda {
                    store = store.with_fixed_base(fixed_base.clone());
                }
                tracing::info!("bench {kind} 2^{log_size}: loading parameters");
                store.get_or_generate(kind, size).map_err(ctx_params)?
            };
            let domain = params.h.len() + 1;
            let (r, s) = partition_randomness(1, 0);
            let pvk = bellperson::groth16::prepare_verifying_key(&params.vk);
            let witness = || {
                circuit::bundled(kind, size, 1).map_err(|source| BenchError::Circuit {
                    circuit: kind,
                    log_size,
                    source,
                })
            };
            let inputs = witness()?.1;
            let verifies = |proof: &bellperson::groth16::Proof<blstrs::Bls12>| {
                bellperson::groth16::verify_proof(&pvk, proof, &inputs).unwrap_or(false)
            };

            let prove_err = |source| BenchError::Prove {
                circuit: kind,
                log_size,
                source,
            };
            let compiled = if cfg.compiled {
                let (c, _) = witness()?;
                let t = Instant::now();
                let r1cs = compiled::compile(c).map_err(|source| BenchError::Compile {
                    circuit: kind,
                    log_size,
                    source,
                })?;
                Some((Arc::new(r1cs), t.elapsed().as_secs_f64() * 1e3))
            } else {
                None
            };
            let heap = synthesis::heap_pool(u64::MAX);
            // The whole circuit's witness pass on this thread, once: what
            // the pieces are measured against.
            let witness_whole_ms = match &compiled {
                Some((r1cs, _)) => {
                    let (c, _) = witness()?;
                    let shape = prove::shape_of_key(params.as_ref());
                    let syn = synthesis::synthesize_compiled(c, r1cs, &shape, &heap, false)
                        .map_err(|e| prove_err(ProveError::from(e)))?;
                    syn.parts.map(|p| p.witness_ms)
                }
                None => None,
            };
            let cpu_runs = |with: Option<&Arc<CompiledR1cs>>| -> Result<Best, BenchError> {
                let mut best = Best::default();
                for _ in 0..cfg.repeat.max(1) {
                    let (c, _) = witness()?;
                    let (run, m) = measure_split(|mark| {
                        our_proof(&backend, params.as_ref(), c, with, &heap, (r, s), mark)
                    });
                    let run = run.map_err(prove_err)?;
                    best.offer(m, &run, verifies(&run.proof));
                }
                Ok(best)
            };
            let ours = if cfg.cpu {
                cpu_runs(None)?
            } else {
                Best::default()
            };
            let ours_compiled = match &compiled {
                Some((r1cs, _)) if cfg.cpu => Some(cpu_runs(Some(r1cs))?),
                _ => None,
            };

            let mut on_gpu = Best::default();
            let mut on_gpu_compiled = Best::default();
            if let Some((gpu, pinned, _)) = &cuda {
                // The bases stay resident under this name for the process's
                // life, as a daemon keeps them under the file's checksum.
                let set = format!("bench:{kind}:{log_size}:{DEFAULT_SEED}");
                let key = prove::IdentifiedKey {
                    key: params.as_ref(),
                    sha256: &set,
                };
                let variants = [(None, &mut on_gpu)].into_iter().chain(
                    compiled
                        .as_ref()
                        .map(|(r1cs, _)| (Some(r1cs), &mut on_gpu_compiled)),
                );
                for (with, best) in variants {
                    for run in 0..=cfg.repeat.max(1) {
                        let (c, _) = witness()?;
                        let (proof, m) = measure_split(|mark| {
                            our_proof(gpu, &key, c, with, pinned, (r, s), mark)
                        });
                        let proof = proof.map_err(prove_err)?;
                        let verified = verifies(&proof.proof);
                        // Run 0 warms up: kernels compiled, bases uploaded.
                        if run > 0 {
                            best.offer(m, &proof, verified);
                        } else {
                            best.verified &= verified;
                        }
                    }
                }
            }

            let mut theirs: Option<(Measured, Vec<u8>)> = None;
            if cfg.baseline {
                for _ in 0..cfg.repeat.max(1) {
                    let (c, _) = witness()?;
                    let (proof, m) =
                        measure(|| bellperson::groth16::create_proof(c, params.as_ref(), r, s));
                    let proof = proof.map_err(|source| BenchError::Baseline {
                        circuit: kind,
                        log_size,
                        source,
                    })?;
                    if theirs.as_ref().is_none_or(|(best, _)| m.ms < best.ms) {
                        theirs = Some((m, proof_bytes(&proof)));
                    }
                }
            }
            // Where the CPU backend was left out the compiled proofs are
            // compared with the CUDA backend's, and that with bellperson's.
            let reference = ours.bytes().or(on_gpu.bytes());
            let best_parts = ours_compiled
                .as_ref()
                .or(Some(&on_gpu_compiled))
                .and_then(|b| b.run.as_ref())
                .and_then(|r| r.parts);
            let compiled_identical = compiled.as_ref().and_then(|_| {
                let reference = reference?;
                Some(
                    [
                        ours_compiled.as_ref().and_then(Best::bytes),
                        on_gpu_compiled.bytes(),
                    ]
                    .into_iter()
                    .flatten()
                    .all(|b| b == reference),
                )
            });
            let cuda_reference = ours.bytes().or(theirs.as_ref().map(|t| t.1.as_slice()));
            let Some(synthesis_ms) = ours
                .run
                .as_ref()
                .or(on_gpu.run.as_ref())
                .map(|r| r.synthesis_ms)
            else {
                continue;
            };
            let ours_m = ours.run.as_ref().map(|r| &r.m);
            let verified = [&ours, &on_gpu, &on_gpu_compiled]
                .into_iter()
                .chain(ours_compiled.as_ref())
                .all(|b| b.verified);
            let row = BenchRow {
                circuit: kind.to_string(),
                log_size,
                domain,
                ours_ms: ours_m.map(|m| m.ms),
                ours_prove_ms: ours_m.map(|m| m.prove_ms),
                cuda_ms: on_gpu.ms(),
                cuda_prove_ms: on_gpu.run.as_ref().map(|g| g.m.prove_ms),
                cuda_device_ms: on_gpu.run.as_ref().map(|g| g.device_ms),
                cuda_identical: on_gpu.bytes().zip(cuda_reference).map(|(a, b)| a == b),
                verified,
                ours_cpu_s: ours_m.and_then(|m| m.cpu_s),
                ours_peak_bytes: ours_m
                    .and_then(|m| m.peak)
                    .or(on_gpu.run.as_ref().and_then(|g| g.m.peak)),
                bellperson_ms: theirs.as_ref().map(|t| t.0.ms),
                bellperson_cpu_s: theirs.as_ref().and_then(|t| t.0.cpu_s),
                bellperson_peak_bytes: theirs.as_ref().and_then(|t| t.0.peak),
                speedup: theirs.as_ref().zip(ours_m).map(|(t, m)| t.0.ms / m.ms),
                identical: theirs
                    .as_ref()
                    .zip(ours.bytes())
                    .map(|(t, ours)| t.1 == ours),
                threads,
                synthesis_ms,
                compile_ms: compiled.as_ref().map(|c| c.1),
                witness_ms: best_parts.map(|p| p.witness_ms),
                witness_whole_ms,
                abc_ms: best_parts.map(|p| p.abc_ms),
                nnz: compiled.as_ref().map(|c| c.0.nnz()),
                compiled_bytes: compiled.as_ref().map(|c| c.0.bytes()),
                compiled_ms: ours_compiled.as_ref().and_then(Best::ms),
                cuda_compiled_ms: on_gpu_compiled.ms(),
                compiled_identical,
            };
            tracing::info!(
                "bench {kind} 2^{log_size}: ours {:?} ms, cuda {:?} ms, bellperson {:?} ms, identical {:?}, verified {}",
                row.ours_ms.map(|v| v.round()),
                row.cuda_ms.map(|v| v.round()),
                row.bellperson_ms.map(|v| v.round()),
                row.identical,
                row.verified
            );
            rows.push(row);
        }
    }
    Ok(rows)
}

fn secs(s: Option<f64>) -> String {
    s.map(|s| format!("{s:.1}")).unwrap_or_else(|| "-".into())
}

fn opt_ms(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.0}")).unwrap_or_else(|| "-".into())
}

fn mib(b: Option<u64>) -> String {
    b.map(|b| format!("{:.1}", b as f64 / (1 << 20) as f64))
        .unwrap_or_else(|| "-".into())
}

/// The results as a table.
pub fn render(rows: &[BenchRow]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(vec![
        "circuit",
        "size",
        "domain",
        "ours ms",
        "after synthesis",
        "cuda ms",
        "cuda after synthesis",
        "cuda device ms",
        "cuda identical",
        "bellperson ms",
        "speedup",
        "ours cpu s",
        "bellperson cpu s",
        "ours peak MiB",
        "bellperson peak MiB",
        "identical",
        "verified",
    ]);
    for r in rows {
        let right = |s: String| Cell::new(s).set_alignment(CellAlignment::Right);
        t.add_row(vec![
            Cell::new(&r.circuit),
            right(format!("2^{}", r.log_size)),
            right(r.domain.to_string()),
            right(opt_ms(r.ours_ms)),
            right(opt_ms(r.ours_prove_ms)),
            right(opt_ms(r.cuda_ms)),
            right(opt_ms(r.cuda_prove_ms)),
            right(opt_ms(r.cuda_device_ms)),
            Cell::new(
                r.cuda_identical
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "-".into()),
            ),
            right(
                r.bellperson_ms
                    .map(|v| format!("{v:.0}"))
                    .unwrap_or_else(|| "-".into()),
            ),
            right(
                r.speedup
                    .map(|v| format!("{v:.2}x"))
                    .unwrap_or_else(|| "-".into()),
            ),
            right(secs(r.ours_cpu_s)),
            right(secs(r.bellperson_cpu_s)),
            right(mib(r.ours_peak_bytes)),
            right(mib(r.bellperson_peak_bytes)),
            Cell::new(
                r.identical
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "-".into()),
            ),
            Cell::new(r.verified.to_string()),
        ]);
    }
    t
}

/// Synthesis per circuit and size: the bellperson way against compiled
/// constraints (witness pass + a, b, c), and the whole proofs with each.
pub fn render_synthesis(rows: &[BenchRow]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    t.set_header(vec![
        "circuit",
        "size",
        "synthesis ms",
        "witness ms (1 thread)",
        "witness ms",
        "a/b/c ms",
        "synthesis speedup",
        "compile ms (once)",
        "terms",
        "recording MiB",
        "proof ms (cpu)",
        "compiled proof ms (cpu)",
        "proof ms (cuda)",
        "compiled proof ms (cuda)",
        "identical",
    ]);
    for r in rows {
        let right = |s: String| Cell::new(s).set_alignment(CellAlignment::Right);
        let compiled = r.witness_ms.zip(r.abc_ms).map(|(w, a)| w + a);
        t.add_row(vec![
            Cell::new(&r.circuit),
            right(format!("2^{}", r.log_size)),
            right(format!("{:.0}", r.synthesis_ms)),
            right(opt_ms(r.witness_whole_ms)),
            right(opt_ms(r.witness_ms)),
            right(opt_ms(r.abc_ms)),
            right(
                compiled
                    .map(|c| format!("{:.2}x", r.synthesis_ms / c.max(1e-3)))
                    .unwrap_or_else(|| "-".into()),
            ),
            right(opt_ms(r.compile_ms)),
            right(r.nnz.map(|n| n.to_string()).unwrap_or_else(|| "-".into())),
            right(mib(r.compiled_bytes.map(|b| b as u64))),
            right(opt_ms(r.ours_ms)),
            right(opt_ms(r.compiled_ms)),
            right(opt_ms(r.cuda_ms)),
            right(opt_ms(r.cuda_compiled_ms)),
            Cell::new(
                r.compiled_identical
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "-".into()),
            ),
        ]);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peak_measurement_sees_an_allocation() {
        // The closure touches 64 MiB, sleeps 30 ms and spins until this
        // process has used 50 ms more CPU: lower bounds each figure must show.
        let (v, m) = measure(|| {
            let v = vec![1u8; 64 << 20];
            std::hint::black_box(&v);
            std::thread::sleep(std::time::Duration::from_millis(30));
            let start = cpu_seconds().expect("getrusage");
            let give_up = Instant::now() + std::time::Duration::from_secs(30);
            while cpu_seconds().expect("getrusage") < start + 0.05 && Instant::now() < give_up {
                std::hint::black_box(0u64.wrapping_add(1));
            }
            v.len()
        });
        assert_eq!(v, 64 << 20);
        assert!(m.ms >= 30.0, "wall {} ms", m.ms);
        let cpu = m.cpu_s.expect("CPU time measured (getrusage)");
        assert!(cpu >= 0.05, "cpu {cpu} s");
        // Linux lets a process reset its RSS high-water mark (clear_refs),
        // which the peak is measured from: it must be there and see the 64 MiB.
        let peak = m
            .peak
            .expect("peak measured (/proc/self/clear_refs, VmHWM)");
        assert!(peak >= 60 << 20, "peak {peak}");
    }
}
