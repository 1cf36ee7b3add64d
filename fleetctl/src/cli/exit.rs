//! Process exit codes of fleetctl, all decided here: a run's [`RunEnd`], or
//! whether every host of a `status`/`health`/`timing collect` answered.

use fleetctl::executor::RunEnd;
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
/// Stopped by Ctrl-C before every host was done. `--resume` continues it.
pub const EXIT_INTERRUPTED: u8 = 130;

/// The code for a run's end.
pub fn run_end(end: RunEnd) -> u8 {
    match end {
        RunEnd::Ok => EXIT_OK,
        RunEnd::HostsFailed => EXIT_HOSTS_FAILED,
        RunEnd::Halted => EXIT_HALTED,
        RunEnd::Interrupted => EXIT_INTERRUPTED,
    }
}

/// The code for a command that reads every host: non-zero when any failed.
pub fn hosts(all_ok: bool) -> u8 {
    if all_ok {
        EXIT_OK
    } else {
        EXIT_HOSTS_FAILED
    }
}

/// The process exit code for one of the codes above.
pub fn code(c: u8) -> ExitCode {
    ExitCode::from(c)
}
