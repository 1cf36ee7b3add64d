//! Groth16 parameters: bellperson's file format, read, mmap, write, and the on-disk cache.
