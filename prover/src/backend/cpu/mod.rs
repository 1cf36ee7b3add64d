//! The CPU backend: radix-2 FFTs and Pippenger multi-exponentiation on all cores.
