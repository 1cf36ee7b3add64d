//! Filecoin jobs in the engine: a request's inputs checked and turned into
//! a [`Statement`] (the same checks `prover c2` / `prover post` make), and
//! the parameter file of its circuit read from Filecoin's parameter cache
//! once (in place, never written), then kept in memory under its own budget
//! reservation so later jobs of that circuit start at once.

use crate::budget::{BudgetError, MemoryBudget, Reservation};
use crate::circuit::CircuitShape;
use crate::daemon::engine::admission::SubmitError;
use crate::filecoin::cache::{self, CacheEntry, Provenance};
use crate::filecoin::post::{PostKind, PostRequest};
use crate::filecoin::statement::Statement;
use crate::filecoin::{c1, porep, post, FilecoinError, SealProof};
use crate::params::{ParamStore, Params};
use bellperson::groth16::{prepare_verifying_key, PreparedVerifyingKey};
use blstrs::Bls12;
use fleet_wire::api::{FilecoinKind, FilecoinSubmitRequest};
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

/// A field of the request refused: the request's own, not the C1 output's
/// or the vanilla proofs' (those errors name their document).
fn bad(field: &'static str, reason: impl Into<String>) -> SubmitError {
    SubmitError::Filecoin(FilecoinError::RequestField {
        field,
        reason: reason.into(),
    })
}

/// Refuses a field that another kind of job takes: never silently ignored.
fn refuse_field<T>(
    v: &Option<T>,
    field: &'static str,
    kind: FilecoinKind,
) -> Result<(), SubmitError> {
    match v {
        Some(_) => Err(bad(field, format!("is not taken by a {kind} job"))),
        None => Ok(()),
    }
}

/// The request's statement, its inputs checked (replica id, vanilla proofs).
/// This is CPU work of seconds for a large sector: run it off the runtime.
pub fn statement_of(req: &FilecoinSubmitRequest) -> Result<Box<dyn Statement>, SubmitError> {
    let prover_id = c1::parse_prover_id(&req.prover_id).map_err(|e| bad("prover_id", e))?;
    let kind = req.kind;
    match kind {
        FilecoinKind::PorepC2 => {
            refuse_field(&req.vanilla_proofs, "vanilla_proofs", kind)?;
            refuse_field(&req.randomness, "randomness", kind)?;
            refuse_field(&req.sector_size, "sector_size", kind)?;
            refuse_field(&req.partition, "partition", kind)?;
            let c1_value = req
                .c1
                .clone()
                .ok_or_else(|| bad("c1", "is required for a porep-c2 job"))?;
            let seal_proof = req
                .registered_proof
                .as_deref()
                .map(str::parse::<SealProof>)
                .transpose()
                .map_err(|e| bad("registered_proof", e.to_string()))?;
            let doc = c1::from_value(c1_value, seal_proof, req.sector_id)
                .map_err(|e| SubmitError::Filecoin(e.into()))?;
            porep::prepare_c2(&doc, prover_id).map_err(SubmitError::Filecoin)
        }
        FilecoinKind::WindowPost | FilecoinKind::WinningPost => {
            refuse_field(&req.c1, "c1", kind)?;
            refuse_field(&req.registered_proof, "registered_proof", kind)?;
            refuse_field(&req.sector_id, "sector_id", kind)?;
            if kind == FilecoinKind::WinningPost {
                refuse_field(&req.partition, "partition", kind)?;
            }
            let vanilla = req
                .vanilla_proofs
                .as_ref()
                .ok_or_else(|| bad("vanilla_proofs", format!("is required for a {kind} job")))?;
            let randomness = req
                .randomness
                .as_deref()
                .ok_or_else(|| bad("randomness", format!("is required for a {kind} job")))?;
            let randomness =
                c1::parse_hex32("randomness", randomness).map_err(|e| bad("randomness", e))?;
            let sector_size = req
                .sector_size
                .ok_or_else(|| bad("sector_size", format!("is required for a {kind} job")))?;
            let vanilla_json =
                serde_json::to_vec(vanilla).map_err(|e| bad("vanilla_proofs", e.to_string()))?;
            let partition = usize::try_from(req.partition.unwrap_or(0))
                .map_err(|_| bad("partition", "too large"))?;
            let request = PostRequest {
                kind: match kind {
                    FilecoinKind::WinningPost => PostKind::Winning,
                    _ => PostKind::Window,
                },
                sector_size,
                vanilla_json,
                randomness,
                prover_id,
                partition,
            };
            post::prepare_post(&request).map_err(SubmitError::Filecoin)
        }
        // Compile-only until the daemon is wired to filecoin::snap.
        FilecoinKind::SnapDeals => Err(bad("kind", "snap-deals is not served by the daemon yet")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(kind: FilecoinKind) -> FilecoinSubmitRequest {
        FilecoinSubmitRequest {
            kind,
            prover_id: "00".repeat(32),
            c1: None,
            registered_proof: None,
            sector_id: None,
            vanilla_proofs: None,
            randomness: None,
            sector_size: None,
            partition: None,
            rs_seed: None,
        }
    }

    fn refusal(r: &FilecoinSubmitRequest) -> String {
        match statement_of(r) {
            Ok(_) => panic!("accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn each_kind_names_the_field_it_lacks_or_does_not_take() {
        let r = req(FilecoinKind::PorepC2);
        assert!(refusal(&r).contains("c1") && refusal(&r).contains("required"));
        let mut r = req(FilecoinKind::PorepC2);
        r.randomness = Some("00".repeat(32));
        assert!(refusal(&r).contains("randomness") && refusal(&r).contains("not taken"));
        let mut r = req(FilecoinKind::WinningPost);
        r.partition = Some(1);
        assert!(refusal(&r).contains("partition"));
        let r = req(FilecoinKind::WindowPost);
        assert!(refusal(&r).contains("vanilla_proofs"));
        let mut r = req(FilecoinKind::WindowPost);
        r.c1 = Some(serde_json::json!({}));
        assert!(refusal(&r).contains("c1") && refusal(&r).contains("not taken"));
        let mut r = req(FilecoinKind::PorepC2);
        r.prover_id = "zz".into();
        assert!(refusal(&r).contains("prover"));
    }

    #[test]
    fn a_c1_without_its_proof_type_or_of_an_unknown_size_is_refused_by_name() {
        let mut r = req(FilecoinKind::PorepC2);
        r.c1 = Some(serde_json::json!({"comm_r": [0]}));
        assert!(refusal(&r).contains("registered"), "{}", refusal(&r));
        r.registered_proof = Some("StackedDrg3KiBV1_1".into());
        assert!(refusal(&r).contains("registered_proof"), "{}", refusal(&r));
        let mut r = req(FilecoinKind::WinningPost);
        r.vanilla_proofs = Some(serde_json::json!([]));
        r.randomness = Some("00".repeat(32));
        r.sector_size = Some(4096);
        assert!(refusal(&r).contains("4096"), "{}", refusal(&r));
    }

    /// A PoSt's refusals name the PoSt input or the job's field, never "the
    /// C1 output"; a refused value is not echoed.
    #[test]
    fn post_refusals_name_the_post_input_not_a_c1_output() {
        let mut r = req(FilecoinKind::WinningPost);
        r.vanilla_proofs = Some(serde_json::json!([]));
        r.randomness = Some("00".repeat(32));
        r.sector_size = Some(2048);
        let text = refusal(&r);
        assert!(
            text.contains("PoSt input") && !text.contains("C1"),
            "{text}"
        );
        r.vanilla_proofs = Some(serde_json::json!([{"unexpected": 1}]));
        let text = refusal(&r);
        assert!(
            text.contains("PoSt input") && !text.contains("C1"),
            "{text}"
        );
        r.randomness = Some("z".repeat(49_000));
        let text = refusal(&r);
        assert!(
            text.contains("randomness") && !text.contains("C1"),
            "{text}"
        );
        assert!(text.len() < 400, "{} bytes", text.len());
    }
}
