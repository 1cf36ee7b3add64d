//! `collect_timing`: fetch the host's new timing records into the local
//! timing store over the run's connection (the same incremental, rotation-safe
//! fetch as `fleetctl timing collect`). Reads the host, changes nothing there.

use super::ctx::StepCtx;
use super::outcome::{Cause, Failed, StepOutcome};
use super::params::duration;
use super::params::{self as bounds, Check};
use crate::timing::collect::{collect_host, timing_log_path, CHUNK, CHUNK_BYTES};
use crate::timing::store::Store;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CollectTimingParams {
    /// Local store, one folder per host (relative to fleetctl's working directory).
    pub store: PathBuf,
    /// Deadline for this host; what was fetched before it is kept.
    #[serde(with = "duration")]
    pub timeout: Duration,
    /// Bytes per remote read.
    pub chunk_bytes: u64,
}

impl Default for CollectTimingParams {
    fn default() -> Self {
        CollectTimingParams {
            store: PathBuf::from(".fleetctl/timing"),
            timeout: Duration::from_secs(120),
            chunk_bytes: CHUNK,
        }
    }
}

impl Check for CollectTimingParams {
    fn check(&self) -> Result<(), String> {
        bounds::duration_in("timeout", self.timeout, &bounds::TIMEOUTS)?;
        let (lo, hi) = (*CHUNK_BYTES.start(), *CHUNK_BYTES.end());
        bounds::in_range(
            "chunk_bytes",
            bounds::ByteSize(self.chunk_bytes),
            &(bounds::ByteSize(lo)..=bounds::ByteSize(hi)),
        )
    }
}

pub fn describe(p: &CollectTimingParams, ctx: &StepCtx<'_>) -> String {
    format!(
        "fetch new lines of {}* into {}/{}",
        timing_log_path(ctx.host),
        p.store.display(),
        ctx.host.name
    )
}

const KEPT: &str = "everything on the host; the local store keeps what was fetched";

pub(super) async fn run(
    p: &CollectTimingParams,
    ctx: &mut StepCtx<'_>,
) -> Result<StepOutcome, Failed> {
    let store = Store::new(&p.store);
    let fetch = collect_host(ctx.transport, ctx.host, &store, p.chunk_bytes);
    match tokio::time::timeout(p.timeout, fetch).await {
        Ok(Ok(got)) => {
            let mut detail = format!(
                "{} new bytes from {} file(s) into {}",
                got.new_bytes,
                got.files,
                store.host_dir(&ctx.host.name).display()
            );
            if got.skipped > 0 {
                detail += &format!(
                    "; left out {} line(s):\n{}",
                    got.skipped,
                    got.skipped_text()
                );
            }
            Ok(StepOutcome::done(detail))
        }
        Ok(Err(e)) => Err((Cause::Check(e.to_string()), KEPT.to_owned())),
        Err(_) => Err((
            Cause::Check(format!(
                "no complete fetch within {}; the next collect resumes",
                humantime::format_duration(p.timeout)
            )),
            KEPT.to_owned(),
        )),
    }
}
