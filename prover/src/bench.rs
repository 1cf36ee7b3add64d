//! prover bench: our prover against bellperson on the same circuit and parameters.
