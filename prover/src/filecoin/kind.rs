//! The table of Filecoin proof kinds: a job request, one variant per kind,
//! to its checked [`FilStatement`]. Every way a proof is asked for (the HTTP
//! API, Curio's gRPC, `prover c2` / `post` / `snap`) builds a
//! [`FilecoinSubmitRequest`] and comes through here, so a kind's checks are
//! written once. A new kind is one variant of the request and one arm here;
//! the rest of it lives in its own module. A parameter set named without a
//! request ([`FilCircuit`]) comes through [`param_set`] likewise, and one
//! named by Curio's circuit id through [`curio_circuit`].

use fleet_wire::api::{
    FilecoinSubmitRequest, PorepC2Request, SnapDealsRequest, WinningPostRequest,
};

use crate::filecoin::post::{PostKind, PostRequest};
use crate::filecoin::registered::PostSet;
use crate::filecoin::set::ParamSet;
use crate::filecoin::snap::{self, SnapRequest, SnapVanilla};
use crate::filecoin::statement::FilStatement;
use crate::filecoin::{c1, porep, post, FilCircuit, FilecoinError, SealProof, UpdateProof};

/// A field of the request refused: the request's own, not the C1 output's
/// or the vanilla proofs' (those errors name their document).
fn bad(field: &'static str, reason: impl Into<String>) -> FilecoinError {
    FilecoinError::RequestField {
        field,
        reason: reason.into(),
    }
}

fn prover_id(hex: &str) -> Result<[u8; 32], FilecoinError> {
    c1::parse_prover_id(hex).map_err(|e| bad("prover_id", e))
}

/// The request's statement, its inputs checked (replica id, vanilla proofs).
/// This is CPU work of seconds for a large sector: callers on an async
/// runtime run it off the runtime.
pub fn statement(req: &FilecoinSubmitRequest) -> Result<Box<dyn FilStatement>, FilecoinError> {
    match req {
        FilecoinSubmitRequest::PorepC2(r) => porep_c2(r),
        FilecoinSubmitRequest::WindowPost(r) => post(
            PostKind::Window,
            &r.prover_id,
            &r.vanilla_proofs,
            &r.randomness,
            r.sector_size,
            r.partition,
        ),
        FilecoinSubmitRequest::WinningPost(WinningPostRequest {
            prover_id,
            vanilla_proofs,
            randomness,
            sector_size,
            ..
        }) => post(
            PostKind::Winning,
            prover_id,
            vanilla_proofs,
            randomness,
            *sector_size,
            0,
        ),
        FilecoinSubmitRequest::SnapDeals(r) => snap_deals(r),
    }
}

fn porep_c2(r: &PorepC2Request) -> Result<Box<dyn FilStatement>, FilecoinError> {
    let prover_id = prover_id(&r.prover_id)?;
    let seal_proof = r
        .registered_proof
        .as_deref()
        .map(str::parse::<SealProof>)
        .transpose()
        .map_err(|e| bad("registered_proof", e.to_string()))?;
    let doc = c1::from_value(r.c1.clone(), seal_proof, r.sector_id)?;
    porep::prepare_c2(&doc, prover_id)
}

fn post(
    kind: PostKind,
    prover: &str,
    vanilla: &serde_json::Value,
    randomness: &str,
    sector_size: u64,
    partition: u32,
) -> Result<Box<dyn FilStatement>, FilecoinError> {
    let prover_id = prover_id(prover)?;
    let randomness = c1::parse_hex32("randomness", randomness).map_err(|e| bad("randomness", e))?;
    let vanilla_json =
        serde_json::to_vec(vanilla).map_err(|e| bad("vanilla_proofs", e.to_string()))?;
    let partition = usize::try_from(partition).map_err(|_| bad("partition", "too large"))?;
    post::prepare_post(&PostRequest {
        kind,
        sector_size,
        vanilla_json,
        randomness,
        prover_id,
        partition,
    })
}

fn snap_deals(r: &SnapDealsRequest) -> Result<Box<dyn FilStatement>, FilecoinError> {
    // The update circuit takes no prover id; one given malformed is still
    // the client's error, as for every kind.
    if !r.prover_id.is_empty() {
        prover_id(&r.prover_id)?;
    }
    let update_proof = r
        .update_proof
        .parse::<UpdateProof>()
        .map_err(|e| bad("update_proof", e.to_string()))?;
    let comm =
        |field: &'static str, hex: &str| c1::parse_hex32(field, hex).map_err(|e| bad(field, e));
    snap::prepare_snap(&SnapRequest {
        update_proof,
        comm_r_old: comm("comm_r_old", &r.comm_r_old)?,
        comm_r_new: comm("comm_r_new", &r.comm_r_new)?,
        comm_d_new: comm("comm_d_new", &r.comm_d_new)?,
        vanilla: SnapVanilla::from_value(&r.vanilla_proofs)?,
    })
}

/// The kind table for a parameter set named without a request (setup,
/// preload, Curio's circuit ids): its file, shape and blank circuit.
pub fn param_set(circuit: FilCircuit) -> Box<dyn ParamSet> {
    match circuit {
        FilCircuit::PoRep(p) => Box::new(p),
        FilCircuit::Post(kind, sector_size) => Box::new(PostSet { kind, sector_size }),
        FilCircuit::Snap(u) => Box::new(u),
    }
}

/// A kind's parameter set of a sector size, if the kind has one of that size.
type OfSize = fn(u64) -> Option<FilCircuit>;

/// Curio's circuit ids name a parameter set `<prefix>-<size>` (`porep-32g`,
/// `wpost-2k`): each kind's prefix with its set of a sector size, in the
/// order Curio's status lists them. A PoRep's parameters are the same for
/// V1 and V1_1: the current proof type names them.
const CURIO_PREFIXES: [(&str, OfSize); 4] = [
    ("porep", |size| {
        SealProof::current(size).map(FilCircuit::PoRep)
    }),
    ("wpost", |size| {
        Some(FilCircuit::Post(PostKind::Window, size))
    }),
    ("winning", |size| {
        Some(FilCircuit::Post(PostKind::Winning, size))
    }),
    ("snap", |size| {
        UpdateProof::of_size(size).map(FilCircuit::Snap)
    }),
];

/// The prefixes of Curio's circuit ids, in the order of its status.
pub fn curio_prefixes() -> impl Iterator<Item = &'static str> {
    CURIO_PREFIXES.iter().map(|(prefix, _)| *prefix)
}

/// The parameter set a Curio circuit id of `prefix` and `sector_size`
/// names; `None` where no kind has the prefix.
pub fn curio_circuit(prefix: &str, sector_size: u64) -> Option<Result<FilCircuit, FilecoinError>> {
    CURIO_PREFIXES
        .iter()
        .find(|(p, _)| *p == prefix)
        .map(|(_, of_size)| of_size(sector_size).ok_or(FilecoinError::SectorSize(sector_size)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_wire::api::WindowPostRequest;

    fn refusal(r: &FilecoinSubmitRequest) -> String {
        match statement(r) {
            Ok(_) => panic!("accepted"),
            Err(e) => e.to_string(),
        }
    }

    fn c2(c1: serde_json::Value) -> PorepC2Request {
        PorepC2Request {
            prover_id: "00".repeat(32),
            c1,
            registered_proof: None,
            sector_id: None,
            rs_seed: None,
        }
    }

    fn winning(vanilla: serde_json::Value, sector_size: u64) -> WinningPostRequest {
        WinningPostRequest {
            prover_id: "00".repeat(32),
            vanilla_proofs: vanilla,
            randomness: "00".repeat(32),
            sector_size,
            rs_seed: None,
        }
    }

    #[test]
    fn a_bad_prover_id_is_refused_by_name_for_every_kind() {
        let mut r = c2(serde_json::json!({}));
        r.prover_id = "zz".into();
        assert!(refusal(&FilecoinSubmitRequest::PorepC2(r)).contains("prover_id"));
        let r = WindowPostRequest {
            prover_id: "zz".into(),
            vanilla_proofs: serde_json::json!([]),
            randomness: "00".repeat(32),
            sector_size: 2048,
            partition: 0,
            rs_seed: None,
        };
        assert!(refusal(&FilecoinSubmitRequest::WindowPost(r)).contains("prover_id"));
    }

    #[test]
    fn a_c1_without_its_proof_type_or_of_an_unknown_size_is_refused_by_name() {
        let mut r = c2(serde_json::json!({"comm_r": [0]}));
        let text = refusal(&FilecoinSubmitRequest::PorepC2(r.clone()));
        assert!(text.contains("registered"), "{text}");
        r.registered_proof = Some("StackedDrg3KiBV1_1".into());
        let text = refusal(&FilecoinSubmitRequest::PorepC2(r));
        assert!(text.contains("registered_proof"), "{text}");
        let r = winning(serde_json::json!([]), 4096);
        let text = refusal(&FilecoinSubmitRequest::WinningPost(r));
        assert!(text.contains("4096"), "{text}");
    }

    #[test]
    fn curio_prefixes_name_each_kinds_parameter_file() {
        let file = |prefix: &str| {
            let circuit = curio_circuit(prefix, 2048)
                .expect("a known prefix")
                .expect("a known size");
            param_set(circuit)
                .cache_entry(std::path::Path::new("/nonexistent"))
                .expect("a cache entry")
                .params_name()
        };
        assert!(
            file("snap").contains("empty-sector-update"),
            "{}",
            file("snap")
        );
        assert!(
            file("porep").contains("stacked-proof-of-replication"),
            "{}",
            file("porep")
        );
        assert!(curio_circuit("nope", 2048).is_none());
        assert!(matches!(
            curio_circuit("porep", 4096),
            Some(Err(FilecoinError::SectorSize(4096)))
        ));
    }

    /// A PoSt's refusals name the PoSt input or the job's field, never "the
    /// C1 output"; a refused value is not echoed.
    #[test]
    fn post_refusals_name_the_post_input_not_a_c1_output() {
        let text = refusal(&FilecoinSubmitRequest::WinningPost(winning(
            serde_json::json!([]),
            2048,
        )));
        assert!(
            text.contains("PoSt input") && !text.contains("C1"),
            "{text}"
        );
        let text = refusal(&FilecoinSubmitRequest::WinningPost(winning(
            serde_json::json!([{"unexpected": 1}]),
            2048,
        )));
        assert!(
            text.contains("PoSt input") && !text.contains("C1"),
            "{text}"
        );
        let mut r = winning(serde_json::json!([]), 2048);
        r.randomness = "z".repeat(49_000);
        let text = refusal(&FilecoinSubmitRequest::WinningPost(r));
        assert!(
            text.contains("randomness") && !text.contains("C1"),
            "{text}"
        );
        assert!(text.len() < 400, "{} bytes", text.len());
    }
}
