//! CUDA C sources embedded in the binary and their NVRTC compilation.
//!
//! A kernel *unit* is an ordered list of files from `kernels/` concatenated
//! into one translation unit: NVRTC then needs no include path at run time,
//! and a `#line` marker per file keeps compiler messages pointing at the
//! real file. Compiled PTX is cached in memory per (architecture, source
//! hash), so several backends on one host compile each unit once.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::ffi::{c_char, CString};
use std::sync::{Mutex, OnceLock};

/// One file of `kernels/`, by its path under that folder.
#[derive(Debug, Clone, Copy)]
pub struct KernelFile {
    pub path: &'static str,
    pub source: &'static str,
}

/// Files compiled together into one module.
#[derive(Debug, Clone, Copy)]
pub struct KernelUnit {
    pub name: &'static str,
    pub files: &'static [KernelFile],
}

macro_rules! kernel_file {
    ($path:literal) => {
        KernelFile {
            path: $path,
            source: include_str!(concat!("../../../../kernels/", $path)),
        }
    };
}

const FR: KernelFile = kernel_file!("ff/fr.cuh");
const FP: KernelFile = kernel_file!("ff/fp.cuh");
const FP2: KernelFile = kernel_file!("ff/fp2.cuh");
const CURVE: KernelFile = kernel_file!("ec/xyzz.cuh");
const MSM_STEPS: KernelFile = kernel_file!("msm/msm.cu");
const OPS: KernelFile = kernel_file!("ec/ops.cu");

/// The NTT phase: passes (with the coefficient-wise steps fused into
/// them) and table expansion.
pub const NTT: KernelUnit = KernelUnit {
    name: "ntt",
    files: &[FR, kernel_file!("ntt/ntt.cu")],
};

/// The G1 multi-scalar multiplication (Pippenger steps), and entry points
/// for single field and curve operations (the GPU tests against blstrs).
pub const MSM: KernelUnit = KernelUnit {
    name: "msm",
    files: &[
        FR,
        FP,
        CURVE,
        MSM_STEPS,
        kernel_file!("msm/msm_g1.cu"),
        OPS,
        kernel_file!("ec/ops_g1.cu"),
    ],
};

/// The same for G2 (coordinates in Fp2). A unit of its own: the G2 curve
/// code is about three times G1's, and two units compile in parallel.
pub const MSM_G2: KernelUnit = KernelUnit {
    name: "msm_g2",
    files: &[
        FR,
        FP,
        FP2,
        CURVE,
        MSM_STEPS,
        kernel_file!("msm/msm_g2.cu"),
        OPS,
        kernel_file!("ec/ops_g2.cu"),
    ],
};

include!(concat!(env!("OUT_DIR"), "/kernel_tree.rs"));

/// Every unit the backend loads; the compile test checks that together they
/// cover every file of `kernels/`.
pub const UNITS: &[KernelUnit] = &[NTT, MSM, MSM_G2];

impl KernelUnit {
    /// The translation unit handed to NVRTC.
    pub fn source(&self) -> String {
        let mut out = String::new();
        for f in self.files {
            out.push_str(&format!("#line 1 \"{}\"\n", f.path));
            out.push_str(f.source);
            out.push('\n');
        }
        out
    }

    /// Hex SHA-256 of the translation unit (the cache key with the arch).
    pub fn hash(&self) -> String {
        hex::encode(Sha256::digest(self.source().as_bytes()))
    }
}

/// Why a unit did not compile.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("libnvrtc could not be loaded (install `nvidia-cuda-nvrtc` 13.x or the CUDA toolkit and put its lib dir on LD_LIBRARY_PATH)")]
    NoNvrtc,
    #[error("kernel unit {unit}: nvrtc {call} failed: {reason}")]
    Nvrtc {
        unit: &'static str,
        call: &'static str,
        reason: String,
    },
    #[error("kernel unit {unit} for {arch}: compilation failed:\n{log}")]
    Failed {
        unit: &'static str,
        arch: String,
        log: String,
    },
    #[error("kernel unit {unit} for {arch}: compiler warnings (treated as errors):\n{log}")]
    Warnings {
        unit: &'static str,
        arch: String,
        log: String,
    },
}

/// Whether libnvrtc can be loaded. Must be checked before any other NVRTC
/// call: with dynamic loading, a missing library panics inside cudarc.
pub fn nvrtc_available() -> bool {
    // SAFETY: only tries to dlopen the library by its usual names.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Compiler options for `arch` (e.g. `sm_90`).
fn options(arch: &str) -> Vec<String> {
    vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".into(),
        // Field arithmetic is integer-only; fast-math flags do not matter,
        // but line info lets profilers map time to source lines.
        "--generate-line-info".into(),
    ]
}

fn c_chars_to_string(v: &[c_char]) -> String {
    let bytes: Vec<u8> = v
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Compiles `unit` to PTX text for `arch`, failing on errors and warnings.
pub fn compile(unit: &KernelUnit, arch: &str) -> Result<String, CompileError> {
    use cudarc::nvrtc::result;
    if !nvrtc_available() {
        return Err(CompileError::NoNvrtc);
    }
    let nvrtc_err =
        |call: &'static str, e: cudarc::nvrtc::result::NvrtcError| CompileError::Nvrtc {
            unit: unit.name,
            call,
            reason: format!("{e:?}"),
        };
    let src = CString::new(unit.source()).map_err(|e| CompileError::Nvrtc {
        unit: unit.name,
        call: "nvrtcCreateProgram",
        reason: format!("source holds a NUL byte: {e}"),
    })?;
    let name = CString::new(format!("{}.cu", unit.name)).map_err(|e| CompileError::Nvrtc {
        unit: unit.name,
        call: "nvrtcCreateProgram",
        reason: e.to_string(),
    })?;
    let prog = result::create_program(&src, Some(name.as_c_str()))
        .map_err(|e| nvrtc_err("nvrtcCreateProgram", e))?;
    let out = (|| {
        // SAFETY: `prog` is a live program created above.
        let compiled = unsafe { result::compile_program(prog, &options(arch)) };
        // SAFETY: as above; the log exists after a compile attempt.
        let log = unsafe { result::get_program_log(prog) }
            .map(|l| c_chars_to_string(&l))
            .unwrap_or_default();
        let log = log.trim().to_string();
        if compiled.is_err() {
            return Err(CompileError::Failed {
                unit: unit.name,
                arch: arch.to_string(),
                log,
            });
        }
        if !log.is_empty() {
            return Err(CompileError::Warnings {
                unit: unit.name,
                arch: arch.to_string(),
                log,
            });
        }
        // SAFETY: compiled successfully, so PTX is available.
        let ptx = unsafe { result::get_ptx(prog) }.map_err(|e| nvrtc_err("nvrtcGetPTX", e))?;
        Ok(c_chars_to_string(&ptx))
    })();
    // SAFETY: created above and not used afterwards.
    let _ = unsafe { result::destroy_program(prog) };
    out
}

/// The NVRTC version, e.g. (13, 0).
pub fn nvrtc_version() -> Option<(i32, i32)> {
    if !nvrtc_available() {
        return None;
    }
    let mut major = 0;
    let mut minor = 0;
    // SAFETY: the library is present; the call only writes the two ints.
    let rc = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    (rc == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS).then_some((major, minor))
}

type Cache = Mutex<HashMap<(String, String), String>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Folder of the on-disk PTX cache: `PROVER_KERNEL_CACHE` (empty turns
/// the cache off), else `$XDG_CACHE_HOME/prover/kernels`, else
/// `$HOME/.cache/prover/kernels`.
pub fn disk_cache_dir() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    if let Some(v) = std::env::var_os("PROVER_KERNEL_CACHE") {
        return (!v.is_empty()).then(|| PathBuf::from(v));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("prover").join("kernels"))
}

/// The cache file of `unit` for `arch`: the source hash, the architecture
/// and the NVRTC version name it, so a new kernel, a new GPU or a new
/// compiler each miss.
fn disk_cache_file(unit: &KernelUnit, arch: &str, hash: &str) -> Option<std::path::PathBuf> {
    let (major, minor) = nvrtc_version()?;
    let dir = disk_cache_dir()?;
    Some(dir.join(format!(
        "{}-{}-{arch}-nvrtc{major}.{minor}.ptx",
        unit.name,
        &hash[..16]
    )))
}

fn read_disk_cache(path: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    // A truncated file (a crash mid-write cannot leave one: writes are
    // renamed into place) or a foreign one is recompiled, never loaded.
    text.contains(".entry").then_some(text)
}

fn write_disk_cache(path: &std::path::Path, ptx: &str) {
    let Some(dir) = path.parent() else { return };
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("ptx"),
        std::process::id()
    ));
    let written = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&tmp, ptx))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        tracing::warn!(path = %path.display(), error = %e, "could not write the kernel cache (next start compiles again)");
    }
}

/// [`compile`] through the process-wide cache keyed by arch and source
/// hash, and the on-disk cache ([`disk_cache_dir`]) so a restarted daemon
/// does not wait for NVRTC (the msm unit takes about half a minute).
pub fn compile_cached(unit: &KernelUnit, arch: &str) -> Result<String, CompileError> {
    let hash = unit.hash();
    let key = (arch.to_string(), hash.clone());
    if let Some(ptx) = cache().lock().ok().and_then(|c| c.get(&key).cloned()) {
        return Ok(ptx);
    }
    let file = disk_cache_file(unit, arch, &hash);
    let ptx = match file.as_deref().and_then(read_disk_cache) {
        Some(ptx) => ptx,
        None => {
            let t = std::time::Instant::now();
            let ptx = compile(unit, arch)?;
            tracing::info!(
                unit = unit.name,
                arch,
                ms = t.elapsed().as_millis() as u64,
                "kernels compiled by NVRTC"
            );
            if let Some(f) = &file {
                write_disk_cache(f, &ptx);
            }
            ptx
        }
    };
    if let Ok(mut c) = cache().lock() {
        c.insert(key, ptx.clone());
    }
    Ok(ptx)
}

/// `sm_XY` for a compute capability.
pub fn arch_for(major: i32, minor: i32) -> String {
    format!("sm_{major}{minor}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_carry_line_markers_and_stable_hashes() {
        let src = NTT.source();
        assert!(src.starts_with("#line 1 \"ff/fr.cuh\"\n"));
        assert!(src.contains("#line 1 \"ntt/ntt.cu\"\n"));
        assert_eq!(NTT.hash().len(), 64);
        // The hash names the source: a changed file changes it (it keys
        // both caches), and the units differ from each other.
        const EDITED: KernelUnit = KernelUnit {
            name: "ntt",
            files: &[
                FR,
                KernelFile {
                    path: "ntt/ntt.cu",
                    source: "// edited\n",
                },
            ],
        };
        assert_ne!(EDITED.hash(), NTT.hash());
        assert_ne!(MSM.hash(), NTT.hash());
    }

    #[test]
    fn disk_cache_refuses_a_file_that_is_not_ptx() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("k.ptx");
        std::fs::write(&f, "garbage").expect("write");
        assert_eq!(read_disk_cache(&f), None);
        write_disk_cache(&f, ".version 8.0\n.entry k()\n");
        assert_eq!(
            read_disk_cache(&f).as_deref(),
            Some(".version 8.0\n.entry k()\n")
        );
        assert!(read_disk_cache(&dir.path().join("missing.ptx")).is_none());
    }

    #[test]
    fn arch_names_follow_compute_capability() {
        assert_eq!(arch_for(9, 0), "sm_90");
        assert_eq!(arch_for(8, 6), "sm_86");
    }

    /// Parses `#define NAME 0x...ULL` from the field header.
    fn header_const(name: &str) -> u64 {
        let line = FR
            .source
            .lines()
            .find(|l| l.starts_with(&format!("#define {name} ")))
            .unwrap_or_else(|| panic!("{name} missing from ff/fr.cuh"));
        let hex = line
            .split_whitespace()
            .nth(2)
            .and_then(|v| v.strip_prefix("0x"))
            .and_then(|v| v.strip_suffix("ULL"))
            .unwrap_or_else(|| panic!("{name}: malformed line {line:?}"));
        u64::from_str_radix(hex, 16).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    #[test]
    fn field_header_constants_match_blstrs() {
        use ff::PrimeField;
        let modulus = blstrs::Scalar::MODULUS.trim_start_matches("0x");
        let limbs: Vec<u64> = (0..4)
            .map(|i| {
                let end = modulus.len() - 16 * i;
                u64::from_str_radix(&modulus[end - 16..end], 16).expect("hex modulus")
            })
            .collect();
        let header: Vec<u64> = ["FR_P0", "FR_P1", "FR_P2", "FR_P3"]
            .iter()
            .map(|n| header_const(n))
            .collect();
        assert_eq!(header, limbs);
        // FR_INV * r = -1 mod 2^64.
        assert_eq!(header_const("FR_INV").wrapping_mul(limbs[0]), u64::MAX);
    }
}
