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
