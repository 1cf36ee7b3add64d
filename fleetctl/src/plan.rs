//! What a run would do on which host, without changing anything.

use crate::cli::PlanArgs;

/// `fleetctl plan`.
pub fn cli_plan(_args: PlanArgs) -> anyhow::Result<()> {
    anyhow::bail!("plan: being built")
}
