//! Compiles every CUDA C file of `kernels/` to a cubin for sm_90 through NVRTC,
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

/// Every unit to device code (cubin) for sm_90, as a daemon start and
/// `prover kernels warm` build it: NVRTC and the assembler both run, so a
/// kernel the assembler refuses (too many registers, a bad inline asm
/// operand) fails here too. The units compile side by side.
#[test]
fn every_unit_compiles_to_a_cubin_for_sm_90_without_warnings() {
    if !have_nvrtc() {
        return;
    }
    let results: Vec<_> = std::thread::scope(|s| {
        let jobs: Vec<_> = UNITS
            .iter()
            .map(|u| s.spawn(move || (u.name, kernels::compile(u, ARCH))))
            .collect();
        jobs.into_iter()
            .map(|j| j.join().expect("compile thread"))
            .collect()
    });
    let mut failures = Vec::new();
    for (name, r) in results {
        match r {
            Ok(c) => {
                assert!(
                    c.ptx.contains(".target sm_90"),
                    "unit {name}: PTX lacks its target"
                );
                assert!(c.ptx.contains(".entry"), "unit {name}: PTX has no kernel");
                // An ELF for EM_CUDA (190): device code, not PTX text.
                assert!(
                    c.cubin.starts_with(b"\x7fELF") && c.cubin[18..20] == 190u16.to_le_bytes(),
                    "unit {name}: not a CUDA ELF"
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

/// The backend's units hold every kernel it looks up, each in the unit
/// it loads it from (see `MsmKernels::load`), and no unit is empty.
#[test]
fn backend_units_define_the_kernels_the_backend_loads() {
    use kernels::{BACKEND_UNITS, MSM_G1, MSM_G2, MSM_INDEX, NTT};
    let entry = |u: &kernels::KernelUnit, name: &str| {
        u.source()
            .contains(&format!("extern \"C\" __global__ void {name}("))
    };
    assert_eq!(BACKEND_UNITS.len(), 12);
    assert!(entry(&NTT, "expand_powers"));
    for k in [
        "msm_canonical",
        "msm_count",
        "msm_scatter",
        "msm_segment_counts",
    ] {
        assert!(entry(&MSM_INDEX, k), "{k}");
    }
    // The steps come from macros: each unit's defines pick one.
    for (units, g) in [(&MSM_G1, "g1"), (&MSM_G2, "g2")] {
        let steps = [
            "ACCUMULATE_SEGMENTS",
            "ACCUMULATE_PARTIALS",
            "BUCKET_REDUCE",
            "WINDOW_SUM",
            "PRECOMPUTE",
        ];
        for (u, step) in units.iter().zip(steps) {
            assert!(u.name.starts_with(&format!("msm_{g}_")), "{}", u.name);
            let only = format!("MSM_ONLY_{step}");
            // The curve steps call their Fp products out of line (ff/fp.cuh);
            // G2's bucket sums inline the Fp2 products (ff/fp2.cuh).
            let want: &[&str] = if g == "g2" && step == "ACCUMULATE_SEGMENTS" {
                &["MSM_ONLY", &only, "FP_MUL_CALL", "FP2_INLINE"]
            } else {
                &["MSM_ONLY", &only, "FP_MUL_CALL"]
            };
            assert_eq!(u.defines, want);
        }
    }
}

#[test]
fn compile_reports_errors_with_the_file_name() {
    if !have_nvrtc() {
        return;
    }
    const BROKEN: kernels::KernelUnit = kernels::KernelUnit {
        name: "broken",
        defines: &[],
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
