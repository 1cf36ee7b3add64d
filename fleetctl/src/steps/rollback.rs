//! `rollback`: drain the current daemon, wait for its memory, point `current`
//! back at `state/previous` and start that release.

use super::drain::{self, DrainParams};
use super::params::duration;
use super::remote::{self, is_release_id, q, QUICK};
use super::start::start_release;
use super::wait_release::{self, WaitReleaseParams};
use super::{kept, Cause, Failed, StepCtx, StepOutcome};
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RollbackParams {
    pub drain: DrainParams,
    pub wait_release: WaitReleaseParams,
    #[serde(with = "duration")]
    pub start_timeout: Duration,
}

impl Default for RollbackParams {
    fn default() -> Self {
        RollbackParams {
            drain: DrainParams::default(),
            wait_release: WaitReleaseParams::default(),
            start_timeout: Duration::from_secs(15),
        }
    }
}

pub fn describe(_p: &RollbackParams, ctx: &StepCtx<'_>) -> String {
    format!(
        "drain the daemon, wait for its memory, point {} at the release in {} and start it",
        ctx.layout().current(),
        ctx.layout().previous_file()
    )
}

const KEPT: &str = "`current`, `state/previous`, the releases and the running daemon";

pub(super) async fn run(p: &RollbackParams, ctx: &mut StepCtx<'_>) -> Result<StepOutcome, Failed> {
    let layout = ctx.layout();
    let prev = kept(
        ctx.transport
            .run_script_ok(
                &format!(
                    "cat {} 2>/dev/null || true",
                    kept(q(&layout.previous_file()), KEPT)?
                ),
                QUICK,
            )
            .await,
        KEPT,
    )?
    .stdout_text();
    if !is_release_id(&prev) {
        return Err((
            Cause::Check(format!(
                "no previous release recorded in {} (found {prev:?}): nothing to roll back to",
                layout.previous_file()
            )),
            KEPT.to_owned(),
        ));
    }
    let present = kept(
        ctx.transport
            .run_script(
                &format!(
                    "[ -x {} ]",
                    kept(q(&format!("{}/prover", layout.release(&prev))), KEPT)?
                ),
                QUICK,
            )
            .await,
        KEPT,
    )?;
    if !present.success() {
        return Err((
            Cause::Check(format!(
                "previous release {} is no longer on the host",
                layout.release(&prev)
            )),
            KEPT.to_owned(),
        ));
    }
    let from = kept(remote::current_release(ctx).await, KEPT)?;
    let drained = drain::run(&p.drain, ctx).await?;
    wait_release::run(&p.wait_release, ctx).await?;
    start_release(ctx, &prev, p.start_timeout).await?;
    let pid = ctx.state.started.as_ref().map_or(0, |s| s.pid);
    let short = |s: &str| s[..12.min(s.len())].to_owned();
    Ok(StepOutcome::done(format!(
        "rolled back {} -> {}, started as pid {pid} ({})",
        from.as_deref().map_or("none".to_owned(), short),
        short(&prev),
        match drained {
            StepOutcome::Done { detail } => detail,
            StepOutcome::Skipped { reason } => reason,
        }
    )))
}
