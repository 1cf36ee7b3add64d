//! Parameters: our generator against bellperson's prover and verifier, the
//! on-disk cache, and how bad parameter files are reported.

use std::fs;
use std::io::Write;
use std::path::Path;

use bellperson::groth16::{
    create_random_proof, generate_random_parameters, prepare_verifying_key, verify_proof,
    Parameters,
};
use blstrs::{Bls12, Scalar};
use ff::Field;
use prover::backend::BackendKind;
use prover::circuit::{self, CircuitKind};
use prover::params::{
    memory_bytes, read_mapped, read_params, write_params, ParamStore, ParamsError, ParamsLayout,
    ParamsOrigin, TestParams,
};
use prover::setup;
use prover::setup::command::{run as run_setup, SetupOptions};
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha20Rng;
use sha2::{Digest, Sha256};

const SIZE: usize = 1024;

fn generated(kind: CircuitKind, size: usize, seed: u64) -> Parameters<Bls12> {
    let shape = circuit::shape_circuit(kind, size).expect("shape circuit");
    setup::generate(&shape, seed).expect("generate")
}

/// Proves `kind`/`size` for witness `seed` with bellperson and verifies it.
fn prove_and_verify(params: &Parameters<Bls12>, kind: CircuitKind, size: usize, seed: u64) {
    let (circuit, inputs) = circuit::bundled(kind, size, seed).expect("bundled");
    let mut rng = ChaCha20Rng::seed_from_u64(seed ^ 0x5eed);
    let proof = create_random_proof(circuit, params, &mut rng).expect("prove");
    let pvk = prepare_verifying_key(&params.vk);
    assert!(
        verify_proof(&pvk, &proof, &inputs).expect("verify"),
        "{kind} proof rejected"
    );
    let mut wrong = inputs.clone();
    wrong[0] += Scalar::ONE;
    assert!(
        !verify_proof(&pvk, &proof, &wrong).expect("verify"),
        "{kind} proof accepted for a wrong public input"
    );
}

#[test]
fn chain_proof_with_generated_parameters_verifies() {
    let params = generated(CircuitKind::Chain, SIZE, 1);
    assert_eq!(params.h.len(), SIZE - 1);
    prove_and_verify(&params, CircuitKind::Chain, SIZE, 11);
}

#[test]
fn sha256_proof_with_generated_parameters_verifies_and_exposes_the_digest() {
    // Any size below two blocks is one block (26 034 padded constraints, domain 2^15).
    let size = 4096;
    let (circuit, inputs) = circuit::bundled(CircuitKind::Sha256, size, 21).expect("bundled");
    let circuit::BundledCircuit::Sha256(sha) = &circuit else {
        panic!("sha256 kind built {:?}", circuit.kind());
    };
    let digest = Sha256::digest(sha.preimage().expect("witness"));
    assert_eq!(inputs, circuit::sha256::digest_inputs(&digest));
    let params = generated(CircuitKind::Sha256, size, 2);
    assert_eq!(params.h.len(), (1 << 15) - 1);
    prove_and_verify(&params, CircuitKind::Sha256, size, 21);
}

#[test]
fn store_round_trip_is_identical_and_mapped_parameters_prove() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = ParamStore::open(dir.path()).expect("store");
    let params = generated(CircuitKind::Chain, SIZE, 3);
    let meta = store
        .insert(
            CircuitKind::Chain,
            SIZE,
            &params,
            ParamsOrigin::TestSetup { seed: 3 },
        )
        .expect("insert");
    assert_eq!(meta.domain_size, SIZE);
    assert_eq!(
        meta.sha256,
        hex::encode(Sha256::digest(
            fs::read(store.params_path(CircuitKind::Chain, SIZE)).expect("read")
        ))
    );

    // Only the file and its sidecar remain: no temporary files.
    let mut names: Vec<_> = fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["chain-1024.json", "chain-1024.params"]);

    let fresh = ParamStore::open(dir.path()).expect("store");
    let loaded = fresh.load(CircuitKind::Chain, SIZE).expect("load");
    assert!(*loaded == params, "loaded parameters differ");
    assert!(std::sync::Arc::ptr_eq(
        &loaded,
        &fresh.load(CircuitKind::Chain, SIZE).expect("load again")
    ));
    assert_eq!(
        fresh.verify(CircuitKind::Chain, SIZE).expect("verify"),
        meta
    );

    let mapped = fresh.load_mapped(CircuitKind::Chain, SIZE).expect("mapped");
    assert!(mapped.vk == params.vk);
    let (circuit, inputs) = circuit::bundled(CircuitKind::Chain, SIZE, 4).expect("bundled");
    let proof = create_random_proof(circuit, &mapped, &mut ChaCha20Rng::seed_from_u64(4))
        .expect("prove from mapped parameters");
    assert!(verify_proof(&mapped.pvk, &proof, &inputs).expect("verify"));
}

#[test]
fn bellperson_and_our_files_are_interchangeable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shape = circuit::shape_circuit(CircuitKind::Chain, SIZE).expect("shape");
    let theirs =
        generate_random_parameters::<Bls12, _, _>(shape, &mut ChaCha20Rng::seed_from_u64(5))
            .expect("bellperson");
    let foreign = dir.path().join("from-bellperson.params");
    let mut file = fs::File::create(&foreign).expect("create");
    theirs.write(&mut file).expect("bellperson write");
    file.flush().expect("flush");

    let store = ParamStore::open(dir.path().join("cache")).expect("store");
    let meta = store
        .import(CircuitKind::Chain, SIZE, &foreign, false)
        .expect("import");
    assert!(matches!(meta.origin, ParamsOrigin::Imported { .. }));
    assert!(*store.load(CircuitKind::Chain, SIZE).expect("load") == theirs);

    // Same seed, same parameters: our cache file is byte-identical to bellperson's.
    let ours = generated(CircuitKind::Chain, SIZE, 5);
    let ours_path = dir.path().join("ours.params");
    write_params(&ours_path, &ours).expect("write");
    assert_eq!(
        fs::read(&ours_path).expect("read"),
        fs::read(&foreign).expect("read")
    );
    let reread = Parameters::<Bls12>::read(fs::File::open(&ours_path).expect("open"), true)
        .expect("bellperson reads our file");
    assert!(reread == ours);
}

#[test]
fn get_or_generate_caches_on_disk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = ParamStore::open(dir.path())
        .expect("store")
        .with_test_params(TestParams::Generate { seed: 0 });
    assert!(!store.contains(CircuitKind::Chain, 256));
    let first = store
        .get_or_generate(CircuitKind::Chain, 256)
        .expect("generate");
    assert!(store.contains(CircuitKind::Chain, 256));
    let meta = store.meta(CircuitKind::Chain, 256).expect("meta");
    assert_eq!(meta.origin, ParamsOrigin::TestSetup { seed: 0 });
    // Loading what is there needs no permission to generate.
    let again = ParamStore::open(dir.path())
        .expect("store")
        .get_or_generate(CircuitKind::Chain, 256)
        .expect("load");
    assert!(*first == *again);
    prove_and_verify(&again, CircuitKind::Chain, 256, 6);
}

#[test]
fn setup_command_writes_the_cache_and_skips_valid_entries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let args = SetupOptions {
        circuit: CircuitKind::Chain,
        size: Some(128),
        params_dir: dir.path().to_path_buf(),
        seed: 8,
        force: false,
        bench: false,
        bench_sizes: vec![],
        backend: BackendKind::Cpu,
    };
    run_setup(args.clone()).expect("setup");
    let store = ParamStore::open(dir.path()).expect("store");
    let meta = store.verify(CircuitKind::Chain, 128).expect("verify");
    assert_eq!(meta.origin, ParamsOrigin::TestSetup { seed: 8 });
    // A second run keeps the valid file.
    run_setup(SetupOptions { seed: 9, ..args }).expect("setup again");
    assert_eq!(store.verify(CircuitKind::Chain, 128).expect("verify"), meta);
}

/// A valid parameter file for chain/SIZE and its layout.
fn valid_file(dir: &Path) -> (std::path::PathBuf, ParamsLayout) {
    let path = dir.join("valid.params");
    write_params(&path, &generated(CircuitKind::Chain, SIZE, 7)).expect("write");
    let layout = ParamsLayout::read(&path).expect("layout");
    (path, layout)
}

fn write_bytes(path: &Path, bytes: &[u8]) {
    fs::write(path, bytes).expect("write");
}

/// Every reader rejects `path` with an error (never a panic), whose text names the file.
fn all_readers_reject(path: &Path) -> Vec<ParamsError> {
    let errors = vec![
        ParamsLayout::read(path)
            .map(drop)
            .expect_err("layout accepted a bad file"),
        read_params(path, true)
            .map(drop)
            .expect_err("read accepted a bad file"),
        read_mapped(path, false)
            .map(drop)
            .expect_err("mmap accepted a bad file"),
    ];
    for e in &errors {
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
    }
    errors
}

#[test]
fn truncated_garbage_and_wrong_lengths_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (valid, layout) = valid_file(dir.path());
    let bytes = fs::read(&valid).expect("read");
    assert_eq!(layout.file_len, bytes.len() as u64);
    assert_eq!(layout.h, SIZE as u64 - 1);

    // Truncated in the middle of the b_g2 section.
    let truncated = dir.path().join("truncated.params");
    write_bytes(&truncated, &bytes[..bytes.len() - 100]);
    let errors = all_readers_reject(&truncated);
    assert!(
        matches!(
            &errors[0],
            ParamsError::Truncated {
                section: "b_g2",
                ..
            }
        ),
        "{}",
        errors[0]
    );

    // Empty and random garbage.
    let empty = dir.path().join("empty.params");
    write_bytes(&empty, &[]);
    all_readers_reject(&empty);
    let garbage = dir.path().join("garbage.params");
    let noise: Vec<u8> = (0..5000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    write_bytes(&garbage, &noise);
    all_readers_reject(&garbage);

    // A length field claiming 2^32 − 1 points must not be trusted.
    let ic_len_at = 3 * 96 + 3 * 192;
    let h_len_at = ic_len_at + 4 + 96 * layout.ic as usize;
    let mut huge = bytes.clone();
    huge[h_len_at..h_len_at + 4].copy_from_slice(&u32::MAX.to_be_bytes());
    let huge_path = dir.path().join("huge.params");
    write_bytes(&huge_path, &huge);
    let errors = all_readers_reject(&huge_path);
    assert!(
        matches!(&errors[0], ParamsError::Truncated { section: "h", .. }),
        "{}",
        errors[0]
    );

    // A shorter length makes the next length field land inside a point.
    let mut short = bytes.clone();
    short[h_len_at..h_len_at + 4].copy_from_slice(&(layout.h as u32 - 1).to_be_bytes());
    let short_path = dir.path().join("short.params");
    write_bytes(&short_path, &short);
    let errors = all_readers_reject(&short_path);
    assert!(
        matches!(
            &errors[0],
            ParamsError::Truncated { .. } | ParamsError::Malformed { .. }
        ),
        "{}",
        errors[0]
    );

    // Trailing bytes after a valid file.
    let mut trailing = bytes.clone();
    trailing.extend_from_slice(&[0; 7]);
    let trailing_path = dir.path().join("trailing.params");
    write_bytes(&trailing_path, &trailing);
    let err = ParamsLayout::read(&trailing_path)
        .map(drop)
        .expect_err("trailing bytes");
    assert!(err.to_string().contains("7 trailing bytes"), "{err}");

    // A point that is not on the curve, lengths intact.
    let mut off_curve = bytes.clone();
    let first_h = h_len_at + 4;
    off_curve[first_h + 50] ^= 0x01;
    let off_curve_path = dir.path().join("off-curve.params");
    write_bytes(&off_curve_path, &off_curve);
    ParamsLayout::read(&off_curve_path).expect("lengths are fine");
    let err = read_params(&off_curve_path, true)
        .map(drop)
        .expect_err("off-curve point");
    assert!(err.to_string().contains("not on curve"), "{err}");
}

#[test]
fn corrupt_cache_entries_are_detected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = ParamStore::open(dir.path()).expect("store");
    let params = generated(CircuitKind::Chain, SIZE, 10);
    store
        .insert(CircuitKind::Chain, SIZE, &params, ParamsOrigin::Inserted)
        .expect("insert");
    let path = store.params_path(CircuitKind::Chain, SIZE);

    // One flipped bit in a point: the layout is fine, the checksum is not.
    let mut bytes = fs::read(&path).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    write_bytes(&path, &bytes);
    let err = ParamStore::open(dir.path())
        .expect("store")
        .load(CircuitKind::Chain, SIZE)
        .map(drop)
        .expect_err("corrupt file loaded");
    assert!(matches!(err, ParamsError::ChecksumMismatch { .. }), "{err}");
    assert!(matches!(
        store.verify(CircuitKind::Chain, SIZE),
        Err(ParamsError::ChecksumMismatch { .. })
    ));
    assert!(store.load_mapped(CircuitKind::Chain, SIZE).is_err());

    // Truncated cache file.
    write_bytes(&path, &bytes[..bytes.len() / 2]);
    let err = ParamStore::open(dir.path())
        .expect("store")
        .load(CircuitKind::Chain, SIZE)
        .map(drop)
        .expect_err("truncated file loaded");
    assert!(matches!(err, ParamsError::Truncated { .. }), "{err}");

    // The truncated file no longer matches its sidecar, so nothing says the
    // store wrote it: it is not replaced until the operator removes it.
    let err = store
        .insert(CircuitKind::Chain, SIZE, &params, ParamsOrigin::Inserted)
        .expect_err("replaced a file its sidecar does not describe");
    assert!(matches!(err, ParamsError::Protected { .. }), "{err}");
    fs::remove_file(&path).expect("remove");

    // A sidecar that is not JSON.
    store
        .insert(CircuitKind::Chain, SIZE, &params, ParamsOrigin::Inserted)
        .expect("insert");
    write_bytes(&store.meta_path(CircuitKind::Chain, SIZE), b"{not json");
    let err = ParamStore::open(dir.path())
        .expect("store")
        .load(CircuitKind::Chain, SIZE)
        .map(drop)
        .expect_err("bad sidecar");
    assert!(matches!(err, ParamsError::Meta { .. }), "{err}");
}

#[test]
fn parameters_that_do_not_fit_say_what_to_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = ParamStore::open(dir.path()).expect("store");
    let small = generated(CircuitKind::Chain, SIZE, 12);

    let err = store
        .insert(CircuitKind::Chain, 4 * SIZE, &small, ParamsOrigin::Inserted)
        .map(drop)
        .expect_err("2^10 parameters stored for 2^12");
    let text = err.to_string();
    assert!(
        matches!(
            err,
            ParamsError::DomainMismatch {
                have_log2: 10,
                need_log2: 12,
                ..
            }
        ),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "have domain 2^10, circuit `chain` size 4096 needs 2^12: run `prover setup --circuit chain --size 4096 --params-dir {}`",
            dir.path().display()
        )),
        "{text}"
    );

    // Same domain, different circuit: the variable counts give it away.
    let err = store
        .insert(
            CircuitKind::Chain,
            SIZE - 10,
            &small,
            ParamsOrigin::Inserted,
        )
        .map(drop)
        .expect_err("wrong shape");
    assert!(matches!(err, ParamsError::ShapeMismatch { .. }), "{err}");

    // A cache file renamed to another size is caught when loading.
    store
        .insert(CircuitKind::Chain, SIZE, &small, ParamsOrigin::Inserted)
        .expect("insert");
    fs::copy(
        store.params_path(CircuitKind::Chain, SIZE),
        store.params_path(CircuitKind::Chain, 2 * SIZE),
    )
    .expect("copy");
    fs::copy(
        store.meta_path(CircuitKind::Chain, SIZE),
        store.meta_path(CircuitKind::Chain, 2 * SIZE),
    )
    .expect("copy");
    let err = store
        .load(CircuitKind::Chain, 2 * SIZE)
        .map(drop)
        .expect_err("wrong size");
    assert!(
        matches!(
            err,
            ParamsError::DomainMismatch {
                have_log2: 10,
                need_log2: 11,
                ..
            }
        ),
        "{err}"
    );

    let err = store
        .load(CircuitKind::Sha256, SIZE)
        .map(drop)
        .expect_err("missing");
    assert!(matches!(err, ParamsError::Missing { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("`prover setup --circuit sha256 --size 1024 --params-dir"),
        "{err}"
    );
}

/// bellperson's parameters for chain/SIZE from an RNG we never use: what an
/// operator brings from a real ceremony, as far as the store can tell.
fn foreign_params(seed: u64) -> Parameters<Bls12> {
    let shape = circuit::shape_circuit(CircuitKind::Chain, SIZE).expect("shape");
    generate_random_parameters::<Bls12, _, _>(shape, &mut ChaCha20Rng::seed_from_u64(seed))
        .expect("bellperson")
}

fn write_foreign(path: &Path, params: &Parameters<Bls12>) -> Vec<u8> {
    let mut bytes = Vec::new();
    params.write(&mut bytes).expect("bellperson write");
    fs::write(path, &bytes).expect("write");
    bytes
}

#[test]
fn a_file_without_sidecar_is_adopted_as_imported_never_overwritten() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = ParamStore::open(dir.path())
        .expect("store")
        .with_test_params(TestParams::Generate { seed: 0 });
    let theirs = foreign_params(77);
    let path = store.params_path(CircuitKind::Chain, SIZE);
    let bytes = write_foreign(&path, &theirs);

    let loaded = store
        .get_or_generate(CircuitKind::Chain, SIZE)
        .expect("adopted");
    assert!(*loaded == theirs, "the store loaded something else");
    assert_eq!(
        fs::read(&path).expect("read"),
        bytes,
        "the file was modified"
    );
    let meta = store.meta(CircuitKind::Chain, SIZE).expect("sidecar");
    assert!(
        matches!(&meta.origin, ParamsOrigin::Imported { from } if from.contains("without a sidecar")),
        "{:?}",
        meta.origin
    );
    assert_eq!(meta.sha256, hex::encode(Sha256::digest(&bytes)));
    // A proof made with the operator's file verifies against what the store serves.
    prove_and_verify(&loaded, CircuitKind::Chain, SIZE, 5);
}

#[test]
fn a_file_without_sidecar_that_does_not_fit_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = ParamStore::open(dir.path())
        .expect("store")
        .with_test_params(TestParams::Generate { seed: 0 });
    // Parameters for another size under this entry's name, then garbage.
    let wrong = generated(CircuitKind::Chain, SIZE / 2, 1);
    let path = store.params_path(CircuitKind::Chain, SIZE);
    let bytes = write_foreign(&path, &wrong);
    let err = store
        .get_or_generate(CircuitKind::Chain, SIZE)
        .map(drop)
        .expect_err("wrong domain adopted");
    assert!(matches!(err, ParamsError::NotAdopted { .. }), "{err}");
    assert!(err.to_string().contains("domain 2^9"), "{err}");
    assert_eq!(
        fs::read(&path).expect("read"),
        bytes,
        "the file was modified"
    );
    assert!(!store.meta_path(CircuitKind::Chain, SIZE).exists());

    fs::write(&path, b"not parameters").expect("write");
    let err = store
        .get_or_generate(CircuitKind::Chain, SIZE)
        .map(drop)
        .expect_err("garbage adopted");
    assert!(matches!(err, ParamsError::NotAdopted { .. }), "{err}");
    assert_eq!(fs::read(&path).expect("read"), b"not parameters");
}

#[test]
fn setup_never_replaces_a_file_it_did_not_write_even_with_force() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = ParamStore::open(dir.path()).expect("store");
    let path = store.params_path(CircuitKind::Chain, SIZE);
    let bytes = write_foreign(&path, &foreign_params(3));
    let args = SetupOptions {
        circuit: CircuitKind::Chain,
        size: Some(SIZE),
        params_dir: dir.path().to_path_buf(),
        seed: 0,
        force: true,
        bench: false,
        bench_sizes: vec![],
        backend: BackendKind::Cpu,
    };
    let err = run_setup(args.clone()).expect_err("setup overwrote a foreign file");
    assert!(format!("{err:#}").contains("never replaced"), "{err:#}");
    assert_eq!(fs::read(&path).expect("read"), bytes);
    // Adopted, it is `imported`: still protected.
    store.load(CircuitKind::Chain, SIZE).expect("adopt");
    run_setup(args).expect_err("setup overwrote an imported entry");
    assert_eq!(fs::read(&path).expect("read"), bytes);
}

#[test]
fn missing_parameters_are_generated_only_when_test_params_are_allowed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = ParamStore::open(dir.path()).expect("store");
    let err = store
        .get_or_generate(CircuitKind::Chain, 256)
        .map(drop)
        .expect_err("generated without permission");
    assert!(matches!(err, ParamsError::Missing { .. }), "{err}");
    assert!(err.to_string().contains("prover params import"), "{err}");
    assert_eq!(fs::read_dir(dir.path()).expect("list").count(), 0);
}

#[test]
fn import_copies_byte_for_byte_and_replaces_only_when_asked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = ParamStore::open(dir.path().join("store")).expect("store");
    let first = dir.path().join("first.params");
    let first_bytes = write_foreign(&first, &foreign_params(1));
    store
        .import(CircuitKind::Chain, SIZE, &first, false)
        .expect("import");
    let entry = store.params_path(CircuitKind::Chain, SIZE);
    assert_eq!(fs::read(&entry).expect("read"), first_bytes);

    let second = dir.path().join("second.params");
    let second_bytes = write_foreign(&second, &foreign_params(2));
    let err = store
        .import(CircuitKind::Chain, SIZE, &second, false)
        .map(drop)
        .expect_err("replaced an imported entry");
    assert!(matches!(err, ParamsError::Protected { .. }), "{err}");
    assert_eq!(fs::read(&entry).expect("read"), first_bytes);
    store
        .import(CircuitKind::Chain, SIZE, &second, true)
        .expect("import --replace");
    assert_eq!(fs::read(&entry).expect("read"), second_bytes);
    assert!(store.verify(CircuitKind::Chain, SIZE).is_ok());

    // A file that does not fit is refused before anything is written.
    let small = dir.path().join("small.params");
    write_foreign(&small, &generated(CircuitKind::Chain, SIZE / 2, 1));
    let err = store
        .import(CircuitKind::Chain, SIZE, &small, true)
        .map(drop)
        .expect_err("wrong size imported");
    assert!(matches!(err, ParamsError::ImportMismatch { .. }), "{err}");
    // The hint is about the source, not a setup into the source's folder.
    let text = err.to_string();
    assert!(
        text.contains("its domain is 2^") && !text.contains("prover setup"),
        "{text}"
    );
    assert_eq!(fs::read(&entry).expect("read"), second_bytes);
}

#[test]
fn loaded_parameters_hold_a_budget_reservation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let budget = prover::budget::MemoryBudget::new(1 << 30);
    let store = ParamStore::open(dir.path())
        .expect("store")
        .with_test_params(TestParams::Generate { seed: 0 })
        .with_budget(budget.clone());
    assert_eq!(budget.stats().reserved, 0);
    store
        .get_or_generate(CircuitKind::Chain, 256)
        .expect("load");
    let layout = ParamsLayout::read(&store.params_path(CircuitKind::Chain, 256)).expect("layout");
    let want = memory_bytes(&layout);
    assert!(
        want > layout.file_len / 2,
        "{want} for a {}-byte file",
        layout.file_len
    );
    assert_eq!(budget.stats().reserved, want);
    assert_eq!(store.loaded_bytes(), want);
    // Loading again shares the entry and reserves nothing more.
    store.load(CircuitKind::Chain, 256).expect("load again");
    assert_eq!(budget.stats().reserved, want);
    drop(store);
    assert_eq!(budget.stats().reserved, 0, "released with the store");
}

#[test]
fn a_sidecar_that_cannot_be_put_in_place_leaves_no_file_to_be_adopted_as_imported() {
    // The parameters fit on disk, their sidecar does not land (here its
    // place is taken by a directory; a full disk fails the same step):
    // before, the file stayed without a sidecar and the next load adopted
    // our TEST-ONLY parameters as `imported`, protected from `setup --force`.
    let dir = tempfile::tempdir().expect("tempdir");
    let store = ParamStore::open(dir.path())
        .expect("store")
        .with_test_params(TestParams::Generate { seed: 0 });
    let meta_path = store.meta_path(CircuitKind::Chain, SIZE);
    fs::create_dir(&meta_path).expect("block the sidecar");
    let err = store
        .get_or_generate(CircuitKind::Chain, SIZE)
        .map(drop)
        .expect_err("the sidecar cannot be written");
    assert!(err.to_string().contains("renaming into place"), "{err}");
    assert!(
        !store.params_path(CircuitKind::Chain, SIZE).exists(),
        "a parameter file without its sidecar was left in place"
    );
    assert!(
        store.temp_files().expect("list").is_empty(),
        "temporary files left"
    );
    // Once the sidecar can land, the entry is made again, labelled TEST-ONLY.
    fs::remove_dir(&meta_path).expect("unblock");
    store
        .get_or_generate(CircuitKind::Chain, SIZE)
        .expect("generated");
    let meta = store.meta(CircuitKind::Chain, SIZE).expect("sidecar");
    assert!(
        matches!(meta.origin, ParamsOrigin::TestSetup { .. }),
        "{:?}",
        meta.origin
    );
}

#[test]
fn a_test_setup_sidecar_beside_a_foreign_file_does_not_make_it_replaceable() {
    // An operator copies bellperson parameters over ours and leaves our
    // sidecar: it claims `test_setup` but records another file's sha256.
    let dir = tempfile::tempdir().expect("tempdir");
    let store = ParamStore::open(dir.path()).expect("store");
    store
        .generate_test(CircuitKind::Chain, SIZE, 1)
        .expect("ours");
    let path = store.params_path(CircuitKind::Chain, SIZE);
    let theirs = write_foreign(&path, &foreign_params(9));
    let recorded = store
        .meta(CircuitKind::Chain, SIZE)
        .expect("sidecar")
        .sha256;
    let actual = hex::encode(Sha256::digest(&theirs));
    let args = SetupOptions {
        circuit: CircuitKind::Chain,
        size: Some(SIZE),
        params_dir: dir.path().to_path_buf(),
        seed: 0,
        force: true,
        bench: false,
        bench_sizes: vec![],
        backend: BackendKind::Cpu,
    };
    let err = run_setup(args).expect_err("setup --force replaced a foreign file");
    let text = format!("{err:#}");
    assert!(text.contains(&recorded) && text.contains(&actual), "{text}");
    assert_eq!(
        fs::read(&path).expect("read"),
        theirs,
        "the file was replaced"
    );
    // Loading it is refused as well, naming the mismatch.
    let err = store
        .load(CircuitKind::Chain, SIZE)
        .map(drop)
        .expect_err("trusted");
    assert!(matches!(err, ParamsError::ChecksumMismatch { .. }), "{err}");
}

#[test]
fn a_dead_writers_temporary_file_is_removed_at_open_and_a_live_ones_is_listed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = std::process::Command::new("true").spawn().expect("spawn");
    let dead = child.id();
    child.wait().expect("reap");
    let dead_tmp = dir.path().join(format!(".chain-1024.params.tmp.{dead}.3"));
    let live_tmp = dir
        .path()
        .join(format!(".chain-2048.params.tmp.{}.0", std::process::id()));
    fs::write(&dead_tmp, vec![0u8; 4096]).expect("write");
    fs::write(&live_tmp, vec![0u8; 100]).expect("write");
    let store = ParamStore::open(dir.path()).expect("store");
    assert!(!dead_tmp.exists(), "a killed write's file stayed");
    let listed = store.temp_files().expect("list");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].path, live_tmp);
    assert_eq!(listed[0].bytes, 100);
    assert!(listed[0].writer_alive);
}

#[test]
fn generation_is_admitted_by_the_budget_and_unused_sets_are_evicted_under_pressure() {
    use prover::budget::MemoryBudget;
    use prover::params::generation_bytes;
    let dir = tempfile::tempdir().expect("tempdir");
    let small = ParamStore::open(dir.path().join("small"))
        .expect("store")
        .with_test_params(TestParams::Generate { seed: 0 })
        .with_budget(MemoryBudget::new(256 << 10));
    // Generating chain/1024 holds several MB: refused before any work, not
    // done outside the budget.
    let err = small
        .get_or_generate(CircuitKind::Chain, SIZE)
        .map(drop)
        .expect_err("generated outside the budget");
    assert!(matches!(err, ParamsError::Budget { .. }), "{err}");
    assert!(!small.params_path(CircuitKind::Chain, SIZE).exists());

    let shape = |size| circuit::shape(CircuitKind::Chain, size).expect("shape");
    let one = memory_bytes(&layout_of_generated(SIZE));
    let budget = MemoryBudget::new(generation_bytes(&shape(2 * SIZE)) + one - 1);
    let store = ParamStore::open(dir.path().join("big"))
        .expect("store")
        .with_test_params(TestParams::Generate { seed: 0 })
        .with_budget(budget.clone());
    let first = store
        .get_or_generate(CircuitKind::Chain, SIZE)
        .expect("first set");
    assert_eq!(
        budget.stats().reserved,
        one,
        "a loaded set holds exactly its size"
    );
    // While a partition holds the set it is never evicted.
    assert_eq!(store.evict_unused(&budget, u64::MAX), 0);
    assert!(store.is_loaded(CircuitKind::Chain, SIZE));
    drop(first);
    // No room for a second generation beside it: the unused first set goes.
    store
        .get_or_generate(CircuitKind::Chain, 2 * SIZE)
        .expect("second set, after evicting the first");
    assert!(
        !store.is_loaded(CircuitKind::Chain, SIZE),
        "the unused set stayed"
    );
    assert!(store.is_loaded(CircuitKind::Chain, 2 * SIZE));
    assert_eq!(
        budget.stats().reserved,
        memory_bytes(&layout_of_generated(2 * SIZE))
    );
    // The evicted set comes back from its file when asked for again.
    drop(store.load(CircuitKind::Chain, 2 * SIZE).expect("loaded"));
    store
        .get_or_generate(CircuitKind::Chain, SIZE)
        .expect("reloaded");
}

/// The layout of the set the store generates for chain/`size`.
fn layout_of_generated(size: usize) -> ParamsLayout {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("p.params");
    write_params(&path, &generated(CircuitKind::Chain, size, 0)).expect("write");
    ParamsLayout::read(&path).expect("layout")
}

/// `prover params import` of a file that is not parameters: exit 1 with the
/// source named, and no parameter folder left behind where there was none.
#[test]
fn a_refused_import_leaves_no_new_parameter_folder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let junk = dir.path().join("junk.params");
    write_bytes(&junk, &[0x5a; 1000]);
    let params_dir = dir.path().join("new-params");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_prover"))
        .args(["params", "import", "--circuit", "chain", "--size", "1024"])
        .arg("--params-dir")
        .arg(&params_dir)
        .arg(&junk)
        .output()
        .expect("run prover");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("importing") && err.contains("junk.params"),
        "{err}"
    );
    assert!(
        !params_dir.exists(),
        "a refused import created {params_dir:?}"
    );
}

/// The bound `prover setup` checks free disk space against is never below
/// the file it then writes (the chain's A and B queries are full, so there
/// it is the file's length; SHA-256 leaves points out).
#[test]
fn the_file_size_bound_of_setup_holds_for_generated_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = ParamStore::open(dir.path()).expect("store");
    for (kind, size) in [(CircuitKind::Chain, 1024), (CircuitKind::Sha256, 1 << 12)] {
        let (meta, _) = store.generate_test(kind, size, 3).expect("generate");
        let bound = prover::params::file_bytes_bound(&store.shape(kind, size).expect("shape"));
        let written = fs::metadata(store.params_path(kind, size))
            .expect("file")
            .len();
        assert_eq!(written, meta.layout.file_len);
        assert!(bound >= written, "{kind}: bound {bound} < file {written}");
        assert!(
            bound < 2 * written,
            "{kind}: bound {bound} far above {written}"
        );
    }
}

/// `prover setup` on a filesystem too small for the set: refused before the
/// generation with both sizes named, exit 1, and the parameter folder it
/// created removed. The small filesystem is a 64 KiB tmpfs mounted in a
/// mount namespace of its own (root, as for the lab fleet), gone when the
/// command ends.
#[test]
fn setup_on_a_full_filesystem_is_refused_before_the_work_and_leaves_nothing() {
    if !fleet_testkit::have_lab() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let script = r#"mount -t tmpfs -o size=64k tmpfs "$1" || exit 90
"$2" setup --circuit chain --size 1024 --params-dir "$1/params"
rc=$?
echo "left: $(ls -A "$1")"
exit $rc"#;
    let out = fleet_testkit::output_within(
        std::process::Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
                "sh",
            ])
            .arg(dir.path())
            .arg(env!("CARGO_BIN_EXE_prover")),
        std::time::Duration::from_secs(60),
    );
    assert_ne!(out.status.code(), Some(90), "mounting the tmpfs: {out:?}");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no room for the parameters of `chain` size 1024")
            && err.contains("bytes free"),
        "{err}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.lines().any(|l| l == "left: "),
        "setup left files on the full filesystem: {stdout}"
    );
}

/// A file without a sidecar in a parameter folder this process cannot
/// write (a read-only bind mount, in a mount namespace of its own; root, as
/// for the lab fleet): `params verify` says it is used as found, and
/// `prove` proves with it, writing nothing there. Before, adopting it
/// failed on the sidecar's write, though `params verify` promised adoption.
#[test]
fn a_sidecar_less_file_in_a_read_only_folder_is_used_as_found() {
    if !fleet_testkit::have_lab() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let params = dir.path().join("params");
    fs::create_dir(&params).expect("dir");
    write_foreign(
        &params.join(format!("chain-{SIZE}.params")),
        &foreign_params(78),
    );
    let script = r#"mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 90
"$2" params verify --params-dir "$1" || exit 91
"$2" prove --circuit chain --size 1024 --params-dir "$1" --backend cpu --log warn"#;
    let out = fleet_testkit::output_within(
        std::process::Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
                "sh",
            ])
            .arg(&params)
            .arg(env!("CARGO_BIN_EXE_prover")),
        std::time::Duration::from_secs(300),
    );
    assert_ne!(out.status.code(), Some(90), "mounting read-only: {out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("used as found on every load"), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("proof ")), "{stdout}");
    let left: Vec<_> = fs::read_dir(&params)
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(left.len(), 1, "something was written: {left:?}");
}
