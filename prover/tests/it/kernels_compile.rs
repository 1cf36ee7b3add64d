//! Compiles every CUDA C file of `kernels/` to PTX for sm_90 through NVRTC,
//! with no GPU: a kernel that does not compile, or compiles with warnings,
//! fails CI before it reaches a GPU host.

use fleet_testkit::Need;
use prover::backend::cuda::kernels::{self, CompileError, KERNEL_TREE, UNITS};

/// Architecture the fleet's H200s report (compute capability 9.0).
const ARCH: &str = "sm_90";

/// Whether NVRTC can be loaded; when not, the test fails, or records its skip
/// when the run leaves NVRTC out (`TEST_LEAVE_OUT=nvrtc`).
#[track_caller]
fn have_nvrtc() -> bool {
    fleet_testkit::have(
        Need::Nvrtc,
        kernels::nvrtc_available(),
        "libnvrtc.so.13 cannot be loaded, so the CUDA kernels cannot be checked. Install it \
         with `pip install 'nvidia-cuda-nvrtc==13.0.*'` and run with \
         LD_LIBRARY_PATH=$(scripts/nvrtc-libdir.sh)",
    )
}

/// The kernel files of the tree this binary was built from (listed at build
/// time), so the check does not depend on where the test binary runs (a GPU
/// host without the source tree).
#[test]
fn every_kernel_file_belongs_to_a_unit() {
    assert!(
        !KERNEL_TREE.is_empty(),
        "no kernel files were found at build time"
    );
    for f in KERNEL_TREE {
        assert!(
            UNITS.iter().any(|u| u.files.iter().any(|k| k.path == *f)),
            "kernels/{f} is not compiled by any unit in backend/cuda/kernels.rs"
        );
    }
    // And every file a unit embeds exists in the tree (no stale path).
    for u in UNITS {
        for k in u.files {
            assert!(
                KERNEL_TREE.contains(&k.path),
                "unit {} embeds {}, which is not under kernels/",
                u.name,
                k.path
            );
        }
    }
}

#[test]
fn every_unit_compiles_for_sm_90_without_warnings() {
    if !have_nvrtc() {
        return;
    }
    let mut failures = Vec::new();
    for unit in UNITS {
        match kernels::compile(unit, ARCH) {
            Ok(ptx) => {
                assert!(
                    ptx.contains(".target sm_90"),
                    "unit {}: PTX lacks its target",
                    unit.name
                );
                assert!(
                    ptx.contains(".entry"),
                    "unit {}: PTX has no kernel",
                    unit.name
                );
            }
            Err(e @ (CompileError::Failed { .. } | CompileError::Warnings { .. })) => {
                failures.push(e.to_string())
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn compile_reports_errors_with_the_file_name() {
    if !have_nvrtc() {
        return;
    }
    const BROKEN: kernels::KernelUnit = kernels::KernelUnit {
        name: "broken",
        files: &[kernels::KernelFile {
            path: "broken/oops.cu",
            source: "extern \"C\" __global__ void k() { undefined_name = 1; }\n",
        }],
    };
    let err = kernels::compile(&BROKEN, ARCH).expect_err("an undefined name must not compile");
    let msg = err.to_string();
    assert!(msg.contains("broken/oops.cu"), "{msg}");
    assert!(msg.contains("undefined_name"), "{msg}");
}
