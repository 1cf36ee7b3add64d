//! SSH master connections kept between fleetctl invocations, so that
//! `fleetctl status` polled every few seconds, or a `health` right after a
//! rollout, pays for key exchange and authentication once per host and not
//! once per command line. This is OpenSSH's own ControlPersist (and what
//! Ansible does by default); fleetctl only has to find the socket again.
//!
//! Layout: `<base>/<key>/.ssh-connectionXXXXXX/master`, where `<base>` is a
//! private (0700, ours) directory and `<key>` hashes everything that decides
//! *which* connection this is (user, address, port, identity, known_hosts,
//! jump host, key exchange), so an inventory change never reuses a master
//! made under other settings. The master exits by itself after the host's
//! `ssh_persist` idle time, or when the host drops the connection.

use crate::inventory::Host;
use openssh::Session;
use sha2::{Digest, Sha256};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// An alive check is a round trip over a local socket to our own master;
/// anything slower means the master is wedged and a fresh one is cheaper.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);
/// A directory without a socket may be a master that another fleetctl is
/// still authenticating; only leftovers older than this are removed.
const STALE_AFTER: Duration = Duration::from_secs(600);
/// Prefix the openssh crate gives each master's directory.
const MASTER_DIR_PREFIX: &str = ".ssh-connection";

/// Where one host's reusable masters live.
#[derive(Debug, Clone)]
pub struct MuxSlot {
    dir: PathBuf,
}

impl MuxSlot {
    /// The slot for `host`, or `None` when reuse is off for it
    /// (`ssh_persist: 0`) or no private directory can be had (then the
    /// connection is made and closed per invocation, as before).
    pub fn for_host(host: &Host, kex: &str) -> Option<MuxSlot> {
        if host.ssh_persist_s == 0 {
            return None;
        }
        let base = match base_dir() {
            Ok(base) => base,
            Err(why) => {
                tracing::warn!(host = %host.name, "not reusing SSH connections: {why}");
                return None;
            }
        };
        let dir = base.join(key(host, kex));
        match private_dir(&dir) {
            Ok(()) => Some(MuxSlot { dir }),
            Err(why) => {
                tracing::warn!(host = %host.name, "not reusing SSH connections: {why}");
                None
            }
        }
    }

    /// The directory a new master's socket goes in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A master an earlier invocation left, if one answers an alive check.
    /// Masters that do not answer are dead (host gone, killed): their
    /// directories are removed so the next look is quick.
    pub async fn resume(&self) -> Option<Session> {
        let mut candidates = master_dirs(&self.dir);
        // Newest first: the one most likely to be alive.
        candidates.sort_by_key(|(_, modified)| std::cmp::Reverse(*modified));
        for (dir, modified) in candidates {
            let ctl = dir.join("master");
            if !is_socket(&ctl) {
                if modified.elapsed().is_ok_and(|age| age > STALE_AFTER) {
                    let _ = std::fs::remove_dir_all(&dir);
                }
                continue;
            }
            let session = Session::resume_mux(ctl.into_boxed_path(), None);
            match tokio::time::timeout(CHECK_TIMEOUT, session.check()).await {
                Ok(Ok(())) => return Some(session),
                _ => {
                    // Dropping a resumed session leaves the master alone; the
                    // socket is dead or wedged either way.
                    drop(session);
                    let _ = std::fs::remove_dir_all(&dir);
                }
            }
        }
        None
    }
}

/// `$XDG_RUNTIME_DIR/fleetctl-ssh` when the session has one (per user,
/// memory-backed, cleared at logout), else `<tmp>/fleetctl-ssh-<uid>`.
fn base_dir() -> Result<PathBuf, String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let base = match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(run) if Path::new(&run).is_absolute() => Path::new(&run).join("fleetctl-ssh"),
        _ => std::env::temp_dir().join(format!("fleetctl-ssh-{uid}")),
    };
    private_dir(&base)?;
    Ok(base)
}

/// Creates `dir` (0700) or accepts an existing one only if it is a real
/// directory owned by us that nobody else can enter: an authenticated
/// master's socket is as good as the key that opened it.
fn private_dir(dir: &Path) -> Result<(), String> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    // SAFETY: as above.
    let uid = unsafe { libc::geteuid() };
    if !meta.is_dir() {
        return Err(format!("{} exists and is not a directory", dir.display()));
    }
    if meta.uid() != uid {
        return Err(format!(
            "{} belongs to uid {}, not to us (uid {uid}); remove it",
            dir.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{} is open to other users (mode {:o}); `chmod 700` it",
            dir.display(),
            meta.mode() & 0o777
        ));
    }
    Ok(())
}

/// What decides which connection this is; sixteen hex digits keep socket
/// paths well under the 108-byte limit of a Unix socket address.
fn key(host: &Host, kex: &str) -> String {
    let mut h = Sha256::new();
    let fields = [
        host.user.as_str(),
        host.address.as_str(),
        &host.port.to_string(),
        &path_text(host.identity_file.as_deref()),
        &path_text(host.known_hosts.as_deref()),
        host.jump_host.as_deref().unwrap_or(""),
        kex,
    ];
    for f in fields {
        // Length-prefixed so ("ab", "c") and ("a", "bc") differ.
        h.update((f.len() as u64).to_le_bytes());
        h.update(f.as_bytes());
    }
    hex::encode(&h.finalize()[..8])
}

fn path_text(p: Option<&Path>) -> String {
    p.map(|p| p.display().to_string()).unwrap_or_default()
}

fn master_dirs(dir: &Path) -> Vec<(PathBuf, SystemTime)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(MASTER_DIR_PREFIX)
        })
        .filter_map(|e| {
            let modified = e.metadata().ok()?.modified().ok()?;
            Some((e.path(), modified))
        })
        .collect()
}

fn is_socket(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::TransportKind;

    fn host(address: &str) -> Host {
        Host {
            transport: TransportKind::Ssh,
            address: address.into(),
            user: "ops".into(),
            identity_file: Some("/keys/id".into()),
            connect_timeout_s: 10,
            ssh_persist_s: 120,
            ..Host::local("h1", "/data/prover")
        }
    }

    #[test]
    fn the_key_changes_with_every_connection_setting() {
        let base = host("10.0.0.1");
        let k = key(&base, "x");
        assert_eq!(k.len(), 16);
        assert_eq!(k, key(&base.clone(), "x"), "stable");
        let mut variants = vec![key(&host("10.0.0.2"), "x"), key(&base, "y")];
        let mut h = base.clone();
        h.port = 2222;
        variants.push(key(&h, "x"));
        let mut h = base.clone();
        h.user = "root".into();
        variants.push(key(&h, "x"));
        let mut h = base.clone();
        h.identity_file = Some("/keys/other".into());
        variants.push(key(&h, "x"));
        let mut h = base.clone();
        h.known_hosts = Some("/kh".into());
        variants.push(key(&h, "x"));
        let mut h = base.clone();
        h.jump_host = Some("bastion".into());
        variants.push(key(&h, "x"));
        for v in &variants {
            assert_ne!(v, &k);
        }
    }

    #[test]
    fn only_a_private_directory_of_ours_is_used() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("fresh");
        private_dir(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        private_dir(&dir).unwrap();

        let open = tmp.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let err = private_dir(&open).unwrap_err();
        assert!(err.contains("chmod 700"), "{err}");

        let file = tmp.path().join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(private_dir(&file).unwrap_err().contains("not a directory"));

        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(
            private_dir(&link).unwrap_err().contains("not a directory"),
            "a symlink is not followed"
        );
    }

    #[test]
    fn reuse_is_off_when_persist_is_zero() {
        let mut h = host("10.0.0.1");
        h.ssh_persist_s = 0;
        assert!(MuxSlot::for_host(&h, "x").is_none());
    }

    #[tokio::test]
    async fn dead_sockets_are_cleared_and_young_half_made_masters_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let slot = MuxSlot {
            dir: tmp.path().to_owned(),
        };
        // A socket nobody listens on: what a killed master leaves.
        let dead = tmp.path().join(".ssh-connectionDEAD");
        std::fs::create_dir(&dead).unwrap();
        let listener = std::os::unix::net::UnixListener::bind(dead.join("master")).unwrap();
        drop(listener);
        // A master still authenticating: directory, no socket yet.
        let young = tmp.path().join(".ssh-connectionYOUNG");
        std::fs::create_dir(&young).unwrap();
        assert!(slot.resume().await.is_none());
        assert!(!dead.exists(), "dead master's directory removed");
        assert!(young.exists(), "a master being made is left alone");
    }
}
