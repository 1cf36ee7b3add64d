//! One transport type over SSH (openssh, native mux) or the local machine.
//!
//! Every command is a shell line assembled by [`quote`] and wrapped in the
//! host's own `timeout`, because a remote process cannot be killed from this
//! side: the deadline is enforced where the command runs, and a local deadline
//! a little later catches a host that stopped answering altogether.

mod local;
mod mux_cache;
pub mod quote;
mod ssh;

use crate::inventory::{Host, TransportKind};
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use local::LocalTransport;
pub use quote::QuoteError;
pub use ssh::{ConnectCause, SshTransport};

/// Grace after the remote deadline before `timeout` escalates to SIGKILL.
const KILL_AFTER_S: u64 = 3;
/// How long past the remote deadline the local side waits before it gives up
/// on the connection itself.
const LOCAL_SLACK: Duration = Duration::from_secs(KILL_AFTER_S + 5);
/// Upload chunk: large enough to keep the channel busy, small enough to bound memory.
const UPLOAD_CHUNK: usize = 256 * 1024;

/// What a finished command left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// Exit code; `None` when the process was ended by a signal.
    pub status: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Output {
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }

    /// Stdout as text (lossy), trimmed.
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).trim().to_owned()
    }

    /// Stderr as text (lossy), trimmed.
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).trim().to_owned()
    }
}

/// What kind of remote failure an error is, in one word the operator can
/// act on; the first word of every transport error's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The host could not be reached, or the connection was lost.
    Unreachable,
    /// Permission denied / operation not permitted.
    Permission,
    /// The filesystem is mounted read-only.
    ReadOnly,
    /// No space left (or quota exceeded).
    NoSpace,
    /// A binary that does not run here: another architecture, not an
    /// executable (the shell then reads it as a script and trips over it).
    ExecFormat,
    /// The command ran past its deadline and was killed.
    Timeout,
    /// A program the command needs is not on the host.
    MissingCommand,
    /// Anything else: the command failed; its own message follows.
    Failed,
}

impl Failure {
    pub fn label(self) -> &'static str {
        match self {
            Failure::Unreachable => "unreachable",
            Failure::Permission => "permission denied",
            Failure::ReadOnly => "read-only filesystem",
            Failure::NoSpace => "no space left",
            Failure::ExecFormat => "exec format error",
            Failure::Timeout => "timeout",
            Failure::MissingCommand => "command not found",
            Failure::Failed => "remote command failed",
        }
    }

    /// What to do about it, for the message.
    pub fn fix(self) -> &'static str {
        match self {
            Failure::Unreachable => "check the host and the network, then run again",
            Failure::Permission => "the SSH user needs write access to install_dir (or run as its owner)",
            Failure::ReadOnly => "remount the filesystem read-write, or set install_dir to a writable one",
            Failure::NoSpace => "free space under install_dir (old releases, logs) and run again",
            Failure::ExecFormat => "the binary is not built for this host (check `uname -m` there against the build's target)",
            Failure::Timeout => "the host is overloaded or the command hangs; raise the step's timeout if it is only slow",
            Failure::MissingCommand => "install the missing tool (coreutils) or fix PATH for the SSH user",
            Failure::Failed => "see the message; -vv logs the remote command",
        }
    }

    /// The class of a command that exited with `status` and said `stderr`.
    pub fn of(status: Option<i32>, stderr: &str) -> Failure {
        let e = stderr.to_ascii_lowercase();
        let has = |p: &str| e.contains(p);
        if has("read-only file system") {
            Failure::ReadOnly
        } else if has("no space left on device") || has("disk quota exceeded") {
            Failure::NoSpace
        } else if has("exec format error")
            || has("cannot execute binary file")
            || (has("syntax error") && has("unexpected"))
        {
            Failure::ExecFormat
        } else if has("permission denied") || has("operation not permitted") || status == Some(126)
        {
            Failure::Permission
        } else if status == Some(127) || has("command not found") || has(": not found") {
            Failure::MissingCommand
        } else {
            Failure::Failed
        }
    }
}

/// The line of `stderr` that tells the cause (the one the class was read
/// from, else the last), bounded, on one line.
fn telling_line(stderr: &str) -> String {
    const PATTERNS: [&str; 9] = [
        "read-only file system",
        "no space left",
        "quota exceeded",
        "exec format",
        "cannot execute binary",
        "syntax error",
        "permission denied",
        "not permitted",
        "not found",
    ];
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let line = lines
        .iter()
        .find(|l| {
            let l = l.to_ascii_lowercase();
            PATTERNS.iter().any(|p| l.contains(p))
        })
        .or(lines.last())
        .copied()
        .unwrap_or("(nothing on stderr)");
    let line = redact(line);
    match line.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &line[..i]),
        None => line,
    }
}

/// Hides the secrets a command line may carry (a lock's 128-bit token is
/// 32 hex digits; release ids, 64, and temporary tags, 16, stay), for the
/// `-vv` log of remote commands.
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut run = String::new();
    let flush = |run: &mut String, out: &mut String| {
        if run.len() == 32 {
            out.push_str("<secret>");
        } else {
            out.push_str(run);
        }
        run.clear();
    };
    for c in text.chars() {
        if c.is_ascii_hexdigit() {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    out
}

fn exit_text(status: &Option<i32>) -> String {
    status.map_or("killed by a signal".to_owned(), |c| format!("exit {c}"))
}

/// Errors of the transport, each naming the host and the kind of failure
/// ([`Failure`]) in one line. The remote command itself is kept for the
/// `-vv` log (secrets redacted), never put in the message.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("{host} ({address}): unreachable: cannot connect: {cause} after {attempts} attempt(s): {detail}; fix: {}", cause.fix())]
    Connect {
        host: String,
        address: String,
        cause: ConnectCause,
        attempts: u32,
        detail: String,
    },
    #[error("{host}: timeout: a remote command did not finish within {} and was killed; fix: {}", humantime::format_duration(*after), Failure::Timeout.fix())]
    Timeout {
        host: String,
        command: String,
        after: Duration,
    },
    #[error("{host}: {}: {} ({}); fix: {}", Failure::of(*status, stderr).label(), telling_line(stderr), exit_text(status), Failure::of(*status, stderr).fix())]
    Failed {
        host: String,
        command: String,
        status: Option<i32>,
        stderr: String,
    },
    #[error("{host}: unreachable: the connection was lost during a remote command: {source}")]
    Session {
        host: String,
        command: String,
        #[source]
        source: openssh::Error,
    },
    #[error("{host}: unreachable: cannot run a remote command: {source}")]
    Io {
        host: String,
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{host}: cannot read local file {}: {source}", path.display())]
    LocalFile {
        host: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{host}: {source}")]
    Quote {
        host: String,
        #[source]
        source: QuoteError,
    },
}

/// A connection to one host, reused by every step of a run.
#[derive(Debug)]
pub enum Transport {
    Ssh(SshTransport),
    Local(LocalTransport),
}

impl TransportError {
    /// The kind of failure (the first word of the message).
    pub fn failure(&self) -> Failure {
        match self {
            TransportError::Connect { .. }
            | TransportError::Session { .. }
            | TransportError::Io { .. } => Failure::Unreachable,
            TransportError::Timeout { .. } => Failure::Timeout,
            TransportError::Failed { status, stderr, .. } => Failure::of(*status, stderr),
            TransportError::LocalFile { .. } | TransportError::Quote { .. } => Failure::Failed,
        }
    }

    /// The remote command, secrets redacted (for `-vv`).
    pub fn command(&self) -> Option<String> {
        match self {
            TransportError::Timeout { command, .. }
            | TransportError::Failed { command, .. }
            | TransportError::Session { command, .. }
            | TransportError::Io { command, .. } => Some(redact(command)),
            _ => None,
        }
    }
}

impl Transport {
    /// Opens the transport the inventory asks for (SSH: one master connection,
    /// retried with backoff only while connecting).
    pub async fn connect(host: &Host) -> Result<Transport, TransportError> {
        match host.transport {
            TransportKind::Ssh => Ok(Transport::Ssh(SshTransport::connect(host).await?)),
            TransportKind::Local => Ok(Transport::Local(LocalTransport::new(&host.name))),
        }
    }

    /// Name of the host this transport reaches (for errors).
    pub fn host(&self) -> &str {
        match self {
            Transport::Ssh(t) => t.host(),
            Transport::Local(t) => t.host(),
        }
    }

    /// Runs `argv` (every word quoted) under a deadline; stdin is /dev/null.
    pub async fn run(&self, argv: &[&str], timeout: Duration) -> Result<Output, TransportError> {
        let line = quote::join(argv).map_err(|source| self.quote_error(source))?;
        self.exec(&line, &line, timeout).await
    }

    /// Runs a script with `sh -c`. The script must be assembled only from
    /// constants and [`quote::quote`]d pieces.
    pub async fn run_script(
        &self,
        script: &str,
        timeout: Duration,
    ) -> Result<Output, TransportError> {
        let line = format!(
            "sh -c {}",
            quote::quote(script).map_err(|source| self.quote_error(source))?
        );
        self.exec(&line, script, timeout).await
    }

    /// [`Transport::run_script`], turning a non-zero exit into [`TransportError::Failed`].
    pub async fn run_script_ok(
        &self,
        script: &str,
        timeout: Duration,
    ) -> Result<Output, TransportError> {
        let out = self.run_script(script, timeout).await?;
        if out.success() {
            Ok(out)
        } else {
            Err(logged(TransportError::Failed {
                host: self.host().to_owned(),
                command: script.to_owned(),
                status: out.status,
                stderr: out.stderr_text(),
            }))
        }
    }

    /// Streams a local file into `remote_path` (created or truncated) over the
    /// existing connection: stdin of `cat`, in chunks. No scp or sftp needed.
    pub async fn upload(
        &self,
        local_path: &Path,
        remote_path: &str,
        timeout: Duration,
    ) -> Result<(), TransportError> {
        let script = format!(
            "cat > {}",
            quote::quote(remote_path).map_err(|source| self.quote_error(source))?
        );
        let line = wrap_deadline(
            &format!(
                "sh -c {}",
                quote::quote(&script).map_err(|source| self.quote_error(source))?
            ),
            timeout,
        );
        let file = tokio::fs::File::open(local_path).await.map_err(|source| {
            TransportError::LocalFile {
                host: self.host().to_owned(),
                path: local_path.to_owned(),
                source,
            }
        })?;
        let out = match self {
            Transport::Ssh(t) => t.exec_with_stdin(&line, &script, file, timeout).await?,
            Transport::Local(t) => t.exec_with_stdin(&line, &script, file, timeout).await?,
        };
        self.check_deadline(&script, &out, timeout)
            .map_err(logged)?;
        if !out.success() {
            return Err(logged(TransportError::Failed {
                host: self.host().to_owned(),
                command: script,
                status: out.status,
                stderr: out.stderr_text(),
            }));
        }
        Ok(())
    }

    /// Reads at most `max_len` bytes of a remote file starting at byte
    /// `offset` (for logs and timing records that only grow).
    pub async fn read_range(
        &self,
        remote_path: &str,
        offset: u64,
        max_len: u64,
        timeout: Duration,
    ) -> Result<Vec<u8>, TransportError> {
        let script = format!(
            "tail -c +{} {} | head -c {}",
            offset + 1,
            quote::quote(remote_path).map_err(|source| self.quote_error(source))?,
            max_len
        );
        Ok(self.run_script_ok(&script, timeout).await?.stdout)
    }

    /// Closes the connection (the SSH master exits, its socket directory is removed).
    pub async fn close(self) -> Result<(), TransportError> {
        match self {
            Transport::Ssh(t) => t.close().await,
            Transport::Local(_) => Ok(()),
        }
    }

    async fn exec(
        &self,
        line: &str,
        shown: &str,
        timeout: Duration,
    ) -> Result<Output, TransportError> {
        let wrapped = wrap_deadline(line, timeout);
        tracing::trace!(host = self.host(), command = %redact(shown), "remote command");
        let out = match self {
            Transport::Ssh(t) => t.exec(&wrapped, shown, timeout).await,
            Transport::Local(t) => t.exec(&wrapped, shown, timeout).await,
        }
        .map_err(logged)?;
        self.check_deadline(shown, &out, timeout).map_err(logged)?;
        Ok(out)
    }

    /// `timeout` exits 124 when it had to stop the command.
    fn check_deadline(
        &self,
        shown: &str,
        out: &Output,
        timeout: Duration,
    ) -> Result<(), TransportError> {
        if out.status == Some(124) {
            return Err(TransportError::Timeout {
                host: self.host().to_owned(),
                command: shown.to_owned(),
                after: timeout,
            });
        }
        Ok(())
    }

    fn quote_error(&self, source: QuoteError) -> TransportError {
        TransportError::Quote {
            host: self.host().to_owned(),
            source,
        }
    }
}

/// Logs the remote command of a failure at debug level (`-vv`), secrets
/// redacted: the message itself only says what kind of failure it was.
fn logged(e: TransportError) -> TransportError {
    if let Some(command) = e.command() {
        tracing::debug!(failure = e.failure().label(), %command, "remote command failed");
    }
    e
}

/// Awaits a spawned command under the local deadline (the host-side
/// `timeout` plus [`LOCAL_SLACK`], for a host that stopped answering) and
/// turns its output into ours. Shared by every backend.
async fn finish<F>(
    host: &str,
    shown: &str,
    timeout: Duration,
    fut: F,
) -> Result<Output, TransportError>
where
    F: std::future::Future<Output = Result<std::process::Output, TransportError>>,
{
    match tokio::time::timeout(timeout + LOCAL_SLACK, fut).await {
        Ok(Ok(out)) => Ok(Output {
            status: out.status.code(),
            stdout: out.stdout,
            stderr: out.stderr,
        }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(TransportError::Timeout {
            host: host.to_owned(),
            command: shown.to_owned(),
            after: timeout + LOCAL_SLACK,
        }),
    }
}

/// Puts a command line under the host's `timeout`, which sends TERM at the
/// deadline and KILL a few seconds later.
fn wrap_deadline(line: &str, timeout: Duration) -> String {
    let secs = timeout.as_secs_f64().max(0.1);
    format!("timeout -k {KILL_AFTER_S} {secs:.1} {line}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a wrapped line with the host's shell: exit code and how long.
    fn run(line: &str) -> (Option<i32>, Duration) {
        let started = std::time::Instant::now();
        let out = fleet_testkit::output_within(
            std::process::Command::new("sh").args(["-c", line]),
            Duration::from_secs(60),
        );
        (out.status.code(), started.elapsed())
    }

    fn failed(status: i32, stderr: &str) -> String {
        TransportError::Failed {
            host: "h1".into(),
            command: format!(
                "printf '%s' {} > /data/prover/state/lock/owner",
                "ab".repeat(16)
            ),
            status: Some(status),
            stderr: stderr.into(),
        }
        .to_string()
    }

    #[test]
    fn every_remote_failure_is_classified_in_one_line_without_the_script() {
        for (status, stderr, class) in [
            (
                1,
                "mkdir: cannot create directory '/data/prover/state/lock': Read-only file system",
                "read-only filesystem",
            ),
            (
                1,
                "cat: write error: No space left on device",
                "no space left",
            ),
            (
                1,
                "mkdir: cannot create directory '/opt/prover': Permission denied",
                "permission denied",
            ),
            (
                2,
                "/data/prover/releases/x/prover: 1: Syntax error: \")\" unexpected",
                "exec format error",
            ),
            (
                126,
                "sh: 1: /x/prover: cannot execute binary file: Exec format error",
                "exec format error",
            ),
            (127, "sh: 1: sha256sum: not found", "command not found"),
            (3, "something odd\nthe last word", "remote command failed"),
        ] {
            let msg = failed(status, stderr);
            assert!(msg.starts_with(&format!("h1: {class}: ")), "{msg}");
            assert!(!msg.contains('\n'), "one line: {msg}");
            assert!(
                !msg.contains("printf") && !msg.contains(&"ab".repeat(16)),
                "no script: {msg}"
            );
            assert!(
                msg.contains(&format!("exit {status}")) && msg.contains("; fix: "),
                "{msg}"
            );
        }
        assert!(failed(3, "something odd\nthe last word").contains(": the last word (exit 3)"));
        let t = TransportError::Timeout {
            host: "h1".into(),
            command: "sleep 99".into(),
            after: Duration::from_secs(1),
        };
        assert!(t.to_string().starts_with("h1: timeout: ") && !t.to_string().contains("sleep"));
        assert_eq!(t.failure(), Failure::Timeout);
    }

    #[test]
    fn redaction_hides_lock_tokens_and_keeps_release_ids() {
        let token = "0123456789abcdef".repeat(2);
        let sha = "ab".repeat(32);
        let r = redact(&format!(
            "printf '%s' '{token}\nrun=x' > lock/owner; ls releases/{sha} .p.{}.tmp",
            "c".repeat(16)
        ));
        assert!(!r.contains(&token) && r.contains("<secret>"), "{r}");
        assert!(r.contains(&sha) && r.contains(&"c".repeat(16)), "{r}");
    }

    #[test]
    fn deadline_wraps_with_kill_escalation() {
        // The command's own exit code passes through.
        assert_eq!(
            run(&wrap_deadline("sh -c 'exit 7'", Duration::from_secs(30))).0,
            Some(7)
        );
        // Past the deadline: TERM, exit 124 (timeout's own code), at once.
        let (code, took) = run(&wrap_deadline("sleep 30", Duration::from_millis(200)));
        assert_eq!(code, Some(124));
        assert!(took < Duration::from_secs(20), "{took:?}");
        // A command that ignores TERM gets KILL KILL_AFTER_S later (exit 137).
        let (code, took) = run(&wrap_deadline(
            "sh -c 'trap \"\" TERM; sleep 30'",
            Duration::from_millis(200),
        ));
        assert_eq!(code, Some(137));
        assert!(
            took >= Duration::from_secs(KILL_AFTER_S) && took < Duration::from_secs(25),
            "{took:?}"
        );
    }
}
