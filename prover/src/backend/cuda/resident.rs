//! Parameter bases kept on the device across proofs.
//!
//! A parameter set's queries (h, l, a, b_g1 in G1, b_g2 in G2) are the
//! same for every proof made with it, and at 2^24 each G1 query is 1.6 GB
//! (b_g2 3.2 GB): uploading them per MSM would cost more than the MSM. They are uploaded once, keyed by the
//! parameter file's checksum and the query, and evicted least recently used
//! when a new set would exceed the device-memory budget. Each query is kept
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
            let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(e) = self.entries.remove(&oldest) {
                tracing::info!(
                    device,
                    set = %oldest.0,
                    query = oldest.1.as_str(),
                    bytes = e.buf.bytes(),
                    "resident bases evicted (least recently used)"
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
