//! `prepare`: everything a new release needs before it can start that does
//! not need the old daemon gone, run while the old daemon still serves:
//! its kernels compiled into the kernel cache the new daemon reads
//! (`prover kernels warm`), and its config and the parameter files that
//! config preloads checked by the new binary itself
//! (`prover daemon --check-config`). A failure leaves the old daemon and
//! `current` untouched; the release folder stays complete but unprepared.
//!
//! The config check is done once per release and config: a marker in the
//! release folder records the config's checksum, so a staged host or a
//! resumed run does not hash the parameter files again. The kernels are
//! warmed every time: the marker cannot know whether the kernel cache the
//! new daemon reads still holds them (it may have been emptied, or point
//! elsewhere), and warming a full cache only loads it.

use super::ctx::StepCtx;
use super::outcome::{kept, Cause, Failed, StepOutcome};
use super::params::{self as bounds, Check};
use super::params::{duration, show};
use super::release::sha256_file;
use super::remote::{q, QUICK};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PrepareParams {
    /// Deadline for the kernel compilation (a cold NVRTC run of every unit).
    #[serde(with = "duration")]
    pub timeout: Duration,
    /// Architecture to compile for (`sm_90`); default: the host's GPU 0,
    /// and nothing on a host without one.
    pub arch: Option<String>,
    /// Check the config and preloaded parameter files with the new binary.
    pub check_config: bool,
}

impl Default for PrepareParams {
    fn default() -> Self {
        PrepareParams {
            timeout: Duration::from_secs(600),
            arch: None,
            check_config: true,
        }
    }
}

impl Check for PrepareParams {
    fn check(&self) -> Result<(), String> {
        bounds::duration_in("timeout", self.timeout, &bounds::TIMEOUTS)
    }
}

/// The marker file in a release folder (see the module docs).
const MARKER: &str = ".prepared";

pub fn describe(p: &PrepareParams, ctx: &StepCtx<'_>) -> String {
    format!(
        "while the old daemon serves: `prover kernels warm{}` into the kernel cache (up to {}){}",
        p.arch
            .as_deref()
            .map_or(String::new(), |a| format!(" --arch {a}")),
        humantime::format_duration(p.timeout),
        if p.check_config {
            format!(
                ", `prover daemon --config {} --check-config` (config and preloaded parameters)",
                config_path(ctx)
            )
        } else {
            String::new()
        }
    )
}

const KEPT: &str =
    "the old daemon (still serving), `current`, and the uploaded release (not marked prepared)";

/// The config the new daemon will read: the release's own when the run
/// ships one, else the host's.
fn config_path(ctx: &StepCtx<'_>) -> String {
    if ctx.release.config.is_some() {
        format!("{}/prover.toml", ctx.layout().release(&ctx.release.id))
    } else {
        ctx.layout().config
    }
}

/// The last lines of a failed command's output: what the operator needs
/// (NVRTC's error, the refused key), not a whole compiler log.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

pub(super) async fn run(p: &PrepareParams, ctx: &mut StepCtx<'_>) -> Result<StepOutcome, Failed> {
    if ctx.release.id.is_empty() {
        return Ok(StepOutcome::skipped("no release to prepare"));
    }
    let layout = ctx.layout();
    let dir = layout.release(&ctx.release.id);
    let config_sha = match (&ctx.release.config, &ctx.release.config_sha256) {
        (Some(_), Some(sum)) => sum.clone(),
        (Some(c), None) => kept(sha256_file(c), KEPT)?,
        (None, _) => "host-config".to_string(),
    };
    let qdir = kept(q(&dir), KEPT)?;
    let marker = kept(q(&format!("{dir}/{MARKER}")), KEPT)?;
    let seen = kept(
        ctx.transport
            .run_script_ok(&format!("cat {marker} 2>/dev/null || true"), QUICK)
            .await,
        KEPT,
    )?;
    let checked_earlier = seen.stdout_text() == config_sha;
    let bin = kept(q(&format!("{dir}/prover")), KEPT)?;
    let install = kept(q(&layout.install), KEPT)?;
    let mut details = Vec::new();

    let t = Instant::now();
    let arch = match &p.arch {
        Some(a) => format!(" --arch {}", kept(q(a), KEPT)?),
        None => String::new(),
    };
    let warm = ctx
        .transport
        .run_script(
            // Niced: the old daemon's synthesis threads keep the CPU first.
            &format!("cd {install} && nice -n 10 {bin} kernels warm{arch} 2>&1"),
            p.timeout,
        )
        .await;
    let warm = kept(warm, KEPT)?;
    if !warm.success() {
        return Err((
            Cause::Check(format!(
                "kernel compilation failed (`prover kernels warm`, exit {:?}): {}",
                warm.status,
                tail(&warm.stdout_text(), 8)
            )),
            KEPT.to_owned(),
        ));
    }
    details.push(format!("kernels warm {}", show(t.elapsed())));

    if p.check_config && checked_earlier {
        details.push("config checked earlier".into());
    } else if p.check_config {
        let cfg = config_path(ctx);
        let qcfg = kept(q(&cfg), KEPT)?;
        let out = kept(
            ctx.transport
                .run_script(
                    &format!("cd {install} && {bin} daemon --config {qcfg} --check-config 2>&1"),
                    p.timeout,
                )
                .await,
            KEPT,
        )?;
        if !out.success() {
            return Err((
                Cause::Check(format!(
                    "the new binary refuses the config {cfg}: {}",
                    tail(&out.stdout_text(), 8)
                )),
                KEPT.to_owned(),
            ));
        }
        details.push("config and preloaded parameters ok".into());
    }
    let tmp = kept(q(&format!("{dir}/.{MARKER}.tmp")), KEPT)?;
    kept(
        ctx.transport
            .run_script_ok(
                &format!(
                    "printf '%s\\n' {} > {tmp} && mv -f {tmp} {marker} && test -d {qdir}",
                    kept(q(&config_sha), KEPT)?
                ),
                QUICK,
            )
            .await,
        KEPT,
    )?;
    Ok(StepOutcome::done(details.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_parse_with_defaults_and_refuse_unknown_keys() {
        let p: PrepareParams = serde_yaml::from_str("{arch: sm_90, timeout: 5m}").unwrap();
        assert_eq!(p.arch.as_deref(), Some("sm_90"));
        assert_eq!(p.timeout, Duration::from_secs(300));
        assert!(p.check_config);
        assert!(serde_yaml::from_str::<PrepareParams>("{archh: sm_90}").is_err());
    }

    #[test]
    fn failures_show_the_last_lines_only() {
        let log = (1..=20).map(|i| format!("line {i}\n")).collect::<String>();
        assert_eq!(tail(&log, 2), "line 19\nline 20");
        assert_eq!(tail("one\n\n", 8), "one");
    }
}
