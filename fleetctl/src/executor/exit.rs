//! Process exit codes of a run, decided in one place from the run's outcome.

use std::process::ExitCode;

/// Every selected host finished every step (or `--check`/`plan` only).
pub const EXIT_OK: u8 = 0;
/// fleetctl itself failed: bad inventory or playbook, no host matched,
/// state or audit file not writable. Nothing was changed on any host.
pub const EXIT_ERROR: u8 = 1;
/// At least one host failed (unreachable, a step failed, rolled back);
/// every other host was still run.
pub const EXIT_HOSTS_FAILED: u8 = 2;
/// The failure budget (`max_fail`) was exceeded: the run halted and some
/// hosts were not started. `--resume RUN_ID` continues it.
pub const EXIT_HALTED: u8 = 3;
/// `experiment`: the verdict was not a pass (fail, marginal, NODATA, or the
/// candidate never deployed); the verdict's action itself succeeded.
pub const EXIT_NOT_PASSED: u8 = 4;
/// Stopped by Ctrl-C before every host was done. `--resume` continues it.
pub const EXIT_INTERRUPTED: u8 = 130;

/// How a run ended, as far as the exit code is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    Ok,
    HostsFailed,
    Halted,
    Interrupted,
}

/// The one mapping from a run's end to the process exit code.
pub fn exit_code(end: RunEnd) -> ExitCode {
    ExitCode::from(match end {
        RunEnd::Ok => EXIT_OK,
        RunEnd::HostsFailed => EXIT_HOSTS_FAILED,
        RunEnd::Halted => EXIT_HALTED,
        RunEnd::Interrupted => EXIT_INTERRUPTED,
    })
}
