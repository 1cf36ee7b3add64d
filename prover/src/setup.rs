//! Fast parallel (test-only randomness) parameter generation.
