//! Curio's proof requests (`SubmitProofRequest`) in the daemon's own terms:
//! filecoin-ffi's proof-type numbers, the miner id, raw 32-byte values and
//! bincode vanilla proofs become a [`FilecoinSubmitRequest`], which the
//! engine checks and proves as it does one from the HTTP API.
//!
//! Only the shape is judged here (numbers in range, lengths, decodable
//! bincode, fields the kind does not take left empty); whether the inputs
//! are true of the sector (replica id, vanilla proofs) is the engine's
//! check, the same for every client.

use crate::filecoin::c1::prover_id_of_miner;
use crate::filecoin::registered::{size_name, SealProof, SealVersion, SECTOR_SIZES};
use crate::filecoin::{FilecoinError, UpdateProof};
use bincode::Options as _;
use fleet_wire::api::{
    FilecoinKind, FilecoinSubmitRequest, PorepC2Request, SnapDealsRequest, WindowPostRequest,
    WinningPostRequest,
};
use serde_json::Value;
use storage_proofs_core::merkle::MerkleTreeTrait;

use crate::daemon::grpc::pb::{ProofKind, SubmitProofRequest};

/// Most vanilla proofs one request may carry: a WindowPoSt partition holds
/// at most 2349 sectors, a SnapDeals update 16 partitions.
pub const MAX_VANILLA_PROOFS: usize = 4096;

/// Why a request was refused before it reached the engine. Each names the
/// field and the cause, never the field's value.
#[derive(Debug, thiserror::Error)]
pub enum CurioError {
    #[error("proof_kind {0} is not one of POREP_SEAL_COMMIT, SNAP_DEALS_UPDATE, WINDOW_POST_PARTITION, WINNING_POST")]
    Kind(i32),
    #[error("registered_proof {number}: {reason}")]
    Registered { number: u64, reason: String },
    #[error("sector_size {given} disagrees with registered_proof {number} ({expected} bytes)")]
    SectorSize {
        given: u64,
        number: u64,
        expected: u64,
    },
    #[error("{field}: {reason}")]
    Field { field: &'static str, reason: String },
    #[error("vanilla_proofs[{index}] is not a bincode FallbackPoStSectorProof of a {sector} sector: {reason}")]
    Bincode {
        index: usize,
        sector: &'static str,
        reason: String,
    },
}

fn field(field: &'static str, reason: impl Into<String>) -> CurioError {
    CurioError::Field {
        field,
        reason: reason.into(),
    }
}

/// The seal proof of filecoin-ffi's number: 0-4 V1, 5-9 V1_1 (2 KiB, 8 MiB,
/// 512 MiB, 32 GiB, 64 GiB each); 10-14 (Synthetic PoRep) and 15-19
/// (NI-PoRep) are refused by name, with the reason.
pub fn seal_proof(number: u64) -> Result<SealProof, CurioError> {
    let refuse = |reason: String| CurioError::Registered { number, reason };
    let size = |i: u64| SECTOR_SIZES[(i % 5) as usize];
    match number {
        0..=9 => Ok(SealProof {
            sector_size: size(number).0,
            version: if number < 5 {
                SealVersion::V1
            } else {
                SealVersion::V1_1
            },
        }),
        10..=14 => Err(refuse(format!(
            "StackedDrg{}V1_1_Feat_SyntheticPoRep: Synthetic PoRep is not proved by this daemon (its C1 carries the synthetic challenges' proofs, which this prover does not check yet); seal with StackedDrg{}V1_1",
            size(number).1,
            size(number).1
        ))),
        15..=19 => Err(refuse(format!(
            "StackedDrg{}V1_2_Feat_NiPoRep: non-interactive PoRep aggregates many more challenges into a proof this prover does not make",
            size(number).1
        ))),
        _ => Err(refuse(
            "not a seal proof type (filecoin-ffi numbers them 0 to 19)".into(),
        )),
    }
}

/// The PoSt of filecoin-ffi's number: 0-4 WinningPoSt, 10-14 WindowPoSt
/// (`…V1_2`, what the chain takes since network version 21); 5-9, the
/// WindowPoSt of the old API, are refused.
pub fn post_proof(number: u64) -> Result<(FilecoinKind, u64), CurioError> {
    let refuse = |reason: String| CurioError::Registered { number, reason };
    match number {
        0..=4 => Ok((FilecoinKind::WinningPost, SECTOR_SIZES[number as usize].0)),
        10..=14 => Ok((
            FilecoinKind::WindowPost,
            SECTOR_SIZES[(number - 10) as usize].0,
        )),
        5..=9 => Err(refuse(format!(
            "StackedDrgWindow{}V1 is the WindowPoSt of the old API (challenges drawn differently); this daemon proves StackedDrgWindow{}V1_2 (numbers 10-14)",
            SECTOR_SIZES[(number - 5) as usize].1,
            SECTOR_SIZES[(number - 5) as usize].1
        ))),
        _ => Err(refuse(
            "not a PoSt proof type (filecoin-ffi numbers them 0 to 14)".into(),
        )),
    }
}

/// `sector_size` as sent (0: the proof type's own) checked against the type.
fn sector_size(given: u64, number: u64, expected: u64) -> Result<u64, CurioError> {
    match given {
        0 => Ok(expected),
        g if g == expected => Ok(g),
        g => Err(CurioError::SectorSize {
            given: g,
            number,
            expected,
        }),
    }
}

fn must_be_empty(v: &[u8], name: &'static str, kind: &str) -> Result<(), CurioError> {
    match v.is_empty() {
        true => Ok(()),
        false => Err(field(name, format!("is not taken by a {kind} request"))),
    }
}

fn raw32(v: &[u8], name: &'static str) -> Result<[u8; 32], CurioError> {
    <[u8; 32]>::try_from(v).map_err(|_| field(name, format!("has {} bytes; 32 expected", v.len())))
}

/// The daemon's request for Curio's `req` (the kind, its proof type and
/// inputs), or why it cannot be one. `rs_seed` stays unset: r and s come
/// from the OS, as a node's must.
pub fn translate(req: &SubmitProofRequest) -> Result<FilecoinSubmitRequest, CurioError> {
    let kind = ProofKind::try_from(req.proof_kind).map_err(|_| CurioError::Kind(req.proof_kind))?;
    let prover_id = hex::encode(prover_id_of_miner(req.miner_id));
    match kind {
        ProofKind::Unspecified => Err(CurioError::Kind(req.proof_kind)),
        ProofKind::SnapDealsUpdate => snap_deals(req, prover_id),
        ProofKind::PorepSealCommit => {
            let name = kind.as_str_name();
            must_be_empty(&req.randomness, "randomness", name)?;
            if !req.vanilla_proofs.is_empty() {
                return Err(field(
                    "vanilla_proofs",
                    "is not taken by a POREP_SEAL_COMMIT request (its C1 output goes in vanilla_proof)",
                ));
            }
            let seal = seal_proof(req.registered_proof)?;
            sector_size(req.sector_size, req.registered_proof, seal.sector_size)?;
            if req.vanilla_proof.is_empty() {
                return Err(field("vanilla_proof", "is empty: the C1 output goes here"));
            }
            let c1: Value = serde_json::from_slice(&req.vanilla_proof).map_err(|e| {
                field(
                    "vanilla_proof",
                    format!("is not JSON (line {}, column {})", e.line(), e.column()),
                )
            })?;
            // A wrapper that names its own sector number must agree with the
            // request's; the C1 reader judges the rest.
            let sector_id = match c1.get("SectorNum").and_then(Value::as_u64) {
                Some(n) if req.sector_number != 0 && n != req.sector_number => {
                    return Err(field(
                        "sector_number",
                        format!(
                            "is {} but the C1 output's SectorNum is {n}",
                            req.sector_number
                        ),
                    ))
                }
                Some(n) => n,
                None => req.sector_number,
            };
            Ok(FilecoinSubmitRequest::PorepC2(PorepC2Request {
                prover_id,
                c1,
                registered_proof: Some(seal.to_string()),
                sector_id: Some(sector_id),
                rs_seed: None,
            }))
        }
        ProofKind::WindowPostPartition | ProofKind::WinningPost => {
            let name = kind.as_str_name();
            must_be_empty(&req.vanilla_proof, "vanilla_proof", name)?;
            let (post_kind, size) = post_proof(req.registered_proof)?;
            let wanted = match kind {
                ProofKind::WinningPost => FilecoinKind::WinningPost,
                _ => FilecoinKind::WindowPost,
            };
            if post_kind != wanted {
                return Err(CurioError::Registered {
                    number: req.registered_proof,
                    reason: format!("is a {post_kind} proof type, not one of {name}"),
                });
            }
            let size = sector_size(req.sector_size, req.registered_proof, size)?;
            if wanted == FilecoinKind::WinningPost && req.partition_index != 0 {
                return Err(field(
                    "partition_index",
                    "is not taken by a WINNING_POST request",
                ));
            }
            let randomness = raw32(&req.randomness, "randomness")?;
            let vanilla = vanilla_posts(&req.vanilla_proofs, size)?;
            let randomness = hex::encode(randomness);
            Ok(match wanted {
                FilecoinKind::WinningPost => {
                    FilecoinSubmitRequest::WinningPost(WinningPostRequest {
                        prover_id,
                        vanilla_proofs: vanilla,
                        randomness,
                        sector_size: size,
                        rs_seed: None,
                    })
                }
                _ => FilecoinSubmitRequest::WindowPost(WindowPostRequest {
                    prover_id,
                    vanilla_proofs: vanilla,
                    randomness,
                    sector_size: size,
                    partition: req.partition_index,
                    rs_seed: None,
                }),
            })
        }
    }
}

/// Curio's request for `req`: the inverse of [`translate`], for a client of
/// our own that asks as Curio asks (`prover client c2|post|snap --grpc`,
/// fleetctl's smoke step). Numbers are filecoin-ffi's, values raw bytes,
/// vanilla proofs bincode (a JSON form is decoded and encoded); the prover
/// id must be a miner's (an ID address payload), as Curio has only the
/// miner id (a SnapDeals update takes none: miner 0 where it has none).
pub fn submit_of(
    req: &FilecoinSubmitRequest,
    request_id: &str,
) -> Result<SubmitProofRequest, FilecoinError> {
    let base = SubmitProofRequest {
        request_id: request_id.to_string(),
        ..Default::default()
    };
    match req {
        FilecoinSubmitRequest::PorepC2(r) => porep_submit(r, base),
        FilecoinSubmitRequest::WinningPost(r) => post_submit(
            PostForm {
                kind: FilecoinKind::WinningPost,
                prover_id: &r.prover_id,
                vanilla: &r.vanilla_proofs,
                randomness: &r.randomness,
                sector_size: r.sector_size,
                partition: 0,
            },
            base,
        ),
        FilecoinSubmitRequest::WindowPost(r) => post_submit(
            PostForm {
                kind: FilecoinKind::WindowPost,
                prover_id: &r.prover_id,
                vanilla: &r.vanilla_proofs,
                randomness: &r.randomness,
                sector_size: r.sector_size,
                partition: r.partition,
            },
            base,
        ),
        FilecoinSubmitRequest::SnapDeals(r) => snap_submit(r, base),
    }
}

fn request_field(field: &'static str, reason: impl Into<String>) -> FilecoinError {
    FilecoinError::RequestField {
        field,
        reason: reason.into(),
    }
}

/// The miner whose prover id `prover_id` (64 hex digits) is.
fn miner_of(prover_id: &str) -> Result<u64, FilecoinError> {
    let prover_id = crate::filecoin::c1::parse_prover_id(prover_id)
        .map_err(|e| request_field("prover_id", e))?;
    crate::filecoin::c1::miner_of_prover_id(&prover_id).ok_or_else(|| {
        request_field(
            "prover_id",
            "is not a miner's (an ID address payload): Curio's request carries only the miner id",
        )
    })
}

/// 32 bytes from 64 hex digits.
fn hex32(v: &str, field: &'static str) -> Result<Vec<u8>, FilecoinError> {
    match hex::decode(v) {
        Ok(b) if b.len() == 32 => Ok(b),
        _ => Err(request_field(field, "is not 32 bytes as 64 hex digits")),
    }
}

/// The C1 output goes as given (any form the C1 reader takes); its proof
/// type and sector number come from the request or the C1 output.
fn porep_submit(
    req: &PorepC2Request,
    base: SubmitProofRequest,
) -> Result<SubmitProofRequest, FilecoinError> {
    let miner_id = miner_of(&req.prover_id)?;
    let seal_proof = req
        .registered_proof
        .as_deref()
        .map(str::parse::<SealProof>)
        .transpose()
        .map_err(|e| request_field("registered_proof", e.to_string()))?;
    let doc = crate::filecoin::c1::from_value(req.c1.clone(), seal_proof, req.sector_id)?;
    let vanilla_proof =
        serde_json::to_vec(&req.c1).map_err(|e| request_field("c1", e.to_string()))?;
    Ok(SubmitProofRequest {
        proof_kind: ProofKind::PorepSealCommit as i32,
        miner_id,
        sector_number: doc.sector_id,
        registered_proof: doc.seal_proof.number(),
        sector_size: doc.seal_proof.sector_size,
        vanilla_proof,
        ..base
    })
}

/// A PoSt request's fields, either kind.
struct PostForm<'a> {
    kind: FilecoinKind,
    prover_id: &'a str,
    vanilla: &'a Value,
    randomness: &'a str,
    sector_size: u64,
    partition: u32,
}

/// filecoin-ffi's PoSt number of the kind and size (see [`post_proof`]),
/// the randomness raw, one bincode `FallbackPoStSectorProof` per sector.
fn post_submit(
    form: PostForm<'_>,
    base: SubmitProofRequest,
) -> Result<SubmitProofRequest, FilecoinError> {
    let index = SECTOR_SIZES
        .iter()
        .position(|(size, _)| *size == form.sector_size)
        .ok_or(FilecoinError::SectorSize(form.sector_size))? as u64;
    let (proof_kind, registered_proof) = match form.kind {
        FilecoinKind::WinningPost => (ProofKind::WinningPost, index),
        _ => (ProofKind::WindowPostPartition, 10 + index),
    };
    let json = serde_json::to_vec(form.vanilla)
        .map_err(|e| request_field("vanilla_proofs", e.to_string()))?;
    Ok(SubmitProofRequest {
        proof_kind: proof_kind as i32,
        miner_id: miner_of(form.prover_id)?,
        registered_proof,
        sector_size: form.sector_size,
        randomness: hex32(form.randomness, "randomness")?,
        partition_index: form.partition,
        vanilla_proofs: crate::filecoin::post::vanilla_bincode(&json, form.sector_size)?,
        ..base
    })
}

/// filecoin-ffi's update proof number, the commitments raw, one bincode
/// `PartitionProof` per partition.
fn snap_submit(
    req: &SnapDealsRequest,
    base: SubmitProofRequest,
) -> Result<SubmitProofRequest, FilecoinError> {
    let update: UpdateProof = req.update_proof.parse().map_err(
        |e: crate::filecoin::snap::update_proof::UpdateProofError| {
            request_field("update_proof", e.to_string())
        },
    )?;
    let miner_id = match req.prover_id.is_empty() {
        true => 0,
        false => miner_of(&req.prover_id)?,
    };
    let vanilla = crate::filecoin::snap::SnapVanilla::from_value(&req.vanilla_proofs)?;
    Ok(SubmitProofRequest {
        proof_kind: ProofKind::SnapDealsUpdate as i32,
        miner_id,
        registered_proof: update.number(),
        sector_size: update.sector_size,
        comm_r_old: hex32(&req.comm_r_old, "comm_r_old")?,
        comm_r_new: hex32(&req.comm_r_new, "comm_r_new")?,
        comm_d_new: hex32(&req.comm_d_new, "comm_d_new")?,
        vanilla_proofs: vanilla.into_bincode(update.sector_size)?,
        ..base
    })
}

/// A SnapDeals update: filecoin-ffi's update proof number (0-4), the three
/// commitments as raw 32 bytes, one bincode `PartitionProof` per partition
/// (passed on as hex; the update's statement decodes and checks them).
fn snap_deals(
    req: &SubmitProofRequest,
    prover_id: String,
) -> Result<FilecoinSubmitRequest, CurioError> {
    let name = ProofKind::SnapDealsUpdate.as_str_name();
    must_be_empty(&req.vanilla_proof, "vanilla_proof", name)?;
    must_be_empty(&req.randomness, "randomness", name)?;
    let update =
        UpdateProof::from_number(req.registered_proof).map_err(|e| CurioError::Registered {
            number: req.registered_proof,
            reason: e.to_string(),
        })?;
    sector_size(req.sector_size, req.registered_proof, update.sector_size)?;
    if req.vanilla_proofs.is_empty() {
        return Err(field("vanilla_proofs", "is empty: one proof per partition"));
    }
    if req.vanilla_proofs.len() > MAX_VANILLA_PROOFS {
        return Err(field(
            "vanilla_proofs",
            format!(
                "has {} proofs; at most {MAX_VANILLA_PROOFS}",
                req.vanilla_proofs.len()
            ),
        ));
    }
    let comm = |v: &[u8], name| raw32(v, name).map(hex::encode);
    Ok(FilecoinSubmitRequest::SnapDeals(SnapDealsRequest {
        prover_id,
        update_proof: update.to_string(),
        comm_r_old: comm(&req.comm_r_old, "comm_r_old")?,
        comm_r_new: comm(&req.comm_r_new, "comm_r_new")?,
        comm_d_new: comm(&req.comm_d_new, "comm_d_new")?,
        vanilla_proofs: Value::Array(
            req.vanilla_proofs
                .iter()
                .map(|p| Value::String(hex::encode(p)))
                .collect(),
        ),
        rs_seed: None,
    }))
}

/// Bincode `FallbackPoStSectorProof`s (what filecoin-proofs-api's
/// `generate_single_vanilla_proof` returns) as the JSON array the PoSt
/// statement reads.
fn vanilla_posts(proofs: &[Vec<u8>], sector_size: u64) -> Result<Value, CurioError> {
    if proofs.is_empty() {
        return Err(field("vanilla_proofs", "is empty: one proof per sector"));
    }
    if proofs.len() > MAX_VANILLA_PROOFS {
        return Err(field(
            "vanilla_proofs",
            format!("has {} proofs; at most {MAX_VANILLA_PROOFS}", proofs.len()),
        ));
    }
    let decoded = crate::filecoin::with_tree!(sector_size, decode_all, proofs, sector_size);
    decoded.map_err(|e| match e {
        FilecoinError::ProofCrates { reason, .. } => field("vanilla_proofs", reason),
        other => field("vanilla_proofs", other.to_string()),
    })?
}

fn decode_all<Tree: 'static + MerkleTreeTrait>(
    proofs: &[Vec<u8>],
    sector_size: u64,
) -> Result<Result<Value, CurioError>, FilecoinError> {
    let sector = size_name(sector_size).unwrap_or("?");
    let mut out = Vec::with_capacity(proofs.len());
    for (index, bytes) in proofs.iter().enumerate() {
        // Bounded by the message limit; bincode's own length prefixes are
        // checked against the bytes present (no allocation beyond them).
        let proof: filecoin_proofs::FallbackPoStSectorProof<Tree> =
            match bincode::DefaultOptions::new()
                .with_fixint_encoding()
                .allow_trailing_bytes()
                .with_limit(bytes.len() as u64)
                .deserialize(bytes)
            {
                Ok(p) => p,
                Err(e) => {
                    return Ok(Err(CurioError::Bincode {
                        index,
                        sector,
                        reason: e.to_string(),
                    }))
                }
            };
        match serde_json::to_value(&proof) {
            Ok(v) => out.push(v),
            Err(e) => {
                return Ok(Err(CurioError::Bincode {
                    index,
                    sector,
                    reason: e.to_string(),
                }))
            }
        }
    }
    Ok(Ok(Value::Array(out)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_numbers_follow_filecoin_ffi() {
        assert_eq!(seal_proof(3).unwrap().to_string(), "StackedDrg32GiBV1");
        assert_eq!(seal_proof(5).unwrap().to_string(), "StackedDrg2KiBV1_1");
        assert_eq!(seal_proof(8).unwrap().to_string(), "StackedDrg32GiBV1_1");
        let e = seal_proof(13).unwrap_err().to_string();
        assert!(e.contains("StackedDrg32GiBV1_1_Feat_SyntheticPoRep"), "{e}");
        let e = seal_proof(18).unwrap_err().to_string();
        assert!(e.contains("StackedDrg32GiBV1_2_Feat_NiPoRep"), "{e}");
        assert!(seal_proof(20).is_err());
        for n in 0..20 {
            let _ = seal_proof(n);
        }
    }

    #[test]
    fn post_numbers_follow_filecoin_ffi() {
        assert_eq!(post_proof(0).unwrap(), (FilecoinKind::WinningPost, 2048));
        assert_eq!(
            post_proof(13).unwrap(),
            (FilecoinKind::WindowPost, 32 << 30)
        );
        assert!(post_proof(7).unwrap_err().to_string().contains("V1_2"));
        assert!(post_proof(15).is_err());
    }

    fn base(kind: ProofKind) -> SubmitProofRequest {
        SubmitProofRequest {
            request_id: "r".into(),
            proof_kind: kind as i32,
            miner_id: 1000,
            ..Default::default()
        }
    }

    #[test]
    fn refusals_name_the_field_and_never_echo_it() {
        let mut r = base(ProofKind::PorepSealCommit);
        r.registered_proof = 5;
        r.vanilla_proof = vec![b'{'; 100_000];
        let e = translate(&r).unwrap_err().to_string();
        assert!(e.starts_with("vanilla_proof: is not JSON"), "{e}");
        assert!(e.len() < 200, "{e}");
        r.vanilla_proof = br#"{"SectorNum": 7, "Phase1Out": "", "SectorSize": 2048}"#.to_vec();
        r.sector_number = 8;
        let e = translate(&r).unwrap_err().to_string();
        assert!(e.contains("SectorNum is 7"), "{e}");
        r.sector_size = 4096;
        let e = translate(&r).unwrap_err().to_string();
        assert!(e.contains("sector_size 4096 disagrees"), "{e}");

        let mut w = base(ProofKind::WinningPost);
        w.registered_proof = 0;
        w.randomness = vec![0; 31];
        w.vanilla_proofs = vec![vec![1, 2, 3]];
        let e = translate(&w).unwrap_err().to_string();
        assert!(e.contains("randomness: has 31 bytes"), "{e}");
        w.randomness = vec![0; 32];
        let e = translate(&w).unwrap_err().to_string();
        assert!(e.contains("vanilla_proofs[0] is not a bincode"), "{e}");
        w.registered_proof = 10;
        let e = translate(&w).unwrap_err().to_string();
        assert!(e.contains("window-post proof type"), "{e}");
        let mut s = base(ProofKind::SnapDealsUpdate);
        s.registered_proof = 5;
        let e = translate(&s).unwrap_err().to_string();
        assert!(e.starts_with("registered_proof 5"), "{e}");
        s.registered_proof = 0;
        let e = translate(&s).unwrap_err().to_string();
        assert!(e.contains("vanilla_proofs: is empty"), "{e}");
        s.vanilla_proofs = vec![vec![0; 8]];
        s.comm_r_old = vec![0; 33];
        let e = translate(&s).unwrap_err().to_string();
        assert!(e.contains("comm_r_old: has 33 bytes"), "{e}");
        s.comm_r_old = vec![1; 32];
        s.comm_r_new = vec![2; 32];
        s.comm_d_new = vec![3; 32];
        let FilecoinSubmitRequest::SnapDeals(snap) = translate(&s).expect("a snap request") else {
            panic!("not a SnapDeals request");
        };
        assert_eq!(snap.update_proof, "StackedDrg2KiBV1");
        assert_eq!(snap.comm_r_new, "02".repeat(32));
        assert_eq!(snap.vanilla_proofs, serde_json::json!(["0000000000000000"]));
        let mut odd = base(ProofKind::WinningPost);
        odd.proof_kind = 77;
        assert!(translate(&odd).unwrap_err().to_string().contains("77"));
    }
}
