//! Why parameters could not be read, written, found or used: one error type
//! for the whole parameter directory, each variant naming the file and, where
//! there is one, the command that fixes it.

use std::io;
use std::path::{Path, PathBuf};

use crate::budget::BudgetError;
use crate::circuit::{CircuitError, CircuitKind};
use crate::setup::SetupError;

impl ParamsError {
    /// The file at `path` is not a parameter file as its layout says, for `reason`.
    pub fn malformed(path: &Path, reason: impl Into<String>) -> Self {
        ParamsError::Malformed {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }
}

/// Why parameters could not be read, written, found or used.
#[derive(Debug, thiserror::Error)]
pub enum ParamsError {
    #[error("{action} {path}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: io::Error,
    },
    #[error(
        "no room for the parameters of `{kind}` size {size}: they take up to {need} bytes on disk, {dir} has {free} bytes free"
    )]
    NoSpace {
        dir: PathBuf,
        kind: CircuitKind,
        size: usize,
        need: u64,
        free: u64,
    },
    #[error("malformed parameter file {path}: {reason}")]
    Malformed { path: PathBuf, reason: String },
    #[error(
        "truncated parameter file {path}: the {section} section needs {needed} more bytes at offset {offset} but the file has {available}"
    )]
    Truncated {
        path: PathBuf,
        section: &'static str,
        offset: u64,
        needed: u64,
        available: u64,
    },
    #[error(
        "parameters in {path} have domain 2^{have_log2}, circuit `{kind}` size {size} needs 2^{need_log2}: run `prover setup --circuit {kind} --size {size} --params-dir {}` (TEST-ONLY) or `prover params import FILE --circuit {kind} --size {size} --params-dir {}`",
        dir_of(path).display(), dir_of(path).display()
    )]
    DomainMismatch {
        path: PathBuf,
        kind: CircuitKind,
        size: usize,
        have_log2: u32,
        need_log2: u32,
    },
    #[error(
        "parameters in {path} do not fit circuit `{kind}` size {size}: {what}: run `prover setup --circuit {kind} --size {size} --params-dir {}` (TEST-ONLY) or `prover params import FILE --circuit {kind} --size {size} --params-dir {}`",
        dir_of(path).display(), dir_of(path).display()
    )]
    ShapeMismatch {
        path: PathBuf,
        kind: CircuitKind,
        size: usize,
        what: String,
    },
    #[error(
        "{path} is not a parameter file for circuit `{kind}` size {size}: {what}; import the file made for that circuit and size"
    )]
    ImportMismatch {
        path: PathBuf,
        kind: CircuitKind,
        size: usize,
        what: String,
    },
    #[error(
        "parameter file {path} is corrupt: its SHA-256 is {actual}, its sidecar recorded {expected}"
    )]
    ChecksumMismatch {
        path: PathBuf,
        expected: String,
        actual: String,
    },
    #[error(
        "no parameters for circuit `{kind}` size {size} in {dir}: import real ones with `prover params import FILE --circuit {kind} --size {size} --params-dir {dir}`, or generate TEST-ONLY ones with `prover setup --circuit {kind} --size {size} --params-dir {dir}`"
    )]
    Missing {
        dir: PathBuf,
        kind: CircuitKind,
        size: usize,
    },
    #[error("parameter sidecar {path}: {reason}")]
    Meta { path: PathBuf, reason: String },
    #[error(
        "{path} was not written by `prover setup` ({why}), so it is never replaced: move it out of the parameter directory first"
    )]
    Protected { path: PathBuf, why: String },
    #[error(
        "{path} has no sidecar and could not be adopted: {reason}; the file was left as it is"
    )]
    NotAdopted {
        path: PathBuf,
        #[source]
        reason: Box<ParamsError>,
    },
    #[error("reserving memory for parameters {path}: {source}")]
    Budget {
        path: PathBuf,
        #[source]
        source: BudgetError,
    },
    #[error(transparent)]
    Circuit(#[from] CircuitError),
    #[error("generating parameters for circuit `{kind}` size {size}: {source}")]
    Generate {
        kind: CircuitKind,
        size: usize,
        #[source]
        source: SetupError,
    },
}

/// The directory a parameter file lies in, for fix hints.
pub(crate) fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

pub(crate) fn io_err(path: &Path, action: &'static str) -> impl FnOnce(io::Error) -> ParamsError {
    let path = path.to_path_buf();
    move |source| ParamsError::Io {
        path,
        action,
        source,
    }
}
