//! The daemon's log as the steps read it: the part written since a start,
//! failure lines in it, its `ready` line, and the last words of a daemon
//! that died. One reading for `handover`, `drain` and `verify`.

use super::ctx::StepCtx;
use super::outcome::Cause;
use super::remote::{self, QUICK};

/// Read at most this much new log per poll.
const LOG_WINDOW: u64 = 4 << 20;

/// What the new daemon logs once its start-up is done and it waits.
pub(super) const WAITING_LINE: &str = "started, waiting to take over";
/// What it logs, with the pid it took over from, once it holds both.
pub(super) const TOOK_OVER_LINE: &str = "took over";

/// The log from `offset` on; nothing yet when the file does not exist.
pub(super) async fn new_log(ctx: &StepCtx<'_>, offset: u64) -> Result<String, Cause> {
    let log = ctx.layout().log();
    let size = remote::file_size(ctx, &log).await?;
    if size == 0 {
        return Ok(String::new());
    }
    // A log shorter than where the start left it was truncated or replaced
    // (a build that opens it with O_TRUNC, a logrotate copytruncate): all of
    // it is new. Reading from the old offset would show nothing.
    let offset = if size < offset { 0 } else { offset };
    let bytes = ctx
        .transport
        .read_range(&log, offset, LOG_WINDOW, QUICK)
        .await?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The log from `offset` on and whether `pid` was alive just after it was
/// read (not gone, not a zombie), in one command on the host: what every
/// poll of a starting daemon asks, at one round trip instead of three
/// (size, range, /proc). Falls back to [`new_log`] and a /proc read when the
/// answer does not parse (a log truncated while it was read).
pub(super) async fn log_and_alive(
    ctx: &StepCtx<'_>,
    pid: u32,
    offset: u64,
) -> Result<(String, bool), Cause> {
    let log = remote::q(&ctx.layout().log())?;
    let script = format!(
        "l={log}; off={offset}; s=0; if [ -f \"$l\" ]; then s=$(wc -c < \"$l\"); fi; if [ \"$s\" -lt \"$off\" ]; then off=0; fi; n=$((s-off)); if [ \"$n\" -gt {LOG_WINDOW} ]; then n={LOG_WINDOW}; fi; echo \"$s $n\"; if [ \"$n\" -gt 0 ]; then tail -c +$((off+1)) \"$l\" | head -c \"$n\"; fi; st=$(sed -n 's/^State:[[:space:]]*//p' /proc/{pid}/status 2>/dev/null); echo; echo \"state:${{st:-gone}}\""
    );
    let out = ctx.transport.run_script_ok(&script, QUICK).await?;
    match parse_log_and_state(&out.stdout) {
        Some(seen) => Ok(seen),
        None => {
            let log = new_log(ctx, offset).await?;
            let alive = remote::proc_info(ctx, pid)
                .await?
                .is_some_and(|i| !i.zombie());
            Ok((log, alive))
        }
    }
}

/// `<size> <n>\n`, `n` bytes of log, `\nstate:<State of /proc/pid/status,
/// or gone>\n`.
fn parse_log_and_state(out: &[u8]) -> Option<(String, bool)> {
    let nl = out.iter().position(|&b| b == b'\n')?;
    let header = std::str::from_utf8(&out[..nl]).ok()?;
    let n: usize = header.split_whitespace().nth(1)?.parse().ok()?;
    let rest = out.get(nl + 1..)?;
    let log = rest.get(..n)?;
    let state = std::str::from_utf8(rest.get(n..)?).ok()?.trim();
    let state = state.strip_prefix("state:")?;
    let alive = !(state == "gone" || state.starts_with('Z') || state.starts_with('X'));
    Some((String::from_utf8_lossy(log).into_owned(), alive))
}

/// The last lines the daemon wrote since the start, read now (a copy read
/// earlier can miss its last words), or a line that says there are none,
/// never an empty string under "last log lines:".
pub(super) async fn last_lines(ctx: &StepCtx<'_>, offset: u64) -> String {
    match new_log(ctx, offset).await {
        Ok(log) if log.trim().is_empty() => format!(
            "(nothing written to {} since the start, at byte {offset})",
            ctx.layout().log()
        ),
        Ok(log) => tail(&log, 10),
        Err(e) => format!("(log unreadable: {e})"),
    }
}

/// Shows each offending line with the one after it: a Rust panic puts
/// its message on the line below `panicked at`.
pub(super) fn check_log(log: &str, patterns: &[String]) -> Result<(), Cause> {
    let lines: Vec<&str> = log.lines().collect();
    let mut bad: Vec<&str> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if bad.len() >= 20 {
            break;
        }
        if patterns.iter().any(|p| line.contains(p.as_str())) {
            if bad.last() != Some(line) {
                bad.push(line);
            }
            if let Some(next) = lines.get(i + 1) {
                bad.push(next);
            }
        }
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(Cause::Check(format!(
            "the new log has failure lines:\n{}",
            bad.join("\n")
        )))
    }
}

pub(super) async fn check_alive(ctx: &StepCtx<'_>, pid: u32, log_offset: u64) -> Result<(), Cause> {
    if remote::proc_info(ctx, pid)
        .await?
        .is_some_and(|i| !i.zombie())
    {
        return Ok(());
    }
    // Read the log again now that the process is gone: a copy read before
    // it died can miss its last words (the reason it exited).
    let log = last_lines(ctx, log_offset).await;
    Err(Cause::Check(format!(
        "daemon pid {pid} has exited; last log lines:\n{log}"
    )))
}

/// `ready` as a word of its own (not `ready_reason`, not `already`).
pub(super) fn is_ready_line(line: &str) -> bool {
    line.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))
        .any(|w| w == "ready")
        && !line.contains("not ready")
}

fn tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_is_matched_as_a_word() {
        assert!(is_ready_line(
            "2026-11-29T19:00:00Z  INFO prover::daemon: ready listen=127.0.0.1:7070"
        ));
        assert!(!is_ready_line("INFO already configured"));
        assert!(!is_ready_line("INFO ready_reason=warming"));
        assert!(!is_ready_line("WARN not ready yet"));
    }

    #[test]
    fn a_log_and_the_state_after_it_parse_from_one_answer() {
        let out = b"120 11\nINFO ready\n\nstate:S (sleeping)\n";
        assert_eq!(
            parse_log_and_state(out),
            Some(("INFO ready\n".to_string(), true))
        );
        assert_eq!(
            parse_log_and_state(b"0 0\n\nstate:gone\n"),
            Some((String::new(), false))
        );
        assert_eq!(
            parse_log_and_state(b"9 3\nabc\nstate:Z (zombie)\n"),
            Some(("abc".to_string(), false))
        );
        // Fewer bytes than announced (truncated meanwhile): not parsed.
        assert_eq!(parse_log_and_state(b"9 30\nabc\nstate:S\n"), None);
        assert_eq!(parse_log_and_state(b"garbage"), None);
    }

    #[test]
    fn failure_lines_are_shown() {
        let log = "INFO starting\nthread 'main' panicked at src/x.rs:1\nboom\nINFO x\n2026 ERROR pool: oom\n";
        let err = check_log(log, &["panicked".into(), " ERROR ".into()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("panicked at src/x.rs:1\nboom")
                && err.contains("ERROR pool: oom")
                && !err.contains("starting"),
            "{err}"
        );
        assert!(check_log("INFO fine\n", &["panicked".into()]).is_ok());
    }
}
