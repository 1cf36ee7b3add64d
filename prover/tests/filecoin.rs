//! Filecoin's own PoRep through this prover, judged by `filecoin-proofs`.
//!
//! A test binary of its own, not a module of `it`: `filecoin-proofs` reads
//! its parameter folder (`FIL_PROOFS_PARAMETER_CACHE`) from the environment
//! once per process, so this process sets it before anything else runs, to a
//! folder under the target directory. The 2 KiB PoRep parameters are
//! generated there (TEST-ONLY, by `prover::filecoin::setup`) once and kept
//! between runs; the 2 KiB sector is sealed once per run (PC1, PC2, C1 take
//! well under a second).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use fleet_testkit::deadline::output_within;
use prover::filecoin::cache::{CACHE_ENV, TEST_ONLY_SUFFIX};
use prover::filecoin::post::{self, PostKind};
use prover::filecoin::seal::{self, Sealed};
use prover::filecoin::snap::forge_key;
use prover::filecoin::snap::vector::{self as snap_vector, SectorKey, SnapVector};
use prover::filecoin::snap::{self, SnapRequest, SnapVanilla};
use prover::filecoin::{porep, setup, FilCircuit, FilecoinError, SealProof, UpdateProof};
use prover::setup::fixed_base::CpuFixedBase;

/// Parameter generation and one CPU proof of a 2 KiB PoRep on 2 cores.
const CLI_LIMIT: Duration = Duration::from_secs(1200);
const TEST_SEED: u64 = 26;

struct Fixture {
    root: PathBuf,
    cache: PathBuf,
    sealed: Sealed,
    c1: PathBuf,
    /// The sealing folder: replica and trees, for PoSt vanilla proofs.
    work: PathBuf,
}

const RANDOMNESS: [u8; 32] = [7; 32];

fn proof_2kib() -> SealProof {
    "StackedDrg2KiBV1_1".parse().expect("a known seal proof")
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("filecoin");
        let cache = root.join("param-cache");
        // Before filecoin-proofs first reads its settings (every test comes
        // through here first), so its verifier loads our verifying keys.
        std::env::set_var(CACHE_ENV, &cache);
        let entry = porep::cache_entry(&cache, proof_2kib()).expect("cache entry");
        if !entry.params.exists() {
            let t = Instant::now();
            let generated = setup::generate(
                &cache,
                FilCircuit::PoRep(proof_2kib()),
                TEST_SEED,
                &CpuFixedBase,
            )
            .expect("TEST-ONLY setup");
            eprintln!(
                "generated {} ({} bytes) in {:.1} s",
                generated.params,
                generated.bytes,
                t.elapsed().as_secs_f64()
            );
        }
        for kind in [PostKind::Winning, PostKind::Window] {
            let entry = post::cache_entry(&cache, kind, 2048).expect("PoSt cache entry");
            if !entry.params.exists() {
                let t = Instant::now();
                setup::generate(
                    &cache,
                    FilCircuit::Post(kind, 2048),
                    TEST_SEED,
                    &CpuFixedBase,
                )
                .expect("PoSt setup");
                eprintln!(
                    "generated {} parameters in {:.1} s",
                    kind.name(),
                    t.elapsed().as_secs_f64()
                );
            }
        }
        // SnapDeals' too: every parameter set this binary uses is made here,
        // before any test sees the cache, so the tests that check the cache
        // is left unchanged never race a setup writing into it.
        let entry = snap::cache_entry(&cache, snap_2kib()).expect("snap cache entry");
        if !entry.params.exists() {
            let t = Instant::now();
            let generated = setup::generate(
                &cache,
                FilCircuit::Snap(snap_2kib()),
                TEST_SEED,
                &CpuFixedBase,
            )
            .expect("snap setup");
            eprintln!(
                "generated {} ({} bytes) in {:.1} s",
                generated.params,
                generated.bytes,
                t.elapsed().as_secs_f64()
            );
        }
        let work = root.join("sector");
        let _ = fs::remove_dir_all(&work);
        let t = Instant::now();
        let sealed = seal::seal_random_sector(proof_2kib(), TEST_SEED, &work).expect("seal");
        eprintln!(
            "sealed a 2 KiB sector in {:.2} s (PC1 {:.2}, PC2 {:.2}, C1 {:.2})",
            t.elapsed().as_secs_f64(),
            sealed.pc1_s,
            sealed.pc2_s,
            sealed.c1_s
        );
        let c1 = root.join("c1.json");
        fs::write(&c1, &sealed.c1_json).expect("write C1");
        Fixture {
            root,
            cache,
            sealed,
            c1,
            work,
        }
    })
}

/// SHA-256 of every file in `dir`.
fn digests(dir: &Path) -> BTreeMap<String, String> {
    fs::read_dir(dir)
        .expect("read cache")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_file())
        .map(|p| {
            (
                p.file_name().expect("name").to_string_lossy().into_owned(),
                prover::params::file_sha256(&p).expect("hash"),
            )
        })
        .collect()
}

fn scratch(name: &str) -> PathBuf {
    let dir = fixture().root.join("scratch").join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn utf8(p: &Path) -> String {
    p.to_str().expect("utf-8 path").to_owned()
}

/// What `prover c2` and `prover client c2` take to prove `c1` for the
/// fixture's sector into `out`: `extra` follows, and its `--sector-id` or
/// `--sector-size` stands instead of the fixture's.
fn c2_args(c1: &Path, out: &Path, extra: &[&str]) -> Vec<String> {
    let f = fixture();
    let mut args = vec![
        "--c1".into(),
        utf8(c1),
        "--out".into(),
        utf8(out),
        "--prover-id".into(),
        hex::encode(f.sealed.prover_id),
    ];
    if !extra.contains(&"--sector-id") {
        args.extend(["--sector-id".into(), f.sealed.sector_id.to_string()]);
    }
    if !extra.contains(&"--sector-size") {
        args.extend(["--sector-size".into(), "2KiB".into()]);
    }
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// `prover c2` on `c1` for the fixture's sector with `extra` arguments.
fn c2(c1: &Path, cache: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_prover"));
    cmd.arg("c2")
        .args(c2_args(c1, out, extra))
        .arg("--param-cache")
        .arg(cache)
        .args(["--backend", "cpu", "--log", "warn"])
        .env_remove(CACHE_ENV);
    output_within(&mut cmd, CLI_LIMIT)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn file_names_are_filecoin_proofs_own() {
    let f = fixture();
    let ours = porep::cache_entry(&f.cache, proof_2kib()).expect("entry");
    let theirs = proof_2kib()
        .porep_config()
        .get_cache_params_path::<filecoin_proofs::SectorShape2KiB>()
        .expect("filecoin-proofs' path");
    assert_eq!(ours.params, theirs);
    let vk = proof_2kib()
        .porep_config()
        .get_cache_verifying_key_path::<filecoin_proofs::SectorShape2KiB>()
        .expect("filecoin-proofs' vk path");
    assert_eq!(ours.vk, vk);
}

#[test]
fn porep_c2_of_a_2kib_sector_is_accepted_by_verify_seal_and_leaves_the_cache_unchanged() {
    let f = fixture();
    let before = digests(&f.cache);
    let dir = scratch("ok");
    let (out, report) = (dir.join("proof"), dir.join("report.json"));
    let t = Instant::now();
    let run = c2(
        &f.c1,
        &f.cache,
        &out,
        &[
            "--allow-test-params",
            "--report",
            report.to_str().expect("utf-8 path"),
        ],
    );
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    eprintln!("prover c2 (2 KiB, CPU) took {secs:.1} s:\n{}", stderr(&run));
    let proof = fs::read(&out).expect("proof written");
    assert_eq!(proof.len(), porep::PROOF_BYTES, "one partition, one proof");
    assert!(
        seal::verify(&f.sealed, &proof).expect("verify_seal runs"),
        "filecoin-proofs' verify_seal rejected our proof"
    );
    let mut bad = proof.clone();
    bad[10] ^= 1;
    assert!(!seal::verify(&f.sealed, &bad).unwrap_or(false));
    let report: serde_json::Value =
        serde_json::from_slice(&fs::read(&report).expect("report")).expect("report JSON");
    // The report is the job as the daemon reports it, and each partition's
    // timing record in the daemon's format.
    assert_eq!(report["job"]["circuit"], "porep-c2:2KiB");
    assert_eq!(report["job"]["state"], "done");
    assert_eq!(report["params"]["origin"], "test-only");
    assert!(report["partitions"][0]["size"].as_u64().unwrap_or(0) > 100_000);
    assert!(report["partitions"][0]["phases_ms"]["synthesis"].is_number());
    assert_eq!(digests(&f.cache), before, "the parameter cache changed");
}

/// The PoRep C2 that `fleetctl`'s `smoke: {kind: porep-c2}` sends (the body
/// of `POST /v1/filecoin/jobs`), shipped in the repository.
const SMOKE_REQUEST: &str = "../fixtures/filecoin/porep-c2-2KiB.json";

/// The shipped smoke request is the C1 output of miner [`MINER`]'s seeded
/// 2 KiB sector (the seal is seeded, so it is the same every run), which
/// the gRPC test proves (as Curio sends it, and by `prover client c2 --grpc`)
/// and `verify_seal` accepts; its
/// prover id is a miner's, so the smoke can send it as Curio does
/// (`grpc: true`). `BLESS=1` writes it anew (after a change of the proof
/// crates' C1 format, say).
#[test]
fn the_shipped_smoke_request_is_the_c1_output_of_the_seeded_2kib_sector() {
    use fleet_wire::api::{FilecoinSubmitRequest, PorepC2Request};
    let (sealed, _) = miner_sector();
    let want = FilecoinSubmitRequest::PorepC2(PorepC2Request {
        prover_id: hex::encode(sealed.prover_id),
        c1: serde_json::from_slice(&sealed.c1_json).expect("C1 JSON"),
        registered_proof: Some(sealed.seal_proof.clone()),
        sector_id: Some(sealed.sector_id),
        rs_seed: None,
    });
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(SMOKE_REQUEST);
    if std::env::var_os("BLESS").is_some() {
        let mut text = serde_json::to_vec(&want).expect("request JSON");
        text.push(b'\n');
        fs::write(&path, text).expect("write the smoke request");
    }
    let shipped: FilecoinSubmitRequest =
        serde_json::from_slice(&fs::read(&path).expect("the shipped smoke request"))
            .expect("a FilecoinSubmitRequest");
    assert!(
        shipped == want,
        "{} is not the C1 output of the seeded 2 KiB sector; BLESS=1 rewrites it",
        path.display()
    );
}

#[test]
fn hostile_c1_outputs_are_refused_with_exit_7_and_nothing_written() {
    let f = fixture();
    let dir = scratch("hostile-c1");
    let out = dir.join("proof");
    let c1: serde_json::Value = serde_json::from_slice(&f.sealed.c1_json).expect("C1 JSON");
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.join(name);
        fs::write(&p, bytes).expect("write");
        p
    };
    let other_sector = (f.sealed.sector_id + 1).to_string();
    let sector_id = f.sealed.sector_id.to_string();
    let truncated = write(
        "truncated.json",
        &f.sealed.c1_json[..f.sealed.c1_json.len() / 2],
    );
    let mut altered_r = c1.clone();
    altered_r["comm_r"][3] = serde_json::json!((c1["comm_r"][3].as_u64().unwrap_or(0) ^ 1));
    let altered_r = write(
        "comm_r.json",
        &serde_json::to_vec(&altered_r).expect("json"),
    );
    let mut altered_d = c1.clone();
    altered_d["comm_d"][5] = serde_json::json!((c1["comm_d"][5].as_u64().unwrap_or(0) ^ 4));
    let altered_d = write(
        "comm_d.json",
        &serde_json::to_vec(&altered_d).expect("json"),
    );
    let mut no_proofs = c1.clone();
    no_proofs["vanilla_proofs"] = serde_json::json!([]);
    let no_proofs = write("empty.json", &serde_json::to_vec(&no_proofs).expect("json"));
    let mut unknown = c1.clone();
    unknown["comm_rr"] = c1["comm_r"].clone();
    let unknown = write("unknown.json", &serde_json::to_vec(&unknown).expect("json"));
    // Curio's / lotus-bench's wrapper whose SectorSize (8 MiB) is not its
    // Phase1Out's (a 2 KiB C1 in the api form).
    let mut api = c1.clone();
    api["registered_proof"] = serde_json::json!("StackedDrg2KiBV1_1");
    let wrapped = {
        use base64::Engine as _;
        serde_json::json!({
            "SectorNum": f.sealed.sector_id,
            "Phase1Out": base64::engine::general_purpose::STANDARD
                .encode(serde_json::to_vec(&api).expect("json")),
            "SectorSize": 8u64 << 20,
        })
    };
    let wrapped = write("wrapped.json", &serde_json::to_vec(&wrapped).expect("json"));
    let cases: [(&str, &Path, Vec<&str>, &str); 8] = [
        (
            "another sector",
            &f.c1,
            vec!["--sector-id", &other_sector],
            "is not for sector",
        ),
        ("truncated", &truncated, vec![], "not valid JSON"),
        (
            "altered CommR",
            &altered_r,
            vec![],
            "vanilla proofs do not verify",
        ),
        ("altered CommD", &altered_d, vec![], "is not for sector"),
        ("no vanilla proofs", &no_proofs, vec![], "vanilla_proofs"),
        (
            "an unknown field",
            &unknown,
            vec![],
            "unknown field `comm_rr`",
        ),
        (
            "a wrapper's SectorSize against its C1",
            &wrapped,
            vec!["--sector-id", &sector_id],
            "SectorSize 8388608",
        ),
        (
            "another sector size",
            &f.c1,
            vec!["--sector-size", "8MiB"],
            "StackedDrg8MiBV1_1",
        ),
    ];
    for (what, c1, extra, says) in cases {
        let mut args = extra.clone();
        args.push("--allow-test-params");
        let run = c2(c1, &f.cache, &out, &args);
        let err = stderr(&run);
        assert_eq!(run.status.code(), Some(7), "{what}: {err}");
        assert!(err.contains(says), "{what}: `{says}` not in: {err}");
        assert!(!out.exists(), "{what}: a proof was written");
    }
}

#[test]
fn missing_truncated_foreign_and_test_only_parameters_are_refused_with_exit_8() {
    let f = fixture();
    let entry = porep::cache_entry(&f.cache, proof_2kib()).expect("entry");
    let name = entry.params_name();
    let dir = scratch("hostile-params");
    let out = dir.join("proof");

    let empty = dir.join("empty");
    fs::create_dir_all(&empty).expect("dir");
    let run = c2(&f.c1, &empty, &out, &["--allow-test-params"]);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(8), "{err}");
    assert!(
        err.contains(&name) && err.contains("prover setup --filecoin"),
        "{err}"
    );

    // The first 64 KiB of the real file, with its sidecar: a cut download.
    let cut = dir.join("cut");
    fs::create_dir_all(&cut).expect("dir");
    let head = {
        use std::io::Read;
        let mut buf = vec![0u8; 64 << 10];
        fs::File::open(&entry.params)
            .and_then(|mut file| file.read_exact(&mut buf))
            .expect("read head");
        buf
    };
    fs::write(cut.join(&name), &head).expect("write");
    fs::copy(
        entry.sidecar(),
        cut.join(format!("{name}{TEST_ONLY_SUFFIX}")),
    )
    .expect("sidecar");
    let run = c2(&f.c1, &cut, &out, &["--allow-test-params"]);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(8), "{err}");
    assert!(err.contains("truncated parameter file"), "{err}");

    // A whole, well-formed parameter file under the 2 KiB name that is
    // neither Filecoin's (parameters.json lists this name) nor ours.
    let foreign = dir.join("foreign");
    fs::create_dir_all(&foreign).expect("dir");
    let small =
        prover::circuit::shape_circuit(prover::circuit::CircuitKind::Chain, 64).expect("circuit");
    let params = prover::setup::generate(&small, 1).expect("small params");
    prover::params::write_params(&foreign.join(&name), &params).expect("write");
    let run = c2(&f.c1, &foreign, &out, &["--allow-test-params"]);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(8), "{err}");
    assert!(
        err.contains("does not match filecoin-proofs' parameters.json"),
        "{err}"
    );

    let started = Instant::now();
    let run = c2(&f.c1, &f.cache, &out, &[]);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(8), "{err}");
    assert!(
        err.contains("TEST-ONLY") && err.contains("--allow-test-params"),
        "{err}"
    );
    assert!(!out.exists(), "a proof was written");
    eprintln!(
        "TEST-ONLY refused in {:.1} s (the file is not read)",
        started.elapsed().as_secs_f64()
    );

    // The sidecar decides before the file is read: beside the foreign file
    // (whose digest, were it computed, matches nothing), it is the TEST-ONLY
    // refusal that comes, not the digest's.
    fs::copy(
        entry.sidecar(),
        foreign.join(format!("{name}{TEST_ONLY_SUFFIX}")),
    )
    .expect("sidecar");
    let run = c2(&f.c1, &foreign, &out, &[]);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(8), "{err}");
    assert!(
        err.contains("TEST-ONLY") && err.contains("sidecar"),
        "{err}"
    );
    assert!(!err.contains("parameters.json"), "{err}");
}

#[test]
fn setup_never_writes_over_an_existing_parameter_file() {
    setup_refuses_to_write_over("StackedDrg2KiBV1_1");
}

/// `prover setup --filecoin circuit` over the fixture's cache, where its
/// file exists: exit 1 saying so, every file of the cache unchanged.
fn setup_refuses_to_write_over(circuit: &str) {
    let f = fixture();
    let before = digests(&f.cache);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_prover"));
    cmd.args(["setup", "--filecoin", circuit, "--param-cache"])
        .arg(&f.cache)
        .args(["--log", "warn"]);
    let run = output_within(&mut cmd, CLI_LIMIT);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(1), "{err}");
    assert!(err.contains("is never written over"), "{err}");
    assert_eq!(digests(&f.cache), before);
}

/// What `prover post` and `prover client post` take to prove the
/// fixture's sector's `kind` from the vanilla proofs in `vanilla` into `out`.
fn post_args(kind: PostKind, vanilla: &Path, out: &Path, randomness: [u8; 32]) -> Vec<String> {
    let kind = match kind {
        PostKind::Winning => "winning",
        PostKind::Window => "window",
    };
    [
        "--kind",
        kind,
        "--vanilla",
        &utf8(vanilla),
        "--randomness",
        &hex::encode(randomness),
        "--prover-id",
        &hex::encode(fixture().sealed.prover_id),
        "--sector-size",
        "2KiB",
        "--out",
        &utf8(out),
    ]
    .map(str::to_owned)
    .to_vec()
}

/// `prover post` for the fixture's sector with vanilla proofs `vanilla`.
fn post_cli(kind: PostKind, vanilla: &Path, out: &Path, randomness: [u8; 32]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_prover"));
    cmd.arg("post")
        .args(post_args(kind, vanilla, out, randomness))
        .args(["--allow-test-params", "--backend", "cpu", "--log", "warn"])
        .arg("--param-cache")
        .arg(&fixture().cache)
        .env_remove(CACHE_ENV);
    output_within(&mut cmd, CLI_LIMIT)
}

fn post_is_accepted_by_filecoin_proofs(kind: PostKind) {
    let f = fixture();
    let before = digests(&f.cache);
    let dir = scratch(kind.name());
    let vanilla = seal::post_vanilla(kind, &f.sealed, &f.work, RANDOMNESS).expect("vanilla");
    let vanilla_path = dir.join("vanilla.json");
    fs::write(&vanilla_path, &vanilla).expect("write vanilla");
    let out = dir.join("proof");
    let t = Instant::now();
    let run = post_cli(kind, &vanilla_path, &out, RANDOMNESS);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    eprintln!(
        "prover post {} (2 KiB, CPU) took {:.1} s:\n{}",
        kind.name(),
        t.elapsed().as_secs_f64(),
        stderr(&run)
    );
    let proof = fs::read(&out).expect("proof");
    assert_eq!(proof.len(), porep::PROOF_BYTES);
    assert!(
        seal::verify_post(kind, &f.sealed, RANDOMNESS, &proof).expect("verifier runs"),
        "filecoin-proofs rejected our {}",
        kind.name()
    );
    assert!(!seal::verify_post(kind, &f.sealed, [9; 32], &proof).unwrap_or(false));

    // Vanilla proofs of other randomness: refused before proving.
    let bad_out = dir.join("bad-proof");
    let run = post_cli(kind, &vanilla_path, &bad_out, [9; 32]);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(7), "{err}");
    assert!(err.contains("vanilla PoSt proofs are refused"), "{err}");
    assert!(!bad_out.exists());
    assert_eq!(digests(&f.cache), before, "the parameter cache changed");
}

/// A WindowPoSt's vanilla proofs sent as a WinningPoSt (and the other way
/// round) are refused before any proving, naming the challenge counts and
/// the PoSt input (not "the C1 output"), with the real parameters there.
#[test]
fn vanilla_proofs_of_the_other_post_kind_are_refused_before_proving() {
    let f = fixture();
    let dir = scratch("other-kind");
    for (made_for, sent_as, says) in [
        (PostKind::Window, PostKind::Winning, "10 challenges"),
        (PostKind::Winning, PostKind::Window, "66 challenges"),
    ] {
        let vanilla =
            seal::post_vanilla(made_for, &f.sealed, &f.work, RANDOMNESS).expect("vanilla");
        let path = dir.join(format!("{}.json", made_for.name()));
        fs::write(&path, &vanilla).expect("write");
        let out = dir.join("proof");
        let run = post_cli(sent_as, &path, &out, RANDOMNESS);
        let err = stderr(&run);
        assert_eq!(run.status.code(), Some(7), "{err}");
        assert!(
            err.contains("the PoSt input's vanilla proofs") && err.contains(says),
            "{err}"
        );
        assert!(!err.contains("C1 output"), "{err}");
        assert!(!out.exists());
    }
}

#[test]
fn winning_post_of_a_2kib_sector_is_accepted_by_verify_winning_post() {
    post_is_accepted_by_filecoin_proofs(PostKind::Winning);
}

#[test]
fn a_window_post_partition_of_a_2kib_sector_is_accepted_by_verify_window_post() {
    post_is_accepted_by_filecoin_proofs(PostKind::Window);
}

/// A daemon on the CPU backend whose Filecoin jobs read the fixture's
/// parameter cache; killed and its folder removed on drop.
struct FilDaemon {
    dir: tempfile::TempDir,
    child: std::process::Child,
}

impl FilDaemon {
    /// With `drain_timeout` and `extra` TOML tables after the test's own.
    fn start_with(drain_timeout: &str, extra: &str) -> FilDaemon {
        let f = fixture();
        let dir = tempfile::tempdir().expect("tempdir");
        let config = format!(
            "listen = \"127.0.0.1:0\"\ndrain_timeout = \"{drain_timeout}\"\n[gpu]\ndevices = []\n\
             [memory]\nbudget = \"4GiB\"\n[filecoin]\nparam_cache = {:?}\nallow_test_params = true\n{extra}",
            f.cache.to_str().expect("utf-8 path")
        );
        fs::create_dir_all(dir.path().join("run")).expect("run dir");
        fs::write(dir.path().join("prover.toml"), config).expect("config");
        let child = Command::new(env!("CARGO_BIN_EXE_prover"))
            .args(["daemon", "--config", "prover.toml"])
            .current_dir(dir.path())
            .env_remove(CACHE_ENV)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn prover daemon");
        let d = FilDaemon { dir, child };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let (code, _) = d.client(&["ready"], &[]);
            if code == Some(0) {
                return d;
            }
            assert!(Instant::now() < deadline, "daemon not ready:\n{}", d.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("logs/prover.log")).unwrap_or_default()
    }

    /// `prover client SUB --config … ARGS`: exit code and stderr.
    fn client(&self, sub: &[&str], args: &[String]) -> (Option<i32>, String) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_prover"));
        cmd.arg("client")
            .args(sub)
            .arg("--config")
            .arg(self.dir.path().join("prover.toml"))
            .args(args)
            .current_dir(self.dir.path());
        let out = output_within(&mut cmd, CLI_LIMIT);
        (out.status.code(), stderr(&out))
    }
}

impl Drop for FilDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_daemon_proves_a_c2_and_a_winning_post_that_filecoin_proofs_accepts() {
    let f = fixture();
    let before = digests(&f.cache);
    // The WinningPoSt set preloaded: its constraints recorded at start, so
    // its first (urgent) proof synthesises from the recording.
    let d = FilDaemon::start_with("30s", "preload = [\"winning-post:2KiB\"]\n");
    let log = d.log();
    assert!(
        log.contains("constraints recorded from the blank circuit")
            && log.contains("Filecoin parameters preloaded"),
        "{log}"
    );
    let dir = scratch("daemon");

    let out = dir.join("c2.proof");
    let (code, err) = d.client(&["c2"], &c2_args(&f.c1, &out, &[]));
    assert_eq!(code, Some(0), "{err}\n{}", d.log());
    let proof = fs::read(&out).expect("proof written");
    assert_eq!(proof.len(), porep::PROOF_BYTES);
    assert!(
        seal::verify(&f.sealed, &proof).expect("verify_seal runs"),
        "filecoin-proofs' verify_seal rejected the daemon's proof"
    );

    // The second C2 of this sector size runs from the recording the first
    // one made (checked then): unchecked now, its witness pass in pieces of
    // the partition's two challenges on the two threads CI has.
    let again = dir.join("c2-again.proof");
    let (code, err) = d.client(&["c2"], &c2_args(&f.c1, &again, &[]));
    assert_eq!(code, Some(0), "{err}\n{}", d.log());
    let proof = fs::read(&again).expect("proof written");
    assert!(
        seal::verify(&f.sealed, &proof).expect("verify_seal runs"),
        "filecoin-proofs' verify_seal rejected the daemon's proof from pieces"
    );
    if std::thread::available_parallelism().map_or(1, |n| n.get()) > 1 {
        let log = d.log();
        assert!(
            log.contains("witness pass in pieces") && log.contains("pieces=2"),
            "the second C2 did not run its witness in pieces:\n{log}"
        );
    }

    // Another sector's number: refused before any proving, exit 7, no file.
    let wrong = dir.join("wrong.proof");
    let other = (f.sealed.sector_id + 1).to_string();
    let (code, err) = d.client(&["c2"], &c2_args(&f.c1, &wrong, &["--sector-id", &other]));
    assert_eq!(code, Some(7), "{err}");
    assert!(
        err.contains("bad_filecoin_input") && err.contains("sector"),
        "{err}"
    );
    assert!(!wrong.exists());

    let vanilla =
        seal::post_vanilla(PostKind::Winning, &f.sealed, &f.work, RANDOMNESS).expect("vanilla");
    let vanilla_path = dir.join("winning.json");
    fs::write(&vanilla_path, &vanilla).expect("write vanilla");
    let out = dir.join("winning.proof");
    let (code, err) = d.client(
        &["post"],
        &post_args(PostKind::Winning, &vanilla_path, &out, RANDOMNESS),
    );
    assert_eq!(code, Some(0), "{err}\n{}", d.log());
    let proof = fs::read(&out).expect("proof written");
    assert!(
        seal::verify_post(PostKind::Winning, &f.sealed, RANDOMNESS, &proof).expect("verifier runs"),
        "filecoin-proofs rejected the daemon's WinningPoSt"
    );
    let timing = fs::read_to_string(d.dir.path().join("logs/timing.jsonl")).expect("timing log");
    let winning: Vec<serde_json::Value> = timing
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["kind"] == "partition" && r["circuit"] == "winning-post:2KiB")
        .collect();
    assert!(
        !winning.is_empty()
            && winning
                .iter()
                .all(|r| r["phases_ms"]["witness"].is_number()),
        "the first WinningPoSt did not synthesise from the preloaded recording: {winning:?}"
    );
    assert!(
        timing
            .lines()
            .any(|l| l.contains("\"priority\":\"critical\"")),
        "no TIMELINE event of the WinningPoSt says its priority"
    );

    // A WindowPoSt's vanilla proofs as a WinningPoSt: refused at submission
    // (so never queued as urgent), and vanilla proofs of other randomness
    // too; neither is an ERROR line in the daemon's log.
    let window =
        seal::post_vanilla(PostKind::Window, &f.sealed, &f.work, RANDOMNESS).expect("vanilla");
    let window_path = dir.join("window.json");
    fs::write(&window_path, &window).expect("write vanilla");
    let refused = dir.join("refused.proof");
    let (code, err) = d.client(
        &["post"],
        &post_args(PostKind::Winning, &window_path, &refused, RANDOMNESS),
    );
    assert_eq!(code, Some(7), "{err}");
    assert!(
        err.contains("bad_filecoin_input") && err.contains("66"),
        "{err}"
    );
    let (code, err) = d.client(
        &["post"],
        &post_args(PostKind::Winning, &vanilla_path, &refused, [9; 32]),
    );
    assert_eq!(code, Some(7), "{err}");
    assert!(!refused.exists());
    let log = d.log();
    assert!(
        !log.lines()
            .any(|l| l.contains("ERROR") && l.contains("storage_proofs")),
        "a client's input wrote ERROR lines into the daemon's log:\n{log}"
    );
    assert_eq!(digests(&f.cache), before, "the parameter cache changed");
}

/// The miner Curio's requests in the gRPC test come from.
const MINER: u64 = 1000;

/// A 2 KiB sector of miner [`MINER`], sealed once, with its folder.
fn miner_sector() -> &'static (Sealed, PathBuf) {
    static SECTOR: OnceLock<(Sealed, PathBuf)> = OnceLock::new();
    SECTOR.get_or_init(|| {
        let work = fixture().root.join("miner-sector");
        let _ = fs::remove_dir_all(&work);
        let sealed = seal::seal_random_sector_of_miner(proof_2kib(), TEST_SEED + 1, &work, MINER)
            .expect("seal the miner's sector");
        (sealed, work)
    })
}

/// `sealed`'s C1 output in Curio's wrapper: `Phase1Out` is base64 of
/// filecoin-ffi's form (`registered_proof`, proofs keyed by version).
fn curio_c1(sealed: &Sealed, sector_num: u64) -> Vec<u8> {
    use base64::Engine as _;
    let mut api: serde_json::Value = serde_json::from_slice(&sealed.c1_json).expect("C1 JSON");
    let proofs = api["vanilla_proofs"].take();
    api["vanilla_proofs"] = serde_json::json!({ "StackedDrg2KiBV1": proofs });
    api["registered_proof"] = "StackedDrg2KiBV1_1".into();
    let inner = serde_json::to_vec(&api).expect("api form");
    serde_json::to_vec(&serde_json::json!({
        "SectorNum": sector_num,
        "Phase1Out": base64::engine::general_purpose::STANDARD.encode(inner),
        "SectorSize": 2048,
    }))
    .expect("wrapper")
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A daemon serving gRPC on a unix socket (and TCP on a free loopback
/// port), its Filecoin jobs from the fixture's cache.
struct GrpcDaemon {
    daemon: FilDaemon,
}

impl GrpcDaemon {
    fn start() -> GrpcDaemon {
        // A drain waits for a C2 on the CPU (a minute on a loaded CI host).
        let daemon = FilDaemon::start_with(
            "10m",
            "[grpc]\nsocket = \"run/cuzk.sock\"\nlisten = \"127.0.0.1:0\"\n",
        );
        GrpcDaemon { daemon }
    }

    fn pid(&self) -> i32 {
        self.daemon.child.id() as i32
    }

    fn log(&self) -> String {
        self.daemon.log()
    }

    fn socket(&self) -> String {
        format!(
            "unix://{}",
            self.daemon.dir.path().join("run/cuzk.sock").display()
        )
    }

    /// The TCP address from the `gRPC listening` log line.
    fn tcp(&self) -> String {
        let log = self.log();
        let line = log
            .lines()
            .find(|l| l.contains("gRPC listening"))
            .expect("gRPC listening line");
        line.split_whitespace()
            .find_map(|w| w.strip_prefix("listen="))
            .and_then(|w| w.trim_matches('"').split(',').next().map(str::to_owned))
            .expect("a listen= field")
    }

    /// Runs `plan` through the Python client against `target`: per step,
    /// per call, `{code, details, response}`.
    fn run(&self, target: &str, plan: &serde_json::Value) -> Vec<Vec<serde_json::Value>> {
        let plan_path = self.daemon.dir.path().join("plan.json");
        let results = self.daemon.dir.path().join("results.json");
        fs::write(&plan_path, serde_json::to_vec(plan).expect("plan")).expect("write plan");
        let _ = fs::remove_file(&results);
        let proto = concat!(env!("CARGO_MANIFEST_DIR"), "/proto");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/grpc/curio_client.py");
        let out = output_within(
            Command::new("python3").args([
                script,
                proto,
                target,
                &utf8(&plan_path),
                &utf8(&results),
            ]),
            CLI_LIMIT,
        );
        assert!(
            out.status.success(),
            "the Python client failed: {}\n{}",
            stderr(&out),
            self.log()
        );
        serde_json::from_slice(&fs::read(&results).expect("results")).expect("results JSON")
    }
}

/// Whether Python's grpcio and grpcio-tools can be imported here.
fn have_grpcio() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import grpc, grpc_tools"])
        .output()
        .is_ok_and(|o| o.status.success());
    fleet_testkit::have(
        fleet_testkit::Need::Grpcio,
        ok,
        "python3 cannot import grpc and grpc_tools (pip install grpcio grpcio-tools)",
    )
}

fn proof_of(result: &serde_json::Value) -> Vec<u8> {
    use base64::Engine as _;
    let r = &result["response"]["result"];
    assert_eq!(r["status"], "COMPLETED", "{result}");
    base64::engine::general_purpose::STANDARD
        .decode(r["proof"].as_str().expect("proof"))
        .expect("base64 proof")
}

fn refused(result: &serde_json::Value, code: &str, needle: &str) {
    assert_eq!(result["code"], code, "{result}");
    let details = result["details"].as_str().unwrap_or("");
    assert!(details.contains(needle), "{needle:?} not in {result}");
    assert!(details.len() < 2000, "a long message: {}", details.len());
}

#[test]
fn curio_over_grpc_gets_proofs_filecoin_proofs_accepts_and_clear_refusals() {
    if !have_grpcio() {
        return;
    }
    let (sealed, work) = miner_sector();
    let d = GrpcDaemon::start();
    let c1 = curio_c1(sealed, sealed.sector_id);
    let porep = |id: &str| {
        serde_json::json!({
            "request_id": id,
            "proof_kind": "POREP_SEAL_COMMIT",
            "registered_proof": 5,
            "sector_number": sealed.sector_id,
            "miner_id": MINER,
            "vanilla_proof": b64(&c1),
        })
    };
    let winning = bincode_vanilla(PostKind::Winning, sealed, work);
    let window = bincode_vanilla(PostKind::Window, sealed, work);
    let post = |kind: &str, id: &str, number: u64, vanilla: &[u8], randomness: [u8; 32]| {
        serde_json::json!({
            "request_id": id,
            "proof_kind": kind,
            "registered_proof": number,
            "miner_id": MINER,
            "vanilla_proofs": [b64(vanilla)],
            "randomness": b64(&randomness),
            "partition_index": 0,
        })
    };
    let prove = |submit: serde_json::Value| serde_json::json!({"rpc": "Prove", "request": {"submit": submit}});
    // A SnapDeals update of a CC sector, as Curio sends it: update proof 0
    // (2 KiB), raw commitments, one bincode PartitionProof per partition.
    let sv = snap_fixture();
    let snap = |id: &str, comm_r_old: &[u8; 32], vanilla: &[Vec<u8>]| {
        serde_json::json!({
            "request_id": id,
            "proof_kind": "SNAP_DEALS_UPDATE",
            "registered_proof": 0,
            "sector_size": 0,
            "miner_id": MINER,
            "vanilla_proofs": vanilla.iter().map(|v| b64(v)).collect::<Vec<_>>(),
            "comm_r_old": b64(comm_r_old),
            "comm_r_new": b64(&sv.comm_r_new),
            "comm_d_new": b64(&sv.comm_d_new),
        })
    };
    let request_id = format!("porep-{MINER}-{}", sealed.sector_id);
    let mut truncated = winning.clone();
    truncated.truncate(winning.len() / 2);
    let mut other_sector = porep("porep-other");
    other_sector["vanilla_proof"] = b64(&curio_c1(sealed, sealed.sector_id + 1)).into();
    other_sector["sector_number"] = (sealed.sector_id + 1).into();
    let mut changed = porep(&request_id);
    changed["miner_id"] = (MINER + 1).into();
    let mut synthetic = porep("porep-synthetic");
    synthetic["registered_proof"] = 12.into();
    let plan = serde_json::json!([
        // Curio's retry of a request still being proved: one proof.
        [prove(porep(&request_id)), {
            "rpc": "Prove", "request": {"submit": porep(&request_id)}, "delay_s": 0.5
        }],
        [
            prove(post("WINNING_POST", "winpost-1000-1", 0, &winning, RANDOMNESS)),
            prove(post("WINDOW_POST_PARTITION", "wdpost-1000-0-1", 10, &window, RANDOMNESS)),
            prove(snap("snap-1000-1", &sv.comm_r_old, &sv.vanilla)),
        ],
        [
            prove(other_sector),
            prove(post("WINNING_POST", "winpost-trunc", 0, &truncated, RANDOMNESS)),
            prove(post("WINNING_POST", "winpost-other", 0, &winning, [9; 32])),
            prove(snap("snap-trunc", &sv.comm_r_old, &[b"x".to_vec()])),
            prove(changed),
            prove(synthetic),
            prove(post("WINNING_POST", "winpost-as-window", 10, &winning, RANDOMNESS)),
            // The update claimed of a sector that is not its CC sector key.
            prove(snap("snap-not-cc", &sealed.comm_r, &sv.vanilla)),
        ],
        [
            {"rpc": "GetStatus"},
            {"rpc": "GetMetrics"},
            {"rpc": "PreloadSRS", "request": {"circuit_id": "porep-2k"}},
            {"rpc": "EvictSRS", "request": {"circuit_id": "wpost-2k"}},
            {"rpc": "PreloadSRS", "request": {"circuit_id": "porep-3k"}},
            {"rpc": "AwaitProof", "request": {"job_id": "no-such-job", "timeout_ms": 10}},
        ],
        [{"rpc": "SubmitProof", "request": porep("porep-cancelled")}],
    ]);
    let results = d.run(&d.socket(), &plan);

    let first = proof_of(&results[0][0]);
    assert_eq!(first.len(), porep::PROOF_BYTES);
    assert_eq!(
        proof_of(&results[0][1]),
        first,
        "the retry got another proof"
    );
    assert!(
        seal::verify(sealed, &first).expect("verify_seal runs"),
        "verify_seal rejected the proof Curio got"
    );
    let winning_proof = proof_of(&results[1][0]);
    assert!(
        seal::verify_post(PostKind::Winning, sealed, RANDOMNESS, &winning_proof).expect("verifier")
    );
    let window_proof = proof_of(&results[1][1]);
    assert!(
        seal::verify_post(PostKind::Window, sealed, RANDOMNESS, &window_proof).expect("verifier")
    );
    let snap_proof = proof_of(&results[1][2]);
    assert!(
        snap_vector::verify_snap(sv, &snap_proof).expect("verifier"),
        "verify_empty_sector_update_proof rejected the SnapDeals proof Curio got"
    );
    for r in &results[1] {
        let result = &r["response"]["result"];
        assert!(result["total_ms"].as_str().unwrap_or("0") != "0", "{r}");
    }

    let hostile = &results[2];
    refused(&hostile[0], "INVALID_ARGUMENT", "not for sector");
    refused(
        &hostile[1],
        "INVALID_ARGUMENT",
        "vanilla_proofs[0] is not a bincode",
    );
    refused(
        &hostile[2],
        "INVALID_ARGUMENT",
        "vanilla PoSt proofs are refused",
    );
    refused(
        &hostile[3],
        "INVALID_ARGUMENT",
        "partition 0 is not a bincode PartitionProof",
    );
    refused(&hostile[4], "ALREADY_EXISTS", "different request");
    refused(&hostile[5], "INVALID_ARGUMENT", "SyntheticPoRep");
    refused(&hostile[6], "INVALID_ARGUMENT", "window-post proof type");
    refused(&hostile[7], "INVALID_ARGUMENT", "do not verify");

    let status = &results[3][0];
    assert_eq!(status["code"], "OK", "{status}");
    let completed: u64 = status["response"]["total_proofs_completed"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("completed count");
    assert_eq!(completed, 4, "the retried C2 was proved twice? {status}");
    let loaded: Vec<&str> = status["response"]["loaded_srs"]
        .as_array()
        .expect("loaded_srs")
        .iter()
        .filter_map(|s| s["circuit_id"].as_str())
        .collect();
    assert!(
        loaded.contains(&"porep-2k") && loaded.contains(&"winning-2k"),
        "{status}"
    );
    let metrics = &results[3][1];
    assert!(
        metrics["response"]["prometheus_text"]
            .as_str()
            .unwrap_or("")
            .contains("prover_"),
        "{metrics}"
    );
    assert_eq!(
        results[3][2]["response"]["already_loaded"], true,
        "{}",
        results[3][2]
    );
    assert_eq!(
        results[3][3]["response"]["was_loaded"], true,
        "{}",
        results[3][3]
    );
    refused(&results[3][4], "INVALID_ARGUMENT", "circuit_id");
    refused(&results[3][5], "NOT_FOUND", "no job");

    // A submitted job cancelled before it reaches a device.
    let job = results[4][0]["response"]["job_id"]
        .as_str()
        .expect("job id")
        .to_owned();
    let cancel = serde_json::json!([
        [{"rpc": "CancelProof", "request": {"job_id": job}}],
        [{"rpc": "AwaitProof", "request": {"job_id": job, "timeout_ms": 60000}}],
        [{"rpc": "GetStatus"}],
    ]);
    let after = d.run(&d.tcp(), &cancel);
    assert_eq!(after[0][0]["code"], "OK", "{}", after[0][0]);
    let status = &after[1][0]["response"]["status"];
    assert!(status == "CANCELLED", "{}", after[1][0]);
    assert_eq!(
        after[2][0]["code"],
        "OK",
        "the daemon stopped serving: {}",
        d.log()
    );

    // Our own client asks as Curio does (`prover client c2 --grpc`, what
    // fleetctl's smoke step runs): the socket from the config, the miner id
    // from the prover id; its proof is accepted by verify_seal.
    let c1_path = d.daemon.dir.path().join("c1-curio.json");
    fs::write(&c1_path, curio_c1(sealed, sealed.sector_id)).expect("C1 file");
    let out = d.daemon.dir.path().join("grpc-proof.bin");
    let c1_arg = c1_path.display().to_string();
    let (code, err) = d.daemon.client(
        &["c2"],
        &[
            "--grpc".into(),
            "--c1".into(),
            c1_arg.clone(),
            "--miner-id".into(),
            MINER.to_string(),
            "--request-id".into(),
            "smoke-grpc-1".into(),
            "--out".into(),
            out.display().to_string(),
        ],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("over gRPC (unix://"), "{err}");
    let proof = fs::read(&out).expect("proof written");
    assert!(
        seal::verify(sealed, &proof).expect("verify_seal runs"),
        "verify_seal rejected the proof of prover client c2 --grpc"
    );
    // A prover id that is no miner's cannot go as Curio's request: refused
    // before anything is sent (exit 7), nothing written.
    let (code, err) = d.daemon.client(
        &["c2"],
        &[
            "--grpc".into(),
            "--c1".into(),
            c1_arg,
            "--prover-id".into(),
            "ff".repeat(32),
            "--out".into(),
            d.daemon.dir.path().join("none.bin").display().to_string(),
        ],
    );
    assert_eq!(code, Some(7), "{err}");
    assert!(err.contains("not a miner's"), "{err}");
    assert!(!d.daemon.dir.path().join("none.bin").exists());

    // `prover client post --grpc`: the WinningPoSt's JSON vanilla proofs go
    // as Curio's bincode; filecoin-proofs accepts the proof.
    let vanilla = seal::post_vanilla(PostKind::Winning, sealed, work, RANDOMNESS).expect("vanilla");
    let vanilla_path = d.daemon.dir.path().join("winning-vanilla.json");
    fs::write(&vanilla_path, &vanilla).expect("vanilla file");
    let out = d.daemon.dir.path().join("grpc-winning.bin");
    let (code, err) = d.daemon.client(
        &["post"],
        &[
            "--grpc",
            "--kind",
            "winning",
            "--vanilla",
            &utf8(&vanilla_path),
            "--randomness",
            &hex::encode(RANDOMNESS),
            "--miner-id",
            &MINER.to_string(),
            "--sector-size",
            "2KiB",
            "--out",
            &utf8(&out),
        ]
        .map(str::to_owned),
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("winning-post job") && err.contains("over gRPC"),
        "{err}"
    );
    let proof = fs::read(&out).expect("proof written");
    assert!(
        seal::verify_post(PostKind::Winning, sealed, RANDOMNESS, &proof).expect("verifier runs"),
        "filecoin-proofs rejected the WinningPoSt of prover client post --grpc"
    );

    // A drain: the proof being made is finished and handed over, a new
    // request is answered UNAVAILABLE (Curio retries it elsewhere or later).
    let started = d.run(
        &d.socket(),
        &serde_json::json!([
            [{"rpc": "SubmitProof", "request": porep("porep-drained")}],
        ]),
    );
    let job = started[0][0]["response"]["job_id"]
        .as_str()
        .expect("job id")
        .to_owned();
    wait_running(&d, &job);
    // SAFETY: kill(2) on the daemon this test started.
    assert_eq!(unsafe { libc::kill(d.pid(), libc::SIGTERM) }, 0);
    let during = d.run(
        &d.socket(),
        &serde_json::json!([[
            {"rpc": "AwaitProof", "request": {"job_id": job, "timeout_ms": 120000}},
            {"rpc": "Prove", "request": {"submit": porep("porep-late")}, "delay_s": 0.2},
        ]]),
    );
    assert_eq!(during[0][0]["code"], "OK", "{during:?}\n{}", d.log());
    let drained = proof_of(&serde_json::json!({"response": {"result": during[0][0]["response"]}}));
    assert!(seal::verify(sealed, &drained).expect("verify_seal runs"));
    refused(&during[0][1], "UNAVAILABLE", "draining");
}

/// Our client's Curio requests (`prover client post|snap --grpc`) are
/// Curio's own: a request as Curio sends it, read as the daemon reads it
/// and written back as our client writes it, is the same message, byte for
/// byte (the PoSt's bincode vanilla proofs go through their JSON form and
/// back). No daemon or Python needed: this runs everywhere.
#[test]
fn curio_requests_read_and_written_back_are_the_same_message() {
    use prover::daemon::grpc::curio::{submit_of, translate};
    use prover::daemon::grpc::pb::{ProofKind, SubmitProofRequest};
    let (sealed, work) = miner_sector();
    let posts = [
        (PostKind::Winning, ProofKind::WinningPost, 0, 0),
        (PostKind::Window, ProofKind::WindowPostPartition, 10, 3),
    ];
    for (kind, proof_kind, number, partition_index) in posts {
        let curio = SubmitProofRequest {
            request_id: format!("{kind:?}-round-trip"),
            proof_kind: proof_kind as i32,
            miner_id: MINER,
            registered_proof: number,
            sector_size: 2048,
            randomness: RANDOMNESS.to_vec(),
            partition_index,
            vanilla_proofs: vec![bincode_vanilla(kind, sealed, work)],
            ..Default::default()
        };
        let ours = translate(&curio).expect("Curio's request is taken");
        let back = submit_of(&ours, &curio.request_id).expect("written back");
        assert!(back == curio, "{kind:?}: {back:?}");
    }
    let v = snap_fixture();
    let curio = SubmitProofRequest {
        request_id: "snap-round-trip".into(),
        proof_kind: ProofKind::SnapDealsUpdate as i32,
        miner_id: MINER,
        registered_proof: 0,
        sector_size: 2048,
        comm_r_old: v.comm_r_old.to_vec(),
        comm_r_new: v.comm_r_new.to_vec(),
        comm_d_new: v.comm_d_new.to_vec(),
        vanilla_proofs: v.vanilla.clone(),
        ..Default::default()
    };
    let ours = translate(&curio).expect("Curio's update is taken");
    let back = submit_of(&ours, &curio.request_id).expect("written back");
    assert!(back == curio, "snap: {back:?}");
    // The HTTP API's other form of the same proofs (JSON PartitionProof
    // objects) goes as the same bincode.
    let objects: Vec<serde_json::Value> = v
        .vanilla
        .iter()
        .map(|b| {
            let p: storage_proofs_update::PartitionProof<filecoin_proofs::SectorShape2KiB> =
                bincode::deserialize(b).expect("bincode");
            serde_json::to_value(p).expect("JSON")
        })
        .collect();
    let mut as_json = ours.clone();
    if let fleet_wire::api::FilecoinSubmitRequest::SnapDeals(r) = &mut as_json {
        r.vanilla_proofs = serde_json::Value::Array(objects);
    }
    let back = submit_of(&as_json, &curio.request_id).expect("written back");
    assert!(back == curio, "snap from JSON objects: {back:?}");
    // What cannot go as Curio's request is refused before anything is sent,
    // the field named and its value never echoed.
    let altered = |change: &dyn Fn(&mut fleet_wire::api::SnapDealsRequest)| {
        let mut req = ours.clone();
        if let fleet_wire::api::FilecoinSubmitRequest::SnapDeals(r) = &mut req {
            change(r);
        }
        submit_of(&req, "x").expect_err("refused").to_string()
    };
    let e = altered(&|r| r.prover_id = "ab".repeat(32));
    assert!(e.contains("not a miner's") && !e.contains("abab"), "{e}");
    let e = altered(&|r| r.comm_r_new = "<script>".into());
    assert!(e.contains("comm_r_new") && !e.contains("<script>"), "{e}");
    let e = altered(&|r| r.vanilla_proofs = serde_json::json!(["zz"]));
    assert!(e.contains("vanilla_proofs"), "{e}");
}

/// Waits (bounded) until `job` has a partition in progress.
fn wait_running(d: &GrpcDaemon, job: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = d.run(&d.socket(), &serde_json::json!([[{"rpc": "GetStatus"}]]));
        let running = r[0][0]["response"]["queues"]
            .as_array()
            .is_some_and(|q| q.iter().any(|q| q["in_progress"].as_u64().unwrap_or(0) > 0));
        if running {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "job {job} never started:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The fixture sector's vanilla proof for `kind`, bincode as Curio sends it.
fn bincode_vanilla(kind: PostKind, sealed: &Sealed, work: &Path) -> Vec<u8> {
    seal::post_vanilla_bincode(kind, sealed, work, RANDOMNESS).expect("vanilla proof")
}

fn snap_2kib() -> UpdateProof {
    "StackedDrg2KiBV1".parse().expect("a known update proof")
}

/// A 2 KiB committed-capacity sector updated with SnapDeals (sealed,
/// encoded and its vanilla proofs made once per run); the update circuit's
/// TEST-ONLY parameters are in the fixture's cache.
fn snap_fixture() -> &'static SnapVector {
    static SNAP: OnceLock<SnapVector> = OnceLock::new();
    SNAP.get_or_init(|| {
        let f = fixture();
        let work = f.root.join("snap-sector");
        let _ = fs::remove_dir_all(&work);
        let vector = snap_vector::snap_vector(snap_2kib(), SectorKey::Sealed, TEST_SEED, &work)
            .expect("snap vector");
        eprintln!(
            "sealed a 2 KiB CC sector in {:.2} s, encoded it in {:.2} s, vanilla proofs in {:.2} s",
            vector.seal_s, vector.encode_s, vector.vanilla_s
        );
        vector
    })
}

fn snap_request(v: &SnapVector, vanilla: SnapVanilla) -> SnapRequest {
    SnapRequest {
        update_proof: v.update_proof,
        comm_r_old: v.comm_r_old,
        comm_r_new: v.comm_r_new,
        comm_d_new: v.comm_d_new,
        vanilla,
    }
}

/// `prover snap` on the fixture's cache (CPU backend), the vanilla proofs
/// in `vanilla` (a file), the commitments `v`'s.
fn snap_cli(v: &SnapVector, vanilla: &Path, out: &Path) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_prover"));
    cmd.arg("snap")
        .args(["--update-proof", &v.update_proof.to_string()])
        .args(["--comm-r-old", &hex::encode(v.comm_r_old)])
        .args(["--comm-r-new", &hex::encode(v.comm_r_new)])
        .args(["--comm-d-new", &hex::encode(v.comm_d_new)])
        .arg("--vanilla")
        .arg(vanilla)
        .arg("--out")
        .arg(out)
        .args(["--allow-test-params", "--backend", "cpu", "--log", "warn"])
        .arg("--param-cache")
        .arg(&fixture().cache)
        .env_remove(CACHE_ENV);
    output_within(&mut cmd, CLI_LIMIT)
}

/// The vanilla proofs as the HTTP API and `prover snap` take Curio's
/// bincode: a JSON array of hex strings.
fn hex_vanilla(parts: &[Vec<u8>]) -> Vec<u8> {
    serde_json::to_vec(&parts.iter().map(hex::encode).collect::<Vec<_>>()).expect("JSON")
}

/// `prover snap` on `v`'s bincode vanilla proofs (hex, in a scratch folder
/// `name`, which it returns with the proof), on the CPU; filecoin-proofs'
/// `verify_empty_sector_update_proof` must accept the proof.
fn snap_proved_and_verified(v: &SnapVector, name: &str) -> (PathBuf, Vec<u8>) {
    let dir = scratch(name);
    let vanilla = dir.join("vanilla.json");
    fs::write(&vanilla, hex_vanilla(&v.vanilla)).expect("write vanilla");
    let out = dir.join("proof");
    let t = Instant::now();
    let run = snap_cli(v, &vanilla, &out);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    eprintln!(
        "prover snap ({name}, 2 KiB, CPU) took {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let proof = fs::read(&out).expect("proof");
    assert_eq!(proof.len(), v.vanilla.len() * porep::PROOF_BYTES);
    assert!(
        snap_vector::verify_snap(v, &proof).expect("verifier runs"),
        "filecoin-proofs rejected our SnapDeals proof ({name})"
    );
    (dir, proof)
}

/// `prover snap` (the engine, as the daemon proves) from the bincode
/// vanilla proofs filecoin-proofs-api hands out, on the CPU:
/// filecoin-proofs' `verify_empty_sector_update_proof` accepts the proof,
/// and refuses it altered or for other commitments.
#[test]
fn snap_deals_of_a_2kib_cc_sector_is_accepted_by_verify_empty_sector_update_proof() {
    let f = fixture();
    let v = snap_fixture();
    let before = digests(&f.cache);
    let (dir, proof) = snap_proved_and_verified(v, "snap");
    let mut bad = proof.clone();
    bad[10] ^= 1;
    assert!(!snap_vector::verify_snap(v, &bad).unwrap_or(false));
    let other = SnapVector {
        comm_r_new: v.comm_r_old,
        ..v.clone()
    };
    assert!(!snap_vector::verify_snap(&other, &proof).unwrap_or(false));
    // The JSON form of the same proofs is read and checked alike.
    let json = serde_json::to_vec(
        &v.vanilla
            .iter()
            .map(|b| {
                bincode::deserialize::<
                    storage_proofs_update::PartitionProof<filecoin_proofs::SectorShape2KiB>,
                >(b)
                .expect("bincode")
            })
            .collect::<Vec<_>>(),
    )
    .expect("json");
    let statement = snap::prepare_snap(&snap_request(v, SnapVanilla::Json(json)));
    assert!(statement.is_ok_and(|s| s.partitions() == 1));
    // Vanilla proofs of another update: refused before proving, exit 7.
    let swapped = SnapVector {
        comm_r_new: v.comm_r_old,
        ..v.clone()
    };
    let bad_out = dir.join("bad-proof");
    let run = snap_cli(&swapped, &dir.join("vanilla.json"), &bad_out);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(7), "{err}");
    assert!(err.contains("do not verify"), "{err}");
    assert!(!bad_out.exists());
    assert_eq!(digests(&f.cache), before, "the parameter cache changed");
}

/// Why `request` is refused: the check every path runs before the
/// parameters are read, let alone anything proved.
fn snap_refusal(request: &SnapRequest) -> FilecoinError {
    match snap::prepare_snap(request) {
        Ok(_) => panic!("a SnapDeals statement was accepted"),
        Err(e) => {
            assert!(e.to_string().len() < 600, "{e}");
            e
        }
    }
}

#[test]
fn damaged_or_mismatched_snap_inputs_are_refused_before_proving() {
    let v = snap_fixture();
    let with = |vanilla: Vec<Vec<u8>>| snap_request(v, SnapVanilla::Bincode(vanilla));

    // A bit of CommC (the proof's first 32 bytes) flipped: still a field
    // element, well-formed, but the proofs no longer verify.
    let mut comm_c = v.vanilla.clone();
    comm_c[0][0] ^= 1;
    let err = snap_refusal(&with(comm_c));
    assert!(
        matches!(err, FilecoinError::VanillaSnapInvalid { .. }),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("do not verify for StackedDrg2KiBV1"),
        "{err}"
    );

    // Bytes damaged further in: refused, whichever check meets them first.
    for at in [1, 3, 7].map(|eighth| v.vanilla[0].len() * eighth / 8) {
        let mut damaged = v.vanilla.clone();
        damaged[0][at] ^= 0x80;
        let err = snap_refusal(&with(damaged));
        assert!(
            matches!(
                err,
                FilecoinError::VanillaSnapInvalid { .. } | FilecoinError::SnapField { .. }
            ),
            "byte {at}: {err}"
        );
    }
    let mut cut = v.vanilla.clone();
    let len = cut[0].len();
    cut[0].truncate(len - 1);
    let err = snap_refusal(&with(cut));
    assert!(
        err.to_string()
            .contains("partition 0 is not a bincode PartitionProof of a 2KiB sector"),
        "{err}"
    );

    // Another sector's new CommR (here the old one's).
    let swapped = SnapRequest {
        comm_r_new: v.comm_r_old,
        ..with(v.vanilla.clone())
    };
    let err = snap_refusal(&swapped);
    assert!(
        matches!(err, FilecoinError::VanillaSnapInvalid { .. }),
        "{err}"
    );

    // The update proof type of another sector size.
    for (number, says) in [
        (1, "1 partition proofs; a StackedDrg8MiBV1 update has 4"),
        (3, "1 partition proofs; a StackedDrg32GiBV1 update has 16"),
    ] {
        let other = SnapRequest {
            update_proof: UpdateProof::from_number(number).expect("known"),
            ..with(v.vanilla.clone())
        };
        let err = snap_refusal(&other);
        assert!(err.to_string().contains(says), "{err}");
    }
}

#[test]
fn setup_of_snap_deals_never_writes_over_its_parameter_file() {
    // (The fixture made the update's parameters.)
    setup_refuses_to_write_over("snap-deals:2KiB");
}

/// A 2 KiB SnapDeals vector on a FORGED sector key (TEST DATA, never
/// sealed), made once per run.
fn forged_snap_fixture() -> &'static SnapVector {
    static FORGED: OnceLock<SnapVector> = OnceLock::new();
    FORGED.get_or_init(|| {
        let f = fixture();
        let work = f.root.join("snap-forged");
        let _ = fs::remove_dir_all(&work);
        let v = snap_vector::snap_vector(snap_2kib(), SectorKey::Forged, TEST_SEED, &work)
            .expect("forged snap vector");
        eprintln!(
            "forged a 2 KiB sector key in {:.2} s, encoded it in {:.2} s, vanilla proofs in {:.2} s",
            v.seal_s, v.encode_s, v.vanilla_s
        );
        v
    })
}

/// The forged sector key is what filecoin-proofs reads of a sealed one:
/// canonical field elements in the sealed file, p_aux whose CommC and
/// CommR_last hash (Poseidon, the crates' `hash2`) to the vector's CommR
/// old, a tree_r_last that is the crates' tree over the sealed file, and a
/// t_aux with the sealed key's tree configs; and the vector says it is
/// test data.
#[test]
fn a_forged_sector_keys_comm_r_is_poseidon_of_its_comm_c_and_tree_r_last() {
    use filecoin_hashers::poseidon::{PoseidonDomain, PoseidonFunction, PoseidonHasher};
    use filecoin_hashers::{Domain, HashFunction};
    use storage_proofs_core::merkle::{DiskTree, MerkleTreeTrait};
    type Tree = filecoin_proofs::SectorShape2KiB;
    let v = forged_snap_fixture();
    let key = fixture().root.join("snap-forged").join("sector-key");
    let (sealed, cache) = (key.join("sealed"), key.join("cache"));

    // p_aux as filecoin-proofs reads it (bincode PersistentAux), hashed here.
    let p_aux: storage_proofs_porep::stacked::PersistentAux<PoseidonDomain> =
        bincode::deserialize(&fs::read(cache.join("p_aux")).expect("p_aux")).expect("bincode");
    let comm_r = PoseidonFunction::hash2(&p_aux.comm_c, &p_aux.comm_r_last);
    assert_eq!(comm_r.into_bytes(), v.comm_r_old.to_vec());
    assert_eq!(v.sector_key.comm_r, v.comm_r_old);
    // And through filecoin-proofs' PrivateReplicaInfo (tree_r_last
    // reopened as PoSt reopens it: its root is p_aux's CommR_last).
    let read_back = forge_key::comm_r_of_key(snap_2kib(), &sealed, &cache, v.comm_r_old)
        .expect("read the key back");
    assert_eq!(read_back, v.comm_r_old);
    // Another CommC gives another CommR: the check above is not vacuous.
    let other = PoseidonFunction::hash2(&p_aux.comm_r_last, &p_aux.comm_c);
    assert_ne!(other.into_bytes(), v.comm_r_old.to_vec());

    // Every node a canonical little-endian Fr, and tree_r_last the crates'
    // tree of those leaves, rebuilt here in memory.
    let data = fs::read(&sealed).expect("sealed");
    assert_eq!(data.len(), 2048);
    let leaves: Vec<PoseidonDomain> = data
        .chunks(32)
        .map(|c| {
            let repr: [u8; 32] = c.try_into().expect("32 bytes");
            assert!(bool::from(blstrs::Scalar::from_bytes_le(&repr).is_some()));
            PoseidonDomain::try_from_bytes(c).expect("a field element")
        })
        .collect();
    assert!(
        leaves.windows(2).any(|w| w[0] != w[1]),
        "random, not constant"
    );
    let tree = DiskTree::<PoseidonHasher, typenum::U8, typenum::U0, typenum::U0>::try_from_iter(
        leaves.into_iter().map(Ok),
    )
    .expect("tree");
    assert_eq!(tree.root(), p_aux.comm_r_last);

    // t_aux: the tree configs a sealed CC key's cache holds (paths aside).
    type TAux =
        storage_proofs_porep::stacked::TemporaryAux<Tree, filecoin_hashers::sha256::Sha256Hasher>;
    let t_aux = |dir: &Path| -> TAux {
        bincode::deserialize(&fs::read(dir.join("t_aux")).expect("t_aux")).expect("bincode")
    };
    let sealed_cache = fixture().root.join("snap-sector/sector-key/cache");
    snap_fixture();
    let (forged, real) = (t_aux(&cache), t_aux(&sealed_cache));
    for (a, b) in [
        (&forged.tree_d_config, &real.tree_d_config),
        (&forged.tree_r_last_config, &real.tree_r_last_config),
        (&forged.tree_c_config, &real.tree_c_config),
    ] {
        assert_eq!(
            (&a.id, a.size, a.rows_to_discard),
            (&b.id, b.size, b.rows_to_discard)
        );
    }
    let tree_r_files = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .expect("cache")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("tree-r-last") || n == "p_aux" || n == "t_aux")
            .collect();
        names.sort();
        names
    };
    assert_eq!(tree_r_files(&cache), tree_r_files(&sealed_cache));

    // Marked as test data wherever the vector goes.
    assert_eq!(v.sector_key_made, SectorKey::Forged);
    let json = serde_json::to_string(v).expect("JSON");
    assert!(json.contains("\"sector_key_made\":\"forged\""), "{json}");
    assert!(json.contains("TEST DATA"), "{json}");
    assert!(prover::filecoin::forge::is_forged_ticket(
        &v.sector_key.ticket
    ));
    let sealed_json = serde_json::to_string(snap_fixture()).expect("JSON");
    assert!(sealed_json.contains("\"sector_key_made\":\"sealed\""));
    assert!(!sealed_json.contains("TEST DATA"));
}

/// An update of a forged sector key, proved by this prover (`prover snap`,
/// CPU): filecoin-proofs' `verify_empty_sector_update_proof` accepts it,
/// and refuses it for the sealed vector's CommR old.
#[test]
fn snap_deals_of_a_forged_2kib_sector_key_is_accepted_by_verify_empty_sector_update_proof() {
    let v = forged_snap_fixture();
    let (_, proof) = snap_proved_and_verified(v, "snap-forged");
    // (filecoin-proofs' own prover on the same vector is the sealed key's
    // test; one CPU proof here keeps CI fast.)
    let elsewhere = SnapVector {
        comm_r_old: snap_fixture().comm_r_old,
        ..v.clone()
    };
    assert!(!snap_vector::verify_snap(&elsewhere, &proof).unwrap_or(false));
}

/// At 8 MiB (four partitions, the smallest multi-partition update) a
/// forged key's vanilla proofs pass the check `prover snap` runs before
/// proving (the crates' `verify_partition_proofs`), and a CommR old other
/// than Poseidon(CommC, CommR_last) is refused. No parameters are needed.
#[test]
fn a_forged_8mib_sector_keys_vanilla_update_proofs_verify() {
    let f = fixture();
    let update: UpdateProof = "StackedDrg8MiBV1".parse().expect("a known update proof");
    let work = f.root.join("snap-forged-8mib");
    let _ = fs::remove_dir_all(&work);
    let t = Instant::now();
    let v = snap_vector::snap_vector(update, SectorKey::Forged, TEST_SEED, &work)
        .expect("forged 8 MiB snap vector");
    eprintln!(
        "8 MiB forged key {:.2} s, encode {:.2} s, vanilla {:.2} s ({:.2} s in all)",
        v.seal_s,
        v.encode_s,
        v.vanilla_s,
        t.elapsed().as_secs_f64()
    );
    let key = work.join("sector-key");
    let read_back = forge_key::comm_r_of_key(
        update,
        &key.join("sealed"),
        &key.join("cache"),
        v.comm_r_old,
    )
    .expect("read the key back");
    assert_eq!(read_back, v.comm_r_old);
    let statement = snap::prepare_snap(&snap_request(&v, SnapVanilla::Bincode(v.vanilla.clone())));
    assert!(statement.is_ok_and(|s| s.partitions() == 4));
    let mut other = v.comm_r_old;
    other[0] ^= 1;
    let elsewhere = SnapRequest {
        comm_r_old: other,
        ..snap_request(&v, SnapVanilla::Bincode(v.vanilla.clone()))
    };
    let err = snap_refusal(&elsewhere);
    assert!(
        matches!(
            err,
            FilecoinError::VanillaSnapInvalid { .. } | FilecoinError::SnapField { .. }
        ),
        "{err}"
    );
    let _ = fs::remove_dir_all(&work);
}
