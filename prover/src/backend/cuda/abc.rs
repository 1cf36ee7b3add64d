//! a, b, c from compiled constraints on the device (`kernels/r1cs/abc.cu`).
//!
//! A recording's matrices are the same for every proof of its circuit and
//! size, so they are uploaded once and kept, keyed by the recording's
//! digest (a few recordings at most, least recently used evicted). Per
//! proof only the witness crosses the bus: inputs and aux, a third of what
//! a, b, c over the domain would be, and the results are written straight
//! into the NTT workspace.

use super::check::check;
use super::domain::scalar_bytes;
use super::memory::{upload_ordered, DeviceBuffer};
use crate::backend::BackendError;
use crate::compiled::{CompiledR1cs, Matrix};
use blstrs::Scalar;
use cudarc::driver::{sys, CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};
use std::sync::Arc;

/// Recordings kept on one device: a daemon proves a handful of circuit
/// sizes; more than that would only hold device memory.
const KEPT: usize = 4;

/// Threads per block of `r1cs_abc` (one row each).
const BLOCK: u32 = 256;

/// Bytes of a slice of plain integers.
fn int_bytes<T: Copy + Into<u64>>(v: &[T]) -> &[u8] {
    // SAFETY: u32 and u64 (the only callers' types) have no padding and
    // every byte of an initialised integer is initialised.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// One matrix on the device.
#[derive(Debug)]
struct DeviceMatrix {
    row_ptr: DeviceBuffer,
    cols: DeviceBuffer,
    coeffs: DeviceBuffer,
}

/// One recording on the device.
#[derive(Debug)]
struct Entry {
    digest: [u8; 32],
    matrices: [DeviceMatrix; 3],
    table: DeviceBuffer,
    last_used: u64,
}

impl Entry {
    fn bytes(&self) -> usize {
        self.table.bytes()
            + self
                .matrices
                .iter()
                .map(|m| m.row_ptr.bytes() + m.cols.bytes() + m.coeffs.bytes())
                .sum::<usize>()
    }
}

/// The recordings resident on one device, and the witness buffer.
#[derive(Debug, Default)]
pub struct ResidentR1cs {
    entries: Vec<Entry>,
    witness: Option<DeviceBuffer>,
    /// Whose witness the buffer holds: the recording's digest and its
    /// number of inputs (where aux starts).
    uploaded: Option<([u8; 32], usize)>,
    tick: u64,
}

fn shape_error(dev: u32, what: &str) -> BackendError {
    super::check::device_error(dev, "r1cs_abc", file!(), line!(), &what.to_string())
}

/// Uploads `bytes` into a fresh buffer (at least one byte, so an empty
/// matrix still has an address), in `stream`'s order.
fn upload_new(
    ctx: &Arc<CudaContext>,
    device: u32,
    stream: &CudaStream,
    bytes: &[u8],
) -> Result<DeviceBuffer, BackendError> {
    let buf = DeviceBuffer::alloc(ctx, device, bytes.len().max(1))?;
    if !bytes.is_empty() {
        upload_ordered(device, stream, buf.ptr(), bytes)?;
    }
    Ok(buf)
}

fn upload_matrix(
    ctx: &Arc<CudaContext>,
    device: u32,
    stream: &CudaStream,
    m: &Matrix,
) -> Result<DeviceMatrix, BackendError> {
    Ok(DeviceMatrix {
        row_ptr: upload_new(ctx, device, stream, int_bytes(&m.row_ptr))?,
        cols: upload_new(ctx, device, stream, int_bytes(&m.cols))?,
        coeffs: upload_new(ctx, device, stream, int_bytes(&m.coeffs))?,
    })
}

/// Where `r1cs_abc` reads and writes for one proof.
pub struct AbcRun<'a> {
    pub device: u32,
    pub ctx: &'a Arc<CudaContext>,
    pub stream: &'a CudaStream,
    pub kernel: &'a CudaFunction,
    /// Take no multiplication for 0/1 values (see the kernel).
    pub boolean_paths: bool,
}

impl ResidentR1cs {
    /// Device bytes held by recordings.
    pub fn bytes(&self) -> usize {
        self.entries.iter().map(Entry::bytes).sum()
    }

    /// Makes `r1cs`'s matrices resident (uploaded on first use) and
    /// uploads the witness, ordered on `run.stream`; then [`Self::launch`].
    /// Returns the bytes it copied to the device.
    pub fn upload(
        &mut self,
        run: &AbcRun<'_>,
        r1cs: &CompiledR1cs,
        inputs: &[Scalar],
        aux: &[Scalar],
    ) -> Result<u64, BackendError> {
        let dev = run.device;
        if inputs.len() != r1cs.num_inputs || aux.len() != r1cs.num_aux {
            return Err(shape_error(
                dev,
                "assignments do not fit the compiled constraints",
            ));
        }
        self.tick += 1;
        let tick = self.tick;
        let resident = self.entries.iter().any(|e| e.digest == r1cs.digest);
        let entry = self.get_or_upload(run, r1cs)?;
        entry.last_used = tick;
        let matrices = if resident { 0 } else { entry.bytes() };
        // The witness: inputs, then aux, in one buffer kept between proofs.
        let in_bytes = std::mem::size_of_val(inputs);
        let need = in_bytes + std::mem::size_of_val(aux);
        if self.witness.as_ref().is_none_or(|w| w.bytes() < need) {
            self.witness = None;
            self.witness = Some(DeviceBuffer::alloc(run.ctx, dev, need.max(1))?);
        }
        let witness = self.witness_ptr(dev)?;
        upload_ordered(dev, run.stream, witness, scalar_bytes(inputs))?;
        upload_ordered(
            dev,
            run.stream,
            witness + in_bytes as u64,
            scalar_bytes(aux),
        )?;
        self.uploaded = Some((r1cs.digest, inputs.len()));
        Ok((matrices + need) as u64)
    }

    fn witness_ptr(&self, dev: u32) -> Result<sys::CUdeviceptr, BackendError> {
        self.witness
            .as_ref()
            .map(DeviceBuffer::ptr)
            .ok_or_else(|| shape_error(dev, "no witness uploaded"))
    }

    /// Enqueues a, b, c of `r1cs` over the witness [`Self::upload`] sent
    /// into `out[0..3]` (each `domain` scalars; rows past the constraints
    /// are zero).
    pub fn launch(
        &mut self,
        run: &AbcRun<'_>,
        r1cs: &CompiledR1cs,
        domain: usize,
        out: [sys::CUdeviceptr; 3],
    ) -> Result<(), BackendError> {
        let dev = run.device;
        let num_inputs = match self.uploaded {
            Some((digest, n)) if digest == r1cs.digest => n,
            _ => {
                return Err(shape_error(
                    dev,
                    "the witness uploaded is another circuit's",
                ))
            }
        };
        let rows = u32::try_from(r1cs.num_constraints)
            .ok()
            .filter(|&r| r as usize <= domain)
            .ok_or_else(|| shape_error(dev, "more constraints than the domain holds"))?;
        let domain_u32 = u32::try_from(domain)
            .map_err(|_| shape_error(dev, "domain too large for the kernel"))?;
        let entry = self
            .entries
            .iter()
            .find(|e| e.digest == r1cs.digest)
            .ok_or_else(|| shape_error(dev, "compiled constraints not resident"))?;
        let in_ptr = self.witness_ptr(dev)?;
        let aux_ptr = in_ptr + (num_inputs * std::mem::size_of::<Scalar>()) as u64;
        let table = entry.table.ptr();
        let cfg = LaunchConfig {
            grid_dim: (domain_u32.div_ceil(BLOCK), 1, 1),
            block_dim: (BLOCK, 1, 1),
            shared_mem_bytes: 0,
        };
        let boolean_paths = u32::from(run.boolean_paths);
        for (m, dst) in entry.matrices.iter().zip(out) {
            let (row_ptr, cols, coeffs) = (m.row_ptr.ptr(), m.cols.ptr(), m.coeffs.ptr());
            let mut launch = run.stream.launch_builder(run.kernel);
            launch
                .arg(&row_ptr)
                .arg(&cols)
                .arg(&coeffs)
                .arg(&table)
                .arg(&in_ptr)
                .arg(&aux_ptr)
                .arg(&rows)
                .arg(&domain_u32)
                .arg(&boolean_paths)
                .arg(&dst);
            // SAFETY: argument types match `r1cs_abc` (pointers as u64, u32
            // scalars); the matrices' columns and coefficient indices were
            // checked against the counts when recorded or loaded, the counts
            // against the uploaded assignments, and `dst` holds `domain`
            // scalars (the workspace of this domain size).
            check!(dev, "cuLaunchKernel(r1cs_abc)", unsafe {
                launch.launch(cfg)
            })?;
        }
        Ok(())
    }

    fn get_or_upload(
        &mut self,
        run: &AbcRun<'_>,
        r1cs: &CompiledR1cs,
    ) -> Result<&mut Entry, BackendError> {
        if let Some(i) = self.entries.iter().position(|e| e.digest == r1cs.digest) {
            return Ok(&mut self.entries[i]);
        }
        if self.entries.len() >= KEPT {
            if let Some(oldest) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(i, _)| i)
            {
                self.entries.swap_remove(oldest);
            }
        }
        let (dev, ctx, stream) = (run.device, run.ctx, run.stream);
        let need = r1cs.bytes();
        let (free, _) = check!(dev, "cuMemGetInfo", ctx.mem_get_info())?;
        if free < need {
            return Err(BackendError::DeviceMemory {
                device: dev,
                need: need as u64,
                free: free as u64,
            });
        }
        let entry = Entry {
            digest: r1cs.digest,
            matrices: [
                upload_matrix(ctx, dev, stream, &r1cs.a)?,
                upload_matrix(ctx, dev, stream, &r1cs.b)?,
                upload_matrix(ctx, dev, stream, &r1cs.c)?,
            ],
            table: upload_new(ctx, dev, stream, scalar_bytes(&r1cs.table))?,
            last_used: self.tick,
        };
        tracing::debug!(
            device = dev,
            bytes = entry.bytes(),
            digest = %r1cs.digest_hex(),
            "compiled constraints resident"
        );
        self.entries.push(entry);
        let last = self.entries.len() - 1;
        Ok(&mut self.entries[last])
    }
}
