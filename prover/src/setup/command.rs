//! `prover setup` as the library runs it: generate TEST-ONLY parameters into
//! the parameter directory (or time the generator), printing what it did.
//! Kept apart from the generator because it uses the store, which in turn
//! uses the generator.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;

use crate::backend::cuda::fixed_base::CudaFixedBase;
use crate::backend::BackendKind;
use crate::circuit::CircuitKind;
use crate::params::store::ParamStore;
use crate::params::{file_bytes_bound, generation_bytes};
use crate::setup::fixed_base::{CpuFixedBase, FixedBaseEngine};
use crate::setup::{bench, TEST_ONLY_WARNING};
use crate::sys::{disk, meminfo};

/// What `prover setup` is asked to do (the binary's `cli::setup` parses it).
#[derive(Debug, Clone)]
pub struct SetupOptions {
    pub circuit: CircuitKind,
    /// Circuit size in constraints; required unless `bench`.
    pub size: Option<usize>,
    pub params_dir: PathBuf,
    /// Seed of the TEST-ONLY toxic waste.
    pub seed: u64,
    /// Regenerate even when valid parameters are already cached.
    pub force: bool,
    /// Time this generator against bellperson's at `bench_sizes` instead.
    pub bench: bool,
    pub bench_sizes: Vec<usize>,
    /// Where the fixed-base multiplications run (`--backend`); with
    /// `bench`, CUDA adds a column next to the CPU's.
    pub backend: BackendKind,
}

/// The engine `backend` names: CUDA on device 0, an error (never a panic)
/// on a host without a usable GPU; or the CPU.
pub fn engine(backend: BackendKind) -> anyhow::Result<Box<dyn FixedBaseEngine>> {
    match backend {
        BackendKind::Cpu => Ok(Box::new(CpuFixedBase)),
        BackendKind::Cuda => Ok(Box::new(
            CudaFixedBase::open(0).context("--backend cuda needs a usable GPU")?,
        )),
    }
}

/// Runs `prover setup`.
pub fn run(args: SetupOptions) -> anyhow::Result<()> {
    if args.bench {
        let engine = engine(args.backend)?;
        let device = (args.backend == BackendKind::Cuda).then_some(&*engine);
        let rows = bench::bench_setup(args.circuit, &args.bench_sizes, args.seed, device)
            .context("benchmarking parameter generation")?;
        println!("{}", bench::render_table(&rows));
        return Ok(());
    }
    let size = args.size.context("--size is required")?;
    let kind = args.circuit;
    let new_dir = !args.params_dir.exists();
    let store = ParamStore::open(&args.params_dir)
        .with_context(|| format!("opening parameter cache {}", args.params_dir.display()))?;
    if !args.force {
        if let Ok(meta) = store.verify(kind, size) {
            println!(
                "parameters for `{kind}` size {size} already cached in {} (sha256 {}); --force regenerates",
                store.params_path(kind, size).display(),
                meta.sha256
            );
            return Ok(());
        }
    }
    if let Err(e) = preflight(&store, kind, size, &args.params_dir) {
        // A refused run leaves nothing behind (remove_dir removes only an
        // empty folder).
        if new_dir {
            let _ = std::fs::remove_dir(&args.params_dir);
        }
        return Err(e);
    }
    let engine = engine(args.backend)?;
    let started = Instant::now();
    // Refuses to replace a file the store did not generate (an imported or
    // sidecar-less one), even with --force.
    let (meta, _) = store
        .generate_test_on(kind, size, args.seed, &*engine)
        .with_context(|| format!("generating parameters for `{kind}` size {size}"))?;
    let generated = started.elapsed();
    println!(
        "wrote {} ({} bytes, domain 2^{}, sha256 {}) in {:.2}s on {}\n{TEST_ONLY_WARNING}",
        store.params_path(kind, size).display(),
        meta.layout.file_len,
        meta.shape.log2_domain(),
        meta.sha256,
        generated.as_secs_f64(),
        engine.name(),
    );
    Ok(())
}

/// Refuses, before minutes of work, a generation this host cannot finish:
/// the set and its working vectors must fit in the memory available now
/// (the kernel's `MemAvailable`), and the largest file the circuit can have
/// in the free space of the parameter directory's file system. Without
/// this a careless `--size 2^27` ends in the OOM killer or a full disk.
fn preflight(store: &ParamStore, kind: CircuitKind, size: usize, dir: &Path) -> anyhow::Result<()> {
    let shape = store.shape(kind, size)?;
    let available = std::fs::read_to_string(meminfo::MEMINFO)
        .ok()
        .and_then(|text| meminfo::field(&text, "MemAvailable"));
    if available.is_none() {
        tracing::warn!(
            "{}: no MemAvailable; generating without a memory check",
            meminfo::MEMINFO
        );
    }
    let free = disk::available_bytes(dir)
        .with_context(|| format!("reading the free space of {}", dir.display()))?;
    let room = Room {
        memory: generation_bytes(&shape),
        available,
        file: file_bytes_bound(&shape),
        free,
    };
    room.check(kind, size, dir)
}

/// What a generation needs and what the host has.
#[derive(Debug, Clone, Copy)]
struct Room {
    memory: u64,
    /// `None` where the host does not say.
    available: Option<u64>,
    file: u64,
    free: u64,
}

impl Room {
    fn check(&self, kind: CircuitKind, size: usize, dir: &Path) -> anyhow::Result<()> {
        let size_of = |b: u64| match b >> 30 {
            0 => format!("{:.1} MiB", b as f64 / f64::from(1u32 << 20)),
            _ => format!("{:.1} GiB", b as f64 / f64::from(1u32 << 30)),
        };
        if let Some(available) = self.available.filter(|a| self.memory > *a) {
            anyhow::bail!(
                "generating `{kind}` size {size} holds up to {} in memory; this host has {} available (MemAvailable)",
                size_of(self.memory),
                size_of(available)
            );
        }
        if self.file > self.free {
            anyhow::bail!(
                "the parameters for `{kind}` size {size} take up to {} on disk; {} has {} free",
                size_of(self.file),
                dir.display(),
                size_of(self.free)
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generation_must_fit_memory_and_disk_and_the_error_says_which() {
        let dir = Path::new("params");
        let fits = Room {
            memory: 10 << 30,
            available: Some(20 << 30),
            file: 5 << 30,
            free: 5 << 30,
        };
        fits.check(CircuitKind::Chain, 1 << 26, dir).unwrap();
        // A host that does not report its memory is not refused for it.
        let unknown = Room {
            available: None,
            ..fits
        };
        unknown.check(CircuitKind::Chain, 1 << 26, dir).unwrap();
        let memory = Room {
            available: Some(9 << 30),
            ..fits
        };
        let err = memory.check(CircuitKind::Chain, 1 << 26, dir).unwrap_err();
        assert_eq!(
            err.to_string(),
            "generating `chain` size 67108864 holds up to 10.0 GiB in memory; this host has 9.0 GiB available (MemAvailable)"
        );
        let disk = Room {
            free: 512 << 20,
            ..fits
        };
        let err = disk.check(CircuitKind::Sha256, 1 << 20, dir).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the parameters for `sha256` size 1048576 take up to 5.0 GiB on disk; params has 512.0 MiB free"
        );
    }
}
