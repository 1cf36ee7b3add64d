//! A ConstraintSystem that writes a/b/c evaluations and assignments straight into pinned buffers.
