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
//! counted for either prover. The two proofs must be byte-identical.

use crate::backend::cpu::CpuBackend;
use crate::backend::cuda::{CudaBackend, CudaHostAllocator};
use crate::backend::{Backend, BackendError, BackendTimes};
use crate::budget::MemoryBudget;
use crate::circuit::{self, CircuitError, CircuitKind};
use crate::params::{ParamStore, ParamsError, TestParams, DEFAULT_SEED};
use crate::pool::{PinnedPool, PoolLimits};
use crate::prove::{self, partition_randomness, ProveError};
use crate::synthesis;
use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};
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
    /// Generate TEST-ONLY parameters for sizes `params_dir` lacks.
    pub test_params: bool,
}

/// Why the benchmark stopped.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("bench: the CUDA backend")]
    Cuda(#[source] BackendError),
    #[error("bench: the pinned pool for the CUDA backend")]
    CudaPool(#[source] BackendError),
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
    pub ours_ms: f64,
    /// Of `ours_ms`: after synthesis (NTT phase, MSMs, assembly).
    pub ours_prove_ms: f64,
    /// The CUDA backend, synthesis included, and after synthesis.
    pub cuda_ms: Option<f64>,
    pub cuda_prove_ms: Option<f64>,
    /// Whether the CUDA proof had the CPU backend's bytes.
    pub cuda_identical: Option<bool>,
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

/// Synthesises and proves on `backend`, marking when synthesis ended.
fn our_proof(
    backend: &dyn Backend,
    key: &dyn prove::ProvingKey,
    circuit: impl bellperson::Circuit<blstrs::Scalar>,
    pool: &PinnedPool,
    (r, s): (blstrs::Scalar, blstrs::Scalar),
    synthesised: &mut Option<Instant>,
) -> Result<bellperson::groth16::Proof<blstrs::Bls12>, ProveError> {
    let shape = prove::shape_of_key(key);
    let syn = synthesis::synthesize(circuit, &shape, pool)?;
    *synthesised = Some(Instant::now());
    prove::prove_synthesized(backend, key, syn, r, s, &mut BackendTimes::default())
}

/// The CUDA backend on device 0 and a pinned pool on it.
fn open_cuda() -> Result<(CudaBackend, PinnedPool), BenchError> {
    let backend = CudaBackend::new(0).map_err(BenchError::Cuda)?;
    let alloc = CudaHostAllocator::new(0).map_err(BenchError::CudaPool)?;
    let pool = PinnedPool::new(
        Arc::new(alloc),
        MemoryBudget::new(u64::MAX),
        PoolLimits::default(),
    );
    Ok((backend, pool))
}

/// Runs the benchmark, logging each row as it finishes.
pub fn run(cfg: &BenchConfig) -> Result<Vec<BenchRow>, BenchError> {
    let threads = rayon::current_num_threads();
    let backend = CpuBackend::new();
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
            let store = ParamStore::open(&cfg.params_dir)
                .map_err(ctx_params)?
                .with_test_params(test_params);
            tracing::info!("bench {kind} 2^{log_size}: loading parameters");
            let params = store.get_or_generate(kind, size).map_err(ctx_params)?;
            let domain = params.h.len() + 1;
            let (r, s) = partition_randomness(1, 0);
            let witness = || {
                circuit::bundled(kind, size, 1).map_err(|source| BenchError::Circuit {
                    circuit: kind,
                    log_size,
                    source,
                })
            };

            let prove_err = |source| BenchError::Prove {
                circuit: kind,
                log_size,
                source,
            };
            let mut ours: Option<(Measured, Vec<u8>)> = None;
            let heap = synthesis::heap_pool(u64::MAX);
            for _ in 0..cfg.repeat.max(1) {
                let (c, _) = witness()?;
                let (proof, m) = measure_split(|mark| {
                    our_proof(&backend, params.as_ref(), c, &heap, (r, s), mark)
                });
                let proof = proof.map_err(prove_err)?;
                if ours.as_ref().is_none_or(|(best, _)| m.ms < best.ms) {
                    ours = Some((m, proof_bytes(&proof)));
                }
            }
            let Some((ours_m, our_bytes)) = ours else {
                continue;
            };

            let mut on_gpu: Option<(Measured, Vec<u8>)> = None;
            if let Some((gpu, pinned)) = &cuda {
                // The bases stay resident under this name for the process's
                // life, as a daemon keeps them under the file's checksum.
                let set = format!("bench:{kind}:{log_size}:{DEFAULT_SEED}");
                let key = prove::IdentifiedKey {
                    key: params.as_ref(),
                    sha256: &set,
                };
                for run in 0..=cfg.repeat.max(1) {
                    let (c, _) = witness()?;
                    let (proof, m) =
                        measure_split(|mark| our_proof(gpu, &key, c, pinned, (r, s), mark));
                    let proof = proof.map_err(prove_err)?;
                    // Run 0 warms up: kernels compiled, bases uploaded.
                    if run > 0 && on_gpu.as_ref().is_none_or(|(best, _)| m.ms < best.ms) {
                        on_gpu = Some((m, proof_bytes(&proof)));
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
            let row = BenchRow {
                circuit: kind.to_string(),
                log_size,
                domain,
                ours_ms: ours_m.ms,
                ours_prove_ms: ours_m.prove_ms,
                cuda_ms: on_gpu.as_ref().map(|g| g.0.ms),
                cuda_prove_ms: on_gpu.as_ref().map(|g| g.0.prove_ms),
                cuda_identical: on_gpu.as_ref().map(|g| g.1 == our_bytes),
                ours_cpu_s: ours_m.cpu_s,
                ours_peak_bytes: ours_m.peak,
                bellperson_ms: theirs.as_ref().map(|t| t.0.ms),
                bellperson_cpu_s: theirs.as_ref().and_then(|t| t.0.cpu_s),
                bellperson_peak_bytes: theirs.as_ref().and_then(|t| t.0.peak),
                speedup: theirs.as_ref().map(|t| t.0.ms / ours_m.ms),
                identical: theirs.as_ref().map(|t| t.1 == our_bytes),
                threads,
            };
            tracing::info!(
                "bench {kind} 2^{log_size}: ours {:.0} ms, cuda {:?} ms, bellperson {:?} ms, identical {:?}",
                row.ours_ms,
                row.cuda_ms.map(|v| v.round()),
                row.bellperson_ms.map(|v| v.round()),
                row.identical
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
        "cuda identical",
        "bellperson ms",
        "speedup",
        "ours cpu s",
        "bellperson cpu s",
        "ours peak MiB",
        "bellperson peak MiB",
        "identical",
    ]);
    for r in rows {
        let right = |s: String| Cell::new(s).set_alignment(CellAlignment::Right);
        t.add_row(vec![
            Cell::new(&r.circuit),
            right(format!("2^{}", r.log_size)),
            right(r.domain.to_string()),
            right(format!("{:.0}", r.ours_ms)),
            right(format!("{:.0}", r.ours_prove_ms)),
            right(opt_ms(r.cuda_ms)),
            right(opt_ms(r.cuda_prove_ms)),
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
