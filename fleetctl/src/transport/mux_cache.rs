//! SSH master connections kept between fleetctl invocations, so that
//! `fleetctl status` polled every few seconds, or a `health` right after a
//! rollout, pays for key exchange and authentication once per host and not
//! once per command line. This is OpenSSH's own ControlPersist (and what
//! Ansible does by default); fleetctl only has to find the socket again.
//!
//! Layout: `<base>/<key>/<pin>/.ssh-connectionXXXXXX/master`, where `<base>`
//! is a private (0700, ours) directory, `<key>` hashes everything that
//! decides *which* connection this is (user, address, port, identity,
//! known_hosts path, jump host, key exchange), so an inventory change never
//! reuses a master made under other settings, and `<pin>` hashes the
//! known_hosts lines that pin this host's key *now*. ssh checks the host key
//! only when a master is made; a master kept from before an operator
//! replaced the key would otherwise go on trusting the old one. So a master
//! is only found under the pin it was made with, and masters under any
//! other pin of the same connection are told to stop when the slot is
//! opened. The master exits by itself after the host's `ssh_persist` idle
//! time, or when the host drops the connection.

use crate::inventory::Host;
use openssh::Session;
use sha2::{Digest, Sha256};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Global known_hosts files ssh reads as well as the user's (its defaults
/// for `GlobalKnownHostsFile`).
const GLOBAL_KNOWN_HOSTS: [&str; 2] = ["/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"];

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
    /// Masters of this connection made under a host key pin that is no
    /// longer the one in known_hosts.
    stale_pins: Vec<PathBuf>,
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
        let conn = base.join(key(host, kex));
        let dir = conn.join(pin(host));
        match private_dir(&conn).and_then(|()| private_dir(&dir)) {
            Ok(()) => Some(MuxSlot {
                stale_pins: pin_dirs(&conn).into_iter().filter(|d| *d != dir).collect(),
                dir,
            }),
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

    /// Stops every master of this connection that was made under another
    /// host key pin, and returns how many answered: each was authenticated
    /// against a key that known_hosts no longer pins, so no command may go
    /// over it. Stopping one only refuses new clients; commands another
    /// invocation is running over it finish, then the master exits.
    pub async fn close_stale(&self) -> usize {
        let mut closed = 0;
        for pin_dir in &self.stale_pins {
            for (dir, _) in master_dirs(pin_dir) {
                let ctl = dir.join("master");
                if !is_socket(&ctl) {
                    continue;
                }
                let session = Session::resume_mux(ctl.into_boxed_path(), None);
                if let Ok(Ok(())) = tokio::time::timeout(CHECK_TIMEOUT, session.close()).await {
                    closed += 1;
                }
            }
            let _ = std::fs::remove_dir_all(pin_dir);
        }
        closed
    }

    /// A master an earlier invocation left under the current host key pin,
    /// if one answers an alive check. Masters that do not answer are dead
    /// (host gone, killed): their directories are removed so the next look
    /// is quick.
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

/// Eight hex digits over the known_hosts lines that can pin `host`'s key,
/// in every file ssh reads for it. A line counts when one of its patterns
/// is the host's name as ssh looks it up (`addr`, or `[addr]:port` off port
/// 22), and also, conservatively, when it cannot be matched without ssh's
/// own logic (hashed names, wildcards, negations): a change to any of those
/// retires the master too, which costs one handshake and never trusts a
/// stale key. A missing file pins nothing, which is also a state.
fn pin(host: &Host) -> String {
    let user_files: Vec<PathBuf> = match &host.known_hosts {
        Some(file) => vec![file.clone()],
        None => match std::env::var_os("HOME") {
            Some(home) => vec![
                Path::new(&home).join(".ssh/known_hosts"),
                Path::new(&home).join(".ssh/known_hosts2"),
            ],
            None => Vec::new(),
        },
    };
    let names = lookup_names(host);
    let mut h = Sha256::new();
    let files = user_files
        .iter()
        .map(PathBuf::as_path)
        .chain(GLOBAL_KNOWN_HOSTS.iter().map(Path::new));
    for file in files {
        h.update(file.as_os_str().as_encoded_bytes());
        h.update([0]);
        match std::fs::read_to_string(file) {
            Ok(text) => {
                for line in pinning_lines(&text, &names) {
                    h.update(line.as_bytes());
                    h.update([b'\n']);
                }
            }
            Err(e) => h.update(format!("unreadable: {:?}", e.kind()).as_bytes()),
        }
        h.update([0]);
    }
    hex::encode(&h.finalize()[..4])
}

/// The names ssh looks the host key up under.
fn lookup_names(host: &Host) -> Vec<String> {
    let addr = host.address.to_ascii_lowercase();
    if host.port == 22 {
        vec![addr]
    } else {
        vec![format!("[{addr}]:{}", host.port)]
    }
}

/// The lines of one known_hosts text that may pin a key for `names`.
fn pinning_lines<'a>(text: &'a str, names: &[String]) -> Vec<&'a str> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter(|line| {
            let mut fields = line.split_whitespace();
            let mut patterns = fields.next().unwrap_or("");
            if patterns.starts_with('@') {
                // `@cert-authority` / `@revoked`: the patterns come next.
                patterns = fields.next().unwrap_or("");
            }
            patterns.split(',').any(|p| {
                p.starts_with('|')
                    || p.starts_with('!')
                    || p.contains(['*', '?'])
                    || names.iter().any(|n| p.eq_ignore_ascii_case(n))
            })
        })
        .collect()
}

/// The pin directories under one connection's directory.
fn pin_dirs(conn: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(conn) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect()
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
    fn the_pin_follows_the_hosts_key_lines_and_nothing_else() {
        let tmp = tempfile::tempdir().unwrap();
        let kh = tmp.path().join("known_hosts");
        let mut h = host("10.0.0.1");
        h.known_hosts = Some(kh.clone());
        std::fs::write(
            &kh,
            "10.0.0.1 ssh-ed25519 AAAAold\n10.0.0.2 ssh-ed25519 AAAAb\n",
        )
        .unwrap();
        let before = pin(&h);
        assert_eq!(before.len(), 8);
        std::fs::write(
            &kh,
            "10.0.0.1 ssh-ed25519 AAAAold\n10.0.0.2 ssh-ed25519 AAAAc\n",
        )
        .unwrap();
        assert_eq!(pin(&h), before, "another host's key does not matter");
        std::fs::write(
            &kh,
            "10.0.0.1 ssh-ed25519 AAAAnew\n10.0.0.2 ssh-ed25519 AAAAc\n",
        )
        .unwrap();
        assert_ne!(pin(&h), before, "this host's key does");

        let names = vec!["[10.0.0.1]:2222".to_owned()];
        let text = "# c\n[10.0.0.1]:2222 k A\n10.0.0.1 k B\n|1|salt|hash k C\n@revoked *.lab k D\n10.0.0.9,[10.0.0.1]:2222 k E\n";
        assert_eq!(
            pinning_lines(text, &names),
            [
                "[10.0.0.1]:2222 k A",
                "|1|salt|hash k C",
                "@revoked *.lab k D",
                "10.0.0.9,[10.0.0.1]:2222 k E"
            ]
        );
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
            stale_pins: Vec::new(),
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
