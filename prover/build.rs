//! Stamps the binary with its build identity (git hash, `-dirty` when the tree
//! was modified) so `fleetctl verify` can match a running daemon to its release.
use std::process::Command;

fn main() {
    let hash = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false);
    let build = if dirty { format!("{hash}-dirty") } else { hash };
    println!("cargo:rustc-env=PROVER_GIT_HASH={build}");
    println!("cargo:rerun-if-changed=../.git/HEAD");
    println!("cargo:rerun-if-changed=../.git/index");
    println!("cargo:rerun-if-changed=../kernels");
    write_kernel_tree();
    compile_proto();
}

/// Generates the gRPC service (`cuzk.v1.ProvingEngine`) and its client from
/// `proto/cuzk/v1/proving.proto` with tonic/prost. `protoc` comes from the
/// `protoc-bin-vendored` crate unless `PROTOC` names one, so a fresh machine
/// needs no protobuf compiler of its own.
fn compile_proto() {
    let proto = "proto/cuzk/v1/proving.proto";
    println!("cargo:rerun-if-changed={proto}");
    println!("cargo:rerun-if-env-changed=PROTOC");
    if std::env::var_os("PROTOC").is_none() {
        let protoc =
            protoc_bin_vendored::protoc_bin_path().expect("a vendored protoc for this host");
        // SAFETY: build scripts are single-threaded.
        unsafe { std::env::set_var("PROTOC", protoc) };
    }
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(&[proto], &["proto"])
        .expect("compiling proto/cuzk/v1/proving.proto");
}

/// Lists every `.cu`/`.cuh` under `kernels/` at build time into
/// `$OUT_DIR/kernel_tree.rs`, so the compile test checks the files the
/// binary was built from, not whatever tree it happens to run in.
fn write_kernel_tree() {
    fn walk(dir: &std::path::Path, base: &std::path::Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                println!("cargo:rerun-if-changed={}", path.display());
                walk(&path, base, out);
            } else if matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("cu" | "cuh")
            ) {
                if let Ok(rel) = path.strip_prefix(base) {
                    out.push(rel.to_string_lossy().replace('\\', "/"));
                }
            }
        }
    }
    let base = std::path::Path::new("../kernels");
    let mut files = Vec::new();
    walk(base, base, &mut files);
    files.sort();
    let body: String = files.iter().map(|f| format!("    {f:?},\n")).collect();
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(
        out.join("kernel_tree.rs"),
        format!("/// Every kernel source file under `kernels/` when this crate was built.\npub const KERNEL_TREE: &[&str] = &[\n{body}];\n"),
    )
    .expect("writing kernel_tree.rs");
}
