//! Dispatcher and one task per host; canary, batches, failure budget.

mod exit;

pub use exit::{
    exit_code, RunEnd, EXIT_ERROR, EXIT_HALTED, EXIT_HOSTS_FAILED, EXIT_INTERRUPTED, EXIT_OK,
};

use crate::cli::RunArgs;
use std::process::ExitCode;

/// `fleetctl run` / `fleetctl rollout`.
pub async fn cli_run(_args: RunArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("run: being built")
}
