//! Filecoin jobs in the engine: a request's inputs checked and turned into
//! a [`FilStatement`] (the same checks `prover c2` / `prover post` make), and
//! the parameter file of its circuit read from Filecoin's parameter cache
//! once (in place, never written), then kept in memory under its own budget
//! reservation so later jobs of that circuit start at once.

use crate::budget::{BudgetError, MemoryBudget, Reservation};
use crate::circuit::CircuitShape;
use crate::daemon::engine::admission::SubmitError;
use crate::filecoin::cache::{self, CacheEntry, Provenance};
use crate::filecoin::statement::FilStatement;
use crate::filecoin::FilecoinError;
use crate::params::{ParamStore, Params};
use bellperson::groth16::{prepare_verifying_key, PreparedVerifyingKey};
use blstrs::Bls12;
use fleet_wire::api::FilecoinSubmitRequest;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A Filecoin parameter file, loaded.
pub struct FilKey {
    /// The file's name in the cache (`v28-stacked-proof-of-replication-...params`).
    pub name: String,
    pub params: Arc<Params>,
    /// The file's SHA-256: the key under which a device keeps its bases resident.
    pub sha256: String,
    pub pvk: PreparedVerifyingKey<Bls12>,
    pub provenance: Provenance,
    pub shape: CircuitShape,
    _reservation: Reservation,
}

impl std::fmt::Debug for FilKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FilKey")
            .field("name", &self.name)
            .field("sha256", &self.sha256)
            .finish_non_exhaustive()
    }
}

/// The parameter files of Filecoin circuits loaded so far.
pub struct FilecoinKeys {
    dir: PathBuf,
    allow_test_params: bool,
    loaded: Mutex<HashMap<PathBuf, Arc<FilKey>>>,
    /// One load at a time: two jobs of a new circuit read its file once.
    loading: Mutex<()>,
}

impl FilecoinKeys {
    /// Whether TEST-ONLY parameters, and so test data, are allowed.
    pub fn allow_test_params(&self) -> bool {
        self.allow_test_params
    }

    pub fn new(dir: PathBuf, allow_test_params: bool) -> Self {
        Self {
            dir,
            allow_test_params,
            loaded: Mutex::new(HashMap::new()),
            loading: Mutex::new(()),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bytes of Filecoin parameters held in memory.
    pub fn loaded_bytes(&self) -> u64 {
        self.loaded
            .lock()
            .values()
            .map(|k| k._reservation.bytes())
            .sum()
    }

    /// `entry`'s file if loaded: (bytes reserved, jobs holding it now).
    pub fn loaded_entry(&self, entry: &CacheEntry) -> Option<(u64, u32)> {
        self.loaded.lock().get(&entry.params).map(|k| {
            let users = Arc::strong_count(k).saturating_sub(1);
            (
                k._reservation.bytes(),
                u32::try_from(users).unwrap_or(u32::MAX),
            )
        })
    }

    /// Each loaded file's name and where it came from.
    pub fn files(&self) -> Vec<(String, Provenance)> {
        self.loaded
            .lock()
            .values()
            .map(|k| (k.name.clone(), k.provenance.clone()))
            .collect()
    }

    /// Forgets `entry`'s loaded file; its reservation is released when the
    /// last job holding it finishes. The bytes it held, if it was loaded.
    pub fn evict(&self, entry: &CacheEntry) -> Option<u64> {
        let key = self.loaded.lock().remove(&entry.params)?;
        tracing::info!(file = %entry.params.display(), "Filecoin parameters evicted");
        Some(key._reservation.bytes())
    }

    /// The loaded parameters of `entry`, read (and checked against
    /// filecoin-proofs' digests) on first use. Their memory is reserved in
    /// `budget` first, evicting idle bundled parameter sets if that makes
    /// room; a budget too full for them refuses the job instead of waiting.
    pub fn get(
        &self,
        entry: &CacheEntry,
        budget: &Arc<MemoryBudget>,
        store: &ParamStore,
    ) -> Result<Arc<FilKey>, SubmitError> {
        if let Some(k) = self.loaded.lock().get(&entry.params) {
            return Ok(k.clone());
        }
        let _one = self.loading.lock();
        if let Some(k) = self.loaded.lock().get(&entry.params) {
            return Ok(k.clone());
        }
        let name = entry.params_name();
        let file_bytes = std::fs::metadata(&entry.params).map(|m| m.len()).ok();
        // In memory the points take about what they take in the file; an
        // absent file is reported by the load below, with its path.
        let who = format!("filecoin parameters {name}");
        let reservation = match file_bytes {
            Some(bytes) => Some(reserve_now(budget, store, &who, bytes)?),
            None => None,
        };
        let loaded = cache::load(entry, self.allow_test_params)
            .map_err(|e| SubmitError::Filecoin(FilecoinError::Cache(e)))?;
        if loaded.provenance.is_test_only() {
            tracing::warn!(file = %entry.params.display(), "{}", crate::setup::TEST_ONLY_WARNING);
        }
        let reservation = match reservation {
            Some(r) => r,
            // The file appeared between the two looks: reserve now.
            None => {
                let bytes = std::fs::metadata(&entry.params).map_or(0, |m| m.len());
                reserve_now(budget, store, &who, bytes)?
            }
        };
        let shape = crate::prove::shape_of_key(&loaded.params);
        let key = Arc::new(FilKey {
            name,
            pvk: prepare_verifying_key(&loaded.params.vk),
            params: Arc::new(loaded.params),
            sha256: loaded.sha256,
            provenance: loaded.provenance,
            shape,
            _reservation: reservation,
        });
        tracing::info!(file = %entry.params.display(), constraints = shape.num_constraints, "Filecoin parameters loaded");
        self.loaded.lock().insert(entry.params.clone(), key.clone());
        Ok(key)
    }
}

fn reserve_now(
    budget: &Arc<MemoryBudget>,
    store: &ParamStore,
    who: &str,
    bytes: u64,
) -> Result<Reservation, SubmitError> {
    let busy = |e: BudgetError| {
        SubmitError::Busy(format!(
            "{who} need {bytes} bytes of the memory budget, which jobs in flight hold now ({e}); retry later"
        ))
    };
    match budget.try_reserve(who, bytes) {
        Ok(r) => Ok(r),
        Err(BudgetError::WouldBlock { .. }) => {
            store.evict_unused(budget, bytes);
            budget.try_reserve(who, bytes).map_err(busy)
        }
        Err(e) => Err(SubmitError::Filecoin(FilecoinError::ProofCrates {
            context: "reserving memory for the parameters",
            reason: e.to_string(),
        })),
    }
}

/// The request's statement, its inputs checked (replica id, vanilla proofs).
/// This is CPU work of seconds for a large sector: run it off the runtime.
pub fn statement_of(req: &FilecoinSubmitRequest) -> Result<Box<dyn FilStatement>, SubmitError> {
    crate::filecoin::kind::statement(req).map_err(SubmitError::Filecoin)
}
