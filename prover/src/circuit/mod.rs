//! Bundled circuits sized by constraint count: an arithmetic chain and a SHA-256 preimage.
//!
//! A circuit's `size` is the number of constraints the prover's evaluation
//! domain must hold: the circuit's own constraints plus the one constraint
//! bellperson adds per input (ONE included). A power-of-two `chain` size thus
//! fills its domain exactly; `sha256` takes the most 64-byte blocks that fit
//! (at least one, ≈27k constraints per block). Parameters depend only on kind
//! and size; the seed only picks the witness.

pub mod chain;
pub mod sha256;
mod shape;
pub mod shapes;
pub mod split;
mod unnamed;

use std::fmt;
use std::str::FromStr;

use bellperson::{Circuit, ConstraintSystem, SynthesisError};
use blstrs::Scalar;

pub use chain::ChainCircuit;
pub use sha256::Sha256Circuit;
pub use shape::{CircuitShape, ShapeCounter};
pub use split::SplitWitness;
pub(crate) use unnamed::unnamed_root;

/// Smallest accepted size (2^4), the API's bound.
pub const MIN_SIZE: usize = *fleet_wire::api::CIRCUIT_SIZES.start() as usize;
/// Largest accepted size (2^27), the API's bound.
pub const MAX_SIZE: usize = *fleet_wire::api::CIRCUIT_SIZES.end() as usize;
/// log2 of [`MIN_SIZE`] and [`MAX_SIZE`], for options that take a power of two.
pub const MIN_LOG_SIZE: u32 = MIN_SIZE.trailing_zeros();
pub const MAX_LOG_SIZE: u32 = MAX_SIZE.trailing_zeros();

/// The circuits this binary ships with.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum CircuitKind {
    Chain,
    Sha256,
}

impl CircuitKind {
    pub const ALL: [CircuitKind; 2] = [CircuitKind::Chain, CircuitKind::Sha256];

    pub fn name(self) -> &'static str {
        match self {
            CircuitKind::Chain => "chain",
            CircuitKind::Sha256 => "sha256",
        }
    }

    fn valid_names() -> String {
        CircuitKind::ALL.map(CircuitKind::name).join(", ")
    }
}

impl fmt::Display for CircuitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CircuitKind {
    type Err = CircuitError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CircuitKind::ALL
            .into_iter()
            // Exact names only: `chain\n` or `Chain` would be stored and
            // echoed back as a different name than the circuit it selects.
            .find(|k| k.name() == s)
            .ok_or_else(|| CircuitError::UnknownKind {
                name: s.escape_debug().to_string(),
                valid: CircuitKind::valid_names(),
            })
    }
}

/// Why a bundled circuit could not be built or measured.
#[derive(Debug, thiserror::Error)]
pub enum CircuitError {
    #[error("unknown circuit `{name}`: valid circuits are {valid}")]
    UnknownKind { name: String, valid: String },
    #[error(
        "size {size} for circuit `{kind}` is out of range: it must be between {MIN_SIZE} (2^4) and {MAX_SIZE} (2^27) constraints"
    )]
    SizeOutOfRange { kind: CircuitKind, size: usize },
    #[error("counting the shape of circuit `{kind}` at size {size}: {source}")]
    Shape {
        kind: CircuitKind,
        size: usize,
        #[source]
        source: SynthesisError,
    },
}

/// One of the bundled circuits, with or without its witness.
#[derive(Clone, Debug)]
pub enum BundledCircuit {
    Chain(ChainCircuit),
    Sha256(Sha256Circuit),
}

impl BundledCircuit {
    pub fn kind(&self) -> CircuitKind {
        match self {
            BundledCircuit::Chain(_) => CircuitKind::Chain,
            BundledCircuit::Sha256(_) => CircuitKind::Sha256,
        }
    }
}

impl Circuit<Scalar> for BundledCircuit {
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        match self {
            BundledCircuit::Chain(c) => c.synthesize(cs),
            BundledCircuit::Sha256(c) => c.synthesize(cs),
        }
    }
}

/// The chain's steps each take the one before: it is one piece. SHA-256
/// splits between blocks.
impl SplitWitness for BundledCircuit {
    fn pieces(&self, max: usize) -> usize {
        match self {
            BundledCircuit::Chain(_) => 1,
            BundledCircuit::Sha256(c) => c.pieces(max),
        }
    }

    fn synthesize_piece<CS: ConstraintSystem<Scalar>>(
        &self,
        piece: usize,
        pieces: usize,
        cs: &mut CS,
    ) -> Result<(), SynthesisError> {
        match self {
            BundledCircuit::Chain(c) if piece == 0 && pieces == 1 => c.clone().synthesize(cs),
            BundledCircuit::Chain(_) => Err(SynthesisError::Unsatisfiable),
            BundledCircuit::Sha256(c) => c.synthesize_piece(piece, pieces, cs),
        }
    }
}

fn check_size(kind: CircuitKind, size: usize) -> Result<(), CircuitError> {
    if (MIN_SIZE..=MAX_SIZE).contains(&size) {
        Ok(())
    } else {
        Err(CircuitError::SizeOutOfRange { kind, size })
    }
}

fn sha256_blocks(size: usize) -> Result<usize, CircuitError> {
    sha256::blocks_for_size(size).map_err(|source| CircuitError::Shape {
        kind: CircuitKind::Sha256,
        size,
        source,
    })
}

/// The witnessed circuit of `kind` and `size` for `seed`, with its public
/// inputs (ONE excluded, as `verify_proof` takes them).
pub fn bundled(
    kind: CircuitKind,
    size: usize,
    seed: u64,
) -> Result<(BundledCircuit, Vec<Scalar>), CircuitError> {
    check_size(kind, size)?;
    Ok(match kind {
        CircuitKind::Chain => {
            let circuit = ChainCircuit::from_seed(size, seed);
            let inputs = circuit.public_input().into_iter().collect();
            (BundledCircuit::Chain(circuit), inputs)
        }
        CircuitKind::Sha256 => {
            let circuit = Sha256Circuit::from_seed(sha256_blocks(size)?, seed);
            let inputs = circuit.public_inputs().unwrap_or_default();
            (BundledCircuit::Sha256(circuit), inputs)
        }
    })
}

/// The circuit of `kind` and `size` without a witness, for parameter generation
/// and shape counting.
pub fn shape_circuit(kind: CircuitKind, size: usize) -> Result<BundledCircuit, CircuitError> {
    check_size(kind, size)?;
    Ok(match kind {
        CircuitKind::Chain => BundledCircuit::Chain(ChainCircuit::for_size(size, None)),
        CircuitKind::Sha256 => BundledCircuit::Sha256(Sha256Circuit::shape(sha256_blocks(size)?)),
    })
}

/// Inputs, aux variables, constraints and domain of `kind` at `size`,
/// counted without assignments (for sizing buffers before proving).
pub fn shape(kind: CircuitKind, size: usize) -> Result<CircuitShape, CircuitError> {
    CircuitShape::of(shape_circuit(kind, size)?).map_err(|source| CircuitError::Shape {
        kind,
        size,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_names_round_trip_and_unknown_names_list_the_valid_ones() {
        for kind in CircuitKind::ALL {
            assert_eq!(
                kind.to_string().parse::<CircuitKind>().expect("parse"),
                kind
            );
        }
        let err = "poseidon".parse::<CircuitKind>().expect_err("unknown");
        assert_eq!(
            err.to_string(),
            "unknown circuit `poseidon`: valid circuits are chain, sha256"
        );
    }

    #[test]
    fn circuit_names_match_exactly_not_trimmed_or_case_folded() {
        for name in ["chain\n", " chain", "Chain", "SHA256", "chain\0"] {
            let err = name.parse::<CircuitKind>().expect_err(name);
            // The name is echoed escaped: a newline cannot forge a log line.
            assert!(!err.to_string().contains('\n'), "{err}");
        }
        assert!(matches!(
            "chain\n".parse::<CircuitKind>(),
            Err(CircuitError::UnknownKind { name, .. }) if name == "chain\\n"
        ));
    }

    #[test]
    fn sizes_out_of_range_are_rejected() {
        for size in [0, MIN_SIZE - 1, MAX_SIZE + 1] {
            let err = shape(CircuitKind::Chain, size).expect_err("out of range");
            assert!(matches!(err, CircuitError::SizeOutOfRange { size: s, .. } if s == size));
            assert!(err
                .to_string()
                .contains("between 16 (2^4) and 134217728 (2^27)"));
        }
        assert!(bundled(CircuitKind::Sha256, 1, 0).is_err());
    }

    #[test]
    fn bundled_circuit_matches_its_shape() {
        let (circuit, inputs) = bundled(CircuitKind::Chain, 256, 5).expect("bundled");
        assert_eq!(circuit.kind(), CircuitKind::Chain);
        let shape = shape(CircuitKind::Chain, 256).expect("shape");
        assert_eq!(shape.num_public_inputs(), inputs.len());
        assert_eq!(CircuitShape::of(circuit).expect("count"), shape);
    }

    #[test]
    fn small_sha256_sizes_still_hash_one_block() {
        let shape = shape(CircuitKind::Sha256, 1024).expect("shape");
        assert_eq!(shape.num_inputs, 3);
        assert_eq!(
            shape.padded_constraints(),
            sha256::padded_constraints(1).expect("costs")
        );
    }
}
