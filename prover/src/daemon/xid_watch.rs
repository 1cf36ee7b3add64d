//! Watches NVML for critical XIDs on the GPUs the engine proves on and
//! reports each one, so the daemon takes that GPU out of rotation before
//! its next partition instead of after a kernel has failed (an XID 79, a
//! GPU fallen off the bus, makes every later call hang or fail; an XID 48
//! or 94/95 means its memory returned wrong values, which only a verifier
//! would notice).
//!
//! NVML numbers devices in its own order; the engine by CUDA ordinal. The
//! two are joined on the PCI address ([`PciAddress`]), never by position.

use crate::sys::pci::PciAddress;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::Nvml;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How long one NVML wait blocks: bounds how long [`XidWatch::stop`] takes.
const POLL_MS: u32 = 250;
/// How long start-up waits for NVML to open and register.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the watch did not start; the daemon proves on without it.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("NVML unavailable: {0}")]
    Nvml(String),
    #[error(
        "no GPU of the engine could be watched (looked for {looked_for}; NVML lists {listed})"
    )]
    NoMatch { looked_for: String, listed: String },
    #[error("NVML did not answer within {0:?}")]
    Timeout(Duration),
    #[error("starting the watch thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// What the watch reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XidEvent {
    /// CUDA ordinal of the GPU.
    pub ordinal: u32,
    /// `None`: NVML reported an XID it could not name.
    pub xid: Option<u64>,
    pub critical: bool,
}

/// Joins NVML's devices to the engine's by PCI address: NVML index →
/// CUDA ordinal, and the ordinals NVML does not list.
pub fn pair(
    engine: &[(u32, PciAddress)],
    nvml: &[(u32, PciAddress)],
) -> (HashMap<u32, u32>, Vec<u32>) {
    let by_address: HashMap<PciAddress, u32> = nvml.iter().map(|&(i, a)| (a, i)).collect();
    let mut paired = HashMap::new();
    let mut missing = Vec::new();
    for &(ordinal, address) in engine {
        match by_address.get(&address) {
            Some(&index) => {
                paired.insert(index, ordinal);
            }
            None => missing.push(ordinal),
        }
    }
    (paired, missing)
}

/// Classifies one NVML XID against the critical list.
pub fn classify(ordinal: u32, xid: &XidError, critical: &[u64]) -> XidEvent {
    let xid = match xid {
        XidError::Value(v) => Some(*v),
        XidError::Unknown => None,
    };
    XidEvent {
        ordinal,
        xid,
        critical: xid.is_some_and(|x| critical.contains(&x)),
    }
}

/// The running watch; [`XidWatch::stop`] ends it within [`POLL_MS`].
pub struct XidWatch {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// CUDA ordinals being watched.
    pub watching: Vec<u32>,
}

impl XidWatch {
    /// Opens NVML, matches `devices` (CUDA ordinal, PCI address), registers
    /// for critical-XID events on each and calls `report` from a thread of
    /// its own for every XID seen. Devices NVML does not list, or that refuse
    /// registration, are left unwatched (logged); it fails only when none is
    /// watched.
    pub fn start(
        devices: Vec<(u32, PciAddress)>,
        critical: Vec<u64>,
        report: impl Fn(XidEvent) + Send + 'static,
    ) -> Result<Self, WatchError> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("xid-watch".into())
            .spawn(move || {
                let nvml = match Nvml::init() {
                    Ok(n) => n,
                    Err(e) => {
                        let _ = ready_tx.send(Err(WatchError::Nvml(e.to_string())));
                        return;
                    }
                };
                watch(&nvml, &devices, &critical, &flag, ready_tx, &report);
            })?;
        match ready_rx.recv_timeout(START_TIMEOUT) {
            Ok(Ok(watching)) => Ok(Self {
                stop,
                thread: Some(thread),
                watching,
            }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                // The thread is stuck in NVML; it sees the flag if it ever
                // returns, and is not waited for.
                stop.store(true, Ordering::Relaxed);
                Err(WatchError::Timeout(START_TIMEOUT))
            }
        }
    }

    /// Ends the watch and joins its thread.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for XidWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The watch thread: registers, says what it watches, then waits for
/// events until told to stop.
fn watch(
    nvml: &Nvml,
    devices: &[(u32, PciAddress)],
    critical: &[u64],
    stop: &AtomicBool,
    ready: crossbeam_channel::Sender<Result<Vec<u32>, WatchError>>,
    report: &dyn Fn(XidEvent),
) {
    let address = |d: &nvml_wrapper::Device| {
        d.pci_info().ok().map(|p| PciAddress {
            domain: p.domain,
            bus: p.bus,
            device: p.device,
        })
    };
    let count = nvml.device_count().unwrap_or(0);
    let listed: Vec<(u32, PciAddress)> = (0..count)
        .filter_map(|i| Some((i, address(&nvml.device_by_index(i).ok()?)?)))
        .collect();
    let (paired, missing) = pair(devices, &listed);
    for ordinal in missing {
        tracing::warn!(
            device = ordinal,
            "xid watch: NVML does not list this GPU; its XIDs go unseen"
        );
    }
    // One event set per GPU: a refused registration releases its set, and
    // the set an event came from names the GPU without another lookup.
    let mut sets = Vec::new();
    for (&index, &ordinal) in &paired {
        let registered = nvml
            .device_by_index(index)
            .map_err(|e| e.to_string())
            .and_then(|dev| {
                let set = nvml.create_event_set().map_err(|e| e.to_string())?;
                dev.register_events(EventTypes::CRITICAL_XID_ERROR, set)
                    .map_err(|e| e.error.to_string())
            });
        match registered {
            Ok(set) => sets.push((ordinal, set)),
            Err(e) => tracing::warn!(
                device = ordinal,
                error = %e,
                "xid watch: registration refused; this GPU's XIDs go unseen"
            ),
        }
    }
    if sets.is_empty() {
        let list = |v: &[(u32, PciAddress)]| {
            v.iter()
                .map(|(o, a)| format!("{o} at {a}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = ready.send(Err(WatchError::NoMatch {
            looked_for: list(devices),
            listed: list(&listed),
        }));
        return;
    }
    sets.sort_by_key(|(o, _)| *o);
    let _ = ready.send(Ok(sets.iter().map(|(o, _)| *o).collect()));
    let slice = (POLL_MS / sets.len() as u32).max(1);
    while !stop.load(Ordering::Relaxed) {
        for (ordinal, set) in &sets {
            // A timeout or an error ends one wait; events stay queued in
            // their set until read.
            let Ok(ev) = set.wait(slice) else { continue };
            if let Some(xid) = ev.event_data {
                report(classify(*ordinal, &xid, critical));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(bus: u32) -> PciAddress {
        PciAddress {
            domain: 0,
            bus,
            device: 0,
        }
    }

    #[test]
    fn devices_pair_by_address_not_by_position() {
        // CUDA_VISIBLE_DEVICES=3,1: CUDA ordinal 0 is NVML's index 3.
        let engine = [(0, at(0xc1)), (1, at(0x41)), (2, at(0x99))];
        let nvml = [(0, at(0x1b)), (1, at(0x41)), (2, at(0x81)), (3, at(0xc1))];
        let (paired, missing) = pair(&engine, &nvml);
        assert_eq!(paired, HashMap::from([(3, 0), (1, 1)]));
        assert_eq!(missing, vec![2]);
    }

    #[test]
    fn only_listed_xids_are_critical() {
        let list = fleet_wire::health::CRITICAL_XIDS;
        let e = classify(2, &XidError::Value(79), &list);
        assert_eq!(
            e,
            XidEvent {
                ordinal: 2,
                xid: Some(79),
                critical: true
            }
        );
        assert!(!classify(2, &XidError::Value(13), &list).critical);
        assert!(!classify(2, &XidError::Unknown, &list).critical);
        assert!(!classify(2, &XidError::Value(79), &[]).critical);
    }
}
