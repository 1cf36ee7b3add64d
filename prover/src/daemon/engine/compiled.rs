//! Compiled constraints of the bundled circuits, one recording per circuit
//! and size for the daemon's life, so that partitions synthesise by the
//! witness pass and sparse products instead of building every constraint.
//!
//! A recording is read from beside the parameters (checked by its digest and
//! against the circuit's shape) or made by one synthesis and written there.
//! It holds a budget reservation for what it takes in memory; where the
//! budget has no room, partitions synthesise the bellperson way and the
//! recording is tried again later. The first `check_first` partitions of each
//! recording run with the structure check, so a circuit whose constraints
//! depend on its witness fails there with the constraint named.
//!
//! A Filecoin set's recording is made by the first partition that needs it
//! (or by preload); partitions synthesised meanwhile wait for it instead of
//! recording it too: at 32 GiB a recording is ~9 GB and minutes of one
//! core, outside the budget until kept, so several at once could exhaust a
//! host that one fits.

use crate::budget::{MemoryBudget, Reservation};
use crate::circuit::{self, CircuitKind};
use crate::compiled::{self, file, CompiledR1cs, FileError};
use crate::params::ParamStore;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a recording that could not be made or kept is not tried again.
const RETRY_AFTER: Duration = Duration::from_secs(60);

/// A recording to synthesise from, and whether to check the circuit against it.
pub struct CompiledUse {
    pub r1cs: Arc<CompiledR1cs>,
    pub check: bool,
}

struct Entry {
    r1cs: Arc<CompiledR1cs>,
    uses: AtomicU32,
    _reservation: Reservation,
}

/// One circuit and size's slot, locked on its own while its recording is made.
type SharedSlot = Arc<Mutex<Slot>>;

enum Slot {
    Empty,
    Ready(Arc<Entry>),
    Unavailable { since: Instant },
}

/// Where a Filecoin set's recording is.
enum FilSlot {
    Ready(Arc<Entry>),
    /// A partition is recording it.
    Recording,
    /// The last recording failed or could not be kept.
    Failed {
        since: Instant,
    },
}

/// How a Filecoin partition is synthesised, as [`CompiledSet::filecoin_for`]
/// finds its set's recording.
pub enum FilecoinRecording<'a> {
    /// From the recording.
    Use(CompiledUse),
    /// Recording it: this partition is the one that makes it, and keeps it
    /// with [`CompiledSet::keep_filecoin`]. Dropped unkept, the recording
    /// counts as failed and the waiting partitions go on without it.
    Record(RecordClaim<'a>),
    /// The bellperson way: recordings are off, an urgent partition (which
    /// neither waits nor pays for a recording), or the last one failed less
    /// than a minute ago.
    Plain,
}

/// One partition's claim to record a Filecoin set.
pub struct RecordClaim<'a> {
    set: &'a CompiledSet,
    sha256: String,
}

impl Drop for RecordClaim<'_> {
    fn drop(&mut self) {
        let mut map = self.set.filecoin.lock();
        if let Some(slot @ FilSlot::Recording) = map.get_mut(&self.sha256) {
            *slot = FilSlot::Failed {
                since: Instant::now(),
            };
        }
        self.set.recorded.notify_all();
    }
}

/// A partition cancelled while it waited for its set's recording.
#[derive(Debug)]
pub struct WaitCancelled;

/// How often a partition waiting for a recording looks whether its job was
/// cancelled.
const WAIT_TICK: Duration = Duration::from_secs(1);

/// The recordings of one daemon.
pub struct CompiledSet {
    enabled: bool,
    check_first: u32,
    slots: Mutex<HashMap<(CircuitKind, usize), SharedSlot>>,
    /// Filecoin recordings by their parameter file's digest: made from a
    /// job's first partition to be synthesised, kept for every later one.
    filecoin: Mutex<HashMap<String, FilSlot>>,
    /// Signalled when a Filecoin recording is kept or given up.
    recorded: Condvar,
}

impl CompiledSet {
    pub fn new(enabled: bool, check_first: u32) -> Self {
        CompiledSet {
            enabled,
            check_first,
            slots: Mutex::new(HashMap::new()),
            filecoin: Mutex::new(HashMap::new()),
            recorded: Condvar::new(),
        }
    }

    /// Whether recordings are in use at all.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// How a partition of the Filecoin set of digest `params_sha256`
    /// synthesises: from the set's recording; by recording it where none is
    /// kept or being made; else, while another partition records it, it
    /// waits for that one (returning `WaitCancelled` once `cancelled` says
    /// so). An `urgent` partition never waits or records.
    pub fn filecoin_for(
        &self,
        params_sha256: &str,
        urgent: bool,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<FilecoinRecording<'_>, WaitCancelled> {
        if !self.enabled {
            return Ok(FilecoinRecording::Plain);
        }
        let mut map = self.filecoin.lock();
        loop {
            match map.get(params_sha256) {
                Some(FilSlot::Ready(entry)) => {
                    return Ok(FilecoinRecording::Use(self.use_of(entry)));
                }
                Some(FilSlot::Failed { since }) if since.elapsed() < RETRY_AFTER => {
                    return Ok(FilecoinRecording::Plain)
                }
                _ if urgent => return Ok(FilecoinRecording::Plain),
                Some(FilSlot::Recording) => {
                    if cancelled() {
                        return Err(WaitCancelled);
                    }
                    self.recorded.wait_for(&mut map, WAIT_TICK);
                }
                _ => {
                    map.insert(params_sha256.to_owned(), FilSlot::Recording);
                    return Ok(FilecoinRecording::Record(RecordClaim {
                        set: self,
                        sha256: params_sha256.to_owned(),
                    }));
                }
            }
        }
    }

    fn use_of(&self, entry: &Entry) -> CompiledUse {
        let n = entry.uses.fetch_add(1, Ordering::Relaxed);
        CompiledUse {
            r1cs: entry.r1cs.clone(),
            check: n < self.check_first,
        }
    }

    /// Whether a Filecoin recording for `params_sha256` is kept (or none is
    /// wanted: recordings are off).
    pub fn has_filecoin(&self, params_sha256: &str) -> bool {
        !self.enabled
            || matches!(
                self.filecoin.lock().get(params_sha256),
                Some(FilSlot::Ready(_))
            )
    }

    /// Keeps a Filecoin recording (made by a partition or by preload; the
    /// first one kept wins), under a reservation; where the budget has no
    /// room, the set's partitions synthesise the bellperson way for a while.
    /// Wakes the partitions waiting for it either way.
    pub fn keep_filecoin(
        &self,
        params_sha256: &str,
        r1cs: Arc<CompiledR1cs>,
        budget: &Arc<MemoryBudget>,
    ) {
        let mut map = self.filecoin.lock();
        if matches!(map.get(params_sha256), Some(FilSlot::Ready(_))) {
            return;
        }
        let who = format!("compiled constraints of Filecoin parameters {params_sha256}");
        let slot = match budget.try_reserve(&who, r1cs.bytes() as u64) {
            Ok(reservation) => FilSlot::Ready(Arc::new(Entry {
                r1cs,
                // The partition that recorded it was checked.
                uses: AtomicU32::new(1),
                _reservation: reservation,
            })),
            Err(e) => {
                tracing::warn!("{who}: {e}; its partitions synthesise the bellperson way");
                FilSlot::Failed {
                    since: Instant::now(),
                }
            }
        };
        map.insert(params_sha256.to_owned(), slot);
        self.recorded.notify_all();
    }

    /// The recording for `kind` at `size`, loading or making it on first use
    /// (one worker makes it; others asking for the same one wait for it).
    /// None: synthesise the bellperson way.
    pub fn get(
        &self,
        kind: CircuitKind,
        size: usize,
        params: &ParamStore,
        budget: &Arc<MemoryBudget>,
    ) -> Option<CompiledUse> {
        if !self.enabled {
            return None;
        }
        let slot = self
            .slots
            .lock()
            .entry((kind, size))
            .or_insert_with(|| Arc::new(Mutex::new(Slot::Empty)))
            .clone();
        let mut slot = slot.lock();
        let entry = match &*slot {
            Slot::Ready(entry) => entry.clone(),
            Slot::Unavailable { since } if since.elapsed() < RETRY_AFTER => return None,
            _ => match open(kind, size, params, budget) {
                Some(entry) => {
                    let entry = Arc::new(entry);
                    *slot = Slot::Ready(entry.clone());
                    entry
                }
                None => {
                    *slot = Slot::Unavailable {
                        since: Instant::now(),
                    };
                    return None;
                }
            },
        };
        drop(slot);
        Some(self.use_of(&entry))
    }

    /// Bytes the recordings take in memory.
    pub fn bytes(&self) -> u64 {
        let bundled: u64 = self
            .slots
            .lock()
            .values()
            .map(|s| match &*s.lock() {
                Slot::Ready(e) => e.r1cs.bytes() as u64,
                _ => 0,
            })
            .sum();
        let filecoin: u64 = self
            .filecoin
            .lock()
            .values()
            .map(|s| match s {
                FilSlot::Ready(e) => e.r1cs.bytes() as u64,
                _ => 0,
            })
            .sum();
        bundled + filecoin
    }
}

/// Reads the recording from beside the parameters or makes it; reserves
/// its memory. Failures are logged and leave the bellperson way in use.
fn open(
    kind: CircuitKind,
    size: usize,
    params: &ParamStore,
    budget: &Arc<MemoryBudget>,
) -> Option<Entry> {
    let shape = params.shape(kind, size).ok()?;
    let path = file::path_for(&params.params_path(kind, size));
    let fits = |r: &CompiledR1cs| {
        r.num_inputs == shape.num_inputs
            && r.num_aux == shape.num_aux
            && r.num_constraints == shape.padded_constraints()
    };
    let loaded = match file::load(&path) {
        Ok(r) if fits(&r) => Some(r),
        Ok(_) => {
            tracing::warn!(path = %path.display(), "compiled constraints are for another shape of {kind} {size}; recording them again");
            None
        }
        Err(FileError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            tracing::warn!("{e}; recording them again");
            None
        }
    };
    let r1cs = match loaded {
        Some(r) => r,
        None => {
            let t = Instant::now();
            let circuit = circuit::shape_circuit(kind, size).ok()?;
            let r = match compiled::compile(circuit) {
                Ok(r) if fits(&r) => r,
                Ok(_) => {
                    tracing::warn!("{kind} {size}: the recorded constraints do not match the circuit's shape; synthesising the bellperson way");
                    return None;
                }
                Err(e) => {
                    tracing::warn!("{kind} {size}: {e}; synthesising the bellperson way");
                    return None;
                }
            };
            tracing::info!(
                "{kind} {size}: constraints compiled in {:.0} ms ({} terms, {} bytes, digest {})",
                t.elapsed().as_secs_f64() * 1e3,
                r.nnz(),
                r.bytes(),
                r.digest_hex()
            );
            // The parameters' folder may be read-only: the recording then
            // lives in memory only and is made again at the next start.
            if let Err(e) = file::save(&r, &path) {
                tracing::warn!("{e}; keeping the compiled constraints in memory only");
            }
            r
        }
    };
    let who = format!("compiled constraints {kind} {size}");
    match budget.try_reserve(&who, r1cs.bytes() as u64) {
        Ok(reservation) => Some(Entry {
            r1cs: Arc::new(r1cs),
            uses: AtomicU32::new(0),
            _reservation: reservation,
        }),
        Err(e) => {
            tracing::warn!("{who}: {e}; synthesising the bellperson way for now");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    fn recording() -> CompiledR1cs {
        let circuit = circuit::shape_circuit(CircuitKind::Chain, 64).expect("circuit");
        compiled::compile(circuit).expect("recorded")
    }

    fn waiter(set: &Arc<CompiledSet>, sha: &'static str) -> thread::JoinHandle<&'static str> {
        let set = set.clone();
        thread::spawn(move || match set.filecoin_for(sha, false, &|| false) {
            Ok(FilecoinRecording::Use(_)) => "use",
            Ok(FilecoinRecording::Record(_)) => "record",
            Ok(FilecoinRecording::Plain) => "plain",
            Err(WaitCancelled) => "cancelled",
        })
    }

    #[test]
    fn a_filecoin_recording_is_made_once_while_other_partitions_wait_for_it() {
        let set = Arc::new(CompiledSet::new(true, 1));
        let budget = MemoryBudget::new(1 << 30);
        let first = set.filecoin_for("set-a", false, &|| false).expect("claim");
        assert!(matches!(first, FilecoinRecording::Record(_)));
        // An urgent partition neither waits nor records; a cancelled one
        // stops waiting.
        let urgent = set.filecoin_for("set-a", true, &|| false).expect("urgent");
        assert!(matches!(urgent, FilecoinRecording::Plain));
        assert!(set.filecoin_for("set-a", false, &|| true).is_err());
        let waiting = waiter(&set, "set-a");
        thread::sleep(Duration::from_millis(100));
        assert!(!waiting.is_finished(), "it did not wait for the recording");
        set.keep_filecoin("set-a", Arc::new(recording()), &budget);
        drop(first);
        assert_eq!(waiting.join().expect("waiter"), "use");
        assert!(set.has_filecoin("set-a"));
        assert!(set.bytes() > 0);

        // A recording given up (its partition failed) lets the waiting
        // partitions go on the bellperson way, and is not tried again at
        // once.
        let claim = set.filecoin_for("set-b", false, &|| false).expect("claim");
        assert!(matches!(claim, FilecoinRecording::Record(_)));
        let waiting = waiter(&set, "set-b");
        thread::sleep(Duration::from_millis(100));
        drop(claim);
        assert_eq!(waiting.join().expect("waiter"), "plain");
        assert_eq!(waiter(&set, "set-b").join().expect("again"), "plain");

        // One the budget cannot hold is given up the same way.
        let small = MemoryBudget::new(1);
        let claim = set.filecoin_for("set-c", false, &|| false).expect("claim");
        set.keep_filecoin("set-c", Arc::new(recording()), &small);
        drop(claim);
        assert!(!set.has_filecoin("set-c"));
        assert_eq!(waiter(&set, "set-c").join().expect("after"), "plain");
    }
}
