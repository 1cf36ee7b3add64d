//! `fleetctl inventory list|show`.

use super::args::InventoryCommand;
use super::exit;
use fleetctl::inventory::{find, load, load_selected, render_list, render_show};
use std::process::ExitCode;

pub fn run(cmd: InventoryCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        InventoryCommand::List(target) => {
            let (inv, hosts) = load_selected(&target.into())?;
            print!("{}", render_list(&inv, &hosts));
        }
        InventoryCommand::Show { host, target } => {
            let inv = load(target.inventory.as_deref(), &target.extra_vars)?;
            print!("{}", render_show(find(&inv, &host)?));
        }
    }
    Ok(exit::code(exit::EXIT_OK))
}
