//! `smoke`: prove one small statement through the running daemon with the
//! deployed client, and check that it was verified and left a timing record.

use super::ctx::StepCtx;
use super::outcome::{kept, Cause, Failed, StepOutcome};
use super::params::{duration, show};
use super::remote::{self, q};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SmokeParams {
    pub circuit: String,
    /// Constraints in the statement (keep it small: this is a probe).
    pub size: u64,
    #[serde(with = "duration")]
    pub timeout: Duration,
}

impl Default for SmokeParams {
    fn default() -> Self {
        SmokeParams {
            circuit: "chain".to_owned(),
            size: 1024,
            timeout: Duration::from_secs(120),
        }
    }
}

pub fn describe(p: &SmokeParams, _ctx: &StepCtx<'_>) -> String {
    format!(
        "submit a `{}` proof of size {} and wait up to {} for `verified: true` and a new timing record",
        p.circuit,
        p.size,
        humantime::format_duration(p.timeout)
    )
}

const KEPT: &str = "the daemon keeps running as it is";

pub(super) async fn run(p: &SmokeParams, ctx: &mut StepCtx<'_>) -> Result<StepOutcome, Failed> {
    let layout = ctx.layout();
    let timing = layout.timing();
    let before = kept(remote::file_size(ctx, &timing).await, KEPT)?;
    let timeout_arg = format!("{}s", p.timeout.as_secs().max(1));
    let script = format!(
        "cd {} && exec {} client submit --config {} --circuit {} --size {} --wait --timeout {}",
        kept(q(&layout.install), KEPT)?,
        kept(q(&layout.current_binary()), KEPT)?,
        kept(q(&layout.config), KEPT)?,
        kept(q(&p.circuit), KEPT)?,
        p.size,
        timeout_arg
    );
    let start = Instant::now();
    // The client enforces its own deadline; ours is a backstop past it.
    let out = kept(
        ctx.transport
            .run_script_ok(&script, p.timeout + Duration::from_secs(15))
            .await,
        KEPT,
    )?;
    let took = start.elapsed();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        (
            Cause::Check(format!(
                "client output is not JSON ({e}): {}",
                out.stdout_text()
            )),
            KEPT.to_owned(),
        )
    })?;
    if verified(&doc) != Some(true) {
        return Err((
            Cause::Check(format!("proof not verified: {}", short(&out.stdout_text()))),
            KEPT.to_owned(),
        ));
    }
    let after = kept(remote::file_size(ctx, &timing).await, KEPT)?;
    // A smaller file was rotated: everything in it is new.
    let from = if after < before { 0 } else { before };
    let fresh = kept(
        ctx.transport
            .read_range(&timing, from, 1 << 20, remote::QUICK)
            .await,
        KEPT,
    )?;
    let records = String::from_utf8_lossy(&fresh)
        .lines()
        .filter(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
        .count();
    if records == 0 {
        return Err((
            Cause::Check(format!(
                "proof verified but no new timing record in {timing}"
            )),
            KEPT.to_owned(),
        ));
    }
    Ok(StepOutcome::done(format!(
        "{} proof of size {} verified in {}; {records} new timing record(s)",
        p.circuit,
        p.size,
        show(took)
    )))
}

/// `verified` at the top of the client's document or in its job result.
fn verified(doc: &serde_json::Value) -> Option<bool> {
    doc.get("verified")
        .or_else(|| doc.get("result").and_then(|r| r.get("verified")))
        .and_then(serde_json::Value::as_bool)
}

fn short(s: &str) -> String {
    s.chars().take(400).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verified_is_found_at_top_or_in_the_result() {
        assert_eq!(verified(&serde_json::json!({"verified": true})), Some(true));
        assert_eq!(
            verified(&serde_json::json!({"result": {"verified": false}})),
            Some(false)
        );
        assert_eq!(verified(&serde_json::json!({"state": "failed"})), None);
    }
}
