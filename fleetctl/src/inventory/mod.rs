//! Inventories: hosts, groups and variables, read raw then resolved.

mod host;

pub use host::{Host, TransportKind};
