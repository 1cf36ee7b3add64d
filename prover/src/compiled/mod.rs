//! Constraints compiled once per circuit and size, and the proof-time path
//! that uses them: a witness-only pass, then a, b, c by sparse products.
//!
//! Synthesis the bellperson way builds every linear combination of every
//! constraint for every proof, although the constraints of a circuit and size
//! never change; only the witness does. Here [`compile`] records A, B, C
//! once ([`CompiledR1cs`]), [`assign`] runs the circuit for its assignments
//! only ([`assign_split`] in pieces on every core, where the circuit comes in
//! pieces), and [`evaluate`] computes a, b, c on every core. [`file`] keeps a
//! recording on disk next to the parameters, checked by its digest on load.

mod error;
mod eval;
pub mod file;
mod layout;
mod matrix;
mod pieces;
mod record;
mod record_split;
mod witness;

pub use error::{CompileError, FileError, StructureMismatch};
pub use eval::{evaluate, EvalShapeError};
pub use layout::{Counts, PieceLayout};
pub use matrix::{CompiledR1cs, Matrix, COEFF_MINUS_ONE, COEFF_ONE, INPUT};
pub use pieces::{assign_split, can_check_in_pieces};
pub use record::{compile, record, Recorded};
pub use record_split::compile_split;
pub use witness::{assign, WitnessError};

#[cfg(test)]
mod tests;
