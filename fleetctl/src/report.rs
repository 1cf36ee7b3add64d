//! Final table of a run.
