//! Reads one host's timing records of the experiment window from the local
//! timing store (where `collect` put them), keeping only lines inside the
//! window so a long history never sits in memory.

use super::analysis::{host_records, HostRecords, HostWindow};
use crate::input::{InputError, LineRead, Lines};
use crate::timing::store::{Store, StoreError};
use fleet_wire::timing::TimingLine;
use std::path::PathBuf;
use std::time::SystemTime;

#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The window's records of `window.host`. Files the store last wrote
/// before `since` (this machine's clock) hold nothing new and are skipped.
/// Lines that do not parse (a newer schema, a torn write) are counted.
pub fn read(
    store: &Store,
    window: &HostWindow,
    since: SystemTime,
) -> Result<(HostRecords, usize), RecordsError> {
    if !store.host_dir(&window.host).is_dir() {
        return Ok((HostRecords::default(), 0));
    }
    let mut lines = Vec::new();
    let mut unreadable = 0;
    for path in store.files(&window.host)? {
        let read_err = |source| RecordsError::Read {
            path: path.clone(),
            source,
        };
        let modified = std::fs::metadata(&path)
            .and_then(|m| m.modified())
            .map_err(read_err)?;
        if modified < since {
            continue;
        }
        let mut file = Lines::open("timing file", &path)?;
        let mut buf = Vec::new();
        loop {
            match file.read_line_or_skip(&mut buf)? {
                LineRead::End => break,
                LineRead::Line(_) => {}
                // Passed over without being held, as the timing report
                // does: one hostile line must not cost the experiment.
                LineRead::TooLong { .. } => {
                    unreadable += 1;
                    continue;
                }
            }
            let Ok(line) = std::str::from_utf8(&buf) else {
                unreadable += 1;
                continue;
            };
            if line.trim().is_empty() {
                continue;
            }
            let Ok(rec) = TimingLine::parse(line.trim_end()) else {
                unreadable += 1;
                continue;
            };
            let ts_ms = rec.ts_ms();
            if (window.start_ms..=window.end_ms).contains(&ts_ms) {
                lines.push(rec);
            }
        }
    }
    Ok((host_records(lines), unreadable))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn only_lines_of_the_window_and_recent_files_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let host = store.host_dir("h1");
        std::fs::create_dir_all(&host).unwrap();
        let line = |ts: u64| {
            format!(
                r#"{{"kind":"proof","v":1,"ts_ms":{ts},"host":"h1","build":"b","job_id":"j","circuit":"chain","size":16,"partitions":1,"backend":"cpu","total_ms":3.0}}"#
            )
        };
        // An overlong line (an older collect stored it) is passed over and
        // counted, not the end of the experiment's analysis.
        let long = "x".repeat(crate::input::MAX_LINE + 1);
        let text = format!(
            "{}\n{}\nnot json\n{long}\n{}\n",
            line(5),
            line(15),
            line(25)
        );
        std::fs::write(host.join("timing.jsonl@1"), text).unwrap();
        let window = HostWindow {
            host: "h1".into(),
            start_ms: 10,
            end_ms: 20,
            build: None,
            jobs: None,
            unsubmitted_failures: 0,
        };
        let long_ago = SystemTime::now() - Duration::from_secs(3600);
        let (recs, bad) = read(&store, &window, long_ago).unwrap();
        assert_eq!((recs.proofs.len(), bad), (1, 2));
        assert_eq!(recs.proofs[0].ts_ms, 15);
        let later = SystemTime::now() + Duration::from_secs(3600);
        assert_eq!(read(&store, &window, later).unwrap().0.proofs.len(), 0);
        let other = HostWindow {
            host: "h9".into(),
            ..window
        };
        assert_eq!(read(&store, &other, long_ago).unwrap().0.proofs.len(), 0);
    }
}
