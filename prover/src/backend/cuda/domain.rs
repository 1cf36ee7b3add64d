//! Per-domain-size constant tables, built from the same constants as
//! bellperson's `EvaluationDomain` and kept on the device per size.
//!
//! The host computes split tables (base^e = lo[e mod 2^bits] * hi[e >> bits],
//! about sqrt(n) entries each) and the device expands them into full tables
//! of n entries: a kernel then reads any twiddle or coset power with one
//! load instead of rebuilding it with a multiplication, the NTT's
//! bottleneck. Cost: 3n elements of device memory per cached size.

use super::check::check;
use super::memory::{upload_ordered, DeviceBuffer};
use crate::backend::cpu::fft::Domain;
use crate::backend::BackendError;
use blstrs::Scalar;
use cudarc::driver::{sys, CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use ff::Field;
use std::sync::Arc;

/// log2 of the largest radix one NTT pass combines (`NTT_MAX_LG_RADIX` in ntt.cu).
pub const MAX_LG_RADIX: u32 = 8;

/// Everything the quotient's kernels need for one domain size.
#[derive(Debug)]
pub struct DomainTables {
    pub log_n: u32,
    /// omega^t for t < n (the inverse reads omega^(n - t)).
    pub tw: sys::CUdeviceptr,
    /// First 2^(MAX_LG_RADIX-1) powers of the 2^MAX_LG_RADIX-th root, forward and inverse.
    pub radix_fwd: sys::CUdeviceptr,
    pub radix_inv: sys::CUdeviceptr,
    /// g^k / n: the iNTT's 1/n fused with the coset shift of the next coset NTT.
    pub to_coset: sys::CUdeviceptr,
    /// g^-k / n: the coset iNTT's 1/n and un-shift.
    pub from_coset: sys::CUdeviceptr,
    /// 1 / (g^n - 1), a single element.
    pub z_inv: sys::CUdeviceptr,
    /// 1 / (n·(g^n - 1)), a single element: the iNTT of c scaled for the
    /// quotient's last step.
    pub c_scale: sys::CUdeviceptr,
    /// 1 / n, a single element.
    pub n_inv: sys::CUdeviceptr,
    _full: DeviceBuffer,
    _small: DeviceBuffer,
}

/// Device bytes the tables of 2^log_n take.
pub fn table_bytes(log_n: u32) -> usize {
    3 * (1usize << log_n) * std::mem::size_of::<Scalar>()
}

/// `count` successive powers of `base` times `scale`.
fn powers(scale: Scalar, base: Scalar, count: usize) -> Vec<Scalar> {
    let mut out = Vec::with_capacity(count);
    let mut acc = scale;
    for _ in 0..count {
        out.push(acc);
        acc *= base;
    }
    out
}

/// lo/hi tables of `base` for exponents below 2^log_n, lo scaled by `scale`.
fn split_table(scale: Scalar, base: Scalar, log_n: u32) -> (Vec<Scalar>, Vec<Scalar>, u32) {
    let bits = log_n.div_ceil(2);
    let lo = powers(scale, base, 1 << bits);
    let step = base.pow_vartime([1u64 << bits]);
    let hi = powers(Scalar::ONE, step, 1 << (log_n - bits));
    (lo, hi, bits)
}

impl DomainTables {
    /// Builds the tables of the domain of 2^log_n elements (log_n >=
    /// MAX_LG_RADIX), expanding them on `stream` with `expand` (the
    /// `expand_powers` kernel); synchronises before returning.
    pub fn new(
        ctx: &Arc<CudaContext>,
        device: u32,
        log_n: u32,
        stream: &CudaStream,
        expand: &CudaFunction,
    ) -> Result<Self, BackendError> {
        let d = Domain::new(1usize << log_n)?;
        let n = 1usize << log_n;
        let radix_step = 1u64 << (log_n - MAX_LG_RADIX);
        let half_radix = 1usize << (MAX_LG_RADIX - 1);

        // Host-side layout: append each table, remember its element offset.
        let mut host: Vec<Scalar> = Vec::new();
        let mut push = |v: Vec<Scalar>| {
            let off = host.len();
            host.extend(v);
            off
        };
        let (w_lo, w_hi, bits) = split_table(Scalar::ONE, d.omega, log_n);
        let (c_lo, c_hi, _) = split_table(d.minv, d.g, log_n);
        let (u_lo, u_hi, _) = split_table(d.minv, d.g_inv, log_n);
        let offs = [
            push(w_lo),
            push(w_hi),
            push(c_lo),
            push(c_hi),
            push(u_lo),
            push(u_hi),
            push(powers(
                Scalar::ONE,
                d.omega.pow_vartime([radix_step]),
                half_radix,
            )),
            push(powers(
                Scalar::ONE,
                d.omega_inv.pow_vartime([radix_step]),
                half_radix,
            )),
            push(vec![d.z_inv_on_coset]),
            push(vec![d.minv]),
            push(vec![d.minv * d.z_inv_on_coset]),
        ];
        let elem = std::mem::size_of::<Scalar>();
        let (free, _) = check!(device, "cuMemGetInfo", ctx.mem_get_info())?;
        if free < table_bytes(log_n) + host.len() * elem {
            return Err(BackendError::DeviceMemory {
                device,
                need: (table_bytes(log_n) + host.len() * elem) as u64,
                free: free as u64,
            });
        }
        let small = DeviceBuffer::alloc(ctx, device, host.len() * elem)?;
        // The expand kernels below read it on `stream`.
        upload_ordered(device, stream, small.ptr(), scalar_bytes(&host))?;
        let at = |i: usize| small.ptr() + (offs[i] * elem) as u64;
        let full = DeviceBuffer::alloc(ctx, device, table_bytes(log_n))?;
        let full_at = |i: usize| full.ptr() + (i * n * elem) as u64;
        let n32 = n as u32;
        let threads = 256u32;
        let cfg = LaunchConfig {
            grid_dim: (n32.div_ceil(threads), 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        for (i, (lo, hi)) in [(0usize, 1usize), (2, 3), (4, 5)].into_iter().enumerate() {
            let (out, lo, hi) = (full_at(i), at(lo), at(hi));
            let mut launch = stream.launch_builder(expand);
            launch.arg(&out).arg(&lo).arg(&hi).arg(&bits).arg(&n32);
            // SAFETY: matches `expand_powers(fr*, const fr*, const fr*, u32, u32)`;
            // `out` has room for n elements, lo/hi cover every index below n.
            check!(device, "cuLaunchKernel(expand_powers)", unsafe {
                launch.launch(cfg)
            })?;
        }
        check!(device, "cuStreamSynchronize", stream.synchronize())?;
        Ok(Self {
            log_n,
            tw: full_at(0),
            to_coset: full_at(1),
            from_coset: full_at(2),
            radix_fwd: at(6),
            radix_inv: at(7),
            z_inv: at(8),
            n_inv: at(9),
            c_scale: at(10),
            _full: full,
            _small: small,
        })
    }
}

/// The bytes of a slice of scalars (blst_fr: four u64 limbs, Montgomery form).
pub fn scalar_bytes(v: &[Scalar]) -> &[u8] {
    // SAFETY: Scalar is repr(transparent) over blst_fr, a plain [u64; 4];
    // any initialised Scalar is valid as bytes.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// Mutable bytes of a slice of scalars; the device only ever writes
/// canonical field elements into it.
pub fn scalar_bytes_mut(v: &mut [Scalar]) -> &mut [u8] {
    // SAFETY: as above; every value the kernels write is a reduced field
    // element, so the slice stays a slice of valid Scalars.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_tables_reproduce_every_power() {
        let log_n = 11;
        let base = Scalar::from(5u64);
        let scale = Scalar::from(3u64);
        let (lo, hi, bits) = split_table(scale, base, log_n);
        for e in [0u64, 1, 63, 64, 65, 1000, 2047] {
            let v = lo[(e & ((1 << bits) - 1)) as usize] * hi[(e >> bits) as usize];
            assert_eq!(v, scale * base.pow_vartime([e]), "exponent {e}");
        }
    }

    #[test]
    fn scalar_layout_is_four_limbs() {
        assert_eq!(std::mem::size_of::<Scalar>(), 32);
        let one = [Scalar::ONE];
        // Montgomery form of 1 is R mod r, whose low limb is 0x1_ffff_fffe.
        assert_eq!(&scalar_bytes(&one)[..8], &0x1_ffff_fffeu64.to_le_bytes());
    }
}
