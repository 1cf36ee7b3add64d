//! Single field and curve operations on the device (kernels/ec/ops.cu),
//! so tests can hold each one against blstrs, edge cases included. Not
//! used by the prover.

use super::check::{self, check};
use super::kernels;
use super::kernels::KernelUnit;
use super::memory::{upload_ordered, DeviceBuffer};
use super::msm::{affine_bytes, xyzz_to_projective, DeviceGroup, G2};
use super::CudaBackend;
use crate::backend::BackendError;
use blstrs::{Fp, Fp2, G1Affine, G1Projective, G2Affine, G2Projective};
use cudarc::driver::{result, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;

fn fp_words(x: &Fp) -> [u32; 12] {
    let p = G1Affine::from_raw_unchecked(*x, *x, false);
    let mut w = [0u32; 12];
    for (i, c) in affine_bytes(std::slice::from_ref(&p))[..48]
        .chunks(4)
        .enumerate()
    {
        w[i] = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
    w
}

fn fp_of_words(w: &[u32]) -> Fp {
    let mut l = [0u64; 6];
    for (k, limb) in l.iter_mut().enumerate() {
        *limb = u64::from(w[2 * k]) | (u64::from(w[2 * k + 1]) << 32);
    }
    Fp::from_raw_unchecked(l)
}

impl CudaBackend {
    fn run_test_kernel(
        &self,
        unit: &KernelUnit,
        name: &str,
        inputs: [&[u8]; 2],
        out_bytes: usize,
        n: u32,
    ) -> Result<Vec<u32>, BackendError> {
        let dev = self.device_ordinal();
        let ctx = self.context();
        let target = kernels::Target {
            arch: self.arch().to_string(),
            driver: super::driver_version(),
        };
        let image = kernels::compile_cached(unit, &target)
            .map_err(|e| check::device_error(dev, "nvrtcCompileProgram", file!(), line!(), &e))?;
        let module = check!(
            dev,
            "cuModuleLoadData",
            ctx.load_module(Ptx::from_binary(image.cubin.as_ref().clone()))
        )?;
        let func = check!(dev, "cuModuleGetFunction", module.load_function(name))?;
        let a = DeviceBuffer::alloc(ctx, dev, inputs[0].len().max(16))?;
        let b = DeviceBuffer::alloc(ctx, dev, inputs[1].len().max(16))?;
        let out = DeviceBuffer::alloc(ctx, dev, out_bytes.max(16))?;
        let stream = check!(dev, "cuStreamCreate", ctx.new_stream())?;
        for (buf, host) in [(&a, inputs[0]), (&b, inputs[1])] {
            // The buffer holds the input's bytes; the kernel reads it on `stream`.
            upload_ordered(dev, &stream, buf.ptr(), host)?;
        }
        let (pa, pb, po) = (a.ptr(), b.ptr(), out.ptr());
        let mut launch = stream.launch_builder(&func);
        launch.arg(&pa).arg(&pb).arg(&po).arg(&n);
        // SAFETY: (const T*, const T*, U*, u32) as the test kernels take.
        check!(dev, "cuLaunchKernel", unsafe {
            launch.launch(LaunchConfig {
                // The curve code needs ~160 registers a thread: 128 threads fit a block.
                grid_dim: (n.div_ceil(128).max(1), 1, 1),
                block_dim: (128, 1, 1),
                shared_mem_bytes: 0,
            })
        })?;
        check!(dev, "cuStreamSynchronize", stream.synchronize())?;
        let mut words = vec![0u32; out_bytes / 4];
        // SAFETY: `out` holds out_bytes; the stream is idle.
        check!(dev, "cuMemcpyDtoH", unsafe {
            result::memcpy_dtoh_sync(&mut words[..], po)
        })?;
        Ok(words)
    }

    /// For each pair: (a·b, a + b, a − b, −a) computed on the device.
    pub fn fp_ops_on_device(&self, a: &[Fp], b: &[Fp]) -> Result<Vec<[Fp; 4]>, BackendError> {
        let n = a.len().min(b.len());
        let flat = |v: &[Fp]| -> Vec<u8> {
            v[..n]
                .iter()
                .flat_map(|x| fp_words(x).into_iter().flat_map(u32::to_le_bytes))
                .collect()
        };
        let words = self.run_test_kernel(
            &kernels::OPS_G1,
            "fp_ops_test",
            [&flat(a), &flat(b)],
            n * 4 * 48,
            n as u32,
        )?;
        Ok(words
            .chunks(48)
            .map(|c| {
                [
                    fp_of_words(&c[0..12]),
                    fp_of_words(&c[12..24]),
                    fp_of_words(&c[24..36]),
                    fp_of_words(&c[36..48]),
                ]
            })
            .collect())
    }

    /// For each pair: (p + q mixed, 2p + (p + q) full, 2p, (p + q) − q)
    /// computed on the device.
    pub fn g1_ops_on_device(
        &self,
        p: &[G1Affine],
        q: &[G1Affine],
    ) -> Result<Vec<[G1Projective; 4]>, BackendError> {
        let n = p.len().min(q.len());
        let words = self.run_test_kernel(
            &kernels::OPS_G1,
            "g1_ops_test",
            [affine_bytes(&p[..n]), affine_bytes(&q[..n])],
            n * 4 * 192,
            n as u32,
        )?;
        Ok(words
            .chunks(4 * 48)
            .map(|c| {
                let pt = |k: usize| {
                    let mut w = [0u32; 48];
                    w.copy_from_slice(&c[48 * k..48 * k + 48]);
                    xyzz_to_projective(&w)
                };
                [pt(0), pt(1), pt(2), pt(3)]
            })
            .collect())
    }

    /// For each pair: (a·b, a + b, a − b, −a) in Fp2 computed on the device.
    pub fn fp2_ops_on_device(&self, a: &[Fp2], b: &[Fp2]) -> Result<Vec<[Fp2; 4]>, BackendError> {
        let n = a.len().min(b.len());
        let flat = |v: &[Fp2]| -> Vec<u8> {
            v[..n]
                .iter()
                .flat_map(|x| {
                    let mut w = fp_words(&x.c0()).to_vec();
                    w.extend(fp_words(&x.c1()));
                    w.into_iter().flat_map(u32::to_le_bytes)
                })
                .collect()
        };
        let words = self.run_test_kernel(
            &kernels::OPS_G2,
            "fp2_ops_test",
            [&flat(a), &flat(b)],
            n * 4 * 96,
            n as u32,
        )?;
        let fp2 = |w: &[u32]| Fp2::new(fp_of_words(&w[..12]), fp_of_words(&w[12..24]));
        Ok(words
            .chunks(96)
            .map(|c| {
                [
                    fp2(&c[0..24]),
                    fp2(&c[24..48]),
                    fp2(&c[48..72]),
                    fp2(&c[72..96]),
                ]
            })
            .collect())
    }

    /// As [`Self::g1_ops_on_device`], in G2.
    pub fn g2_ops_on_device(
        &self,
        p: &[G2Affine],
        q: &[G2Affine],
    ) -> Result<Vec<[G2Projective; 4]>, BackendError> {
        let n = p.len().min(q.len());
        let words = self.run_test_kernel(
            &kernels::OPS_G2,
            "g2_ops_test",
            [G2::affine_bytes(&p[..n]), G2::affine_bytes(&q[..n])],
            n * 4 * G2::XYZZ_BYTES,
            n as u32,
        )?;
        Ok(words
            .chunks(4 * 96)
            .map(|c| {
                let pt = |k: usize| G2::from_xyzz(&c[96 * k..96 * k + 96]);
                [pt(0), pt(1), pt(2), pt(3)]
            })
            .collect())
    }
}
