//! The compute devices the engine proves on, their counters, and whether
//! each is still in rotation.

use crate::backend::{Backend, BackendError};
use fleet_wire::api::Proving;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// One compute device (or the CPU) and the workers that share it.
pub struct Device {
    pub backend: Arc<dyn Backend>,
    /// Worker threads on this device.
    pub workers: u32,
    pub name: Option<String>,
    busy: AtomicU32,
    done: AtomicU64,
    /// Why the device was taken out of rotation; `None` while it proves.
    failed: Mutex<Option<String>>,
    /// What its workers prove now, for `/status` and Curio's `GetStatus`.
    proving: Mutex<Vec<Proving>>,
}

impl Device {
    pub fn new(backend: Arc<dyn Backend>, workers: u32, name: Option<String>) -> Self {
        Self {
            backend,
            workers,
            name,
            busy: AtomicU32::new(0),
            done: AtomicU64::new(0),
            failed: Mutex::new(None),
            proving: Mutex::new(Vec::new()),
        }
    }

    /// The ordinal records and metrics name this device by: the backend's
    /// own, else its position.
    pub fn ordinal(&self, position: usize) -> u32 {
        self.backend.device().unwrap_or(position as u32)
    }

    pub fn busy(&self) -> u32 {
        self.busy.load(Ordering::SeqCst)
    }

    pub fn partitions_done(&self) -> u64 {
        self.done.load(Ordering::SeqCst)
    }

    /// The partitions its workers prove now.
    pub fn proving(&self) -> Vec<Proving> {
        self.proving.lock().clone()
    }

    pub(crate) fn begin(&self, what: Proving) {
        self.proving.lock().push(what);
        self.busy.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn end(&self, job_id: &str, partition: u32) {
        self.proving
            .lock()
            .retain(|p| !(p.job_id == job_id && p.partition == partition));
        self.busy.fetch_sub(1, Ordering::SeqCst);
        self.done.fetch_add(1, Ordering::SeqCst);
    }

    /// Why it is out of rotation, if it is.
    pub fn failure(&self) -> Option<String> {
        self.failed.lock().clone()
    }

    /// Takes it out of rotation; true the first time.
    pub(crate) fn fail(&self, why: String) -> bool {
        let mut f = self.failed.lock();
        if f.is_some() {
            return false;
        }
        *f = Some(why);
        true
    }
}

/// Whether an error means the device itself can no longer be trusted: a
/// sticky driver error leaves a CUDA context unusable, while bad input or a
/// lack of memory ([`crate::backend::is_recoverable`]) says nothing about
/// the device.
pub fn is_device_fault(e: &BackendError) -> bool {
    matches!(e, BackendError::Device { .. }) && !crate::backend::is_recoverable(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::CpuBackend;

    #[test]
    fn a_device_fails_once_and_keeps_the_first_reason() {
        let d = Device::new(Arc::new(CpuBackend::with_threads(1).expect("cpu")), 2, None);
        assert_eq!(d.failure(), None);
        assert!(d.fail("kernel launch failed".into()));
        assert!(!d.fail("later".into()));
        assert_eq!(d.failure().as_deref(), Some("kernel launch failed"));
        assert_eq!(d.ordinal(3), 3);
        let what = |job: &str| Proving {
            job_id: job.into(),
            circuit: "porep-c2:32GiB".into(),
            partition: 3,
            priority: "normal".into(),
        };
        d.begin(what("a"));
        d.begin(what("b"));
        assert_eq!(d.busy(), 2);
        assert_eq!(d.proving(), [what("a"), what("b")]);
        d.end("a", 3);
        assert_eq!(d.proving(), [what("b")]);
        d.end("b", 3);
        assert_eq!((d.busy(), d.partitions_done()), (0, 2));
        assert!(d.proving().is_empty());
    }

    #[test]
    fn only_driver_errors_take_a_device_out() {
        let fault = BackendError::Device {
            device: 0,
            call: "cuLaunchKernel".into(),
            file: "msm.rs",
            line: 1,
            reason: "an illegal memory access was encountered".into(),
        };
        assert!(is_device_fault(&fault));
        assert!(!is_device_fault(&BackendError::DeviceMemory {
            device: 0,
            need: 2,
            free: 1
        }));
        assert!(!is_device_fault(&BackendError::MsmLength {
            bases: 1,
            scalars: 2
        }));
        // Out of memory from the driver: recoverable, the device stays.
        let oom = BackendError::Device {
            device: 0,
            call: "cuMemAlloc".into(),
            file: "memory.rs",
            line: 1,
            reason: "DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")".into(),
        };
        assert!(!is_device_fault(&oom));
        assert!(crate::backend::is_recoverable(&oom));
        let sticky = BackendError::Device {
            device: 0,
            call: "cuStreamSynchronize".into(),
            file: "msm.rs",
            line: 1,
            reason: "DriverError(CUDA_ERROR_ILLEGAL_ADDRESS, \"an illegal memory access was encountered\")".into(),
        };
        assert!(is_device_fault(&sticky));
    }
}
