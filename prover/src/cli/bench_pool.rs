//! `prover bench-pool`: its arguments, converted into [`PoolBenchConfig`].

use prover::pool::DEFAULT_SLAB_BYTES;
use prover::pool_bench::PoolBenchConfig;

#[derive(Debug, clap::Args)]
pub struct PoolBenchArgs {
    /// Pool sizes to measure, in GiB.
    #[arg(long, value_delimiter = ',', default_value = "32")]
    pub gib: Vec<u64>,
    /// Slab size in MiB.
    #[arg(long, default_value_t = DEFAULT_SLAB_BYTES >> 20)]
    pub slab_mib: u64,
    /// Skip the single `cuMemHostAlloc` comparison (it is the slow part).
    #[arg(long)]
    pub no_baseline: bool,
}

impl From<&PoolBenchArgs> for PoolBenchConfig {
    fn from(a: &PoolBenchArgs) -> Self {
        PoolBenchConfig {
            gib: a.gib.clone(),
            // Saturating: an absurd --slab-mib is refused by the pool's own limits
            // rather than wrapping into a small slab.
            slab_bytes: a.slab_mib.saturating_mul(1 << 20),
            baseline: !a.no_baseline,
        }
    }
}
