//! Forged committed-capacity C1 outputs (`prover::filecoin::forge`), judged
//! by the proof crates: their vanilla verifier (through our own C1 check,
//! `porep::prepare_c2`), our C2 and filecoin-proofs' `verify_seal`.
//!
//! A test binary of its own, like `filecoin.rs` and for its reason:
//! filecoin-proofs reads `FIL_PROOFS_PARAMETER_CACHE` once per process. It
//! names the same folder as `filecoin.rs` does, where the TEST-ONLY 2 KiB
//! PoRep parameters are kept between runs; they are generated (with the
//! same seed, so the two binaries share one file) only where missing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use fleet_wire::api::{FilecoinSubmitRequest, JobState, PorepC2Request};
use prover::backend::cpu::CpuBackend;
use prover::daemon::engine::one_shot::{self, Job, OneShot};
use prover::filecoin::cache::CACHE_ENV;
use prover::filecoin::forge::{self, CcSector, Forged};
use prover::filecoin::porep;
use prover::filecoin::seal::{self, Sealed};
use prover::filecoin::{c1, setup, FilCircuit, FilecoinError, SealProof};
use prover::setup::fixed_base::CpuFixedBase;
use serde_json::Value;
use std::sync::Arc;

/// `filecoin.rs`'s parameter seed: its fixture and this one make one file.
const TEST_SEED: u64 = 26;

fn proof_of(size: &str) -> SealProof {
    format!("StackedDrg{size}V1_1")
        .parse()
        .expect("a known seal proof")
}

/// The shared parameter folder, with the 2 KiB PoRep parameters in it.
fn param_cache() -> &'static Path {
    static CACHE: OnceLock<PathBuf> = OnceLock::new();
    CACHE.get_or_init(|| {
        let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("filecoin")
            .join("param-cache");
        // Before filecoin-proofs first reads its settings (every test that
        // proves or verifies a seal comes through here first).
        std::env::set_var(CACHE_ENV, &cache);
        let entry = porep::cache_entry(&cache, proof_of("2KiB")).expect("cache entry");
        if !entry.params.exists() {
            let circuit = FilCircuit::PoRep(proof_of("2KiB"));
            setup::generate(&cache, circuit, TEST_SEED, &CpuFixedBase).expect("TEST-ONLY setup");
        }
        cache
    })
}

fn forge(size: &str, seed: u64) -> Forged {
    let t = Instant::now();
    let forged = forge::forge_cc_c1(&CcSector::seeded(proof_of(size), seed), seed).expect("forge");
    eprintln!(
        "forged a {size} CC C1 ({} bytes, {} challenges, {} columns) in {:.2} s",
        forged.c1_json.len(),
        forged.challenges,
        forged.opened_columns,
        t.elapsed().as_secs_f64()
    );
    forged
}

fn document(forged: &Forged, c1_json: &[u8]) -> c1::C1Document {
    c1::parse(
        c1_json,
        Some(forged.sector.seal_proof),
        Some(forged.sector.sector_id),
    )
    .expect("a C1 document")
}

/// Our own C1 check (the replica id recomputed, the crates' vanilla
/// verifier) on `c1_json` as the C1 output of `forged`'s sector.
fn check(forged: &Forged, c1_json: &[u8]) -> Result<(), FilecoinError> {
    porep::prepare_c2(&document(forged, c1_json), forged.sector.prover_id).map(|_| ())
}

/// What `seal::verify` (filecoin-proofs' `verify_seal`) checks a proof against.
fn sealed(forged: &Forged) -> Sealed {
    Sealed {
        seal_proof: forged.sector.seal_proof.to_string(),
        prover_id: forged.sector.prover_id,
        sector_id: forged.sector.sector_id,
        comm_r: forged.comm_r,
        comm_d: forged.comm_d,
        ticket: forged.sector.ticket,
        seed: forged.sector.seed,
        c1_json: Vec::new(),
        pc1_s: 0.0,
        pc2_s: 0.0,
        c1_s: 0.0,
    }
}

/// `forged`'s C1 proved by the engine in this process (CPU backend, fixed
/// r and s), as `prover c2` proves it.
fn prove(
    forged: &Forged,
    cache: &Path,
    allow_test_params: bool,
) -> Result<one_shot::Finished, one_shot::OneShotError> {
    one_shot::run(
        OneShot {
            backend: Arc::new(CpuBackend::new()),
            filecoin_cache: cache.to_path_buf(),
            allow_test_params,
            compiled: false,
            timing_log: None,
            budget: Some(4 << 30),
        },
        Job::Filecoin(FilecoinSubmitRequest::PorepC2(PorepC2Request {
            prover_id: hex::encode(forged.sector.prover_id),
            c1: serde_json::from_slice(&forged.c1_json).expect("C1 JSON"),
            registered_proof: Some(forged.sector.seal_proof.to_string()),
            sector_id: Some(forged.sector.sector_id),
            rs_seed: Some(3),
        })),
    )
}

#[test]
fn a_forged_2kib_cc_c1_is_proved_by_our_c2_and_accepted_by_verify_seal() {
    let cache = param_cache();
    let forged = forge("2KiB", 7);
    assert_eq!(
        forged.comm_d,
        forge::empty_comm_d(2048).expect("CommD"),
        "a CC sector's CommD"
    );
    let t = Instant::now();
    // The one path every proof takes: the engine, in this process.
    let finished = prove(&forged, cache, true).expect("C2 of the forged C1");
    eprintln!("C2 (2 KiB, CPU) took {:.1} s", t.elapsed().as_secs_f64());
    let status = finished.status;
    assert_eq!(status.state, JobState::Done, "{:?}", status.error);
    let result = status.result.expect("a finished job's result");
    assert!(
        result.verified,
        "the engine verifies every proof it returns"
    );
    let proof = hex::decode(result.proof.expect("the proof")).expect("hex proof");
    assert_eq!(proof.len(), porep::PROOF_BYTES, "one partition, one proof");
    assert_eq!(
        finished.partitions.len(),
        1,
        "one partition's timing record"
    );
    assert!(
        seal::verify(&sealed(&forged), &proof).expect("verify_seal runs"),
        "filecoin-proofs' verify_seal rejected the proof of a forged C1"
    );
    // Without test parameters allowed, a forged C1 is refused as test
    // data before anything is read or proved.
    let refused = prove(&forged, cache, false);
    match refused {
        Err(e) => assert!(e.to_string().contains("FORGED"), "{e}"),
        Ok(f) => panic!(
            "a forged C1 was proved without test parameters: {:?}",
            f.status.state
        ),
    }
    assert!(forge::is_forged_ticket(&forged.sector.ticket));
    // The judge is not lenient: another sector's CommR is refused.
    let mut other = sealed(&forged);
    other.comm_r[0] ^= 1;
    assert!(!seal::verify(&other, &proof).unwrap_or(false));
}

/// Finds a label in a challenge's vanilla proof (JSON).
type Pick = fn(&mut Value) -> &mut Value;

/// `c1_json` with one byte of one label flipped: `pick` finds the label
/// (a JSON array of 32 numbers) in partition 0's first challenge proof.
fn with_flipped_label(c1_json: &[u8], pick: Pick) -> Vec<u8> {
    let mut value: Value = serde_json::from_slice(c1_json).expect("C1 JSON");
    let proof = &mut value["vanilla_proofs"][0][0];
    let label = pick(proof);
    let byte = label[0].as_u64().expect("a label is an array of bytes");
    // The low bit: the label stays a field element, only its value changes.
    label[0] = Value::from(byte ^ 1);
    serde_json::to_vec(&value).expect("C1 JSON")
}

#[test]
fn a_flipped_label_in_a_forged_column_is_refused_by_the_vanilla_check() {
    let forged = forge("2KiB", 8);
    check(&forged, &forged.c1_json).expect("the forged C1 passes as made");
    let flips: [(&str, Pick); 3] = [
        ("a DRG parent's column", |p| {
            &mut p["replica_column_proofs"]["drg_parents"][0]["column"]["rows"][0]
        }),
        ("an expander parent's column", |p| {
            &mut p["replica_column_proofs"]["exp_parents"][3]["column"]["rows"][0]
        }),
        ("the challenged node's column", |p| {
            &mut p["replica_column_proofs"]["c_x"]["column"]["rows"][1]
        }),
    ];
    for (what, pick) in flips {
        let bad = with_flipped_label(&forged.c1_json, pick);
        assert_ne!(bad, forged.c1_json);
        let err = check(&forged, &bad).expect_err(what);
        assert!(
            matches!(err, FilecoinError::VanillaInvalid { .. }),
            "{what}: {err}"
        );
    }
}

/// Every column `proof` opens (the challenged node's, then its parents'),
/// as (node, labels).
fn columns_of(proof: &Value) -> Vec<(u64, Value)> {
    let rcp = &proof["replica_column_proofs"];
    let parents = ["drg_parents", "exp_parents"]
        .iter()
        .flat_map(|k| rcp[*k].as_array().cloned().unwrap_or_default());
    std::iter::once(rcp["c_x"].clone())
        .chain(parents)
        .map(|c| {
            let index = c["column"]["index"].as_u64().expect("a column index");
            (index, c["column"]["rows"].clone())
        })
        .collect()
}

/// A node opened twice (a parent of two challenges, a challenged node that
/// is another's parent) shows one column wherever it appears.
#[test]
fn a_node_opened_twice_has_one_column_everywhere() {
    let mut challenged_parent = false;
    for seed in 0..16 {
        let sector = CcSector::seeded(proof_of("2KiB"), seed);
        let forged = forge::forge_cc_c1(&sector, seed).expect("forge");
        let value: Value = serde_json::from_slice(&forged.c1_json).expect("C1 JSON");
        let proofs: Vec<&Value> = value["vanilla_proofs"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|p| p.as_array().into_iter().flatten())
            .collect();
        let mut seen: BTreeMap<u64, Value> = BTreeMap::new();
        let mut openings = 0;
        for proof in &proofs {
            for (node, rows) in columns_of(proof) {
                openings += 1;
                if let Some(before) = seen.insert(node, rows.clone()) {
                    assert_eq!(before, rows, "seed {seed}: node {node}'s two columns");
                }
            }
        }
        assert!(openings > seen.len(), "seed {seed}: no node opened twice");
        let challenged: BTreeSet<u64> = proofs.iter().map(|p| columns_of(p)[0].0).collect();
        let parents: BTreeSet<u64> = proofs
            .iter()
            .flat_map(|p| columns_of(p).into_iter().skip(1).map(|(n, _)| n))
            .collect();
        challenged_parent |= !challenged.is_disjoint(&parents);
    }
    assert!(
        challenged_parent,
        "no seed made a challenged node another's parent: the case is untested"
    );
}

#[test]
fn forged_8mib_and_512mib_c1_outputs_pass_the_vanilla_check_and_a_seed_gives_one_output() {
    for size in ["8MiB", "512MiB"] {
        let forged = forge(size, 11);
        check(&forged, &forged.c1_json).expect(size);
        let sidecar = forged.sidecar("x.forged-cc-c1.json");
        assert!(sidecar.forged && sidecar.note.starts_with("TEST DATA"));
        assert_eq!(sidecar.registered_proof, format!("StackedDrg{size}V1_1"));
    }
    let (a, b) = (forge("8MiB", 11), forge("8MiB", 11));
    assert!(a.c1_json == b.c1_json, "one seed, one output");
    // Other labels, same sector: another CommR over the same CommD.
    let other = forge::forge_cc_c1(&a.sector, 12).expect("forge");
    assert_eq!((other.comm_d, other.replica_id), (a.comm_d, a.replica_id));
    assert_ne!(other.comm_r, a.comm_r);
}

#[test]
fn the_zero_tree_d_root_is_filecoin_proofs_empty_comm_d() {
    use filecoin_proofs::{compute_comm_d, SectorSize};
    for size in [2048u64, 8 << 20] {
        // filecoin-proofs' CommD of a sector without pieces (it hashes the
        // whole zero sector: small sizes only).
        let theirs = compute_comm_d(SectorSize(size), &[]).expect("compute_comm_d");
        assert_eq!(forge::zero_comm_d(size).expect("CommD"), theirs, "{size}");
    }
    // The 32 GiB one is the chain's well-known CC CommD, the digest of the
    // piece CID baga6ea4seaqao7s73y24kcutaosvacpdjgfe5pw76ooefnyqw4ynr3d2y6x2mpq.
    assert_eq!(
        hex::encode(forge::zero_comm_d(32 << 30).expect("CommD")),
        "077e5fde35c50a9303a55009e3498a4ebedff39c42b710b730d8ec7ac7afa63e"
    );
    for size in [2048u64, 8 << 20, 512 << 20, 32 << 30, 64 << 30] {
        assert_eq!(
            forge::zero_comm_d(size).expect("CommD"),
            forge::empty_comm_d(size).expect("zero piece"),
            "{size}"
        );
    }
}

/// The 32 GiB forge and check, as the example tool runs them; a few
/// seconds in a release build, longer here.
#[test]
#[ignore = "32 GiB: run with --ignored (or the forge-c1 example)"]
fn a_forged_32gib_c1_passes_the_vanilla_check() {
    let forged = forge("32GiB", 1);
    assert_eq!(forged.partitions, 10);
    check(&forged, &forged.c1_json).expect("32 GiB");
}

/// A PoRep partition synthesised from a recording made in pieces of its
/// challenges (as a daemon's first partition makes it) runs its checked
/// witness pass in those pieces, the recording partition's and a later
/// checked one's (`synthesis.check_first` above 1) alike, and gives what the
/// bellperson synthesis gives, value for value.
#[test]
fn a_porep_partition_checked_against_its_recording_in_pieces_is_the_plain_synthesis() {
    use prover::compiled::can_check_in_pieces;
    use prover::statement::Mode;
    use prover::synthesis::{heap_pool, Synthesized};
    let forged = forge("2KiB", 9);
    let req = FilecoinSubmitRequest::PorepC2(PorepC2Request {
        prover_id: hex::encode(forged.sector.prover_id),
        c1: serde_json::from_slice(&forged.c1_json).expect("C1 JSON"),
        registered_proof: Some(forged.sector.seal_proof.to_string()),
        sector_id: Some(forged.sector.sector_id),
        rs_seed: None,
    });
    let statement = prover::filecoin::kind::statement(&req).expect("a statement");
    let shape = statement.param_set().shape().expect("the set's shape");
    // Three syntheses of ~0.5 GB each held at once.
    let pool = heap_pool(2 << 30);
    let two = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("a pool");
    let recorded = two
        .install(|| statement.synthesize(0, &shape, &pool, Mode::Record { defer_abc: false }))
        .expect("recorded");
    let r1cs = recorded.recorded.clone().expect("a recording");
    assert!(can_check_in_pieces(&r1cs, 2), "recorded in 2 pieces");
    let pieces = |s: &Synthesized| s.parts.as_ref().expect("compiled parts").pieces;
    assert_eq!(pieces(&recorded.syn), 2, "the recording partition's check");
    let checked = two
        .install(|| {
            statement.synthesize(
                0,
                &shape,
                &pool,
                Mode::Compiled {
                    r1cs: &r1cs,
                    check: true,
                    defer_abc: false,
                },
            )
        })
        .expect("checked against the recording");
    assert_eq!(pieces(&checked.syn), 2, "a later partition's check");
    let plain = statement
        .synthesize(0, &shape, &pool, Mode::Plain)
        .expect("the bellperson way");
    for syn in [&recorded.syn, &checked.syn] {
        assert_eq!(syn.a.as_slice(), plain.syn.a.as_slice(), "a");
        assert_eq!(syn.b.as_slice(), plain.syn.b.as_slice(), "b");
        assert_eq!(syn.c.as_slice(), plain.syn.c.as_slice(), "c");
        assert_eq!(
            syn.input_assignment.as_slice(),
            plain.syn.input_assignment.as_slice()
        );
        assert_eq!(
            syn.aux_assignment.as_slice(),
            plain.syn.aux_assignment.as_slice()
        );
    }
    assert_eq!(recorded.inputs, plain.inputs);
    drop((recorded, checked));
    // Recorded for a backend that computes a, b, c on its device: the
    // same witness, checked in the same pieces, and a, b, c left to it.
    let deferred = two
        .install(|| statement.synthesize(0, &shape, &pool, Mode::Record { defer_abc: true }))
        .expect("recorded, a, b, c deferred");
    assert_eq!(pieces(&deferred.syn), 2);
    let from = deferred
        .syn
        .abc_from
        .as_ref()
        .expect("a, b, c left to the backend");
    assert!(Arc::ptr_eq(
        from,
        deferred.recorded.as_ref().expect("a recording")
    ));
    assert!(deferred.syn.b.as_slice().is_empty() && deferred.syn.c.as_slice().is_empty());
    assert_eq!(
        deferred.syn.aux_assignment.as_slice(),
        plain.syn.aux_assignment.as_slice()
    );
    assert_eq!(
        deferred.syn.input_assignment.as_slice(),
        plain.syn.input_assignment.as_slice()
    );
}
