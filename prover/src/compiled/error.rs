//! Why constraints could not be compiled, loaded or replayed.

use crate::lc::UnknownVariable;
use std::path::PathBuf;

/// Recording a circuit's constraints failed.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("recording the circuit's constraints: {0}")]
    Circuit(#[from] bellperson::SynthesisError),
    #[error("recording the circuit's constraints: {0}")]
    Malformed(#[source] UnknownVariable),
    #[error("the circuit has more than {limit} {what}, more than compiled constraints can name")]
    TooLarge { what: &'static str, limit: usize },
    /// Recorded in pieces, the pieces do not add up to the circuit's shape
    /// as one preamble repeated, or a piece's preamble differs.
    #[error("recording the circuit in pieces: {0}")]
    Pieces(String),
}

/// A compiled-constraints file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{action} compiled constraints {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("compiled constraints {} are not usable: {reason}", path.display())]
    Invalid { path: PathBuf, reason: String },
    #[error(
        "compiled constraints {} do not match their digest (file says {expected}, contents \
         hash to {got}): the file is damaged or was altered",
        path.display()
    )]
    Digest {
        path: PathBuf,
        expected: String,
        got: String,
    },
}

/// The circuit, run for its witness, did not enforce the constraints that
/// were recorded for it: its structure depends on its witness (or the
/// recording belongs to another circuit), and proving it from the recording
/// would prove a different statement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the circuit's constraints differ from the ones compiled for it, first at constraint \
     {index} ({name}): {what}; a circuit whose constraints change with its witness cannot be \
     proved from compiled constraints"
)]
pub struct StructureMismatch {
    /// Row of the first differing constraint.
    pub index: usize,
    /// Its name as the circuit gave it, with namespaces.
    pub name: String,
    /// What differs.
    pub what: String,
}
