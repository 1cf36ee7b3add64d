//! Helpers every test binary of the workspace shares, so that a test fails
//! for the right reason.
//!
//! Layout:
//! - [`skip`]: what a test needs from its host (root for the lab, a GPU,
//!   Chromium, NVRTC, netem), when a missing part fails the test and when it
//!   skips, and the skip log `scripts/test.sh` counts
//!   (`TEST_LEAVE_OUT`, `TEST_REQUIRE`, `TEST_SKIP_LOG`).
//! - [`deadline`]: running a child process with a deadline, so that a
//!   regression that makes it hang fails the test instead of hanging CI.
//! - [`net`]: a loopback address nothing listens on, held so that nothing
//!   can start listening there during the test.

pub mod deadline;
pub mod net;
pub mod skip;

pub use deadline::{output_within, spawn_within, Within};
pub use net::RefusingAddr;
pub use skip::{have, have_lab, Need};
