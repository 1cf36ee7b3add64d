//! The one way fleetctl runs a task per host in parallel: bounded (at most
//! `limit` hosts at once) and panic-safe (a task that panics is reported as
//! a failure of its own host, never dropped and never blamed on another).
//!
//! The dispatcher, `status`, `health` and `timing collect` all use it, so a
//! host can never go missing from a table because its task died.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::Semaphore;
use tokio::task::{Id, JoinSet};

/// Hosts run at once when a command gives no limit of its own.
pub const DEFAULT_PARALLEL: usize = 64;

/// A host task that ended without a result: it panicked or was cancelled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{host}: internal error in the host task: {reason}")]
pub struct TaskFailed {
    pub host: String,
    pub reason: String,
}

/// Tasks in flight, each tagged with its host's index and name.
pub struct FanOut<T> {
    set: JoinSet<T>,
    hosts: HashMap<Id, (usize, String)>,
    permits: Arc<Semaphore>,
}

impl<T: Send + 'static> FanOut<T> {
    /// At most `limit` tasks run at once (at least one).
    pub fn new(limit: usize) -> Self {
        FanOut {
            set: JoinSet::new(),
            hosts: HashMap::new(),
            permits: Arc::new(Semaphore::new(limit.max(1))),
        }
    }

    /// Starts `work` for host number `index` once a slot is free.
    pub fn spawn<F>(&mut self, index: usize, host: &str, work: F)
    where
        F: Future<Output = T> + Send + 'static,
    {
        let permits = self.permits.clone();
        let handle = self.set.spawn(async move {
            // The semaphore is never closed, so the permit always comes.
            let _permit = permits.acquire_owned().await;
            work.await
        });
        self.hosts.insert(handle.id(), (index, host.to_owned()));
    }

    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// The next task to end: its host's index and its result, or why it
    /// has none. `None` once every task has been joined.
    pub async fn join_next(&mut self) -> Option<(usize, Result<T, TaskFailed>)> {
        loop {
            let (id, result) = match self.set.join_next_with_id().await? {
                Ok((id, value)) => (id, Ok(value)),
                Err(e) => (e.id(), Err(reason(e))),
            };
            // Every spawned id is recorded before it can be joined.
            let Some((index, host)) = self.hosts.remove(&id) else {
                continue;
            };
            return Some((index, result.map_err(|reason| TaskFailed { host, reason })));
        }
    }
}

fn reason(e: tokio::task::JoinError) -> String {
    let payload = match e.try_into_panic() {
        Ok(p) => p,
        Err(_) => return "cancelled".to_owned(),
    };
    match (
        payload.downcast_ref::<&str>(),
        payload.downcast_ref::<String>(),
    ) {
        (Some(s), _) => format!("panicked: {s}"),
        (_, Some(s)) => format!("panicked: {s}"),
        _ => "panicked".to_owned(),
    }
}

/// Runs `work` for every host, at most `limit` at once; results in the
/// order of `hosts`, a failed task in its host's place.
pub async fn for_each_host<H, T, F, Fut>(
    hosts: &[H],
    name: impl Fn(&H) -> &str,
    limit: usize,
    work: F,
) -> Vec<Result<T, TaskFailed>>
where
    H: Clone,
    T: Send + 'static,
    F: Fn(H) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
{
    let mut fan = FanOut::new(limit);
    for (i, h) in hosts.iter().enumerate() {
        fan.spawn(i, name(h), work(h.clone()));
    }
    let mut out: Vec<Option<Result<T, TaskFailed>>> = (0..hosts.len()).map(|_| None).collect();
    while let Some((i, r)) = fan.join_next().await {
        out[i] = Some(r);
    }
    out.into_iter()
        .zip(hosts)
        .map(|(r, h)| {
            r.unwrap_or_else(|| {
                Err(TaskFailed {
                    host: name(h).to_owned(),
                    reason: "never joined".to_owned(),
                })
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    fn names(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("h{i}")).collect()
    }

    #[tokio::test]
    async fn a_panicking_task_is_a_failure_of_its_own_host_in_its_place() {
        let hosts = names(4);
        let out = for_each_host(
            &hosts,
            |h| h.as_str(),
            2,
            |h| async move {
                // The panicking host finishes first, so no other host's slot can
                // be mistaken for it.
                if h == "h3" {
                    panic!("boom on {h}");
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
                h
            },
        )
        .await;
        assert_eq!(out.len(), 4);
        assert_eq!(out[0].as_deref(), Ok("h1"));
        assert_eq!(out[1].as_deref(), Ok("h2"));
        assert_eq!(out[3].as_deref(), Ok("h4"));
        let e = out[2].clone().unwrap_err();
        assert_eq!(e.host, "h3");
        assert!(e.reason.contains("boom on h3"), "{e}");
        assert!(e.to_string().starts_with("h3: internal error"), "{e}");
    }

    #[tokio::test]
    async fn never_more_than_the_limit_run_at_once() {
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let hosts = names(12);
        let out = for_each_host(
            &hosts,
            |h| h.as_str(),
            3,
            |_| {
                let (running, peak) = (running.clone(), peak.clone());
                async move {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    running.fetch_sub(1, Ordering::SeqCst);
                }
            },
        )
        .await;
        assert!(out.iter().all(Result::is_ok));
        assert_eq!(peak.load(Ordering::SeqCst), 3);
    }
}
