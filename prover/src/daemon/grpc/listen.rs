//! Binding the gRPC socket and port. A unix socket is created with the
//! configured mode and group (Curio's user is in the group; nobody else
//! connects), and removed at exit only while it is still this daemon's:
//! a successor that took the path over keeps it.

use crate::daemon::config::Grpc;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, UnixListener};

/// How often a taken port is tried again during a handover.
const RETRY: Duration = Duration::from_millis(20);

#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("grpc.listen {addr}: {source}")]
    Tcp {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("grpc.socket {}: {reason}", path.display())]
    Socket { path: PathBuf, reason: String },
    #[error("grpc.socket_group {group:?}: {reason}")]
    Group { group: String, reason: String },
}

/// What [`bind`] bound.
#[derive(Debug, Default)]
pub struct Listeners {
    pub tcp: Option<TcpListener>,
    pub unix: Option<BoundSocket>,
}

impl Listeners {
    /// Where the service listens, for the log.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(l) = self.tcp.as_ref().and_then(|l| l.local_addr().ok()) {
            parts.push(l.to_string());
        }
        if let Some(u) = &self.unix {
            parts.push(format!("unix:{}", u.socket.path.display()));
        }
        parts.join(", ")
    }
}

/// A bound unix socket and the identity of its file.
#[derive(Debug)]
pub struct BoundSocket {
    listener: UnixListener,
    socket: SocketFile,
}

/// The socket's path and inode, to tell it from a successor's.
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    ino: u64,
    dev: u64,
}

impl BoundSocket {
    pub fn into_parts(self) -> (UnixListener, SocketFile) {
        (self.listener, self.socket)
    }
}

impl SocketFile {
    /// Removes the socket file unless another daemon has replaced it.
    pub fn remove_if_ours(&self) {
        match std::fs::symlink_metadata(&self.path) {
            Ok(m) if m.ino() == self.ino && m.dev() == self.dev => {
                if let Err(e) = std::fs::remove_file(&self.path) {
                    tracing::warn!(path = %self.path.display(), "removing the gRPC socket: {e}");
                }
            }
            _ => {}
        }
    }
}

/// Binds what `config` asks for. `takeover`: this daemon replaces one that
/// is letting go of them now, so a taken port is tried again for up to that
/// long, and a socket path in use is taken over (new connections reach this
/// daemon; the old one finishes on the connections it has).
pub async fn bind(config: &Grpc, takeover: Option<Duration>) -> Result<Listeners, ListenError> {
    let mut out = Listeners::default();
    if let Some(addr) = config.listen {
        let begin = Instant::now();
        out.tcp = Some(loop {
            match TcpListener::bind(addr).await {
                Ok(l) => break l,
                Err(e)
                    if e.kind() == std::io::ErrorKind::AddrInUse
                        && takeover.is_some_and(|w| begin.elapsed() < w) =>
                {
                    tokio::time::sleep(RETRY).await;
                }
                Err(source) => return Err(ListenError::Tcp { addr, source }),
            }
        });
    }
    if let Some(path) = &config.socket {
        out.unix = Some(bind_socket(path, config, takeover.is_some())?);
    }
    Ok(out)
}

fn bind_socket(path: &Path, config: &Grpc, takeover: bool) -> Result<BoundSocket, ListenError> {
    let bad = |reason: String| ListenError::Socket {
        path: path.to_path_buf(),
        reason,
    };
    let gid = match &config.socket_group {
        Some(g) => Some(group_id(g)?),
        None => None,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.is_dir() {
            return Err(bad(format!("its folder {} does not exist", dir.display())));
        }
    }
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(bad(e.to_string())),
        Ok(m) if !m.file_type().is_socket() => {
            return Err(bad("exists and is not a socket; it is never removed".into()))
        }
        Ok(_) => {
            let served = std::os::unix::net::UnixStream::connect(path).is_ok();
            if served && !takeover {
                return Err(bad(
                    "another process serves it (a running daemon? a handover takes it over)".into(),
                ));
            }
            // A stale socket of a daemon that died, or a predecessor's.
            std::fs::remove_file(path).map_err(|e| bad(format!("removing the old socket: {e}")))?;
        }
    }
    let listener = UnixListener::bind(path).map_err(|e| bad(e.to_string()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(config.socket_mode.0))
        .map_err(|e| bad(format!("setting its mode: {e}")))?;
    if let Some(gid) = gid {
        std::os::unix::fs::chown(path, None, Some(gid))
            .map_err(|e| bad(format!("setting its group: {e}")))?;
    }
    let m = std::fs::symlink_metadata(path).map_err(|e| bad(e.to_string()))?;
    Ok(BoundSocket {
        listener,
        socket: SocketFile {
            path: path.to_path_buf(),
            ino: m.ino(),
            dev: m.dev(),
        },
    })
}

/// The id of group `name` (or a number), from the system's group database.
pub fn group_id(name: &str) -> Result<u32, ListenError> {
    let bad = |reason: &str| ListenError::Group {
        group: name.chars().take(64).collect(),
        reason: reason.into(),
    };
    if let Ok(n) = name.parse::<u32>() {
        return Ok(n);
    }
    let c = std::ffi::CString::new(name).map_err(|_| bad("contains a NUL byte"))?;
    let mut buf = vec![0u8; 16 << 10];
    // SAFETY: getgrnam_r writes only into `grp` and `buf` (its length given)
    // and sets `found` to null or to `&grp`.
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::group = std::ptr::null_mut();
    let rc = unsafe {
        libc::getgrnam_r(
            c.as_ptr(),
            &mut grp,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 {
        return Err(bad(&std::io::Error::from_raw_os_error(rc).to_string()));
    }
    if found.is_null() {
        return Err(bad("no such group"));
    }
    Ok(grp.gr_gid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::config::{ByteSize, FileMode};

    fn grpc(socket: &Path) -> Grpc {
        Grpc {
            listen: None,
            socket: Some(socket.to_path_buf()),
            socket_mode: FileMode(0o660),
            socket_group: Some("0".into()),
            max_message_bytes: ByteSize(1 << 20),
        }
    }

    #[tokio::test]
    async fn the_socket_gets_its_mode_a_live_one_is_refused_a_stale_one_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("p.sock");
        let first = bind(&grpc(&path), None).await.expect("bind");
        let m = std::fs::metadata(&path).expect("socket");
        assert_eq!(m.permissions().mode() & 0o777, 0o660);
        // Served: a plain start is refused, a handover takes the path.
        let e = bind(&grpc(&path), None).await.unwrap_err().to_string();
        assert!(e.contains("another process serves it"), "{e}");
        let second = bind(&grpc(&path), Some(Duration::from_secs(1)))
            .await
            .expect("takeover");
        // The first one's exit leaves the successor's socket in place.
        let (_, old) = first.unix.expect("unix").into_parts();
        old.remove_if_ours();
        assert!(path.exists());
        let (l, new) = second.unix.expect("unix").into_parts();
        drop(l);
        // Stale (nobody listens): replaced on a plain start.
        let third = bind(&grpc(&path), None)
            .await
            .expect("stale socket replaced");
        new.remove_if_ours();
        assert!(path.exists(), "not the successor's file any more");
        third.unix.expect("unix").into_parts().1.remove_if_ours();
        assert!(!path.exists());
        // A regular file is never removed.
        std::fs::write(&path, b"x").expect("file");
        let e = bind(&grpc(&path), None).await.unwrap_err().to_string();
        assert!(e.contains("not a socket"), "{e}");
        assert!(group_id("no-such-group-here").is_err());
    }
}
