//! Reading a C1 output (`seal_commit_phase1`'s result) in the forms Filecoin
//! tooling writes it:
//!
//! - **filecoin-proofs**: `SealCommitPhase1Output` as serde JSON
//!   (`vanilla_proofs`, `comm_r`, `comm_d`, `replica_id`, `seed`, `ticket`);
//!   the seal proof type comes from the caller.
//! - **filecoin-proofs-api / filecoin-ffi**: the same with a
//!   `registered_proof` name and `vanilla_proofs` wrapped in an object keyed
//!   by the proof's version (`{"StackedDrg2KiBV1": [...]}`).
//! - **lotus-bench's commit2 input**: `{"SectorNum": n, "Phase1Out":
//!   base64 of the api form, "SectorSize": bytes}`; it also carries the
//!   sector number.
//!
//! The document is bounded in size before it is parsed.

use base64::Engine as _;
use serde_json::Value;

use crate::filecoin::registered::{RegisteredError, SealProof};

/// The largest C1 document accepted: a 32 GiB sector's C1 output is tens of
/// MB of JSON, a 64 GiB one about twice that; base64 adds a third.
pub const MAX_C1_BYTES: usize = 256 << 20;

/// Why a C1 document could not be read.
#[derive(Debug, thiserror::Error)]
pub enum C1Error {
    #[error("the C1 output is {bytes} bytes, more than the {max} accepted")]
    TooLarge { bytes: usize, max: usize },
    #[error("the C1 output is not valid JSON: {0}")]
    Json(#[source] serde_json::Error),
    #[error("the C1 output is not a SealCommitPhase1Output of a {sector} sector: {source}")]
    Shape {
        sector: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("the C1 output's {field}: {reason}")]
    Field { field: &'static str, reason: String },
    #[error("the C1 output names its proof type: {0}")]
    Registered(#[from] RegisteredError),
    #[error(
        "the C1 output is for {in_file} but {given} was asked for (--registered-proof or --sector-size)"
    )]
    ProofTypeConflict {
        in_file: SealProof,
        given: SealProof,
    },
    #[error(
        "the C1 output is for sector number {in_file} but sector {given} was asked for (--sector-id)"
    )]
    SectorConflict { in_file: u64, given: u64 },
    #[error(
        "the C1 output does not say its seal proof type: pass --registered-proof (e.g. StackedDrg32GiBV1_1) or --sector-size"
    )]
    NoProofType,
    #[error("the C1 output does not carry its sector number: pass --sector-id")]
    NoSector,
    #[error(
        "the C1 output's wrapper says SectorSize {in_wrapper} but its Phase1Out is a {in_file} C1 output"
    )]
    SectorSizeConflict { in_wrapper: u64, in_file: SealProof },
    #[error("the C1 output has an unknown field `{field}` {place} (known: {known})")]
    UnknownField {
        field: String,
        place: &'static str,
        known: &'static str,
    },
}

/// The lotus-bench / Curio wrapper's fields (`Commit2In`).
const WRAPPER_FIELDS: [&str; 3] = ["SectorNum", "Phase1Out", "SectorSize"];
/// `SealCommitPhase1Output`'s fields, with the api form's `registered_proof`.
const C1_FIELDS: [&str; 7] = [
    "registered_proof",
    "vanilla_proofs",
    "comm_r",
    "comm_d",
    "replica_id",
    "seed",
    "ticket",
];

/// The longest field name a refusal names; a longer one is cut (an input is
/// never echoed whole).
const MAX_NAMED_FIELD: usize = 64;

/// Refuses a key of `obj` outside `known`, as the HTTP request's own
/// fields are refused: a misspelt or foreign field is never silently dropped.
fn refuse_unknown(
    obj: &serde_json::Map<String, Value>,
    known: &[&str],
    place: &'static str,
    known_text: &'static str,
) -> Result<(), C1Error> {
    match obj.keys().find(|k| !known.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) => Err(C1Error::UnknownField {
            field: k
                .chars()
                .take(MAX_NAMED_FIELD)
                .collect::<String>()
                .escape_debug()
                .to_string(),
            place,
            known: known_text,
        }),
    }
}

/// A C1 document, unwrapped to filecoin-proofs' own form.
#[derive(Debug)]
pub struct C1Document {
    /// filecoin-proofs' `SealCommitPhase1Output` as JSON.
    pub output: Value,
    /// The seal proof type, from the document or the caller.
    pub seal_proof: SealProof,
    /// The sector number, from the document or the caller.
    pub sector_id: u64,
}

fn field_err(field: &'static str, reason: impl Into<String>) -> C1Error {
    C1Error::Field {
        field,
        reason: reason.into(),
    }
}

/// Parses `bytes` (any of the module's forms); `seal_proof` and `sector_id`
/// are the caller's, required where the document lacks them and checked
/// against the document where it has them.
pub fn parse(
    bytes: &[u8],
    seal_proof: Option<SealProof>,
    sector_id: Option<u64>,
) -> Result<C1Document, C1Error> {
    if bytes.len() > MAX_C1_BYTES {
        return Err(C1Error::TooLarge {
            bytes: bytes.len(),
            max: MAX_C1_BYTES,
        });
    }
    let value: Value = serde_json::from_slice(bytes).map_err(C1Error::Json)?;
    from_value(value, seal_proof, sector_id)
}

/// [`parse`] of a document already read as JSON (a daemon job's `c1`).
pub fn from_value(
    mut value: Value,
    seal_proof: Option<SealProof>,
    sector_id: Option<u64>,
) -> Result<C1Document, C1Error> {
    let mut sector_in_file = None;
    let mut size_in_wrapper = None;
    if let Some(obj) = value.as_object_mut() {
        if obj.contains_key("Phase1Out") {
            refuse_unknown(
                obj,
                &WRAPPER_FIELDS,
                "in the SectorNum/Phase1Out wrapper",
                "SectorNum, Phase1Out, SectorSize",
            )?;
            size_in_wrapper = match obj.get("SectorSize") {
                None => None,
                Some(v) => Some(
                    v.as_u64()
                        .ok_or_else(|| field_err("SectorSize", "not an unsigned integer"))?,
                ),
            };
            let n = obj
                .get("SectorNum")
                .and_then(Value::as_u64)
                .ok_or_else(|| field_err("SectorNum", "missing or not an unsigned integer"))?;
            sector_in_file = Some(n);
            let b64 = obj
                .get("Phase1Out")
                .and_then(Value::as_str)
                .ok_or_else(|| field_err("Phase1Out", "not a string"))?;
            let inner = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| field_err("Phase1Out", format!("not base64: {e}")))?;
            value = serde_json::from_slice(&inner).map_err(C1Error::Json)?;
        }
    }
    let mut in_file = None;
    if let Some(obj) = value.as_object_mut() {
        refuse_unknown(
            obj,
            &C1_FIELDS,
            "at its top level",
            "registered_proof, vanilla_proofs, comm_r, comm_d, replica_id, seed, ticket",
        )?;
        if let Some(name) = obj.remove("registered_proof") {
            let name = name
                .as_str()
                .ok_or_else(|| field_err("registered_proof", "not a string"))?;
            in_file = Some(name.parse::<SealProof>()?);
        }
        // The api form keys the proofs by version: {"StackedDrg2KiBV1": [...]}.
        if let Some(Value::Object(wrapped)) = obj.get("vanilla_proofs") {
            if wrapped.len() != 1 {
                return Err(field_err(
                    "vanilla_proofs",
                    "an object, but not one keyed by a single proof version",
                ));
            }
            let inner = wrapped.values().next().cloned().unwrap_or(Value::Null);
            obj.insert("vanilla_proofs".into(), inner);
        }
    } else {
        return Err(field_err("top level", "not a JSON object"));
    }
    let seal_proof = match (in_file, seal_proof) {
        (Some(f), Some(g)) if f != g => {
            return Err(C1Error::ProofTypeConflict {
                in_file: f,
                given: g,
            })
        }
        (Some(p), _) | (None, Some(p)) => p,
        (None, None) => return Err(C1Error::NoProofType),
    };
    if let Some(size) = size_in_wrapper {
        if size != seal_proof.sector_size {
            return Err(C1Error::SectorSizeConflict {
                in_wrapper: size,
                in_file: seal_proof,
            });
        }
    }
    let sector_id = match (sector_in_file, sector_id) {
        (Some(f), Some(g)) if f != g => {
            return Err(C1Error::SectorConflict {
                in_file: f,
                given: g,
            })
        }
        (Some(s), _) | (None, Some(s)) => s,
        (None, None) => return Err(C1Error::NoSector),
    };
    Ok(C1Document {
        output: value,
        seal_proof,
        sector_id,
    })
}

/// A prover id from a miner's actor id, as Filecoin derives it: the payload
/// of the ID address (the id as unsigned LEB128), zero-padded to 32 bytes.
pub fn prover_id_of_miner(actor_id: u64) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut v = actor_id;
    let mut i = 0;
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out[i] = byte;
            break;
        }
        out[i] = byte | 0x80;
        i += 1;
    }
    out
}

/// The miner's actor id whose prover id `prover_id` is: the inverse of
/// [`prover_id_of_miner`], for clients that name a miner as Curio does.
/// None when the bytes are not an ID address payload (a LEB128 number of at
/// most 10 bytes, in its shortest form, zeros after it).
pub fn miner_of_prover_id(prover_id: &[u8; 32]) -> Option<u64> {
    let mut v: u64 = 0;
    for (i, byte) in prover_id.iter().take(10).enumerate() {
        let bits = u64::from(byte & 0x7f);
        let shifted = bits.checked_shl(7 * i as u32)?;
        if shifted >> (7 * i as u32) != bits {
            return None;
        }
        v |= shifted;
        if byte & 0x80 == 0 {
            let tail_zero = prover_id[i + 1..].iter().all(|b| *b == 0);
            return (tail_zero && prover_id_of_miner(v) == *prover_id).then_some(v);
        }
    }
    None
}

/// A prover id from 64 hex digits.
pub fn parse_prover_id(s: &str) -> Result<[u8; 32], String> {
    parse_hex32("prover id", s)
}

/// 32 bytes (a prover id, a randomness) from 64 hex digits. The refusal
/// names `what` and the cause, never the value (it may be kilobytes long).
pub fn parse_hex32(what: &str, s: &str) -> Result<[u8; 32], String> {
    let digits = s.strip_prefix("0x").unwrap_or(s);
    if digits.len() != 64 {
        return Err(format!(
            "{what} must be 64 hex digits (32 bytes), not {} characters",
            digits.chars().count()
        ));
    }
    let bytes = hex::decode(digits).map_err(|e| format!("{what} is not hex: {e}"))?;
    bytes
        .try_into()
        .map_err(|b: Vec<u8>| format!("{what} has {} bytes, not 32", b.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_miner_id_round_trips_through_its_prover_id_and_nothing_else_is_one() {
        for id in [0, 1, 127, 128, 1000, 1 << 35, u64::MAX] {
            assert_eq!(
                miner_of_prover_id(&prover_id_of_miner(id)),
                Some(id),
                "{id}"
            );
        }
        let mut trailing = prover_id_of_miner(1000);
        trailing[31] = 1;
        assert_eq!(miner_of_prover_id(&trailing), None);
        assert_eq!(miner_of_prover_id(&[0xff; 32]), None);
        // 0 written in two bytes is not the shortest form.
        let mut padded = [0u8; 32];
        padded[0] = 0x80;
        assert_eq!(miner_of_prover_id(&padded), None);
    }

    #[test]
    fn miner_ids_encode_as_leb128_like_id_addresses() {
        assert_eq!(prover_id_of_miner(1000)[..3], [0xe8, 0x07, 0]);
        assert_eq!(prover_id_of_miner(0)[..2], [0, 0]);
        assert_eq!(prover_id_of_miner(127)[..2], [0x7f, 0]);
        assert_eq!(prover_id_of_miner(128)[..3], [0x80, 0x01, 0]);
    }

    #[test]
    fn documents_without_type_or_sector_and_conflicts_are_named() {
        let doc = br#"{"vanilla_proofs":[],"comm_r":[]}"#;
        assert!(matches!(
            parse(doc, None, Some(1)),
            Err(C1Error::NoProofType)
        ));
        let p: SealProof = "StackedDrg2KiBV1_1".parse().expect("name");
        assert!(matches!(parse(doc, Some(p), None), Err(C1Error::NoSector)));
        let api = br#"{"registered_proof":"StackedDrg8MiBV1_1","vanilla_proofs":{"StackedDrg8MiBV1":[[]]}}"#;
        assert!(matches!(
            parse(api, Some(p), Some(1)),
            Err(C1Error::ProofTypeConflict { .. })
        ));
        let ok = parse(api, None, Some(1)).expect("api form");
        assert_eq!(ok.seal_proof.sector_size, 8 << 20);
        assert_eq!(ok.output["vanilla_proofs"], serde_json::json!([[]]));
        let inner = base64::engine::general_purpose::STANDARD.encode(api);
        let bench = format!(r#"{{"SectorNum":7,"Phase1Out":"{inner}","SectorSize":8388608}}"#);
        let ok = parse(bench.as_bytes(), None, None).expect("lotus-bench form");
        assert_eq!(ok.sector_id, 7);
        assert!(matches!(
            parse(bench.as_bytes(), None, Some(8)),
            Err(C1Error::SectorConflict {
                in_file: 7,
                given: 8
            })
        ));
        assert!(matches!(
            parse(b"{\"a\":", Some(p), Some(1)),
            Err(C1Error::Json(_))
        ));
        assert!(matches!(
            parse(b"[1]", Some(p), Some(1)),
            Err(C1Error::Field { .. })
        ));
    }

    fn wrapper(inner: &[u8], sector_size: u64) -> String {
        let inner = base64::engine::general_purpose::STANDARD.encode(inner);
        format!(r#"{{"SectorNum":7,"Phase1Out":"{inner}","SectorSize":{sector_size}}}"#)
    }

    #[test]
    fn a_wrapper_whose_sector_size_contradicts_its_phase1out_is_refused() {
        let api = br#"{"registered_proof":"StackedDrg8MiBV1_1","vanilla_proofs":{"StackedDrg8MiBV1":[[]]}}"#;
        let err = parse(wrapper(api, 2048).as_bytes(), None, None).expect_err("contradiction");
        assert!(
            matches!(
                err,
                C1Error::SectorSizeConflict {
                    in_wrapper: 2048,
                    ..
                }
            ),
            "{err}"
        );
        // Without a proof type inside, the caller's type is what it contradicts.
        let bare = br#"{"vanilla_proofs":[[]]}"#;
        let p: SealProof = "StackedDrg2KiBV1_1".parse().expect("name");
        assert!(parse(wrapper(bare, 2048).as_bytes(), Some(p), None).is_ok());
        assert!(matches!(
            parse(wrapper(bare, 8 << 20).as_bytes(), Some(p), None),
            Err(C1Error::SectorSizeConflict { .. })
        ));
    }

    #[test]
    fn unknown_fields_are_refused_at_the_top_and_in_the_wrapper() {
        let p: SealProof = "StackedDrg2KiBV1_1".parse().expect("name");
        let doc = br#"{"vanilla_proofs":[[]],"comm_rr":[1]}"#;
        let err = parse(doc, Some(p), Some(1)).expect_err("unknown field");
        assert!(err.to_string().contains("`comm_rr`"), "{err}");
        let bare = br#"{"vanilla_proofs":[[]]}"#;
        let inner = base64::engine::general_purpose::STANDARD.encode(bare);
        let extra = format!(r#"{{"SectorNum":7,"Phase1Out":"{inner}","Extra":1}}"#);
        let err = parse(extra.as_bytes(), Some(p), None).expect_err("unknown wrapper field");
        assert!(err.to_string().contains("`Extra`"), "{err}");
        // A kilobytes-long field name is cut, not echoed.
        let long = format!(r#"{{"vanilla_proofs":[[]],"{}":1}}"#, "x".repeat(50_000));
        let err = parse(long.as_bytes(), Some(p), Some(1)).expect_err("unknown field");
        assert!(
            err.to_string().len() < 400,
            "{} bytes",
            err.to_string().len()
        );
    }

    #[test]
    fn hex_refusals_name_the_field_not_the_value() {
        let long = "z".repeat(49_000);
        let err = parse_hex32("randomness", &long).expect_err("not hex");
        assert!(err.starts_with("randomness") && err.len() < 200, "{err}");
        let err = parse_hex32("randomness", &"zz".repeat(32)).expect_err("not hex");
        assert!(err.contains("not hex") && !err.contains("zzzz"), "{err}");
        assert!(parse_hex32("randomness", &"07".repeat(32)).is_ok());
    }
}
