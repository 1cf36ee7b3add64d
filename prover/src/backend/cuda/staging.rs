//! MSM scalars uploaded before the MSM holds the device.
//!
//! A proof's MSMs hold the device one after another, and each used to
//! upload its scalars (512 MiB at 2^24) under that hold, on the compute
//! stream, with the kernels idle. A caller that gets a slot here starts its
//! upload on the slot's own stream before it asks for the device, so the
//! copy runs on the copy engine beside whatever holds the device (the h
//! phase, another MSM of the partition on its own thread, another
//! partition); the MSM then waits for the copy on the device and converts
//! the scalars in place. A caller waits for a slot while both are taken:
//! each holder either copies, waits for the device or runs on it, and
//! none waits for a second slot, so a slot always comes free. Slots are a
//! bounded extra: where the scalars are larger than a slot may be or the
//! device lacks the memory, the MSM uploads under its hold as before.

use super::check::check;
use super::domain::scalar_bytes;
use super::memory::DeviceBuffer;
use crate::backend::BackendError;
use blstrs::Scalar;
use cudarc::driver::{result, sys, CudaContext, CudaEvent, CudaStream};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::sync::Arc;

/// Slots per device: one MSM running from a slot and the next one's
/// upload beside it. More would only queue behind the same link.
pub const SLOTS: usize = 2;

/// The largest share of device memory one slot may take (1/32: 2^26
/// scalars, 2 GiB, on an 80 GB device; 2^27 on a 141 GB one), so that the
/// slots together never take more than a sixteenth of what the workspaces
/// and resident bases were planned around.
pub const SLOT_SHARE: usize = 32;

/// A slot is allocated only while this share of the device (1/8) stays
/// free beside it, for the workspaces of the partition it serves.
pub const FREE_SHARE: usize = 8;

#[derive(Debug)]
struct Slot {
    buffer: DeviceBuffer,
    stream: Arc<CudaStream>,
    start: CudaEvent,
    done: CudaEvent,
}

/// A device's upload slots.
#[derive(Debug)]
pub struct ScalarSlots {
    slots: [Mutex<Option<Slot>>; SLOTS],
    /// Bytes one slot may hold.
    max_bytes: usize,
    /// Signalled when a slot is given back.
    freed: Condvar,
    freed_lock: Mutex<()>,
}

/// Scalars on their way into a slot, the slot held until this is dropped.
/// Borrowing the host scalars keeps them alive while the copy reads them;
/// dropping waits for the copy.
#[derive(Debug)]
pub struct Staged<'a> {
    /// `Some` until dropped.
    slot: Option<MutexGuard<'a, Option<Slot>>>,
    slots: &'a ScalarSlots,
    len: usize,
    device: u32,
    _host: std::marker::PhantomData<&'a [Scalar]>,
}

impl ScalarSlots {
    /// Slots on a device of `total_bytes` of memory.
    pub fn new(total_bytes: usize) -> Self {
        Self {
            slots: std::array::from_fn(|_| Mutex::new(None)),
            max_bytes: total_bytes / SLOT_SHARE,
            freed: Condvar::new(),
            freed_lock: Mutex::new(()),
        }
    }

    /// A free slot, waiting while every slot is taken.
    fn take(&self) -> MutexGuard<'_, Option<Slot>> {
        loop {
            if let Some(slot) = self.slots.iter().find_map(|s| s.try_lock()) {
                return slot;
            }
            let mut g = self.freed_lock.lock();
            if let Some(slot) = self.slots.iter().find_map(|s| s.try_lock()) {
                return slot;
            }
            // The timeout only guards against a wake-up lost between the
            // check above and the wait (a release does not hold `freed_lock`
            // while it unlocks its slot).
            self.freed
                .wait_for(&mut g, std::time::Duration::from_millis(50));
        }
    }

    /// Starts copying `scalars` into a slot on that slot's stream, waiting
    /// for a free one. `None` where the MSM should upload under its own
    /// hold instead: more bytes than a slot may hold, no device memory for
    /// the slot, or a failed call (logged; the MSM's own upload then meets
    /// the device's error where it is reported).
    pub fn stage<'a>(
        &'a self,
        ctx: &Arc<CudaContext>,
        device: u32,
        scalars: &'a [Scalar],
    ) -> Option<Staged<'a>> {
        let bytes = std::mem::size_of_val(scalars);
        if bytes == 0 || bytes > self.max_bytes {
            return None;
        }
        let mut slot = self.take();
        match Self::start(&mut slot, ctx, device, scalars, self.max_bytes) {
            Ok(()) => Some(Staged {
                slot: Some(slot),
                slots: self,
                len: scalars.len(),
                device,
                _host: std::marker::PhantomData,
            }),
            Err(e) => {
                drop(slot);
                self.freed.notify_one();
                tracing::debug!(device, error = %e, "scalars not staged; the MSM uploads them itself");
                None
            }
        }
    }

    fn start(
        slot: &mut Option<Slot>,
        ctx: &Arc<CudaContext>,
        device: u32,
        scalars: &[Scalar],
        max_bytes: usize,
    ) -> Result<(), BackendError> {
        let bytes = std::mem::size_of_val(scalars);
        check!(device, "cuCtxSetCurrent", ctx.bind_to_thread())?;
        if slot.as_ref().is_none_or(|s| s.buffer.bytes() < bytes) {
            // The old buffer goes first so that its memory counts as free.
            let old = slot.take();
            let stream = match old {
                Some(s) => s.stream.clone(),
                None => check!(device, "cuStreamCreate", ctx.new_stream())?,
            };
            let (free, total) = check!(device, "cuMemGetInfo", ctx.mem_get_info())?;
            // Room for the slot and still a share of the device for the
            // workspaces that were sized without it.
            if free < bytes.saturating_add(total / FREE_SHARE) || bytes > max_bytes {
                return Err(BackendError::DeviceMemory {
                    device,
                    need: bytes as u64,
                    free: free as u64,
                });
            }
            let event = || {
                check!(
                    device,
                    "cuEventCreate",
                    ctx.new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                )
            };
            *slot = Some(Slot {
                buffer: DeviceBuffer::alloc(ctx, device, bytes)?,
                stream,
                start: event()?,
                done: event()?,
            });
        }
        let s = slot.as_ref().ok_or_else(|| {
            super::check::device_error(device, "stage", file!(), line!(), &"no slot")
        })?;
        check!(device, "cuEventRecord", s.start.record(&s.stream))?;
        // SAFETY: the buffer holds at least `bytes`; the host scalars stay
        // borrowed by the `Staged` that waits for this copy before it goes.
        check!(device, "cuMemcpyHtoDAsync", unsafe {
            result::memcpy_htod_async(s.buffer.ptr(), scalar_bytes(scalars), s.stream.cu_stream())
        })?;
        check!(device, "cuEventRecord", s.done.record(&s.stream))
    }

    /// Frees every slot not in use; returns the bytes they held.
    pub fn release(&self) -> u64 {
        self.slots
            .iter()
            .filter_map(|s| s.try_lock())
            .filter_map(|mut s| s.take())
            .map(|s| s.buffer.bytes() as u64)
            .sum()
    }
}

impl Staged<'_> {
    fn slot(&self) -> Result<&Slot, BackendError> {
        self.slot
            .as_deref()
            .and_then(Option::as_ref)
            .ok_or_else(|| {
                super::check::device_error(self.device, "stage", file!(), line!(), &"empty slot")
            })
    }

    /// The scalars' device address and count, and the event that marks the
    /// end of their copy (a stream that reads them waits for it first).
    pub fn device(&self) -> Result<(sys::CUdeviceptr, usize, &CudaEvent), BackendError> {
        let s = self.slot()?;
        Ok((s.buffer.ptr(), self.len, &s.done))
    }

    /// The copy's device time; waits for it to finish.
    pub fn copy_ms(&self) -> Result<f64, BackendError> {
        let s = self.slot()?;
        check!(self.device, "cuEventSynchronize", s.done.synchronize())?;
        check!(
            self.device,
            "cuEventElapsedTime",
            s.start.elapsed_ms(&s.done)
        )
        .map(f64::from)
    }
}

impl Drop for Staged<'_> {
    fn drop(&mut self) {
        // The host scalars may go once this returns: the copy must be over.
        // A failure here is the device's, and the MSM reported it already.
        if let Some(s) = self.slot.as_deref().and_then(Option::as_ref) {
            let _ = s.stream.synchronize();
        }
        drop(self.slot.take());
        self.slots.freed.notify_one();
    }
}
