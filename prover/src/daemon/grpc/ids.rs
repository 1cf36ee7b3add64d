//! Curio's `request_id`s: a request retried under the same id (Curio does so
//! after its 30-minute deadline) attaches to the job the first one started,
//! so a sector is proved once however often it is asked for.
//!
//! An id is remembered with a digest of its payload while its job is queued
//! or running, and for [`KEEP`] after it finished; a job that failed or was
//! cancelled frees its id at once (the retry proves again). A different
//! payload under a remembered id is refused: it is a client bug, and
//! attaching it would hand back another sector's proof.

use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::OnceCell;

/// How long a finished job's id is remembered.
pub const KEEP: Duration = Duration::from_secs(3600);
/// Ids remembered at most; past it the oldest finished ones are forgotten
/// first, and a submission with a new id waits for none of them.
pub const MAX_IDS: usize = 100_000;
/// Longest request id accepted (Curio's are well under 100 bytes).
pub const MAX_ID_BYTES: usize = 256;

/// Why a submission was refused: a gRPC status code and its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub code: i32,
    pub message: String,
}

/// The job an id started: set once its submission was judged.
pub type Slot = Arc<OnceCell<Result<String, Refusal>>>;

struct Entry {
    digest: [u8; 32],
    slot: Slot,
    /// When its job was seen finished (None: not yet).
    finished: Option<Instant>,
    since: Instant,
}

/// What a submission under an id does.
pub enum Claim {
    /// First of its id (or its id was freed): submit and fill the slot.
    New(Slot),
    /// The same payload is (being) submitted: wait on the slot.
    Attach(Slot),
    /// The id is taken by another payload.
    Conflict,
}

#[derive(Default)]
pub struct RequestIds {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    map: HashMap<String, Entry>,
    /// Job id to the request id that started it.
    jobs: HashMap<String, String>,
}

/// The digest a payload is compared by.
pub fn digest(payload: &[u8]) -> [u8; 32] {
    Sha256::digest(payload).into()
}

impl RequestIds {
    /// Claims `id` for a payload of `digest`. `live(job)` says whether a
    /// job is still queued, running or done (false: failed, cancelled or
    /// forgotten by the engine).
    pub fn claim(&self, id: &str, digest: [u8; 32], live: impl Fn(&str) -> bool) -> Claim {
        let mut inner = self.inner.lock();
        let now = Instant::now();
        if let Some(e) = inner.map.get(id) {
            let usable = match e.slot.get() {
                // Still being submitted: whatever it becomes, this one shares it.
                None => true,
                Some(Ok(job)) => {
                    live(job) && e.finished.is_none_or(|t| now.duration_since(t) < KEEP)
                }
                Some(Err(_)) => false,
            };
            if usable {
                return match e.digest == digest {
                    true => Claim::Attach(e.slot.clone()),
                    false => Claim::Conflict,
                };
            }
        }
        if inner.map.len() >= MAX_IDS {
            prune(&mut inner, now);
        }
        let slot: Slot = Arc::new(OnceCell::new());
        inner.map.insert(
            id.to_string(),
            Entry {
                digest,
                slot: slot.clone(),
                finished: None,
                since: now,
            },
        );
        Claim::New(slot)
    }

    /// Forgets `id` when its slot is `slot` (a refused submission frees
    /// its id for the retry).
    pub fn release(&self, id: &str, slot: &Slot) {
        let mut inner = self.inner.lock();
        if inner
            .map
            .get(id)
            .is_some_and(|e| Arc::ptr_eq(&e.slot, slot))
        {
            inner.map.remove(id);
        }
    }

    /// Notes that `id` started `job`, so the job's end can start the id's [`KEEP`].
    pub fn bind(&self, id: &str, job: &str) {
        self.inner
            .lock()
            .jobs
            .insert(job.to_string(), id.to_string());
    }

    /// Notes that `job` finished now: the id that started it is kept for
    /// [`KEEP`] from here.
    pub fn finished_job(&self, job: &str) {
        let mut inner = self.inner.lock();
        let Some(id) = inner.jobs.get(job).cloned() else {
            return;
        };
        if let Some(e) = inner.map.get_mut(&id) {
            e.finished.get_or_insert_with(Instant::now);
        }
    }

    pub fn len(&self) -> usize {
        self.inner.lock().map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Drops expired ids, then the oldest finished ones until a tenth is free.
fn prune(inner: &mut Inner, now: Instant) {
    inner
        .map
        .retain(|_, e| e.finished.is_none_or(|t| now.duration_since(t) < KEEP));
    let map = &mut inner.map;
    inner.jobs.retain(|_, id| map.contains_key(id));
    if map.len() < MAX_IDS {
        return;
    }
    let mut finished: Vec<(Instant, String)> = map
        .iter()
        .filter(|(_, e)| e.finished.is_some() || matches!(e.slot.get(), Some(Err(_))))
        .map(|(k, e)| (e.since, k.clone()))
        .collect();
    finished.sort();
    for (_, k) in finished.into_iter().take(MAX_IDS / 10) {
        map.remove(&k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_attaches_a_conflict_is_refused_and_a_failure_frees_the_id() {
        let ids = RequestIds::default();
        let a = digest(b"a");
        let Claim::New(slot) = ids.claim("porep-1000-7", a, |_| true) else {
            panic!("first claim")
        };
        // Submitted meanwhile: the retry shares the slot even before it is set.
        assert!(matches!(
            ids.claim("porep-1000-7", a, |_| true),
            Claim::Attach(_)
        ));
        slot.set(Ok("j1".into())).expect("set once");
        match ids.claim("porep-1000-7", a, |_| true) {
            Claim::Attach(s) => assert_eq!(s.get(), Some(&Ok("j1".to_string()))),
            _ => panic!("attach"),
        }
        assert!(matches!(
            ids.claim("porep-1000-7", digest(b"b"), |_| true),
            Claim::Conflict
        ));
        // The job failed: the same id proves again.
        assert!(matches!(
            ids.claim("porep-1000-7", a, |_| false),
            Claim::New(_)
        ));
        // A refused submission releases its id.
        let Claim::New(s2) = ids.claim("x", a, |_| true) else {
            panic!()
        };
        s2.set(Err(Refusal {
            code: 3,
            message: "refused".into(),
        }))
        .expect("set");
        ids.release("x", &s2);
        assert!(matches!(
            ids.claim("x", digest(b"c"), |_| true),
            Claim::New(_)
        ));
    }
}
