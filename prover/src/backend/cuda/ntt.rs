//! Launching the NTT passes of kernels/ntt/ntt.cu: how a transform of 2^log_n
//! points splits into passes, and the launch of one whole transform.

use super::check::check;
use super::domain::{PowTable, Roots, MAX_LG_RADIX};
use crate::backend::BackendError;
use cudarc::driver::{sys, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};

/// Elements one block of `ntt_pass` holds (`NTT_BLOCK_ELEMS`).
pub const BLOCK_ELEMS: u32 = 256;

/// Radix exponents of the passes: as few passes as the radix allows, sizes
/// balanced so no pass is a nearly empty one.
pub fn plan(log_n: u32) -> Vec<u32> {
    let passes = log_n.div_ceil(MAX_LG_RADIX).max(1);
    let base = log_n / passes;
    let extra = log_n % passes;
    (0..passes).map(|i| base + u32::from(i < extra)).collect()
}

/// What the last pass multiplies each output element by.
#[derive(Debug, Clone, Copy)]
pub enum Post {
    None,
    /// One constant (the 1/n of a plain inverse transform).
    Const(sys::CUdeviceptr),
    /// A power table indexed by the output position.
    Table(PowTable),
}

/// Runs a whole transform of `src` (2^log_n elements) with root table
/// `roots`, ping-ponging through `scratch`. Returns true when the result
/// ended in `scratch` (an odd number of passes).
#[allow(clippy::too_many_arguments)]
pub fn transform(
    device: u32,
    stream: &CudaStream,
    pass: &CudaFunction,
    log_n: u32,
    src: sys::CUdeviceptr,
    scratch: sys::CUdeviceptr,
    roots: &Roots,
    post: Post,
) -> Result<bool, BackendError> {
    let degs = plan(log_n);
    let (mut x, mut y) = (src, scratch);
    let mut lg_p = 0u32;
    let cfg = LaunchConfig {
        grid_dim: ((1u32 << log_n) / BLOCK_ELEMS, 1, 1),
        block_dim: (BLOCK_ELEMS / 2, 1, 1),
        shared_mem_bytes: 0,
    };
    for (i, &deg) in degs.iter().enumerate() {
        let last = i + 1 == degs.len();
        let (mode, lo, hi, bits): (u32, u64, u64, u32) = match (last, post) {
            (true, Post::Const(c)) => (1, c, c, 0),
            (true, Post::Table(t)) => (2, t.lo, t.hi, t.bits),
            _ => (0, 0, 0, 0),
        };
        let mut launch = stream.launch_builder(pass);
        launch
            .arg(&x)
            .arg(&y)
            .arg(&log_n)
            .arg(&lg_p)
            .arg(&deg)
            .arg(&roots.pow.lo)
            .arg(&roots.pow.hi)
            .arg(&roots.pow.bits)
            .arg(&roots.radix)
            .arg(&mode)
            .arg(&lo)
            .arg(&hi)
            .arg(&bits);
        // SAFETY: argument types match `ntt_pass`'s signature (pointers as
        // u64, u32 scalars); x and y hold 2^log_n elements each.
        check!(device, "cuLaunchKernel(ntt_pass)", unsafe {
            launch.launch(cfg)
        })?;
        lg_p += deg;
        std::mem::swap(&mut x, &mut y);
    }
    Ok(degs.len() % 2 == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_cover_the_domain_with_bounded_radices() {
        for log_n in 8..=30 {
            let p = plan(log_n);
            assert_eq!(p.iter().sum::<u32>(), log_n, "log_n {log_n}: {p:?}");
            assert!(p.iter().all(|&d| (1..=MAX_LG_RADIX).contains(&d)), "{p:?}");
            assert!(p.iter().max().unwrap_or(&0) - p.iter().min().unwrap_or(&0) <= 1);
        }
        assert_eq!(plan(24), vec![8, 8, 8]);
        assert_eq!(plan(10), vec![5, 5]);
    }
}
