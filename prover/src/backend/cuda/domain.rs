//! Per-domain-size constant tables, built on the host from the same
//! constants as bellperson's `EvaluationDomain` and uploaded once per size.
//!
//! Any power base^e with e < n is read as `lo[e mod 2^bits] * hi[e >> bits]`
//! from two tables of about sqrt(n) entries each, so a kernel gets an
//! arbitrary twiddle (or coset power) with one multiplication and two cached
//! loads instead of a table of n elements.

use super::check::check;
use super::memory::DeviceBuffer;
use crate::backend::cpu::fft::Domain;
use crate::backend::BackendError;
use blstrs::Scalar;
use cudarc::driver::{result, sys, CudaContext};
use ff::Field;
use std::sync::Arc;

/// log2 of the largest radix one NTT pass combines (`NTT_MAX_LG_RADIX` in ntt.cu).
pub const MAX_LG_RADIX: u32 = 8;

/// A split power table: base^e = lo[e & mask] * hi[e >> bits].
#[derive(Debug, Clone, Copy)]
pub struct PowTable {
    pub lo: sys::CUdeviceptr,
    pub hi: sys::CUdeviceptr,
    pub bits: u32,
}

/// Device pointers of one direction of the transform.
#[derive(Debug, Clone, Copy)]
pub struct Roots {
    /// Powers of the transform root (omega, or omega^-1).
    pub pow: PowTable,
    /// The first 2^(MAX_LG_RADIX-1) powers of the 2^MAX_LG_RADIX-th root derived from it.
    pub radix: sys::CUdeviceptr,
}

/// Everything the quotient's kernels need for one domain size.
#[derive(Debug)]
pub struct DomainTables {
    pub log_n: u32,
    pub forward: Roots,
    pub inverse: Roots,
    /// g^k / n: the iNTT's 1/n fused with the coset shift of the next coset NTT.
    pub to_coset: PowTable,
    /// g^-k / n: the coset iNTT's 1/n and un-shift.
    pub from_coset: PowTable,
    /// 1 / (g^n - 1), a single element.
    pub z_inv: sys::CUdeviceptr,
    /// 1 / n, a single element.
    pub n_inv: sys::CUdeviceptr,
    _buf: DeviceBuffer,
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
    /// Builds and uploads the tables of the domain of 2^log_n elements
    /// (log_n >= MAX_LG_RADIX).
    pub fn new(ctx: &Arc<CudaContext>, device: u32, log_n: u32) -> Result<Self, BackendError> {
        let d = Domain::new(1usize << log_n)?;
        let radix_step = 1u64 << (log_n - MAX_LG_RADIX);
        let half_radix = 1usize << (MAX_LG_RADIX - 1);

        // Host-side layout: append each table, remember its element offset.
        let mut host: Vec<Scalar> = Vec::new();
        let mut push = |v: Vec<Scalar>| {
            let off = host.len();
            host.extend(v);
            off
        };
        let (f_lo, f_hi, bits) = split_table(Scalar::ONE, d.omega, log_n);
        let (i_lo, i_hi, _) = split_table(Scalar::ONE, d.omega_inv, log_n);
        let (c_lo, c_hi, _) = split_table(d.minv, d.g, log_n);
        let (u_lo, u_hi, _) = split_table(d.minv, d.g_inv, log_n);
        let offs = [
            push(f_lo),
            push(f_hi),
            push(powers(
                Scalar::ONE,
                d.omega.pow_vartime([radix_step]),
                half_radix,
            )),
            push(i_lo),
            push(i_hi),
            push(powers(
                Scalar::ONE,
                d.omega_inv.pow_vartime([radix_step]),
                half_radix,
            )),
            push(c_lo),
            push(c_hi),
            push(u_lo),
            push(u_hi),
            push(vec![d.z_inv_on_coset]),
            push(vec![d.minv]),
        ];
        let elem = std::mem::size_of::<Scalar>();
        let buf = DeviceBuffer::alloc(ctx, device, host.len() * elem)?;
        // SAFETY: Scalar is 32 plain bytes (blst_fr); the buffer holds
        // exactly host.len() of them; the copy is synchronous.
        check!(device, "cuMemcpyHtoD", unsafe {
            result::memcpy_htod_sync(buf.ptr(), scalar_bytes(&host))
        })?;
        let at = |i: usize| buf.ptr() + (offs[i] * elem) as u64;
        let table = |lo: usize, hi: usize| PowTable {
            lo: at(lo),
            hi: at(hi),
            bits,
        };
        Ok(Self {
            log_n,
            forward: Roots {
                pow: table(0, 1),
                radix: at(2),
            },
            inverse: Roots {
                pow: table(3, 4),
                radix: at(5),
            },
            to_coset: table(6, 7),
            from_coset: table(8, 9),
            z_inv: at(10),
            n_inv: at(11),
            _buf: buf,
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
