//! Process exit codes of fleetctl, all decided here: a run's [`RunEnd`], an
//! experiment's [`End`], or whether every host of a `status`/`health`/
//! `timing collect` answered.

use fleetctl::executor::RunEnd;
use fleetctl::experiment::run::End;
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
/// The command line itself was wrong (unknown flag, missing argument, bad
/// value): nothing was read or run. Distinct from [`EXIT_HOSTS_FAILED`] so a
/// script that retries failed hosts does not retry typos (sysexits' EX_USAGE).
pub const EXIT_USAGE: u8 = 64;
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

/// The code for an experiment's end.
pub fn experiment_end(end: End) -> u8 {
    match end {
        End::Pass => EXIT_OK,
        End::NotPass => EXIT_NOT_PASSED,
        End::HostsFailed => EXIT_HOSTS_FAILED,
        End::Interrupted => EXIT_INTERRUPTED,
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
