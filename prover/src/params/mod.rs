//! Groth16 parameters: bellperson's file format, read, mmap, write, and the on-disk cache.
//!
//! Files are bellperson's `Parameters::write` format, byte for byte, so
//! bellperson reads ours and we read its. Before handing a file to bellperson
//! we walk its length fields ([`ParamsLayout`]) and check them against the file
//! size: bellperson's readers trust those lengths (the mmap reader indexes past
//! the end and panics on a truncated file). The [`ParamStore`] keeps one file
//! per circuit kind and size (`chain-1024.params`) with a JSON sidecar
//! (`chain-1024.json`) holding the shape, provenance and the file's SHA-256.
//! Every write goes to a temporary file that is synced and renamed into place.
//!
//! Layout: [`format`] (the file format, layout check, read, map, write),
//! [`read`] (one pass: read, hashes and decoding side by side),
//! [`file`] (streamed hashing, atomic replacement), [`store`] (the
//! directory, sidecars, the in-memory cache), [`error`].

pub mod error;
pub mod file;
pub mod format;
pub mod read;
pub mod store;

pub use error::ParamsError;
pub use file::{file_sha256, NewDirectory, TempFile};
pub use format::{
    read_mapped, write_params, MappedParams, Params, ParamsLayout, G1_BYTES, G2_BYTES,
};
pub use read::read_params;
pub use store::{
    file_bytes_bound, generation_bytes, memory_bytes, ListedEntry, ParamStore, ParamsMeta,
    ParamsOrigin, TestParams, DEFAULT_SEED, META_FORMAT,
};
