//! Launching the NTT passes of kernels/ntt/ntt.cu: how a transform of 2^log_n
//! points splits into passes, and the launch of one whole transform.

use super::check::check;
use super::domain::{DomainTables, MAX_LG_RADIX};
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

////// What the last pass does to each output element.
#[derive(Debug, Clone, Copy)]
pub enum Post {
    None,
    /// Multiply by one constant (the 1/n of a plain inverse transform).
    Const(sys::CUdeviceptr),
    /// Multiply by a full table indexed by the output position.
    Table(sys::CUdeviceptr),
    /// Write a·value·k into `a`'s buffer (the quotient's product over
    /// Z(g), fused into b's coset NTT); `k` is one element.
    MulScaleInto {
        a: sys::CUdeviceptr,
        k: sys::CUdeviceptr,
    },
    /// value·table[i] − sub[i] (the coset iNTT's un-shift, then c's
    /// coefficients over Z(g) taken off).
    TableSub {
        table: sys::CUdeviceptr,
        sub: sys::CUdeviceptr,
    },
}

/// Direction of a transform.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Forward,
    Inverse,
}

/// Runs a whole transform of `src` (2^log_n elements), ping-ponging
/// through `scratch`; returns the buffer that holds the result (`src`,
/// `scratch`, or `a` for [`Post::MulScaleInto`]).
#[allow(clippy::too_many_arguments)]
pub fn transform(
    device: u32,
    stream: &CudaStream,
    pass: &CudaFunction,
    tables: &DomainTables,
    src: sys::CUdeviceptr,
    scratch: sys::CUdeviceptr,
    dir: Direction,
    post: Post,
) -> Result<sys::CUdeviceptr, BackendError> {
    let log_n = tables.log_n;
    let degs = plan(log_n);
    let (mut x, mut y) = (src, scratch);
    let mut lg_p = 0u32;
    let cfg = LaunchConfig {
        grid_dim: ((1u32 << log_n) / BLOCK_ELEMS, 1, 1),
        block_dim: (BLOCK_ELEMS / 2, 1, 1),
        shared_mem_bytes: 0,
    };
    let (inverse, radix) = match dir {
        Direction::Forward => (0u32, tables.radix_fwd),
        Direction::Inverse => (1u32, tables.radix_inv),
    };
    for (i, &deg) in degs.iter().enumerate() {
        let last = i + 1 == degs.len();
        let (mode, table, fa, fb): (u32, u64, u64, u64) = match (last, post) {
            (true, Post::Const(c)) => (1, c, 0, 0),
            (true, Post::Table(t)) => (2, t, 0, 0),
            (true, Post::MulScaleInto { a, k }) => {
                y = a;
                (3, k, a, 0)
            }
            (true, Post::TableSub { table, sub }) => (4, table, 0, sub),
            _ => (0, 0, 0, 0),
        };
        let mut launch = stream.launch_builder(pass);
        launch
            .arg(&x)
            .arg(&y)
            .arg(&log_n)
            .arg(&lg_p)
            .arg(&deg)
            .arg(&tables.tw)
            .arg(&inverse)
            .arg(&radix)
            .arg(&mode)
            .arg(&table)
            .arg(&fa)
            .arg(&fb);
        // SAFETY: argument types match `ntt_pass`'s signature (pointers as
        // u64, u32 scalars); x and y hold 2^log_n elements each and differ.
        check!(device, "cuLaunchKernel(ntt_pass)", unsafe {
            launch.launch(cfg)
        })?;
        lg_p += deg;
        std::mem::swap(&mut x, &mut y);
    }
    Ok(x)
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
