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

use crate::budget::{MemoryBudget, Reservation};
use crate::circuit::{self, CircuitKind};
use crate::compiled::{self, file, CompiledR1cs, FileError};
use crate::params::ParamStore;
use parking_lot::Mutex;
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

/// The recordings of one daemon.
pub struct CompiledSet {
    enabled: bool,
    check_first: u32,
    slots: Mutex<HashMap<(CircuitKind, usize), SharedSlot>>,
    /// Filecoin recordings by their parameter file's digest: made from a
    /// job's first partition to be synthesised, kept for every later one.
    filecoin: Mutex<HashMap<String, Arc<Entry>>>,
}

impl CompiledSet {
    pub fn new(enabled: bool, check_first: u32) -> Self {
        CompiledSet {
            enabled,
            check_first,
            slots: Mutex::new(HashMap::new()),
            filecoin: Mutex::new(HashMap::new()),
        }
    }

    /// Whether recordings are in use at all.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The Filecoin recording for the parameters of digest `params_sha256`,
    /// if one was kept.
    pub fn filecoin(&self, params_sha256: &str) -> Option<CompiledUse> {
        if !self.enabled {
            return None;
        }
        let entry = self.filecoin.lock().get(params_sha256)?.clone();
        let n = entry.uses.fetch_add(1, Ordering::Relaxed);
        Some(CompiledUse {
            r1cs: entry.r1cs.clone(),
            check: n < self.check_first,
        })
    }

    /// Whether a Filecoin recording for `params_sha256` is kept (or none is
    /// wanted: recordings are off).
    pub fn has_filecoin(&self, params_sha256: &str) -> bool {
        !self.enabled || self.filecoin.lock().contains_key(params_sha256)
    }

    /// Keeps a Filecoin recording made by a partition (the first one kept
    /// wins where two partitions recorded at once), under a reservation.
    pub fn keep_filecoin(
        &self,
        params_sha256: &str,
        r1cs: CompiledR1cs,
        budget: &Arc<MemoryBudget>,
    ) {
        let mut map = self.filecoin.lock();
        if map.contains_key(params_sha256) {
            return;
        }
        let who = format!("compiled constraints of Filecoin parameters {params_sha256}");
        match budget.try_reserve(&who, r1cs.bytes() as u64) {
            Ok(reservation) => {
                map.insert(
                    params_sha256.to_owned(),
                    Arc::new(Entry {
                        r1cs: Arc::new(r1cs),
                        // The partition that recorded it was checked.
                        uses: AtomicU32::new(1),
                        _reservation: reservation,
                    }),
                );
            }
            Err(e) => tracing::warn!("{who}: {e}; its partitions synthesise the bellperson way"),
        }
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
        let n = entry.uses.fetch_add(1, Ordering::Relaxed);
        Some(CompiledUse {
            r1cs: entry.r1cs.clone(),
            check: n < self.check_first,
        })
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
            .map(|e| e.r1cs.bytes() as u64)
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
