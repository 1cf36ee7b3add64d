//! `prover setup` as the library runs it: generate TEST-ONLY parameters into
//! the parameter directory (or time the generator), printing what it did.
//! Kept apart from the generator because it uses the store, which in turn
//! uses the generator.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;

use crate::backend::cuda::fixed_base::CudaFixedBase;
use crate::backend::BackendKind;
use crate::circuit::CircuitKind;
use crate::params::store::ParamStore;
use crate::params::{generation_bytes, NewDirectory};
use crate::setup::fixed_base::{CpuFixedBase, FixedBaseEngine};
use crate::setup::{bench, preflight, TEST_ONLY_WARNING};

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
    // A refused or failed run leaves no folder it created behind.
    let new_dir = NewDirectory::if_absent(&args.params_dir);
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
    check_fits(&store, kind, size)?;
    let engine = engine(args.backend)?;
    let started = Instant::now();
    // Refuses to replace a file the store did not generate (an imported or
    // sidecar-less one), even with --force.
    let (meta, _) = store
        .generate_test_on(kind, size, args.seed, &*engine)
        .with_context(|| format!("generating parameters for `{kind}` size {size}"))?;
    new_dir.keep();
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

/// Refuses, before minutes of work, a generation this host cannot hold
/// (the memory; the store checks the disk itself, for the daemon's
/// generation too): without this a careless `--size 2^27` ends in the OOM
/// killer.
fn check_fits(store: &ParamStore, kind: CircuitKind, size: usize) -> anyhow::Result<()> {
    let memory = generation_bytes(&store.shape(kind, size)?);
    preflight::check_memory(
        &format!("`{kind}` size {size}"),
        memory,
        preflight::mem_available(),
    )?;
    Ok(())
}
