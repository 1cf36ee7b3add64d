//! `rollback`: drain the current daemon, stop whatever else of the failed
//! release still runs, wait for its memory, point `current` back at
//! `state/previous` and start that release.
//!
//! The drain only knows the daemon through its pid file. A failed build may
//! never have written one (it died half-way, or hung before it), or may have
//! left children; starting the old release next to those leaves two daemons
//! on one host, fighting over the GPUs and the port. So before the old
//! release starts, every process of the failed release goes: the pid the
//! start step launched (and its session, which `setsid` made its own), and
//! any process whose `/proc/<pid>/exe` is the failed release's binary.

use super::ctx::StepCtx;
use super::drain::{self, DrainParams};
use super::outcome::{kept, Cause, Failed, StepOutcome};
use super::params::duration;
use super::params::{self as bounds, Check};
use super::remote::{self, is_release_id, q, QUICK};
use super::start::start_release;
use super::wait_release::{self, WaitReleaseParams};
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

impl Check for RollbackParams {
    fn check(&self) -> Result<(), String> {
        self.drain.check().map_err(|e| format!("drain: {e}"))?;
        self.wait_release
            .check()
            .map_err(|e| format!("wait_release: {e}"))?;
        bounds::duration_in("start_timeout", self.start_timeout, &bounds::TIMEOUTS)
    }
}

pub fn describe(_p: &RollbackParams, ctx: &StepCtx<'_>) -> String {
    format!(
        "drain the daemon, stop what is left of its release, wait for its memory, point {} at the newest other release in {} (those that passed verify) and start it",
        ctx.layout().current(),
        ctx.layout().verified_file()
    )
}

const KEPT: &str = "`current`, `state/previous`, the releases and the running daemon";

pub(super) async fn run(p: &RollbackParams, ctx: &mut StepCtx<'_>) -> Result<StepOutcome, Failed> {
    let layout = ctx.layout();
    let from = kept(remote::current_release(ctx).await, KEPT)?;
    // The target is the newest release that passed verify here and is still
    // on the host, never merely the previous `current`: that may be a build
    // that never worked (a first rollout that failed at start).
    let verified = kept(
        ctx.transport
            .run_script_ok(
                &format!(
                    "cat {} 2>/dev/null || true",
                    kept(q(&layout.verified_file()), KEPT)?
                ),
                QUICK,
            )
            .await,
        KEPT,
    )?
    .stdout_text();
    let mut candidates: Vec<&str> = verified
        .lines()
        .map(str::trim)
        .filter(|l| is_release_id(l) && Some(*l) != from.as_deref())
        .collect();
    candidates.reverse();
    let mut prev = None;
    for sha in candidates {
        let present = kept(
            ctx.transport
                .run_script(
                    &format!(
                        "[ -x {} ]",
                        kept(q(&format!("{}/prover", layout.release(sha))), KEPT)?
                    ),
                    QUICK,
                )
                .await,
            KEPT,
        )?;
        if present.success() {
            prev = Some(sha.to_owned());
            break;
        }
    }
    let Some(prev) = prev else {
        return Err((
            Cause::Check(format!(
                "no previous release that passed verify on this host is left (recorded in {}): nothing known to work to roll back to; the host is left as it is",
                layout.verified_file()
            )),
            KEPT.to_owned(),
        ));
    };
    let drained = drain::run(&p.drain, ctx).await?;
    let swept = stop_failed_release(ctx, from.as_deref()).await?;
    wait_release::run(&p.wait_release, ctx).await?;
    start_release(ctx, &prev, p.start_timeout, None).await?;
    let pid = ctx.state.started.as_ref().map_or(0, |s| s.pid);
    let short = |s: &str| s[..12.min(s.len())].to_owned();
    let detail = format!(
        "rolled back {} -> {}, started as pid {pid} ({}{swept})",
        from.as_deref().map_or("none".to_owned(), short),
        short(&prev),
        drained.text()
    );
    // A drain that needed SIGKILL is as visible in the rollback's cell.
    Ok(match drained {
        StepOutcome::Forced { flag, .. } => StepOutcome::forced(flag, detail),
        _ => StepOutcome::done(detail),
    })
}

/// How long the failed release's processes get after SIGTERM before SIGKILL:
/// the drain already had its turn with the daemon, these are what is left.
const SWEEP_TERM_GRACE_TENTHS: u32 = 30;

/// SIGTERM, then SIGKILL, to every process of the failed release; returns
/// a note for the outcome ("" when nothing was left), or fails when a
/// process survives SIGKILL (the old release must not start beside it).
async fn stop_failed_release(ctx: &StepCtx<'_>, failed: Option<&str>) -> Result<String, Failed> {
    let started = ctx.state.started.as_ref().map_or(0, |s| s.pid);
    let exe = failed.map(|sha| format!("{}/prover", ctx.layout().release(sha)));
    if started == 0 && exe.is_none() {
        return Ok(String::new());
    }
    let script = kept(
        sweep_script(exe.as_deref(), started, SWEEP_TERM_GRACE_TENTHS),
        KEPT,
    )?;
    let out = kept(
        ctx.transport
            .run_script_ok(&script, Duration::from_secs(30))
            .await,
        KEPT,
    )?
    .stdout_text();
    let field = |name: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or("")
            .to_owned()
    };
    let (stopped, left) = (field("stopped:"), field("left:"));
    if !left.is_empty() {
        return Err((
            Cause::Check(format!(
                "processes of the failed release survived SIGKILL (pids {left}); not starting the previous release beside them"
            )),
            KEPT.to_owned(),
        ));
    }
    Ok(if stopped.is_empty() {
        String::new()
    } else {
        format!("; stopped what was left of the failed release: pids {stopped}")
    })
}

/// The processes to stop: those whose exe is `exe` (also once deleted by a
/// prune), and those in the session of `started` (the launched pid leads
/// its own session). Prints `stopped: PIDS` and `left: PIDS`.
fn sweep_script(exe: Option<&str>, started: u32, grace_tenths: u32) -> Result<String, Cause> {
    let target = match exe {
        Some(exe) => format!("$(readlink -f {e} 2>/dev/null || echo {e})", e = q(exe)?),
        None => String::new(),
    };
    Ok(format!(
        r#"target="{target}"; sid={started}
list() {{
  for d in /proc/[0-9]*; do
    p=${{d#/proc/}}; [ "$p" = "$$" ] && continue
    e=$(readlink "$d/exe" 2>/dev/null) || continue
    s=$(sed 's/.*) //' "$d/stat" 2>/dev/null | cut -d' ' -f4)
    if [ -n "$target" ] && {{ [ "$e" = "$target" ] || [ "$e" = "$target (deleted)" ]; }}; then echo "$p"
    elif [ "$sid" != 0 ] && [ "$s" = "$sid" ]; then echo "$p"; fi
  done
}}
pids=$(list | tr '
' ' '); [ -n "$pids" ] && kill -TERM $pids 2>/dev/null
i=0; while [ -n "$(list)" ] && [ $i -lt {grace_tenths} ]; do sleep 0.1; i=$((i+1)); done
rest=$(list | tr '
' ' '); [ -n "$rest" ] && kill -KILL $rest 2>/dev/null
i=0; while [ -n "$(list)" ] && [ $i -lt 20 ]; do sleep 0.1; i=$((i+1)); done
echo "stopped: $pids"; echo "left: $(list | tr '
' ' ')""#
    ))
}
