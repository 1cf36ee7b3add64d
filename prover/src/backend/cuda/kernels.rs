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

/// The NTT phase: passes (with the coefficient-wise steps fused into
/// them) and table expansion.
pub const NTT: KernelUnit = KernelUnit {
    name: "ntt",
    files: &[FR, kernel_file!("ntt/ntt.cu")],
};

/// Every unit the backend loads; the compile test checks that together they
/// cover every file of `kernels/`.
pub const UNITS: &[KernelUnit] = &[NTT];

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

/// [`compile`] through the process-wide cache keyed by arch and source hash.
pub fn compile_cached(unit: &KernelUnit, arch: &str) -> Result<String, CompileError> {
    let key = (arch.to_string(), unit.hash());
    if let Some(ptx) = cache().lock().ok().and_then(|c| c.get(&key).cloned()) {
        return Ok(ptx);
    }
    let ptx = compile(unit, arch)?;
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
        assert_eq!(NTT.hash(), NTT.hash());
        assert_eq!(NTT.hash().len(), 64);
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
