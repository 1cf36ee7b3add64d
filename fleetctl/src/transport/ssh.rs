//! SSH transport: one OpenSSH master connection per host (native mux), every
//! command a new channel over it, at most [`MAX_CHANNELS`] at once. Masters
//! outlive the invocation for `ssh_persist` idle seconds and are reused by
//! the next one (see [`super::mux_cache`]).

use super::feed::feed;
use super::mux_cache::MuxSlot;
use super::outcome::{ConnectCause, Output, TransportError};
use crate::inventory::Host;
use openssh::{ControlPersist, KnownHosts, Session, SessionBuilder, Stdio};
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

/// sshd's default `MaxSessions` is 10 per connection; stay below it so a
/// burst of commands queues here instead of being refused by the server.
pub const MAX_CHANNELS: usize = 8;
/// On a master another invocation may also be using (a `status` during a
/// rollout), each takes at most this many, so two together stay under 10.
pub const MAX_CHANNELS_SHARED: usize = 4;
/// Connection attempts before giving up (only the connection is retried,
/// never a command that ran).
const CONNECT_ATTEMPTS: u32 = 3;
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const KEEPALIVE: Duration = Duration::from_secs(15);
/// Key exchange offered first. OpenSSH 9's default hybrid post-quantum KEX
/// (sntrup761/mlkem768 + x25519) costs about five times the CPU of plain
/// curve25519 per connection on both ends (measured: 86 ms against 16 ms of
/// client CPU), which dominates `fleetctl status` on hundreds of hosts. The
/// hybrids stay in the list (`^` puts ours at the head of ssh's own default
/// set), so a server that only offers them still connects; a host or group
/// can set `ssh_kex_algorithms` (ssh_config syntax) to require them.
const DEFAULT_KEX: &str = "^curve25519-sha256,curve25519-sha256@libssh.org";
/// With reuse off, a master left behind by a fleetctl that was killed
/// outright exits after this long without a command (steps poll far more
/// often than that).
const MASTER_IDLE_EXIT_S: u64 = 300;

/// Where a new master's control socket goes.
enum SocketHome {
    /// The host's reuse slot: the master stays for the next invocation.
    Shared(MuxSlot),
    /// A directory of this invocation's own, removed with it.
    Private(tempfile::TempDir),
}

/// The master connection of one host.
pub struct SshTransport {
    host: String,
    // Field order matters: the session (and its socket inside `private_dir`)
    // must go before the directory is removed.
    session: Session,
    channels: Arc<Semaphore>,
    /// The per-invocation socket directory when reuse is off; `None` when
    /// the master lives in the host's reuse slot and is left running.
    private_dir: Option<tempfile::TempDir>,
}

impl fmt::Debug for SshTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SshTransport")
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

impl SshTransport {
    pub(super) async fn connect(host: &Host) -> Result<SshTransport, TransportError> {
        let kex = host
            .vars
            .get("ssh_kex_algorithms")
            .and_then(|v| v.as_str())
            .unwrap_or(DEFAULT_KEX);
        let slot = MuxSlot::for_host(host, kex);
        if let Some(slot) = &slot {
            let closed = slot.close_stale().await;
            if closed > 0 {
                tracing::warn!(
                    host = %host.name,
                    "the host's key in known_hosts changed: closed {closed} SSH master(s) \
                     authenticated under the earlier key; connecting anew"
                );
            }
            if let Some(session) = slot.resume().await {
                tracing::debug!(host = %host.name, "reusing SSH master");
                return Ok(SshTransport {
                    host: host.name.clone(),
                    session,
                    channels: Arc::new(Semaphore::new(MAX_CHANNELS_SHARED)),
                    private_dir: None,
                });
            }
        }
        let home = match slot {
            Some(slot) => SocketHome::Shared(slot),
            // Reuse off: a private directory (0700) for this invocation
            // only, so nobody else on this machine can use our master.
            None => SocketHome::Private(
                tempfile::Builder::new()
                    .prefix("fleetctl-ssh-")
                    .tempdir()
                    .map_err(|source| TransportError::Io {
                        host: host.name.clone(),
                        command: "create control directory".to_owned(),
                        source,
                    })?,
            ),
        };
        let (socket_dir, idle_exit, channels) = match &home {
            SocketHome::Shared(slot) => (slot.dir(), host.ssh_persist_s, MAX_CHANNELS_SHARED),
            SocketHome::Private(dir) => (dir.path(), MASTER_IDLE_EXIT_S, MAX_CHANNELS),
        };
        let mut builder = SessionBuilder::default();
        builder
            .user(host.user.clone())
            .port(host.port)
            .known_hosts_check(KnownHosts::Strict)
            .connect_timeout(Duration::from_secs(host.connect_timeout_s.max(1)))
            .server_alive_interval(KEEPALIVE)
            .control_persist(match NonZeroUsize::new(idle_exit as usize) {
                Some(idle) => ControlPersist::IdleFor(idle),
                None => ControlPersist::ClosedAfterInitialConnection,
            })
            .control_directory(socket_dir);
        let config = ssh_config(socket_dir, kex).map_err(|source| TransportError::Io {
            host: host.name.clone(),
            command: "write ssh config".to_owned(),
            source,
        })?;
        builder.config_file(&config);
        if let Some(key) = &host.identity_file {
            builder.keyfile(key);
        }
        if let Some(known) = &host.known_hosts {
            builder.user_known_hosts_file(known);
        }
        if let Some(jump) = &host.jump_host {
            builder.jump_hosts([jump.as_str()]);
        }
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 0;
        loop {
            attempt += 1;
            // The connect timeout covers TCP only; bound the whole handshake too.
            let limit = Duration::from_secs(host.connect_timeout_s.max(1) * 2 + 5);
            let result = tokio::time::timeout(limit, builder.connect_mux(&host.address)).await;
            let (cause, detail) = match result {
                Ok(Ok(session)) => {
                    return Ok(SshTransport {
                        host: host.name.clone(),
                        session,
                        channels: Arc::new(Semaphore::new(channels)),
                        private_dir: match home {
                            SocketHome::Private(dir) => Some(dir),
                            SocketHome::Shared(_) => None,
                        },
                    })
                }
                Ok(Err(e)) => {
                    let detail = error_chain(&e);
                    (ConnectCause::classify(&detail), detail)
                }
                Err(_) => (
                    ConnectCause::Timeout,
                    format!("no answer within {}", humantime::format_duration(limit)),
                ),
            };
            if !cause.transient() || attempt >= CONNECT_ATTEMPTS {
                return Err(TransportError::Connect {
                    host: host.name.clone(),
                    address: format!("{}@{}:{}", host.user, host.address, host.port),
                    cause,
                    attempts: attempt,
                    detail,
                });
            }
            tracing::debug!(host = %host.name, %cause, attempt, "ssh connect failed, retrying");
            tokio::time::sleep(backoff).await;
            backoff *= 2;
        }
    }

    pub(super) fn host(&self) -> &str {
        &self.host
    }

    pub(super) async fn exec(
        &self,
        line: &str,
        shown: &str,
        timeout: Duration,
    ) -> Result<Output, TransportError> {
        let _permit = self.permit().await;
        let fut = async {
            let child = self
                .session
                .raw_command(line)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .await?;
            child.wait_with_output().await
        };
        super::outcome::finish(
            &self.host,
            shown,
            timeout,
            super::outcome::Runs::Remote,
            async {
                fut.await
                    .map_err(|source| self.session_error(shown, source))
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
        let _permit = self.permit().await;
        let fut = async {
            let mut child = self
                .session
                .raw_command(line)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .await
                .map_err(|e| self.session_error(shown, e))?;
            if let Some(stdin) = child.stdin().take() {
                feed(input, stdin)
                    .await
                    .map_err(|source| self.io_error(shown, source))?;
            }
            child
                .wait_with_output()
                .await
                .map_err(|e| self.session_error(shown, e))
        };
        super::outcome::finish(
            &self.host,
            shown,
            timeout,
            super::outcome::Runs::Remote,
            fut,
        )
        .await
    }

    /// Ends this invocation's use of the master: a reusable one is left
    /// running (it exits after `ssh_persist` idle seconds), any other exits.
    pub(super) async fn close(self) -> Result<(), TransportError> {
        if self.private_dir.is_none() {
            let _ = self.session.detach();
            return Ok(());
        }
        let host = self.host.clone();
        self.session
            .close()
            .await
            .map_err(|source| TransportError::Session {
                host,
                command: "close".to_owned(),
                source,
            })
    }

    async fn permit(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        // The semaphore is never closed, so this only fails if it were.
        self.channels.clone().acquire_owned().await.ok()
    }

    fn session_error(&self, shown: &str, source: openssh::Error) -> TransportError {
        // openssh turns a remote exit status of 127 into an error of its
        // own (dropping the output): a command the host's shell did not
        // find, not a lost connection.
        if let openssh::Error::Remote(e) = &source {
            return TransportError::Failed {
                host: self.host.clone(),
                command: shown.to_owned(),
                status: Some(127),
                stderr: format!("exit 127 (the shell found no such command): {e}"),
            };
        }
        TransportError::Session {
            host: self.host.clone(),
            command: shown.to_owned(),
            source,
        }
    }

    fn io_error(&self, shown: &str, source: std::io::Error) -> TransportError {
        TransportError::Io {
            host: self.host.clone(),
            command: shown.to_owned(),
            source,
        }
    }
}

/// The ssh config for one connection: the user's own config first (so its
/// settings win, as ssh takes the first value it reads), then our key
/// exchange preference. Written into the connection's private directory.
fn ssh_config(dir: &std::path::Path, kex: &str) -> std::io::Result<std::path::PathBuf> {
    let path = dir.join("ssh_config");
    let kex: String = kex
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "-@.,^+".contains(*c))
        .collect();
    // Written aside and renamed: a shared directory may have another
    // invocation's ssh reading the file right now.
    let tmp = dir.join(format!("ssh_config.{}.tmp", std::process::id()));
    std::fs::write(
        &tmp,
        format!("Include ~/.ssh/config\nHost *\n    KexAlgorithms {kex}\n"),
    )?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// openssh puts ssh's own message in the error's source; show all of it.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        parts.push(s.to_string());
        cur = s.source();
    }
    parts.join(": ").replace(['\r', '\n'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_messages_are_classified() {
        let cases = [
            ("ssh: connect to host 10.0.0.9 port 22: Connection refused", ConnectCause::Refused),
            ("ssh: connect to host 10.0.0.9 port 22: Connection timed out", ConnectCause::Timeout),
            ("ssh: connect to host 10.0.0.9 port 22: No route to host", ConnectCause::Unreachable),
            ("@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @ ... Host key verification failed.", ConnectCause::HostKeyMismatch),
            ("No ED25519 host key is known for 10.0.0.9 and you have requested strict checking. Host key verification failed.", ConnectCause::HostKeyUnknown),
            ("ops@10.0.0.9: Permission denied (publickey).", ConnectCause::Auth),
            ("ssh: Could not resolve hostname nope: Name or service not known", ConnectCause::UnknownName),
        ];
        for (msg, want) in cases {
            assert_eq!(ConnectCause::classify(msg), want, "{msg}");
        }
        assert!(!ConnectCause::HostKeyMismatch.transient());
        assert!(ConnectCause::Timeout.transient());
    }

    /// A hint that names an inventory key names one the inventory accepts
    /// (it once said `connect_timeout_s`, refused on a host and silently
    /// ignored in `vars:`); the timeout hint names `connect_timeout`.
    #[test]
    fn fix_hints_name_only_keys_the_inventory_accepts() {
        use crate::inventory::raw::KNOWN_KEYS;
        let all = [
            ConnectCause::Refused,
            ConnectCause::Timeout,
            ConnectCause::Unreachable,
            ConnectCause::UnknownName,
            ConnectCause::HostKeyMismatch,
            ConnectCause::HostKeyUnknown,
            ConnectCause::Auth,
            ConnectCause::Other,
        ];
        for cause in all {
            let fix = cause.fix();
            // Backticked words without a space are keys; `ssh -v` is a command.
            for key in fix
                .split('`')
                .skip(1)
                .step_by(2)
                .filter(|k| !k.contains(' '))
            {
                assert!(KNOWN_KEYS.contains(&key), "{cause:?} names `{key}`: {fix}");
            }
        }
        assert!(ConnectCause::Timeout.fix().contains("`connect_timeout`"));
    }
}
