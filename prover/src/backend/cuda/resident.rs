//! Parameter bases kept on the device across proofs.
//!
//! A parameter set's queries (h, l, a, b_g1 in G1, b_g2 in G2) are the
//! same for every proof made with it, and at 2^24 each G1 query is 1.6 GB
//! (b_g2 3.2 GB): uploading them per MSM would cost more than the MSM. They are uploaded once, keyed by the
//! parameter file's checksum and the query, and evicted when a new query
//! would exceed the device-memory budget ([`victim`]: other sets' queries
//! least recently used first; then, for a set larger than the whole
//! budget, its own most recently used query). Each query is kept
//! with a table of multiples of its bases ([`TablePlan`]: row 0 is the
//! bases as uploaded, the device fills the others), which lets its MSMs
//! use wider windows.

use super::memory::{upload_ordered, DeviceBuffer};
use super::msm::TablePlan;
use crate::backend::{BackendError, BaseQuery};
use cudarc::driver::{sys, CudaContext, CudaStream};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug)]
struct Entry {
    buf: DeviceBuffer,
    points: usize,
    table: TablePlan,
    last_used: u64,
}

/// One query of a parameter set, as [`ResidentBases::get_or_upload`] takes it.
#[derive(Debug, Clone, Copy)]
pub struct Query<'a> {
    /// The parameter file's checksum.
    pub set: &'a str,
    pub which: BaseQuery,
    /// The bases in their device layout.
    pub bytes: &'a [u8],
    pub points: usize,
    pub table: TablePlan,
}

/// A resident query: its table of multiples on the device.
#[derive(Debug, Clone, Copy)]
pub struct Resident {
    /// Row 0 (the bases); row g starts `g × points` bases further.
    pub ptr: sys::CUdeviceptr,
    pub points: usize,
    pub table: TablePlan,
    /// Uploaded by this call: rows 1.. are still to be computed.
    pub fresh: bool,
}

/// The device's resident queries.
#[derive(Debug)]
pub struct ResidentBases {
    entries: HashMap<(String, BaseQuery), Entry>,
    budget: u64,
    tick: u64,
}

impl ResidentBases {
    /// At most `budget` bytes of bases on the device.
    pub fn new(budget: u64) -> Self {
        Self {
            entries: HashMap::new(),
            budget,
            tick: 0,
        }
    }

    pub fn bytes(&self) -> u64 {
        self.entries.values().map(|e| e.buf.bytes() as u64).sum()
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// The part of the budget no resident query holds.
    pub fn free_bytes(&self) -> u64 {
        self.budget.saturating_sub(self.bytes())
    }

    /// The device copy of `q`, uploading it into row 0 of a table laid out
    /// by `q.table` first if it is not resident. `None` when the table
    /// alone exceeds the budget (the caller then uploads per call).
    pub fn get_or_upload(
        &mut self,
        ctx: &Arc<CudaContext>,
        device: u32,
        stream: &CudaStream,
        q: Query<'_>,
    ) -> Result<Option<Resident>, BackendError> {
        let Query {
            set,
            which,
            bytes: query,
            points,
            table,
        } = q;
        self.tick += 1;
        let key = (set.to_string(), which);
        if let Some(e) = self.entries.get_mut(&key) {
            // A checksum names one file, so the length always agrees; a
            // mismatch means a caller bug, and re-uploading is the safe answer.
            if e.points == points && e.buf.bytes() == query.len() * e.table.rows as usize {
                e.last_used = self.tick;
                return Ok(Some(Resident {
                    ptr: e.buf.ptr(),
                    points,
                    table: e.table,
                    fresh: false,
                }));
            }
            self.entries.remove(&key);
        }
        let bytes = query.len() as u64 * u64::from(table.rows);
        if bytes > self.budget || query.is_empty() {
            return Ok(None);
        }
        while self.bytes() + bytes > self.budget {
            let Some(out) = victim(self.entries.iter().map(|(k, e)| (k, e.last_used)), set) else {
                break;
            };
            if let Some(e) = self.entries.remove(&out) {
                tracing::info!(
                    device,
                    set = %out.0,
                    query = out.1.as_str(),
                    bytes = e.buf.bytes(),
                    rule = if out.0 == set {
                        "most recently used of a set larger than the budget"
                    } else {
                        "least recently used of another set"
                    },
                    "resident bases evicted"
                );
            }
        }
        let t = Instant::now();
        let buf = DeviceBuffer::alloc(ctx, device, bytes as usize)?;
        // `buf` holds the query's bytes `table.rows` times; row 0 is
        // written here, before the table kernels read it on `stream`.
        upload_ordered(device, stream, buf.ptr(), query)?;
        tracing::info!(
            device,
            set,
            query = which.as_str(),
            points,
            bytes = query.len(),
            table_rows = table.rows,
            ms = format!("{:.1}", t.elapsed().as_secs_f64() * 1e3),
            "bases uploaded to the device (kept resident)"
        );
        let ptr = buf.ptr();
        self.entries.insert(
            key,
            Entry {
                buf,
                points,
                table,
                last_used: self.tick,
            },
        );
        Ok(Some(Resident {
            ptr,
            points,
            table,
            fresh: true,
        }))
    }

    /// Drops a query (its table could not be completed).
    pub fn remove(&mut self, set: &str, which: BaseQuery) {
        self.entries.remove(&(set.to_string(), which));
    }
}

/// The query to evict to make room for one of `set`: the least recently
/// used of another set's; when only `set`'s own are left (the set alone
/// exceeds the budget), its most recently used. A proof walks a set's
/// queries in the same order every time, so in a set that does not fit,
/// least-recently-used eviction always drops the query needed next and
/// every proof uploads all of them (chain 2^27 on the H200: 77 GB a proof);
/// dropping the most recent keeps all but one resident: with room for k of
/// a cycle of k + 1 queries, one upload every k queries, the fewest any
/// rule achieves on a fixed cycle (it is what evicting the query needed
/// furthest ahead does).
fn victim<'a>(
    entries: impl Iterator<Item = (&'a (String, BaseQuery), u64)>,
    set: &str,
) -> Option<(String, BaseQuery)> {
    let mut other: Option<(&(String, BaseQuery), u64)> = None;
    let mut own: Option<(&(String, BaseQuery), u64)> = None;
    for (key, used) in entries {
        if key.0 == set {
            if own.is_none_or(|(_, u)| used > u) {
                own = Some((key, used));
            }
        } else if other.is_none_or(|(_, u)| used < u) {
            other = Some((key, used));
        }
    }
    other.or(own).map(|(k, _)| k.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The residency rule without a device: queries of `size` bytes, a
    /// budget, and the uploads each access makes.
    struct Model {
        entries: HashMap<(String, BaseQuery), u64>,
        budget: u64,
        size: u64,
        tick: u64,
        uploads: usize,
    }

    impl Model {
        fn new(budget: u64, size: u64) -> Self {
            Self {
                entries: HashMap::new(),
                budget,
                size,
                tick: 0,
                uploads: 0,
            }
        }

        fn access(&mut self, set: &str, which: BaseQuery) {
            self.tick += 1;
            let key = (set.to_string(), which);
            if let Some(used) = self.entries.get_mut(&key) {
                *used = self.tick;
                return;
            }
            while (self.entries.len() as u64 + 1) * self.size > self.budget {
                let out = victim(self.entries.iter().map(|(k, u)| (k, *u)), set).unwrap();
                self.entries.remove(&out);
            }
            self.uploads += 1;
            self.entries.insert(key, self.tick);
        }
    }

    const ORDER: [BaseQuery; 5] = [
        BaseQuery::H,
        BaseQuery::L,
        BaseQuery::A,
        BaseQuery::BG1,
        BaseQuery::BG2,
    ];

    #[test]
    fn a_set_larger_than_the_budget_keeps_all_but_one_query_resident() {
        // Room for four of five queries, the shape of chain 2^27.
        let mut m = Model::new(4, 1);
        for q in ORDER {
            m.access("big", q);
        }
        assert_eq!(m.uploads, 5);
        for proof in 0..20 {
            let before = m.uploads;
            for q in ORDER {
                m.access("big", q);
            }
            assert!(m.uploads - before <= 2, "proof {proof}");
            assert_eq!(m.entries.len(), 4);
        }
        // One upload every four queries: 100 accesses, 25 uploads (least
        // recently used would make all 100).
        assert_eq!(m.uploads - 5, 25);
    }

    #[test]
    fn other_sets_go_first_least_recently_used() {
        let mut m = Model::new(10, 1);
        for q in ORDER {
            m.access("old", q);
        }
        for q in ORDER {
            m.access("mid", q);
        }
        // A third set evicts "old" (the least recently used) and keeps "mid".
        for q in ORDER {
            m.access("new", q);
        }
        assert!(m.entries.keys().all(|(s, _)| s != "old"));
        assert_eq!(m.entries.keys().filter(|(s, _)| s == "mid").count(), 5);
        // Sets that fit take no uploads on their next proofs.
        let before = m.uploads;
        for set in ["mid", "new", "mid", "new"] {
            for q in ORDER {
                m.access(set, q);
            }
        }
        assert_eq!(m.uploads, before);
    }

    #[test]
    fn nothing_to_evict_yields_none() {
        let empty: Vec<((String, BaseQuery), u64)> = Vec::new();
        assert!(victim(empty.iter().map(|(k, u)| (k, *u)), "s").is_none());
        let one = [(("s".to_string(), BaseQuery::A), 3u64)];
        assert_eq!(
            victim(one.iter().map(|(k, u)| (k, *u)), "s"),
            Some(("s".to_string(), BaseQuery::A))
        );
    }
}
