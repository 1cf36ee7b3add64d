//! `fleetctl timing collect`: fetches the timing logs (rotated files too) of
//! every selected host in parallel into the local [`Store`], incrementally.
//!
//! Remote files are tracked by inode, not by name: the prover rotates by
//! renaming (`timing.jsonl` -> `timing.jsonl.1`), so the inode follows the
//! data and a rotation neither loses nor doubles a line. Each read opens the
//! file once and checks its inode through the open descriptor, so a rotation
//! between listing and reading cannot splice two files. Only whole lines are
//! fetched; the state is saved after every chunk, so an interrupted collect
//! resumes where it stopped. Nothing on the host is changed.

use super::store::{FileState, HostLock, HostState, Store, StoreError};
use crate::fanout;
use crate::inventory::Host;
use crate::transport::{quote::quote, Transport, TransportError};
use serde::Serialize;
use std::fs::OpenOptions;
use std::io::Write;
use std::time::{Duration, Instant};

/// Bytes fetched per command: bounded so one read never holds a whole log in memory.
pub const CHUNK: u64 = 32 << 20;
/// What a chunk may be set to (`--chunk-bytes`, the step's `chunk_bytes`):
/// below 4 KiB every line costs a command, above 256 MiB one read holds
/// that much per host at once.
pub const CHUNK_BYTES: std::ops::RangeInclusive<u64> = 4 << 10..=256 << 20;

#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("{host}: {source}")]
    Transport {
        host: String,
        #[source]
        source: TransportError,
    },
    #[error("{host}: {source}")]
    Store {
        host: String,
        #[source]
        source: StoreError,
    },
    #[error("{host}: writing {path}: {source}")]
    Local {
        host: String,
        path: String,
        source: std::io::Error,
    },
    #[error("{host}: timing log path {path:?} cannot be quoted for the shell: {reason}")]
    Path {
        host: String,
        path: String,
        reason: String,
    },
    #[error("{host}: deadline of {after:?} passed; what was fetched is kept and the next collect resumes")]
    Deadline { host: String, after: Duration },
}

/// Where the host's timing log lives: the `timing_log` variable, else the
/// daemon's default under the install dir.
pub fn timing_log_path(host: &Host) -> String {
    host.vars
        .get("timing_log")
        .and_then(|v| v.as_str())
        .map(str::to_string)
        .unwrap_or_else(|| {
            format!(
                "{}/logs/timing.jsonl",
                host.install_dir.trim_end_matches('/')
            )
        })
}

/// Outcome of one host's collect.
#[derive(Debug, Clone, Serialize)]
pub struct HostSummary {
    pub host: String,
    pub files: usize,
    pub new_bytes: u64,
    pub elapsed_ms: u64,
    /// `None` when the host was collected completely.
    pub error: Option<String>,
}

/// One remote file as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Remote {
    inode: u64,
    size: u64,
    name: String,
}

fn parse_listing(text: &str) -> Vec<Remote> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ' ');
            let inode = it.next()?.parse().ok()?;
            let size = it.next()?.parse().ok()?;
            let name = it.next()?.to_string();
            Some(Remote { inode, size, name })
        })
        .collect()
}

/// Waits for the host's folder of the store; polls, since a `flock` wait
/// would block a runtime thread. Every caller runs under a deadline.
async fn hold_host(store: &Store, host: &str) -> Result<HostLock, StoreError> {
    let mut said = false;
    loop {
        if let Some(held) = store.try_lock_host(host)? {
            return Ok(held);
        }
        if !said {
            tracing::info!(host, store = %store.root().display(), "another collect of this host is running; waiting for it");
            said = true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Collects one host: list, then fetch every file's new whole lines.
pub async fn collect_host(
    t: &Transport,
    host: &Host,
    store: &Store,
    chunk: u64,
) -> Result<(usize, u64), CollectError> {
    let tr = |source| CollectError::Transport {
        host: host.name.clone(),
        source,
    };
    let st = |source| CollectError::Store {
        host: host.name.clone(),
        source,
    };
    let log = timing_log_path(host);
    let (dir, base) = match log.rsplit_once('/') {
        Some((d, b)) if !d.is_empty() => (d.to_string(), b.to_string()),
        _ => (".".to_string(), log.clone()),
    };
    let q = |s: &str| {
        quote(s).map_err(|e| CollectError::Path {
            host: host.name.clone(),
            path: log.clone(),
            reason: e.to_string(),
        })
    };
    let (qdir, qbase) = (q(&dir)?, q(&base)?);
    // The active file and its rotations; a missing folder is "nothing yet".
    let list = format!(
        "cd {qdir} 2>/dev/null || exit 0; for f in {qbase} {qbase}.*; do [ -f \"$f\" ] && stat -c '%i %s %n' -- \"$f\"; done; exit 0"
    );
    let out = t
        .run_script_ok(&list, Duration::from_secs(30))
        .await
        .map_err(tr)?;
    let remotes = parse_listing(&out.stdout_text());
    // Held until the state is saved: another collect of this host waits (its
    // own deadline bounds the wait) and then fetches only what is new.
    let _held = hold_host(store, &host.name).await.map_err(st)?;
    let mut state: HostState = store.load_state(&host.name).map_err(st)?;
    let host_dir = store.host_dir(&host.name);
    std::fs::create_dir_all(&host_dir).map_err(|e| CollectError::Local {
        host: host.name.clone(),
        path: host_dir.display().to_string(),
        source: e,
    })?;
    let mut new_bytes = 0;
    for r in &remotes {
        let key = r.inode.to_string();
        let mut file = state.files.get(&key).cloned().unwrap_or_else(|| FileState {
            inode: r.inode,
            fetched: 0,
            local: format!("{base}@{}", r.inode),
        });
        if r.size < file.fetched {
            // A timing log only grows; a shorter file under a known inode means
            // the inode was reused by a new file. Keep the old copy under a new name.
            let old = host_dir.join(&file.local);
            let kept = host_dir.join(format!("{}.replaced-{}", file.local, file.fetched));
            let _ = std::fs::rename(&old, &kept);
            file.fetched = 0;
        }
        let local_path = host_dir.join(&file.local);
        let qname = q(&r.name)?;
        let mut chunk = chunk.max(4096);
        while file.fetched < r.size {
            let want = (r.size - file.fetched).min(chunk);
            let read = format!(
                "cd {qdir} || exit 3; exec 3< {qname} || exit 3; [ \"$(stat -L -c %i /dev/fd/3)\" = {} ] || exit 4; tail -c +{} <&3 | head -c {want}",
                r.inode,
                file.fetched + 1
            );
            let out = t
                .run_script(&read, Duration::from_secs(120))
                .await
                .map_err(tr)?;
            if out.status == Some(3) || out.status == Some(4) {
                // Rotated or removed since the listing: the next collect finds it by inode.
                break;
            }
            if !out.success() {
                return Err(tr(TransportError::Failed {
                    host: host.name.clone(),
                    command: read,
                    status: out.status,
                    stderr: out.stderr_text(),
                }));
            }
            // Only whole lines: a line being written stays for the next collect.
            let whole = out
                .stdout
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |i| i + 1);
            // Fewer bytes than asked, or up to the size listed: the end of
            // what there is to read now.
            let short = (out.stdout.len() as u64) < want
                || file.fetched + out.stdout.len() as u64 >= r.size;
            if whole == 0 {
                if short {
                    // Only a partial line is left: it is still being written.
                    break;
                }
                // One line longer than the chunk: read a bigger piece.
                chunk = chunk.saturating_mul(2);
                continue;
            }
            let local_err = |e| CollectError::Local {
                host: host.name.clone(),
                path: local_path.display().to_string(),
                source: e,
            };
            let mut f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&local_path)
                .map_err(local_err)?;
            f.write_all(&out.stdout[..whole])
                .and_then(|_| f.sync_data())
                .map_err(local_err)?;
            file.fetched += whole as u64;
            new_bytes += whole as u64;
            state.files.insert(key.clone(), file.clone());
            store.save_state(&host.name, &state).map_err(st)?;
            if short {
                // The end of the file was reached; a cut-off last line waits
                // for the next collect.
                break;
            }
        }
        state.files.insert(key, file);
    }
    store.save_state(&host.name, &state).map_err(st)?;
    Ok((remotes.len(), new_bytes))
}

/// Collects every host in parallel, each under `deadline`; one host's failure
/// never stops the others.
pub async fn collect_all(
    hosts: &[Host],
    store: &Store,
    deadline: Duration,
    parallel: usize,
    chunk: u64,
) -> Vec<HostSummary> {
    let work = |host: Host| {
        let store = store.clone();
        async move {
            let started = Instant::now();
            let work = async {
                let t =
                    Transport::connect(&host)
                        .await
                        .map_err(|source| CollectError::Transport {
                            host: host.name.clone(),
                            source,
                        })?;
                let r = collect_host(&t, &host, &store, chunk).await;
                let _ = t.close().await;
                r
            };
            let result = match tokio::time::timeout(deadline, work).await {
                Ok(r) => r,
                Err(_) => Err(CollectError::Deadline {
                    host: host.name.clone(),
                    after: deadline,
                }),
            };
            let (files, new_bytes, error) = match result {
                Ok((f, b)) => (f, b, None),
                Err(e) => (0, 0, Some(e.to_string())),
            };
            HostSummary {
                host: host.name.clone(),
                files,
                new_bytes,
                elapsed_ms: started.elapsed().as_millis() as u64,
                error,
            }
        }
    };
    fanout::for_each_host(hosts, |h| h.name.as_str(), parallel, work)
        .await
        .into_iter()
        .map(|r| {
            r.unwrap_or_else(|e| HostSummary {
                host: e.host.clone(),
                files: 0,
                new_bytes: 0,
                elapsed_ms: 0,
                error: Some(e.to_string()),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local_host(install_dir: &std::path::Path) -> Host {
        Host::local("local", install_dir.display().to_string())
    }

    /// Regression: a chunk that ends mid-line must not end the file's fetch.
    #[tokio::test]
    async fn many_small_chunks_fetch_every_line_once_and_leave_a_partial_line() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let mut text = String::new();
        for i in 0..3000 {
            text.push_str(&format!(
                "{{\"kind\":\"proof\",\"n\":{i},\"pad\":\"{}\"}}\n",
                "x".repeat(i % 50)
            ));
        }
        std::fs::write(logs.join("timing.jsonl.1"), &text).unwrap();
        // The active file ends in a line still being written.
        std::fs::write(
            logs.join("timing.jsonl"),
            "{\"kind\":\"proof\"}\n{\"kind\":\"pro",
        )
        .unwrap();
        let host = local_host(dir.path());
        let t = Transport::connect(&host).await.unwrap();
        let store = Store::new(dir.path().join("store"));
        let (files, bytes) = collect_host(&t, &host, &store, 4096).await.unwrap();
        assert_eq!(files, 2);
        assert_eq!(bytes as usize, text.len() + "{\"kind\":\"proof\"}\n".len());
        let mut fetched = String::new();
        for f in store.files("local").unwrap() {
            fetched.push_str(&std::fs::read_to_string(f).unwrap());
        }
        assert_eq!(fetched.lines().count(), 3001);
        // Nothing new: nothing fetched; the partial line completes: it arrives once.
        assert_eq!(collect_host(&t, &host, &store, 4096).await.unwrap().1, 0);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(logs.join("timing.jsonl"))
            .unwrap();
        std::io::Write::write_all(&mut f, b"of\"}\n").unwrap();
        assert_eq!(
            collect_host(&t, &host, &store, 4096).await.unwrap().1,
            "{\"kind\":\"proof\"}\n".len() as u64
        );
    }

    /// Three collects of one host at once (three fleetctl processes, or an
    /// experiment's collect beside a cron one) store every line once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_collects_of_one_host_store_every_line_once() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let text: String = (0..2000)
            .map(|i| format!("{{\"kind\":\"proof\",\"n\":{i}}}\n"))
            .collect();
        std::fs::write(logs.join("timing.jsonl"), &text).unwrap();
        let host = local_host(dir.path());
        let store = Store::new(dir.path().join("store"));
        let one = || async {
            let t = Transport::connect(&host).await.unwrap();
            collect_host(&t, &host, &store, 4096).await.unwrap().1
        };
        let (a, b, c) = tokio::join!(one(), one(), one());
        assert_eq!(a + b + c, text.len() as u64, "{a} + {b} + {c}");
        let fetched: String = store
            .files("local")
            .unwrap()
            .iter()
            .map(|f| std::fs::read_to_string(f).unwrap())
            .collect();
        assert_eq!(fetched, text);
    }

    #[test]
    fn listing_parses_names_with_spaces_and_skips_noise() {
        let l = parse_listing("12 300 timing.jsonl\n13 5 timing.jsonl.1\ngarbage\n14 7 my file\n");
        assert_eq!(l.len(), 3);
        assert_eq!(
            l[0],
            Remote {
                inode: 12,
                size: 300,
                name: "timing.jsonl".into()
            }
        );
        assert_eq!(l[2].name, "my file");
    }
}
