//! The Filecoin subcommands' checks that come before any proving or
//! parameter loading, through the real binary and without a sealed sector
//! or parameters (those are `tests/filecoin.rs`'s): bad values are usage
//! errors that do not echo the value, outputs are checked up front, and a
//! parameter set larger than the host is refused before its generation.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use fleet_testkit::deadline::output_within;

const LIMIT: Duration = Duration::from_secs(300);

/// `prover ARGS` with no Filecoin cache from the environment: exit code and stderr.
fn prover(args: &[&str]) -> (Option<i32>, String) {
    let out = output_within(
        Command::new(env!("CARGO_BIN_EXE_prover"))
            .args(args)
            .args(["--log", "warn"])
            .env_remove("FIL_PROOFS_PARAMETER_CACHE"),
        LIMIT,
    );
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn utf8(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

const PROVER_ID: &str = "0000000000000000000000000000000000000000000000000000000000000001";

#[test]
fn a_bad_hex_value_or_job_id_exits_2_without_echoing_it() {
    let blob = "z".repeat(49_000);
    let (code, err) = prover(&[
        "post",
        "--kind",
        "winning",
        "--vanilla",
        "v.json",
        "--randomness",
        &blob,
        "--prover-id",
        PROVER_ID,
        "--sector-size",
        "2KiB",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--randomness") && err.len() < 2_000,
        "{} bytes: {}",
        err.len(),
        &err[..err.len().min(300)]
    );
    let (code, err) = prover(&[
        "c2",
        "--c1",
        "c1.json",
        "--prover-id",
        &blob,
        "--sector-id",
        "1",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--prover-id") && err.len() < 2_000,
        "{} bytes",
        err.len()
    );
    let (code, err) = prover(&["client", "job", "--config", "prover.toml", "../healthz"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("not a job id") && !err.contains("healthz"),
        "{err}"
    );
    let (code, err) = prover(&["client", "cancel", "--config", "prover.toml", &blob]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.len() < 2_000, "{} bytes", err.len());
}

#[test]
fn a_synthetic_porep_type_is_refused_by_name() {
    let (code, err) = prover(&[
        "c2",
        "--c1",
        "c1.json",
        "--prover-id",
        PROVER_ID,
        "--sector-id",
        "1",
        "--registered-proof",
        "StackedDrg32GiBV1_1_Feat_SyntheticPoRep",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("StackedDrg32GiBV1_1_Feat_SyntheticPoRep") && err.contains("synthetic PoRep"),
        "{err}"
    );
    assert!(!err.contains("unknown registered seal proof"), "{err}");
}

/// `--out` in a folder that is not there, or naming the input, is refused
/// before the input is even read: the C1 here is not a C1 output at all,
/// and the parameter cache does not exist, yet the answer is the usage
/// error about `--out` (exit 2), not 7 or 8.
#[test]
fn outputs_are_checked_before_the_input_and_the_parameters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c1 = dir.path().join("c1.json");
    std::fs::write(&c1, b"not a C1 output").expect("write");
    let cache = dir.path().join("no-cache");
    let missing = dir.path().join("no/such/folder/proof");
    let base = |out: &Path| {
        vec![
            "c2".to_string(),
            "--c1".into(),
            utf8(&c1).into(),
            "--prover-id".into(),
            PROVER_ID.into(),
            "--sector-id".into(),
            "1".into(),
            "--sector-size".into(),
            "2KiB".into(),
            "--param-cache".into(),
            utf8(&cache).into(),
            "--backend".into(),
            "cpu".into(),
            "--out".into(),
            utf8(out).into(),
        ]
    };
    let args = base(&missing);
    let (code, err) = prover(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--out") && err.contains("does not exist"),
        "{err}"
    );
    let args = base(&c1);
    let (code, err) = prover(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("is the input --c1"), "{err}");
    assert_eq!(std::fs::read(&c1).expect("c1"), b"not a C1 output");
    let (code, err) = prover(&[
        "post",
        "--kind",
        "window",
        "--vanilla",
        utf8(&c1),
        "--randomness",
        PROVER_ID,
        "--prover-id",
        PROVER_ID,
        "--sector-size",
        "2KiB",
        "--param-cache",
        utf8(&cache),
        "--out",
        utf8(&c1),
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("is the input --vanilla"), "{err}");
    // Past the outputs, the input is what is refused (7), still before the
    // missing parameter cache (8).
    let out = dir.path().join("proof");
    let args = base(&out);
    let (code, err) = prover(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, Some(7), "{err}");
    assert!(!out.exists());
}

/// `prover setup --filecoin StackedDrg32GiBV1_1` on a host without the
/// memory for it (this 24 GiB development machine; CI's too) is refused
/// before any of the work, naming what it needs and what the host has, and
/// leaves no folder. A host with the memory skips the assertion.
#[test]
fn a_32gib_filecoin_setup_beyond_this_hosts_memory_is_refused_before_any_work() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("cache");
    let p: prover::filecoin::SealProof = "StackedDrg32GiBV1_1".parse().expect("name");
    let need = prover::setup::preflight::Need::of(
        &prover::filecoin::kind::param_set(prover::filecoin::FilCircuit::PoRep(p))
            .shape()
            .expect("shape"),
    );
    let available = prover::setup::preflight::mem_available().unwrap_or(u64::MAX);
    if need.memory <= available {
        eprintln!(
            "this host has {available} bytes available, enough for {}: not refused here",
            need.memory
        );
        return;
    }
    let started = Instant::now();
    let (code, err) = prover(&[
        "setup",
        "--filecoin",
        "StackedDrg32GiBV1_1",
        "--param-cache",
        utf8(&cache),
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("holds up to")
            && err.contains("GiB available (MemAvailable)")
            && err.contains("2^27"),
        "{err}"
    );
    assert!(!cache.exists(), "the refused setup left its folder");
    // Counting three challenges' worth of the circuit, not generating: the
    // generation would run for hours, or out of memory.
    assert!(
        started.elapsed() < Duration::from_secs(240),
        "{:?}",
        started.elapsed()
    );
}
