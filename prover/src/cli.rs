//! Command-line types of the prover binary.
