//! The serving gap as a client sees it: a bounded loop on the host that
//! asks the daemon's address whether it is ready (`prover client ready`,
//! the route a client's readiness check takes), started by `drain` just
//! before the old daemon is told to stop and stopped when the host is done
//! (after its steps, or after its rollback). Every change of answer is
//! written with the host's clock; the gap is the time the answer was not
//! `ready`, whatever the steps believed (a successor that dies just after
//! taking over, a rollback's restart, all count).
//!
//! Step timestamps would measure fleetctl's view instead: when it sent a
//! signal and when it next looked, not when clients were refused.

use super::ctx::StepCtx;
use super::outcome::Cause;
use super::remote::{q, QUICK};
use std::time::Duration;

/// Time between two probes while the switch is young: the resolution of
/// the measured gap.
pub const INTERVAL: Duration = Duration::from_millis(50);
/// Probes at [`INTERVAL`] before the loop slows to [`SLOW_INTERVAL`]: a
/// switch is over in seconds, and the probe shares the host's CPU with the
/// new daemon's smoke proof for as long as the host's steps last.
const FAST_PROBES: u32 = 200;
/// Time between two probes after [`FAST_PROBES`].
pub const SLOW_INTERVAL: Duration = Duration::from_millis(250);
/// What one probe may take before it counts as not ready.
const PROBE_TIMEOUT: &str = "1s";
/// The loop's bound: at most this many probes (at least 20 minutes, longer
/// than every step's default deadlines together), so a probe whose
/// fleetctl was killed ends by itself.
const MAX_PROBES: u32 = 5_000;

pub use super::gap_record::{Gap, GapProbe};

/// Starts the loop; returns once its first answer is written (so whatever
/// the caller does next, the loop has seen the state before it).
pub async fn start(ctx: &StepCtx<'_>) -> Result<GapProbe, Cause> {
    let layout = ctx.layout();
    let tag: u64 = rand::random();
    let file = format!("{}/run/.gap.{tag:016x}", layout.install);
    let probe = format!(
        "{bin} client ready --config {cfg} --timeout {PROBE_TIMEOUT} >/dev/null 2>&1",
        bin = q(&layout.current_binary())?,
        cfg = q(&layout.config)?,
    );
    let sample = format!(
        "if [ -x {bin} ] && {probe}; then s=up; else s=down; fi",
        bin = q(&layout.current_binary())?
    );
    let (fast, slow) = (
        format!("{:.3}", INTERVAL.as_secs_f64()),
        format!("{:.3}", SLOW_INTERVAL.as_secs_f64()),
    );
    let qfile = q(&file)?;
    // The loop ends when its record is gone (`finish` took it) or at its bound.
    let lp = format!(
        "prev=$1; i=0; while [ $i -lt {MAX_PROBES} ] && [ -e {qfile} ]; do i=$((i+1)); if [ $i -le {FAST_PROBES} ]; then sleep {fast}; else sleep {slow}; fi; {sample}; if [ \"$s\" != \"$prev\" ]; then echo \"$(date +%s%N) $s\"; prev=$s; fi; done; echo \"$(date +%s%N) end\""
    );
    // The first sample in the foreground, then the loop detached (its own
    // session, no stream tied to the channel), as `start` launches a daemon:
    // only the loop's simple command is backgrounded, never an `&&` list,
    // whose subshell would hold the channel open.
    let script = format!(
        "cd {install} && mkdir -p run && {{ {sample}; echo \"$(date +%s%N) $s\" > {qfile}; setsid sh -c {lp} sh \"$s\" >> {qfile} 2>/dev/null < /dev/null & }}",
        install = q(&layout.install)?,
        lp = q(&lp)?,
    );
    ctx.transport.run_script_ok(&script, QUICK).await?;
    Ok(GapProbe::at(file))
}

/// Closes the record with the host's clock, reads it and removes it, which
/// ends the loop at its next probe: one command, no wait for the loop.
pub async fn finish(ctx: &StepCtx<'_>, probe: &GapProbe) -> Result<Gap, Cause> {
    let file = q(probe.file())?;
    let script = format!(
        "if [ -f {file} ]; then echo \"$(date +%s%N) end\" >> {file}; cat {file}; rm -f {file}; fi"
    );
    let out = ctx.transport.run_script_ok(&script, QUICK).await?;
    parse(&out.stdout_text()).ok_or_else(|| {
        Cause::Check(format!(
            "the serving-gap probe left no readable record ({} line(s))",
            out.stdout_text().lines().count()
        ))
    })
}

/// The down time in a record of `<unix ns> up|down` lines closed by
/// `<unix ns> end` (a line the loop wrote after it is not counted); `None`
/// for a record without its end or with a line that is neither (a host
/// whose `date` has no `%N`).
fn parse(text: &str) -> Option<Gap> {
    let mut samples = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (ns, what) = line.trim().split_once(' ')?;
        let ns: u64 = ns.parse().ok()?;
        samples.push((ns, what));
        if what == "end" {
            break;
        }
    }
    let (&(first, _), &(last, end)) = (samples.first()?, samples.last()?);
    if end != "end" || last < first {
        return None;
    }
    let mut down_ns = 0u64;
    let mut outages = 0u32;
    for pair in samples.windows(2) {
        let ((at, state), (next, _)) = (pair[0], pair[1]);
        match state {
            "down" => {
                down_ns = down_ns.saturating_add(next.saturating_sub(at));
                outages = outages.saturating_add(1);
            }
            "up" => {}
            _ => return None,
        }
    }
    Some(Gap {
        down: Duration::from_nanos(down_ns),
        outages,
        watched: Duration::from_nanos(last - first),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gap_is_every_stretch_the_address_was_not_ready() {
        let s = 1_000_000_000u64;
        // Up, refused for 0.4 s at the switch, up, then 3.3 s down after a
        // successor died and the rollback restarted the old build.
        let text = format!(
            "{} up\n{} down\n{} up\n{} down\n{} up\n{} end\n",
            10 * s,
            11 * s,
            11 * s + 400_000_000,
            12 * s,
            15 * s + 300_000_000,
            20 * s
        );
        let gap = parse(&text).unwrap();
        assert_eq!(gap.down, Duration::from_millis(3700));
        assert_eq!(gap.outages, 2);
        assert_eq!(gap.watched, Duration::from_secs(10));
        // Down until the end (nothing came back): counted to the end.
        let gap = parse(&format!("{} up\n{} down\n{} end\n", s, 2 * s, 5 * s)).unwrap();
        assert_eq!((gap.down, gap.outages), (Duration::from_secs(3), 1));
        // Never down.
        assert_eq!(
            parse(&format!("{} up\n{} end\n", s, 2 * s)).unwrap().down,
            Duration::ZERO
        );
        // A change the loop wrote after the record was closed is not counted.
        let gap = parse(&format!("{} up\n{} end\n{} down\n", s, 2 * s, 3 * s)).unwrap();
        assert_eq!(
            (gap.down, gap.watched),
            (Duration::ZERO, Duration::from_secs(1))
        );
    }

    #[test]
    fn a_record_without_its_end_or_with_foreign_lines_is_unreadable() {
        assert_eq!(parse("1 up\n2 down\n"), None);
        assert_eq!(parse("%N up\n%N end\n"), None);
        assert_eq!(parse("1 maybe\n2 end\n"), None);
        assert_eq!(parse(""), None);
    }
}
