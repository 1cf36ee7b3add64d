//! One transport type over SSH (openssh, native mux) or the local machine.
//!
//! Every command is a shell line assembled by [`quote`] and wrapped in the
//! host's own `timeout`, because a remote process cannot be killed from this
//! side: the deadline is enforced where the command runs, and a local deadline
//! a little later catches a host that stopped answering altogether.

mod feed;
mod local;
#[cfg(test)]
mod local_tests;
mod mux_cache;
mod outcome;
pub mod quote;
mod ssh;

use crate::inventory::{Host, TransportKind};
use std::path::Path;
use std::time::Duration;

pub use local::LocalTransport;
use outcome::{logged, wrap_deadline};
pub use outcome::{redact, ConnectCause, Failure, Output, TransportError};
pub use quote::QuoteError;
pub use ssh::SshTransport;

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
        self.upload_through(local_path, &["cat"], remote_path, timeout)
            .await
    }

    /// [`Transport::upload`] with the bytes passed through `decoder` (a
    /// command reading stdin and writing stdout, like `gzip -dc`) on the
    /// host before they reach `remote_path`; its failure (a corrupt stream)
    /// fails the upload.
    pub async fn upload_through(
        &self,
        local_path: &Path,
        decoder: &[&str],
        remote_path: &str,
        timeout: Duration,
    ) -> Result<(), TransportError> {
        let script = format!(
            "{} > {}",
            quote::join(decoder).map_err(|source| self.quote_error(source))?,
            quote::quote(remote_path).map_err(|source| self.quote_error(source))?
        );
        let file = tokio::fs::File::open(local_path).await.map_err(|source| {
            TransportError::LocalFile {
                host: self.host().to_owned(),
                path: local_path.to_owned(),
                source,
            }
        })?;
        let out = self.script_with_stdin(&script, file, timeout).await?;
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

    /// [`Transport::run_script`] with `input` on the script's stdin (a
    /// document a remote command reads from `-`): nothing is written to the
    /// host's disk for it.
    pub async fn run_script_with_input(
        &self,
        script: &str,
        input: &[u8],
        timeout: Duration,
    ) -> Result<Output, TransportError> {
        self.script_with_stdin(script, input, timeout).await
    }

    async fn script_with_stdin(
        &self,
        script: &str,
        input: impl tokio::io::AsyncRead + Unpin,
        timeout: Duration,
    ) -> Result<Output, TransportError> {
        let line = wrap_deadline(
            &format!(
                "sh -c {}",
                quote::quote(script).map_err(|source| self.quote_error(source))?
            ),
            timeout,
        );
        tracing::trace!(host = self.host(), command = %redact(script), "remote command with input");
        let out = match self {
            Transport::Ssh(t) => t.exec_with_stdin(&line, script, input, timeout).await,
            Transport::Local(t) => t.exec_with_stdin(&line, script, input, timeout).await,
        }
        .map_err(logged)?;
        self.check_deadline(script, &out, timeout).map_err(logged)?;
        Ok(out)
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

#[cfg(test)]
mod tests {
    use super::outcome::KILL_AFTER_S;
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
