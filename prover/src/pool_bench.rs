//! `prover bench-pool`: how fast the pinned pool pins and gives back N GiB,
//! and how fast a device reads from it, side by side with one
//! `cuMemHostAlloc` of the same size. Built into the release binary so it
//! runs on a GPU host that has no toolchain.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::cuda::host_alloc::{CudaHostAllocator, PinMode};
use crate::backend::cuda::{cuda_available, driver_present};
use crate::budget::MemoryBudget;
use crate::pool::{HostAllocator, MlockAllocator, PinnedPool, PoolLimits};

/// Bytes copied per host-to-device measurement.
const H2D_BYTES: usize = 1 << 30;
/// Copies averaged per measurement.
const H2D_REPS: u32 = 5;

/// What to measure (the binary's `cli::bench_pool` parses it).
#[derive(Debug, Clone)]
pub struct PoolBenchConfig {
    /// Pool sizes to measure, in GiB.
    pub gib: Vec<u64>,
    pub slab_bytes: u64,
    /// Also time one `cuMemHostAlloc` of the same size (the slow part).
    pub baseline: bool,
}

/// Why a measurement could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PoolBenchError {
    #[error("pool: {0}")]
    Pool(#[from] crate::pool::PoolError),
    #[error("device: {0}")]
    Device(#[from] crate::backend::BackendError),
}

/// One measured way of pinning.
#[derive(Debug)]
struct Row {
    how: String,
    gib: u64,
    regions: usize,
    pinned: Duration,
    freed: Duration,
    h2d_gbps: Option<f64>,
}

pub fn run(args: &PoolBenchConfig) -> Result<(), PoolBenchError> {
    let cuda = driver_present() && cuda_available();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "bench-pool: {cores} cores, CUDA {}",
        if cuda {
            "present"
        } else {
            "absent (mlock pool only)"
        }
    );
    let mut rows = Vec::new();
    for &gib in &args.gib {
        let pool_alloc: Arc<dyn HostAllocator> = if cuda {
            Arc::new(CudaHostAllocator::with_mode(0, PinMode::Register)?)
        } else {
            Arc::new(MlockAllocator)
        };
        rows.push(slab_pool(pool_alloc, gib, args.slab_bytes, cuda)?);
        print_row(rows.last());
        if cuda && args.baseline {
            rows.push(single_host_alloc(gib)?);
            print_row(rows.last());
        }
    }
    Ok(())
}

fn print_row(row: Option<&Row>) {
    if let Some(r) = row {
        let h2d = r
            .h2d_gbps
            .map_or_else(|| "-".to_string(), |g| format!("{g:.1}"));
        println!(
            "RESULT how={} gib={} regions={} pinned_s={:.2} freed_s={:.2} h2d_gbps={h2d}",
            r.how,
            r.gib,
            r.regions,
            r.pinned.as_secs_f64(),
            r.freed.as_secs_f64()
        );
    }
}

/// The pool as the daemon runs it: slabs pinned in parallel, a buffer
/// carved from one, everything released in parallel.
fn slab_pool(
    alloc: Arc<dyn HostAllocator>,
    gib: u64,
    slab: u64,
    cuda: bool,
) -> Result<Row, PoolBenchError> {
    let bytes = gib << 30;
    let how = format!("pool-{}", alloc.name());
    let pool = PinnedPool::new(
        alloc,
        MemoryBudget::new(bytes + (1 << 30)),
        PoolLimits {
            max_bytes: bytes,
            slab_bytes: slab,
            ..PoolLimits::default()
        },
    );
    let pinned = pool.preallocate(bytes)?;
    let regions = pool.stats().regions;
    let h2d_gbps = if cuda {
        let buf = pool.checkout("h2d", H2D_BYTES.min(bytes as usize))?;
        let copier = CudaHostAllocator::with_mode(0, PinMode::HostAlloc)?;
        Some(copier.h2d_gbps(&buf, H2D_REPS)?)
    } else {
        None
    };
    let t = Instant::now();
    pool.shrink_to(0);
    let freed = t.elapsed();
    Ok(Row {
        how,
        gib,
        regions,
        pinned,
        freed,
        h2d_gbps,
    })
}

/// The baseline: one `cuMemHostAlloc` of the whole size.
fn single_host_alloc(gib: u64) -> Result<Row, PoolBenchError> {
    let bytes = usize::try_from(gib << 30).unwrap_or(usize::MAX);
    let alloc = CudaHostAllocator::with_mode(0, PinMode::HostAlloc)?;
    let t = Instant::now();
    let region = alloc.alloc(bytes)?;
    let pinned = t.elapsed();
    // SAFETY: the region is ours, initialised and `len` bytes long.
    let all = unsafe { std::slice::from_raw_parts(region.as_ptr(), region.len()) };
    let h2d_gbps = Some(alloc.h2d_gbps(&all[..H2D_BYTES.min(all.len())], H2D_REPS)?);
    let t = Instant::now();
    // SAFETY: made by this allocator above; the slice is not used after.
    unsafe { alloc.free(region) };
    Ok(Row {
        how: "cuMemHostAlloc-single".into(),
        gib,
        regions: 1,
        pinned,
        freed: t.elapsed(),
        h2d_gbps,
    })
}
