//! Proof assembly: MSM results and r, s into A, B, C, as bellperson does.
