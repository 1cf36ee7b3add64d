//! Local transport: the same command lines as over SSH, run by `sh -c` on
//! this machine, so a playbook behaves the same on a laptop and on a fleet.

use super::feed::feed;
use super::outcome::{Output, TransportError};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::Command;

#[derive(Debug)]
pub struct LocalTransport {
    host: String,
}

impl LocalTransport {
    pub fn new(host: &str) -> LocalTransport {
        LocalTransport {
            host: host.to_owned(),
        }
    }

    pub(super) fn host(&self) -> &str {
        &self.host
    }

    fn command(line: &str, stdin: Stdio) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(line)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Dropped on a local deadline: the shell goes with it, and the
            // host-side `timeout` has already been told to end its child.
            .kill_on_drop(true);
        cmd
    }

    pub(super) async fn exec(
        &self,
        line: &str,
        shown: &str,
        timeout: Duration,
    ) -> Result<Output, TransportError> {
        let child = Self::command(line, Stdio::null())
            .spawn()
            .map_err(|source| self.io_error(shown, source))?;
        super::outcome::finish(
            &self.host,
            shown,
            timeout,
            super::outcome::Runs::Here,
            async {
                child
                    .wait_with_output()
                    .await
                    .map_err(|source| self.io_error(shown, source))
            },
        )
        .await
    }

    pub(super) async fn exec_with_stdin(
        &self,
        line: &str,
        shown: &str,
        input: impl tokio::io::AsyncRead + Unpin,
        timeout: Duration,
    ) -> Result<Output, TransportError> {
        let fut = async {
            let mut child = Self::command(line, Stdio::piped())
                .spawn()
                .map_err(|source| self.io_error(shown, source))?;
            if let Some(stdin) = child.stdin.take() {
                feed(input, stdin)
                    .await
                    .map_err(|source| self.io_error(shown, source))?;
            }
            child
                .wait_with_output()
                .await
                .map_err(|source| self.io_error(shown, source))
        };
        super::outcome::finish(&self.host, shown, timeout, super::outcome::Runs::Here, fut).await
    }

    fn io_error(&self, shown: &str, source: std::io::Error) -> TransportError {
        TransportError::Io {
            host: self.host.clone(),
            command: shown.to_owned(),
            source,
        }
    }
}
