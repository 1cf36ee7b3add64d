//! Inventories: hosts, groups and variables, read raw then resolved.

mod host;

pub use host::{Host, TransportKind};

use crate::cli::InventoryCommand;

/// `fleetctl inventory list|show`.
pub fn cli_inventory(_cmd: InventoryCommand) -> anyhow::Result<()> {
    anyhow::bail!("inventory: being built")
}
