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
//!
//! A line longer than any record, or one that is not a record, is not
//! stored ([`super::line`]): it is counted in the host's state with its file
//! and line number, and a line longer than a chunk is measured on the host
//! and passed over without crossing the link, so no line is held past the
//! chunk's bound.

use super::line::{self, SkippedLine, Verdict, MAX_LINE};
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
    /// Lines left out this time (too long, or not a record): how many, and
    /// the first ones with their file and line number.
    pub skipped: u64,
    pub skipped_lines: Vec<SkippedLine>,
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

/// What one collect of a host fetched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fetched {
    /// Remote files listed (the log and its rotations).
    pub files: usize,
    /// Bytes added to the store.
    pub new_bytes: u64,
    /// Lines this collect left out (too long, or not a record).
    pub skipped: u64,
    /// The first of them, with where they were ([`SKIPPED_SHOWN`] at most).
    pub skipped_lines: Vec<SkippedLine>,
}

/// How many of a collect's skipped lines are named in its outcome; the
/// store's state keeps more, and `timing report` lists those.
pub const SKIPPED_SHOWN: usize = 10;

impl Fetched {
    fn skip(&mut self, state: &mut HostState, line: SkippedLine) {
        tracing::warn!(host = %line.host, file = %line.file, line = line.line, reason = %line.reason, "timing line left out");
        self.skipped += 1;
        if self.skipped_lines.len() < SKIPPED_SHOWN {
            self.skipped_lines.push(line.clone());
        }
        state.skip(line);
    }

    /// The skipped lines on one line each, for a table cell or a step's
    /// detail: `timing.jsonl line 3: <reason>`, and how many more.
    pub fn skipped_text(&self) -> String {
        skipped_text(self.skipped, &self.skipped_lines)
    }
}

/// `count` skipped lines, `lines` the first of them, one per line:
/// `FILE line N: REASON`, and how many more.
pub fn skipped_text(count: u64, lines: &[SkippedLine]) -> String {
    let mut out: Vec<String> = lines
        .iter()
        .map(|s| format!("{} line {}: {}", s.file, s.line, s.reason))
        .collect();
    let more = count.saturating_sub(lines.len() as u64);
    if more > 0 {
        out.push(format!(
            "and {more} more (`fleetctl timing report` lists them)"
        ));
    }
    out.join("\n")
}

/// Newlines in a local file, read in pieces (a state written before lines
/// were counted: its local copy holds every line fetched).
fn count_lines(path: &std::path::Path) -> std::io::Result<u64> {
    use std::io::Read;
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    let mut buf = vec![0u8; 1 << 16];
    let mut n = 0;
    loop {
        let got = f.read(&mut buf)?;
        if got == 0 {
            return Ok(n);
        }
        n += buf[..got].iter().filter(|b| **b == b'\n').count() as u64;
    }
}

/// Length of the line at byte `from` of the remote file (its newline
/// included), measured on the host so that a line longer than any record
/// never crosses the link; `None` while it has no newline yet (still being
/// written, or cut off), within the `size` listed.
async fn remote_line_length(
    t: &Transport,
    host: &str,
    open: &str,
    from: u64,
    size: u64,
) -> Result<Option<u64>, CollectError> {
    let script = format!(
        "{open}; tail -c +{} <&3 | head -c {} | head -n 1 | wc -lc",
        from + 1,
        size - from
    );
    let out = t
        .run_script(&script, Duration::from_secs(120))
        .await
        .map_err(|source| CollectError::Transport {
            host: host.to_owned(),
            source,
        })?;
    if out.status == Some(3) || out.status == Some(4) {
        return Ok(None);
    }
    let text = out.stdout_text();
    let mut it = text.split_whitespace().map(str::parse::<u64>);
    match (out.success(), it.next(), it.next()) {
        (true, Some(Ok(newlines)), Some(Ok(bytes))) if bytes <= size - from => {
            Ok((newlines == 1).then_some(bytes))
        }
        _ => Err(CollectError::Transport {
            host: host.to_owned(),
            source: TransportError::Failed {
                host: host.to_owned(),
                command: script,
                status: out.status,
                stderr: crate::timing::line::bounded_reason(&out.stderr_text()),
            },
        }),
    }
}

/// Collects one host: list, then fetch every file's new whole lines,
/// keeping those [`line::verdict`] keeps and counting the others in the
/// host's state with where they were.
pub async fn collect_host(
    t: &Transport,
    host: &Host,
    store: &Store,
    chunk: u64,
) -> Result<Fetched, CollectError> {
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
    let mut fetched = Fetched {
        files: remotes.len(),
        ..Fetched::default()
    };
    for r in &remotes {
        let key = r.inode.to_string();
        let mut file = state.files.get(&key).cloned().unwrap_or_else(|| FileState {
            inode: r.inode,
            fetched: 0,
            local: format!("{base}@{}", r.inode),
            lines: Some(0),
        });
        if r.size < file.fetched {
            // A timing log only grows; a shorter file under a known inode means
            // the inode was reused by a new file. Keep the old copy under a new name.
            let old = host_dir.join(&file.local);
            let kept = host_dir.join(format!("{}.replaced-{}", file.local, file.fetched));
            let _ = std::fs::rename(&old, &kept);
            file.fetched = 0;
            file.lines = Some(0);
        }
        let local_path = host_dir.join(&file.local);
        let local_err = |e| CollectError::Local {
            host: host.name.clone(),
            path: local_path.display().to_string(),
            source: e,
        };
        let mut lines = match file.lines {
            Some(n) => n,
            None => count_lines(&local_path).map_err(local_err)?,
        };
        // Where a skipped line was: the file as the host names it.
        let remote_name = if dir == "." {
            r.name.clone()
        } else {
            format!("{dir}/{}", r.name)
        };
        let qname = q(&r.name)?;
        let open = format!(
            "cd {qdir} || exit 3; exec 3< {qname} || exit 3; [ \"$(stat -L -c %i /dev/fd/3)\" = {} ] || exit 4",
            r.inode
        );
        let mut chunk = chunk.max(4096);
        while file.fetched < r.size {
            let want = (r.size - file.fetched).min(chunk);
            let read = format!("{open}; tail -c +{} <&3 | head -c {want}", file.fetched + 1);
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
                if want > MAX_LINE as u64 {
                    // No record is this long: measure the line on the host
                    // and pass over it, rather than read it whole.
                    let Some(bytes) =
                        remote_line_length(t, &host.name, &open, file.fetched, r.size).await?
                    else {
                        // Not ended yet: left out once it is.
                        break;
                    };
                    lines += 1;
                    file.fetched += bytes;
                    file.lines = Some(lines);
                    let skipped = SkippedLine {
                        host: host.name.clone(),
                        file: remote_name.clone(),
                        line: lines,
                        bytes,
                        reason: line::too_long(bytes),
                    };
                    fetched.skip(&mut state, skipped);
                    state.files.insert(key.clone(), file.clone());
                    store.save_state(&host.name, &state).map_err(st)?;
                    continue;
                }
                if short {
                    // Only a partial line is left: it is still being written.
                    break;
                }
                // One line longer than the chunk: read a bigger piece, up
                // to one byte past the longest record.
                chunk = chunk.saturating_mul(2).min(MAX_LINE as u64 + 1);
                continue;
            }
            let mut keep = Vec::with_capacity(whole);
            for text in out.stdout[..whole].split_inclusive(|b| *b == b'\n') {
                lines += 1;
                match line::verdict(text) {
                    Verdict::Record => keep.extend_from_slice(text),
                    Verdict::Blank => {}
                    Verdict::Skip(reason) => {
                        let skipped = SkippedLine {
                            host: host.name.clone(),
                            file: remote_name.clone(),
                            line: lines,
                            bytes: text.len() as u64,
                            reason,
                        };
                        fetched.skip(&mut state, skipped);
                    }
                }
            }
            let mut f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&local_path)
                .map_err(local_err)?;
            f.write_all(&keep)
                .and_then(|_| f.sync_data())
                .map_err(local_err)?;
            file.fetched += whole as u64;
            file.lines = Some(lines);
            fetched.new_bytes += keep.len() as u64;
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
    Ok(fetched)
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
            let (fetched, error) = match result {
                Ok(f) => (f, None),
                Err(e) => (Fetched::default(), Some(e.to_string())),
            };
            HostSummary {
                host: host.name.clone(),
                files: fetched.files,
                new_bytes: fetched.new_bytes,
                elapsed_ms: started.elapsed().as_millis() as u64,
                error,
                skipped: fetched.skipped,
                skipped_lines: fetched.skipped_lines,
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
                skipped: 0,
                skipped_lines: Vec::new(),
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
        let Fetched {
            files,
            new_bytes: bytes,
            ..
        } = collect_host(&t, &host, &store, 4096).await.unwrap();
        assert_eq!(files, 2);
        assert_eq!(bytes as usize, text.len() + "{\"kind\":\"proof\"}\n".len());
        let mut fetched = String::new();
        for f in store.files("local").unwrap() {
            fetched.push_str(&std::fs::read_to_string(f).unwrap());
        }
        assert_eq!(fetched.lines().count(), 3001);
        // Nothing new: nothing fetched; the partial line completes: it arrives once.
        assert_eq!(
            collect_host(&t, &host, &store, 4096)
                .await
                .unwrap()
                .new_bytes,
            0
        );
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(logs.join("timing.jsonl"))
            .unwrap();
        std::io::Write::write_all(&mut f, b"of\"}\n").unwrap();
        assert_eq!(
            collect_host(&t, &host, &store, 4096)
                .await
                .unwrap()
                .new_bytes,
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
            collect_host(&t, &host, &store, 4096)
                .await
                .unwrap()
                .new_bytes
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

    /// Regression (issue 51, item 11): a line far past any record's length
    /// and a line that is no record are left out and named (file, line
    /// number); the records around them are stored, whatever the chunk (a
    /// small one meets the overlong line alone, and measures it on the host).
    #[tokio::test]
    async fn an_overlong_line_and_garbage_are_left_out_and_named() {
        for chunk in [4096, CHUNK] {
            let dir = tempfile::tempdir().unwrap();
            let logs = dir.path().join("logs");
            std::fs::create_dir_all(&logs).unwrap();
            let rec = |n: u32| format!("{{\"kind\":\"proof\",\"n\":{n}}}\n");
            let long = format!("{{\"kind\":\"{}\"}}\n", "x".repeat(3 * MAX_LINE));
            let text = format!("{}{long}{}not json\n\n{}", rec(1), rec(2), rec(3));
            std::fs::write(logs.join("timing.jsonl"), &text).unwrap();
            let host = local_host(dir.path());
            let t = Transport::connect(&host).await.unwrap();
            let store = Store::new(dir.path().join("store"));
            let got = collect_host(&t, &host, &store, chunk).await.unwrap();
            let stored: String = store
                .files("local")
                .unwrap()
                .iter()
                .map(|f| std::fs::read_to_string(f).unwrap())
                .collect();
            assert_eq!(
                stored,
                format!("{}{}{}", rec(1), rec(2), rec(3)),
                "chunk {chunk}"
            );
            assert_eq!(got.new_bytes, stored.len() as u64);
            assert_eq!(got.skipped, 2);
            let file = format!("{}/timing.jsonl", logs.display());
            assert_eq!(
                (
                    got.skipped_lines[0].file.as_str(),
                    got.skipped_lines[0].line
                ),
                (file.as_str(), 2)
            );
            assert_eq!(got.skipped_lines[0].bytes, long.len() as u64);
            assert!(got.skipped_lines[0].reason.contains("longer than"));
            assert_eq!(got.skipped_lines[1].line, 4);
            assert!(got.skipped_lines[1]
                .reason
                .starts_with("not a timing record"));
            assert!(got.skipped_text().contains("timing.jsonl line 2: line of"));
            let state = store.load_state("local").unwrap();
            assert_eq!(state.skipped_count, 2);
            assert_eq!(state.skipped, got.skipped_lines);
            // Appended later: numbered on from where the last collect stopped.
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(logs.join("timing.jsonl"))
                .unwrap();
            std::io::Write::write_all(&mut f, b"oops\n").unwrap();
            let again = collect_host(&t, &host, &store, chunk).await.unwrap();
            assert_eq!((again.skipped, again.skipped_lines[0].line), (1, 7));
            assert_eq!(store.skipped().unwrap().0, 3);
        }
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
