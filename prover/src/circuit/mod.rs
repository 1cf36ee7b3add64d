//! Bundled circuits sized by constraint count: an arithmetic chain and a SHA-256 preimage.
