//! `prover kernels warm` as an operator (and a rollout's prepare phase)
//! runs it: the real binary, NVRTC, and a kernel cache in a temporary
//! folder. Only the small NTT unit is compiled, so the test stays short;
//! every unit's compilation is `kernels_compile`'s job.

use fleet_testkit::Need;
use prover::backend::cuda::kernels;
use serde_json::Value;
use std::process::{Command, Output};

fn warm(cache: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_prover"))
        .args(["kernels", "warm"])
        .args(args)
        .env("PROVER_KERNEL_CACHE", cache)
        .output()
        .expect("run prover")
}

fn json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON report")
}

#[test]
fn warm_compiles_into_the_cache_once_and_then_reads_it() {
    if !fleet_testkit::have(
        Need::Nvrtc,
        kernels::nvrtc_available(),
        "libnvrtc.so.13 cannot be loaded (LD_LIBRARY_PATH=$(scripts/nvrtc-libdir.sh))",
    ) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = dir.path().join("kernels");
    let args = ["--arch", "sm_90", "--unit", "ntt", "--json"];
    let first = json(&warm(&cache, &args));
    assert_eq!(first["arch"], "sm_90");
    let unit = &first["units"][0];
    assert_eq!(unit["unit"], "ntt");
    assert_eq!(unit["from"], "compiled", "{first}");
    let file = unit["file"].as_str().expect("cache file");
    assert!(
        file.ends_with(".cubin") && file.contains("-sm_90-nvrtc"),
        "{file}"
    );
    let bytes = std::fs::read(file).expect("cache file written");
    assert_eq!(&bytes[..4], b"\x7fELF");
    assert_eq!(unit["bytes"].as_u64(), Some(bytes.len() as u64));
    // Only the finished file is there: no temporary left beside it.
    let names: Vec<_> = std::fs::read_dir(&cache)
        .expect("cache dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");

    let second = json(&warm(&cache, &args));
    assert_eq!(second["units"][0]["from"], "disk", "{second}");
    assert_eq!(second["units"][0]["file"], unit["file"]);

    // Another architecture is another file, compiled anew.
    let other = json(&warm(
        &cache,
        &["--arch", "sm_80", "--unit", "ntt", "--json"],
    ));
    assert_eq!(other["units"][0]["from"], "compiled");
    assert_ne!(other["units"][0]["file"], unit["file"]);
}

#[test]
fn warm_refuses_bad_architectures_and_units_with_the_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = warm(dir.path(), &["--arch", "compute_90"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("real GPU architecture such as sm_90"), "{err}");

    let out = warm(dir.path(), &["--arch", "sm_90", "--unit", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no kernel unit \"nope\"") && err.contains("msm_g1_segments"),
        "{err}"
    );
    // Nothing was written for either.
    assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 0);
}

#[test]
fn warm_fails_on_an_architecture_nvrtc_does_not_know() {
    if !fleet_testkit::have(
        Need::Nvrtc,
        kernels::nvrtc_available(),
        "libnvrtc.so.13 cannot be loaded (LD_LIBRARY_PATH=$(scripts/nvrtc-libdir.sh))",
    ) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = warm(dir.path(), &["--arch", "sm_11", "--unit", "ntt"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("kernel unit ntt for sm_11: compilation failed"),
        "{err}"
    );
    assert!(
        !dir.path().join("kernels").exists()
            || std::fs::read_dir(dir.path()).expect("dir").count() == 0
    );
}
