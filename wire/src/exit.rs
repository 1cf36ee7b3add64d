//! Exit codes of the `prover` binary, every subcommand's in one table: the
//! prover exits with them, and `fleetctl` reads them from the `prover client`
//! commands it runs on a host (the smoke proof).

/// Success.
pub const OK: u8 = 0;
/// Any failure not listed below (I/O, parameters, proving, a bad config).
pub const ERROR: u8 = 1;
/// Bad command line (clap's own code for usage errors).
pub const USAGE: u8 = 2;
/// A proof was produced or read but did not verify; `bench`: a proof was
/// not identical to bellperson's.
pub const VERIFY_FAILED: u8 = 3;
/// `client ready`: the daemon answered but is not ready.
pub const NOT_READY: u8 = 4;
/// `daemon`: the drain was aborted (second signal or drain timeout).
pub const ABORTED: u8 = 5;
/// `client submit --wait`: the job failed, was cancelled, did not verify,
/// or did not finish within the timeout.
pub const JOB_FAILED: u8 = 6;
/// `c2`: the C1 output was refused (malformed, for another sector, altered).
pub const C1_REFUSED: u8 = 7;
/// `c2`, `setup --filecoin`: Filecoin parameters missing or unusable
/// (truncated, a digest that does not match parameters.json, TEST-ONLY
/// parameters not allowed).
pub const PARAMS_UNUSABLE: u8 = 8;
