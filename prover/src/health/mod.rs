//! The host probe printed by prover health.
