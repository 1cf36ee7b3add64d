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

/// Errors of the transport, each naming the host and, where one ran, the command.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("{host} ({address}): cannot connect: {cause} after {attempts} attempt(s): {detail}; fix: {}", cause.fix())]
    Connect {
        host: String,
        address: String,
        cause: ConnectCause,
        attempts: u32,
        detail: String,
    },
    #[error("{host}: `{command}` did not finish within {}; it was killed", humantime::format_duration(*after))]
    Timeout {
        host: String,
        command: String,
        after: Duration,
    },
    #[error("{host}: `{command}` exited with {}: {stderr}", status.map_or("a signal".to_owned(), |c| format!("status {c}")))]
    Failed {
        host: String,
        command: String,
        status: Option<i32>,
        stderr: String,
    },
    #[error("{host}: connection lost while running `{command}`: {source}")]
    Session {
        host: String,
        command: String,
        #[source]
        source: openssh::Error,
    },
    #[error("{host}: cannot run `{command}`: {source}")]
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
            Err(TransportError::Failed {
                host: self.host().to_owned(),
                command: script.to_owned(),
                status: out.status,
                stderr: out.stderr_text(),
            })
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
        self.check_deadline(&script, &out, timeout)?;
        if !out.success() {
            return Err(TransportError::Failed {
                host: self.host().to_owned(),
                command: script,
                status: out.status,
                stderr: out.stderr_text(),
            });
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
        let out = match self {
            Transport::Ssh(t) => t.exec(&wrapped, shown, timeout).await?,
            Transport::Local(t) => t.exec(&wrapped, shown, timeout).await?,
        };
        self.check_deadline(shown, &out, timeout)?;
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
