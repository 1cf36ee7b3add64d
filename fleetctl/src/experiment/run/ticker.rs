//! Progress lines while the workload runs. A measurement takes a minute or
//! more; silence that long reads as a hang. At most one line per
//! [`EVERY`], whatever the number of hosts or jobs, so a long measurement
//! never floods a terminal or a CI log.

use crate::experiment::workload::Tally;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The time between two progress lines.
pub const EVERY: Duration = Duration::from_secs(10);

/// Awaits `work`, calling `say` with a line every `every` until it ends
/// (none for work shorter than `every`).
pub async fn with_progress<F: Future>(
    work: F,
    every: Duration,
    mut line: impl FnMut(Duration) -> String,
    mut say: impl FnMut(String),
) -> F::Output {
    let begin = Instant::now();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    // A late tick is skipped, not made up in a burst.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tokio::pin!(work);
    loop {
        tokio::select! {
            out = &mut work => return out,
            _ = tick.tick() => say(line(begin.elapsed())),
        }
    }
}

/// `measure: 20 s, 35 job(s) ok, 1 failed on 4 host(s) (WHAT)`.
pub fn measure_line(elapsed: Duration, tally: &Tally, hosts: usize, what: &str) -> String {
    format!(
        "measure: {} s, {} job(s) ok, {} failed on {hosts} host(s) ({what})",
        elapsed.as_secs(),
        tally.ok.load(Ordering::Relaxed),
        tally.failed.load(Ordering::Relaxed),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::{Arc, Mutex};

    /// Regression (issue 51, item 13f): the measurement says how it goes
    /// while it runs, at a bounded rate.
    #[tokio::test]
    async fn a_long_measurement_prints_a_line_per_interval_and_a_short_one_none() {
        let every = Duration::from_millis(100);
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let out = with_progress(
            async {
                tokio::time::sleep(Duration::from_millis(350)).await;
                7
            },
            every,
            |e| format!("{}", e.as_millis() / 100),
            move |l| sink.lock().unwrap().push(l),
        )
        .await;
        assert_eq!(out, 7);
        let lines = lines.lock().unwrap().clone();
        // One per interval: three, or two where a loaded machine was late
        // (a late tick is skipped, never made up in a burst).
        assert!((2..=3).contains(&lines.len()), "{lines:?}");
        assert_eq!(lines[0], "1", "{lines:?}");

        let quiet = AtomicU64::new(0);
        with_progress(
            tokio::time::sleep(Duration::from_millis(30)),
            every,
            |_| String::new(),
            |_| {
                quiet.fetch_add(1, Ordering::Relaxed);
            },
        )
        .await;
        assert_eq!(quiet.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_line_says_time_jobs_and_hosts() {
        let tally = Tally::default();
        tally.ok.fetch_add(35, Ordering::Relaxed);
        tally.failed.fetch_add(1, Ordering::Relaxed);
        assert_eq!(
            measure_line(Duration::from_millis(20_400), &tally, 4, "12 jobs"),
            "measure: 20 s, 35 job(s) ok, 1 failed on 4 host(s) (12 jobs)"
        );
    }
}
