//! What a remote command gives back and how it fails: [`Output`],
//! [`TransportError`] and its [`Failure`] class, the host-side deadline
//! wrapper and the local deadline every backend awaits under. In a file of
//! its own so that the backends (`local.rs`, `ssh.rs`) import it from here,
//! not from the `transport` module that imports them.

use super::quote::QuoteError;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// Grace after the remote deadline before `timeout` escalates to SIGKILL.
pub(super) const KILL_AFTER_S: u64 = 3;
/// How long past the remote deadline the local side waits before it gives up
/// on the connection itself.
pub(super) const LOCAL_SLACK: Duration = Duration::from_secs(KILL_AFTER_S + 5);

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
    /// Over SSH, no answer at all past the command's deadline: the host's
    /// own `timeout` ends every command a few seconds after it, so silence
    /// beyond that is the link or the host gone (a black hole behind a kept
    /// master, which notices only after its keepalives), not a slow command.
    #[error("{host}: unreachable: no answer within {} although the host's own deadline ends the command sooner: the host or the link to it went silent; fix: {}", humantime::format_duration(*after), Failure::Unreachable.fix())]
    NoAnswer {
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

impl TransportError {
    /// The kind of failure (the first word of the message).
    pub fn failure(&self) -> Failure {
        match self {
            TransportError::Connect { .. }
            | TransportError::Session { .. }
            | TransportError::Io { .. }
            | TransportError::NoAnswer { .. } => Failure::Unreachable,
            TransportError::Timeout { .. } => Failure::Timeout,
            TransportError::Failed { status, stderr, .. } => Failure::of(*status, stderr),
            TransportError::LocalFile { .. } | TransportError::Quote { .. } => Failure::Failed,
        }
    }

    /// The remote command, secrets redacted (for `-vv`).
    pub fn command(&self) -> Option<String> {
        match self {
            TransportError::Timeout { command, .. }
            | TransportError::NoAnswer { command, .. }
            | TransportError::Failed { command, .. }
            | TransportError::Session { command, .. }
            | TransportError::Io { command, .. } => Some(redact(command)),
            _ => None,
        }
    }
}

/// Logs the remote command of a failure at debug level (`-vv`), secrets
/// redacted: the message itself only says what kind of failure it was.
pub(super) fn logged(e: TransportError) -> TransportError {
    if let Some(command) = e.command() {
        tracing::debug!(failure = e.failure().label(), %command, "remote command failed");
    }
    e
}

/// Who runs a command, for what silence past its deadline means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Runs {
    /// This machine: a command that outlives its own `timeout` is a machine
    /// too loaded to end it.
    Here,
    /// A host over a connection: the host's `timeout` would have answered,
    /// so silence is the host or the link gone ([`TransportError::NoAnswer`]).
    Remote,
}

/// Awaits a spawned command under the local deadline (the host-side
/// `timeout` plus [`LOCAL_SLACK`], for a host that stopped answering) and
/// turns its output into ours. Shared by every backend.
pub(super) async fn finish<F>(
    host: &str,
    shown: &str,
    timeout: Duration,
    runs: Runs,
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
        Err(_) if runs == Runs::Remote => Err(TransportError::NoAnswer {
            host: host.to_owned(),
            command: shown.to_owned(),
            after: timeout + LOCAL_SLACK,
        }),
        Err(_) => Err(TransportError::Timeout {
            host: host.to_owned(),
            command: shown.to_owned(),
            after: timeout + LOCAL_SLACK,
        }),
    }
}

/// Puts a command line under the host's `timeout`, which sends TERM at the
/// deadline and KILL a few seconds later.
pub(super) fn wrap_deadline(line: &str, timeout: Duration) -> String {
    let secs = timeout.as_secs_f64().max(0.1);
    format!("timeout -k {KILL_AFTER_S} {secs:.1} {line}")
}

/// Why the master connection could not be established.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectCause {
    Refused,
    Timeout,
    Unreachable,
    UnknownName,
    HostKeyMismatch,
    HostKeyUnknown,
    Auth,
    Other,
}

impl ConnectCause {
    /// Causes that another attempt can cure; a wrong key or credential will
    /// be just as wrong a second later.
    pub(super) fn transient(self) -> bool {
        matches!(
            self,
            ConnectCause::Refused
                | ConnectCause::Timeout
                | ConnectCause::Unreachable
                | ConnectCause::Other
        )
    }

    /// What the operator should do about it.
    pub fn fix(self) -> &'static str {
        match self {
            ConnectCause::Refused => "is sshd running and listening on that port? check `port` in the inventory",
            ConnectCause::Timeout => "is the host up and reachable (firewall, jump host)? raise the inventory key `connect_timeout` for slow links (it bounds each of 3 attempts)",
            ConnectCause::Unreachable => "check the address and the routing from this machine (or set `jump_host`)",
            ConnectCause::UnknownName => "check the host's `address` in the inventory",
            ConnectCause::HostKeyMismatch => {
                "the host key changed: verify the new key out of band, then update the host's `known_hosts` file"
            }
            ConnectCause::HostKeyUnknown => "add the host's key to the `known_hosts` file named in the inventory (checking is strict)",
            ConnectCause::Auth => "check `user` and `identity_file` in the inventory and the key in the host's authorized_keys",
            ConnectCause::Other => "run `ssh -v` with the same options to see more",
        }
    }

    pub(super) fn classify(message: &str) -> ConnectCause {
        let m = message.to_ascii_lowercase();
        if m.contains("remote host identification has changed")
            || m.contains("host key for") && m.contains("has changed")
        {
            ConnectCause::HostKeyMismatch
        } else if m.contains("host key verification failed")
            || m.contains("no ") && m.contains("host key is known")
        {
            ConnectCause::HostKeyUnknown
        } else if m.contains("permission denied") || m.contains("too many authentication failures")
        {
            ConnectCause::Auth
        } else if m.contains("connection refused") {
            ConnectCause::Refused
        } else if m.contains("timed out") {
            ConnectCause::Timeout
        } else if m.contains("no route to host") || m.contains("network is unreachable") {
            ConnectCause::Unreachable
        } else if m.contains("could not resolve") || m.contains("name or service not known") {
            ConnectCause::UnknownName
        } else {
            ConnectCause::Other
        }
    }
}

impl fmt::Display for ConnectCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConnectCause::Refused => "connection refused",
            ConnectCause::Timeout => "connection timed out (host down?)",
            ConnectCause::Unreachable => "host unreachable",
            ConnectCause::UnknownName => "unknown host name",
            ConnectCause::HostKeyMismatch => "HOST KEY MISMATCH",
            ConnectCause::HostKeyUnknown => "host key not in known_hosts",
            ConnectCause::Auth => "authentication failed",
            ConnectCause::Other => "ssh failed",
        })
    }
}
