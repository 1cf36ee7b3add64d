//! Local transport: the same command lines as over SSH, run by `sh -c` on
//! this machine, so a playbook behaves the same on a laptop and on a fleet.

use super::{Output, TransportError, UPLOAD_CHUNK};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
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
        super::finish(&self.host, shown, timeout, async {
            child
                .wait_with_output()
                .await
                .map_err(|source| self.io_error(shown, source))
        })
        .await
    }

    pub(super) async fn exec_with_stdin(
        &self,
        line: &str,
        shown: &str,
        mut input: tokio::fs::File,
        timeout: Duration,
    ) -> Result<Output, TransportError> {
        let fut = async {
            let mut child = Self::command(line, Stdio::piped())
                .spawn()
                .map_err(|source| self.io_error(shown, source))?;
            if let Some(mut stdin) = child.stdin.take() {
                let mut buf = vec![0u8; UPLOAD_CHUNK];
                loop {
                    let n = input
                        .read(&mut buf)
                        .await
                        .map_err(|source| self.io_error(shown, source))?;
                    if n == 0 {
                        break;
                    }
                    // The reader went away (disk full, killed): its exit status says why.
                    if stdin.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
                drop(stdin);
            }
            child
                .wait_with_output()
                .await
                .map_err(|source| self.io_error(shown, source))
        };
        super::finish(&self.host, shown, timeout, fut).await
    }

    fn io_error(&self, shown: &str, source: std::io::Error) -> TransportError {
        TransportError::Io {
            host: self.host.clone(),
            command: shown.to_owned(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::transport::{Transport, TransportError};
    use std::time::{Duration, Instant};

    fn local() -> Transport {
        Transport::Local(super::LocalTransport::new("here"))
    }

    #[tokio::test]
    async fn argv_is_quoted_and_stdin_is_empty() {
        let t = local();
        let out = t
            .run(
                &["printf", "%s|", "a b", "$(echo no)", "it's"],
                Duration::from_secs(5),
            )
            .await
            .unwrap();
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            "a b|$(echo no)|it's|"
        );
        // `cat` would hang forever on an inherited terminal or pipe.
        let out = t.run(&["cat"], Duration::from_secs(5)).await.unwrap();
        assert!(out.success() && out.stdout.is_empty());
    }

    #[tokio::test]
    async fn deadline_kills_the_command() {
        let t = local();
        let start = Instant::now();
        let err = t
            .run(&["sleep", "30"], Duration::from_millis(500))
            .await
            .unwrap_err();
        assert!(matches!(err, TransportError::Timeout { .. }), "{err}");
        assert!(start.elapsed() < Duration::from_secs(5));
        // The message says what happened; the command is for -vv only.
        assert!(err.to_string().starts_with("here: timeout: "), "{err}");
        assert!(!err.to_string().contains("sleep 30"), "{err}");
        assert_eq!(err.command().as_deref(), Some("sleep 30"));
    }

    #[tokio::test]
    async fn upload_and_read_range_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src.bin");
        let data: Vec<u8> = (0..700_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&src, &data).unwrap();
        let dst = dir.path().join("dst with space.bin");
        let t = local();
        t.upload(&src, dst.to_str().unwrap(), Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(std::fs::read(&dst).unwrap(), data);
        let part = t
            .read_range(dst.to_str().unwrap(), 1000, 50, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(part, &data[1000..1050]);
    }

    #[tokio::test]
    async fn a_failed_script_says_why_in_one_line_and_keeps_the_command_for_debugging() {
        let err = local()
            .run_script_ok("echo oops >&2; exit 3", Duration::from_secs(5))
            .await
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("here: remote command failed: oops (exit 3)"),
            "{msg}"
        );
        assert!(!msg.contains("echo"), "{msg}");
        assert_eq!(err.command().as_deref(), Some("echo oops >&2; exit 3"));
    }
}
