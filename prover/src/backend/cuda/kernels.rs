//! CUDA C sources embedded in the binary and their NVRTC compilation.
//!
//! A kernel *unit* is an ordered list of files from `kernels/` concatenated
//! into one translation unit: NVRTC then needs no include path at run time,
//! and a `#line` marker per file keeps compiler messages pointing at the
//! real file. Each unit becomes a cubin for the device's architecture
//! (NVRTC assembles it; the driver loads it without translating PTX),
//! cached in memory and on disk under its source, architecture, NVRTC and
//! driver version, so several backends and restarts compile it once.

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

/// Files compiled together into one module, after `#define NAME` lines
/// for each of `defines` (which steps of a shared file the unit takes).
#[derive(Debug, Clone, Copy)]
pub struct KernelUnit {
    pub name: &'static str,
    pub defines: &'static [&'static str],
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

/// The h phase: NTT passes (with the coefficient-wise steps fused into
/// them), table expansion, and a, b, c from compiled constraints.
pub const NTT: KernelUnit = KernelUnit {
    name: "ntt",
    defines: &[],
    files: &[FR, kernel_file!("ntt/ntt.cu"), kernel_file!("r1cs/abc.cu")],
};

const MSM_G1_FILES: &[KernelFile] = &[FR, FP, CURVE, MSM_STEPS, kernel_file!("msm/msm_g1.cu")];
const MSM_G2_FILES: &[KernelFile] = &[FR, FP, FP2, CURVE, MSM_STEPS, kernel_file!("msm/msm_g2.cu")];

/// One step (or the index steps) of the MSM as a unit of its own: the
/// curve steps are what takes NVRTC and the assembler time (about a minute
/// for all of G1's in one unit), and apart they compile side by side.
/// Their Fp products are calls (`FP_MUL_CALL`, ff/fp.cuh): inlined, the
/// curve formulas outgrow the instruction caches.
macro_rules! msm_unit {
    ($name:literal, $files:expr, $only:literal) => {
        KernelUnit {
            name: $name,
            defines: &["MSM_ONLY", $only, "FP_MUL_CALL"],
            files: $files,
        }
    };
}

/// The MSM's integer steps (digits, counting sort, scans), shared by G1
/// and G2.
pub const MSM_INDEX: KernelUnit = msm_unit!("msm_index", MSM_G1_FILES, "MSM_ONLY_INDEX");

/// The G1 curve steps of the MSM (Pippenger), one unit each.
pub const MSM_G1: [KernelUnit; 5] = [
    msm_unit!(
        "msm_g1_segments",
        MSM_G1_FILES,
        "MSM_ONLY_ACCUMULATE_SEGMENTS"
    ),
    msm_unit!(
        "msm_g1_partials",
        MSM_G1_FILES,
        "MSM_ONLY_ACCUMULATE_PARTIALS"
    ),
    msm_unit!("msm_g1_reduce", MSM_G1_FILES, "MSM_ONLY_BUCKET_REDUCE"),
    msm_unit!("msm_g1_window", MSM_G1_FILES, "MSM_ONLY_WINDOW_SUM"),
    msm_unit!("msm_g1_precompute", MSM_G1_FILES, "MSM_ONLY_PRECOMPUTE"),
];

/// The same for G2 (coordinates in Fp2); the bucket sums with the Fp2
/// products inlined (`FP2_INLINE`, see ff/fp2.cuh) around their Fp calls.
pub const MSM_G2: [KernelUnit; 5] = [
    KernelUnit {
        name: "msm_g2_segments",
        defines: &[
            "MSM_ONLY",
            "MSM_ONLY_ACCUMULATE_SEGMENTS",
            "FP_MUL_CALL",
            "FP2_INLINE",
        ],
        files: MSM_G2_FILES,
    },
    msm_unit!(
        "msm_g2_partials",
        MSM_G2_FILES,
        "MSM_ONLY_ACCUMULATE_PARTIALS"
    ),
    msm_unit!("msm_g2_reduce", MSM_G2_FILES, "MSM_ONLY_BUCKET_REDUCE"),
    msm_unit!("msm_g2_window", MSM_G2_FILES, "MSM_ONLY_WINDOW_SUM"),
    msm_unit!("msm_g2_precompute", MSM_G2_FILES, "MSM_ONLY_PRECOMPUTE"),
];

/// Entry points for single field and curve operations in G1 (the GPU
/// tests against blstrs); never loaded by the backend.
pub const OPS_G1: KernelUnit = KernelUnit {
    name: "ops_g1",
    defines: &[],
    files: &[FR, FP, CURVE, OPS, kernel_file!("ec/ops_g1.cu")],
};

/// The same for Fp2 and G2.
pub const OPS_G2: KernelUnit = KernelUnit {
    name: "ops_g2",
    defines: &[],
    files: &[FR, FP, FP2, CURVE, OPS, kernel_file!("ec/ops_g2.cu")],
};

const FIXED_BASE: KernelFile = kernel_file!("ec/fixed_base.cu");

/// Fixed-base multiplications of parameter generation in G1 (`prover
/// setup --backend cuda`); the MSM file lends its digit recoding only.
pub const FIXED_BASE_G1: KernelUnit = KernelUnit {
    name: "fixed_base_g1",
    defines: &["MSM_ONLY", "FIXED_BASE_G1"],
    files: &[FR, FP, CURVE, MSM_STEPS, FIXED_BASE],
};

/// The same in G2.
pub const FIXED_BASE_G2: KernelUnit = KernelUnit {
    name: "fixed_base_g2",
    defines: &["MSM_ONLY", "FIXED_BASE_G2"],
    files: &[FR, FP, FP2, CURVE, MSM_STEPS, FIXED_BASE],
};

include!(concat!(env!("OUT_DIR"), "/kernel_tree.rs"));

/// The units the backend loads at start: what `prover kernels warm`
/// compiles. The NTT first, then the MSM index steps, G1's and G2's steps.
pub const BACKEND_UNITS: [KernelUnit; 12] = [
    NTT, MSM_INDEX, MSM_G1[0], MSM_G1[1], MSM_G1[2], MSM_G1[3], MSM_G1[4], MSM_G2[0], MSM_G2[1],
    MSM_G2[2], MSM_G2[3], MSM_G2[4],
];

/// Every unit; the compile test checks that together they cover every
/// file of `kernels/`.
pub const UNITS: &[KernelUnit] = &[
    NTT,
    MSM_INDEX,
    MSM_G1[0],
    MSM_G1[1],
    MSM_G1[2],
    MSM_G1[3],
    MSM_G1[4],
    MSM_G2[0],
    MSM_G2[1],
    MSM_G2[2],
    MSM_G2[3],
    MSM_G2[4],
    OPS_G1,
    OPS_G2,
    FIXED_BASE_G1,
    FIXED_BASE_G2,
];

impl KernelUnit {
    /// The translation unit handed to NVRTC.
    pub fn source(&self) -> String {
        let mut out = String::new();
        for d in self.defines {
            out.push_str(&format!("#define {d}\n"));
        }
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
    #[error("architecture {0:?}: expected a real GPU architecture such as sm_90 (device code is compiled ahead, not left as PTX for the driver)")]
    BadArch(String),
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

/// Checks that `arch` names a real architecture, `sm_` and two or three
/// digits with an optional `a`/`f` suffix (`sm_90`, `sm_90a`, `sm_100`):
/// only those give NVRTC a machine to emit code for. Whether NVRTC knows
/// the number is its own answer, at compile time.
pub fn check_arch(arch: &str) -> Result<(), CompileError> {
    let digits = arch
        .strip_prefix("sm_")
        .map(|r| r.trim_end_matches(['a', 'f']))
        .unwrap_or("");
    let ok = (1..=3).contains(&digits.len())
        && digits.bytes().all(|b| b.is_ascii_digit())
        && arch.len() - 3 - digits.len() <= 1;
    if ok {
        Ok(())
    } else {
        Err(CompileError::BadArch(arch.to_string()))
    }
}

/// Compiler options for `arch` (e.g. `sm_90`).
fn options(arch: &str) -> Vec<String> {
    vec![
        // A real architecture: NVRTC runs the assembler itself and the
        // cubin loads as is, where PTX would be translated by the driver
        // at every cold load (tens of seconds for the MSM units).
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

/// What NVRTC made of one unit.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// Device code for the architecture, loaded as is.
    pub cubin: Vec<u8>,
    /// The PTX it was assembled from (for inspection and tests).
    pub ptx: String,
}

/// The cubin of `prog`, compiled for a real architecture.
fn get_cubin(prog: cudarc::nvrtc::sys::nvrtcProgram) -> Result<Vec<u8>, &'static str> {
    use cudarc::nvrtc::sys::{nvrtcGetCUBIN, nvrtcGetCUBINSize, nvrtcResult};
    let mut size = 0usize;
    // SAFETY: `prog` compiled successfully; the call only writes `size`.
    if unsafe { nvrtcGetCUBINSize(prog, &mut size) } != nvrtcResult::NVRTC_SUCCESS {
        return Err("nvrtcGetCUBINSize");
    }
    let mut buf = vec![0u8; size];
    // SAFETY: `buf` holds the `size` bytes NVRTC just reported.
    if unsafe { nvrtcGetCUBIN(prog, buf.as_mut_ptr().cast()) } != nvrtcResult::NVRTC_SUCCESS {
        return Err("nvrtcGetCUBIN");
    }
    Ok(buf)
}

/// Compiles `unit` to a cubin for `arch`, failing on errors and warnings.
pub fn compile(unit: &KernelUnit, arch: &str) -> Result<Compiled, CompileError> {
    use cudarc::nvrtc::result;
    check_arch(arch)?;
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
        let cubin = get_cubin(prog).map_err(|call| CompileError::Nvrtc {
            unit: unit.name,
            call,
            reason: "no device code (a virtual architecture?)".into(),
        })?;
        Ok(Compiled {
            cubin,
            ptx: c_chars_to_string(&ptx),
        })
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

/// What the device code is built for, besides its source: both are part
/// of every cache key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Target {
    /// `sm_XY`.
    pub arch: String,
    /// The CUDA driver's version (`cuDriverGetVersion`, 13000 for 13.0),
    /// `None` where no driver is installed (a build host compiling ahead).
    pub driver: Option<i32>,
}

/// Where [`compile_cached`] found a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Compiled earlier by this process.
    Memory,
    /// Read from the on-disk cache.
    Disk,
    /// Compiled now, taking this long.
    Compiled { ms: u64 },
}

impl Origin {
    /// `memory`, `disk`, or `compiled in 36.6 s`.
    pub fn describe(&self) -> String {
        match self {
            Origin::Memory => "memory".into(),
            Origin::Disk => "disk".into(),
            Origin::Compiled { ms } => format!("compiled in {:.1} s", *ms as f64 / 1e3),
        }
    }
}

/// A unit's device code and where it came from.
#[derive(Debug, Clone)]
pub struct Cached {
    pub unit: &'static str,
    pub cubin: std::sync::Arc<Vec<u8>>,
    pub origin: Origin,
    /// The cache file, when there is an on-disk cache.
    pub file: Option<std::path::PathBuf>,
}

type Cache = Mutex<HashMap<(Target, String), std::sync::Arc<Vec<u8>>>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Folder of the on-disk kernel cache: `PROVER_KERNEL_CACHE` (empty turns
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

/// The cache file's name for `unit` (source hash `hash`) on `target`: the
/// source, the architecture, the NVRTC and the driver version all name it,
/// so a new kernel, a new GPU, a new compiler or a new driver each miss.
fn disk_cache_name(unit: &KernelUnit, target: &Target, hash: &str, nvrtc: (i32, i32)) -> String {
    let driver = target
        .driver
        .map_or_else(|| "none".to_string(), |v| v.to_string());
    format!(
        "{}-{}-{}-nvrtc{}.{}-driver{driver}.cubin",
        unit.name,
        &hash[..16],
        target.arch,
        nvrtc.0,
        nvrtc.1
    )
}

fn disk_cache_file(unit: &KernelUnit, target: &Target, hash: &str) -> Option<std::path::PathBuf> {
    let nvrtc = nvrtc_version()?;
    Some(disk_cache_dir()?.join(disk_cache_name(unit, target, hash, nvrtc)))
}

/// ELF of machine `EM_CUDA` (190): what NVRTC emits for a real architecture.
fn is_cubin(bytes: &[u8]) -> bool {
    bytes.len() > 64 && bytes.starts_with(b"\x7fELF") && bytes[18..20] == 190u16.to_le_bytes()
}

fn read_disk_cache(path: &std::path::Path) -> Option<Vec<u8>> {
    let bytes = std::fs::read(path).ok()?;
    // A truncated file (a crash mid-write cannot leave one: writes are
    // renamed into place) or a foreign one is recompiled, never loaded.
    is_cubin(&bytes).then_some(bytes)
}

fn write_disk_cache(path: &std::path::Path, cubin: &[u8]) {
    let Some(dir) = path.parent() else { return };
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("cubin"),
        std::process::id()
    ));
    let written = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&tmp, cubin))
        .and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        tracing::warn!(path = %path.display(), error = %e, "could not write the kernel cache (next start compiles again)");
    }
}

/// [`compile`] through the process-wide cache and the on-disk cache
/// ([`disk_cache_dir`]), so a restarted daemon does not wait for NVRTC.
pub fn compile_cached(unit: &KernelUnit, target: &Target) -> Result<Cached, CompileError> {
    check_arch(&target.arch)?;
    let hash = unit.hash();
    let key = (target.clone(), hash.clone());
    let file = disk_cache_file(unit, target, &hash);
    let done = |cubin, origin| Cached {
        unit: unit.name,
        cubin,
        origin,
        file: file.clone(),
    };
    if let Some(cubin) = cache().lock().ok().and_then(|c| c.get(&key).cloned()) {
        return Ok(done(cubin, Origin::Memory));
    }
    let (cubin, origin) = match file.as_deref().and_then(read_disk_cache) {
        Some(cubin) => (cubin, Origin::Disk),
        None => {
            let t = std::time::Instant::now();
            let compiled = compile(unit, &target.arch)?;
            let ms = u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX);
            tracing::info!(
                unit = unit.name,
                arch = %target.arch,
                ms,
                bytes = compiled.cubin.len(),
                "kernels compiled by NVRTC"
            );
            if let Some(f) = &file {
                write_disk_cache(f, &compiled.cubin);
            }
            (compiled.cubin, Origin::Compiled { ms })
        }
    };
    let cubin = std::sync::Arc::new(cubin);
    if let Ok(mut c) = cache().lock() {
        c.insert(key, cubin.clone());
    }
    Ok(done(cubin, origin))
}

/// [`compile_cached`] for each of `units`, all at once: on a cold cache
/// the caller waits for the slowest unit, not for their sum. Results come
/// back in the order of `units`.
pub fn compile_all(units: &[&KernelUnit], target: &Target) -> Vec<Result<Cached, CompileError>> {
    std::thread::scope(|scope| {
        let jobs: Vec<_> = units
            .iter()
            .map(|u| scope.spawn(move || compile_cached(u, target)))
            .collect();
        jobs.into_iter()
            .map(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    })
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
            defines: &[],
            files: &[
                FR,
                KernelFile {
                    path: "ntt/ntt.cu",
                    source: "// edited\n",
                },
            ],
        };
        assert_ne!(EDITED.hash(), NTT.hash());
        assert_ne!(MSM_INDEX.hash(), NTT.hash());
        // Units of the same files differ by their defines.
        assert_ne!(MSM_G1[0].hash(), MSM_G1[1].hash());
        assert!(MSM_G1[0].source().starts_with(concat!(
            "#define MSM_ONLY\n#define MSM_ONLY_ACCUMULATE_SEGMENTS\n",
            "#define FP_MUL_CALL\n#line 1"
        )));
    }

    /// The smallest file [`is_cubin`] takes: an ELF header for EM_CUDA.
    fn fake_cubin() -> Vec<u8> {
        let mut b = vec![0u8; 128];
        b[..4].copy_from_slice(b"\x7fELF");
        b[18..20].copy_from_slice(&190u16.to_le_bytes());
        b
    }

    #[test]
    fn disk_cache_refuses_a_file_that_is_not_a_cubin() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("k.cubin");
        std::fs::write(&f, ".version 8.0\n.entry k()\n").expect("write");
        assert_eq!(read_disk_cache(&f), None, "PTX text is not device code");
        let mut x86 = fake_cubin();
        x86[18..20].copy_from_slice(&62u16.to_le_bytes());
        std::fs::write(&f, &x86).expect("write");
        assert_eq!(read_disk_cache(&f), None, "a host ELF is not a cubin");
        write_disk_cache(&f, &fake_cubin());
        assert_eq!(read_disk_cache(&f), Some(fake_cubin()));
        assert!(read_disk_cache(&dir.path().join("missing.cubin")).is_none());
        // Nothing but the file itself is left in the folder.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names, [std::ffi::OsString::from("k.cubin")]);
    }

    #[test]
    fn cache_names_change_with_source_arch_compiler_and_driver() {
        let t = Target {
            arch: "sm_90".into(),
            driver: Some(13000),
        };
        let name = |u: &KernelUnit, t: &Target, v| disk_cache_name(u, t, &u.hash(), v);
        let base = name(&NTT, &t, (13, 0));
        assert!(base.starts_with("ntt-"), "{base}");
        assert!(
            base.ends_with("-sm_90-nvrtc13.0-driver13000.cubin"),
            "{base}"
        );
        let other_arch = Target {
            arch: "sm_89".into(),
            ..t.clone()
        };
        let no_driver = Target {
            driver: None,
            ..t.clone()
        };
        let all = [
            base.clone(),
            name(&MSM_INDEX, &t, (13, 0)),
            name(&NTT, &other_arch, (13, 0)),
            name(&NTT, &t, (13, 1)),
            name(&NTT, &no_driver, (13, 0)),
        ];
        let distinct: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), all.len(), "{all:?}");
    }

    #[test]
    fn only_real_architectures_are_accepted() {
        for ok in ["sm_90", "sm_86", "sm_90a", "sm_100", "sm_120f"] {
            assert!(check_arch(ok).is_ok(), "{ok}");
        }
        for bad in [
            "compute_90",
            "sm90",
            "sm_",
            "sm_9x",
            "90",
            "sm_1000",
            "sm_90aa",
            "",
        ] {
            let e = check_arch(bad).expect_err(bad).to_string();
            assert!(e.contains("real GPU architecture"), "{e}");
        }
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
        // FR_2P* is 2r, the bound of the lazy forms (r < 2^255: no fifth limb).
        let twice: Vec<u64> = ["FR_2P0", "FR_2P1", "FR_2P2", "FR_2P3"]
            .iter()
            .map(|n| header_const(n))
            .collect();
        let mut carry = 0u64;
        for (t, r) in twice.iter().zip(&limbs) {
            assert_eq!(*t, (r << 1) | carry);
            carry = r >> 63;
        }
        assert_eq!(carry, 0);
    }
}
