//! Whether a job may be accepted: the request's bounds, and whether one of
//! its partitions fits the memory plan. Pure functions of their inputs.

use crate::circuit::{self, CircuitKind, CircuitShape, MAX_SIZE, MIN_SIZE};
use crate::memory_plan::MemoryPlan;
use crate::synthesis::pool_bytes;
use fleet_wire::api::SubmitRequest;

/// Most partitions one job may ask for.
pub const MAX_PARTITIONS: u32 = fleet_wire::api::MAX_PARTITIONS;

/// Why a submission was refused; each maps to one HTTP status in the API.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error("{0}")]
    UnknownCircuit(#[source] circuit::CircuitError),
    #[error("{0}")]
    SizeOutOfRange(String),
    #[error("partitions must be between 1 and {max}, got {got}")]
    BadPartitions { got: u32, max: u32 },
    #[error(
        "a partition of {circuit} at size {size} needs {pool_need} bytes of pool buffers and \
         {working} bytes of working memory (its parameters included when not loaded yet), but \
         the pool may hold {pool_max} bytes and the rest of the memory budget (less the \
         parameters loaded) is {working_max} bytes"
    )]
    TooLarge {
        circuit: String,
        size: u64,
        pool_need: u64,
        pool_max: u64,
        working: u64,
        working_max: u64,
    },
    #[error("queue is full: {depth} jobs accepted and not finished (queue.max_jobs = {max}); retry later")]
    QueueFull { depth: u64, max: u64 },
    #[error("the daemon is draining and accepts no new jobs")]
    Draining,
    #[error("{0}")]
    Busy(String),
    #[error("no device is in rotation: every device failed (see the daemon's log and /status)")]
    NoDevice,
    #[error("{0}; the daemon's config does not allow TEST-ONLY parameters (test_params)")]
    ParamsMissing(#[source] crate::params::ParamsError),
    /// A Filecoin job's inputs or parameter file.
    #[error("{0}")]
    Filecoin(#[source] crate::filecoin::FilecoinError),
}

/// Heap bytes proving one partition of `shape` allocates besides its pool
/// buffers: the gathered scalars of the A and B MSMs and the backends'
/// per-call scratch (bucket sums, FFT twiddles), bounded by two vectors the
/// size of the larger query.
pub fn working_bytes(shape: &CircuitShape) -> u64 {
    let vars = (shape.num_inputs + shape.num_aux) as u64;
    2 * vars.max(shape.domain_size() as u64) * 32
}

/// The request's circuit, once its fields are within bounds.
pub fn check_request(req: &SubmitRequest) -> Result<CircuitKind, SubmitError> {
    let kind: CircuitKind = req.circuit.parse().map_err(SubmitError::UnknownCircuit)?;
    if !(MIN_SIZE as u64..=MAX_SIZE as u64).contains(&req.size) {
        return Err(SubmitError::SizeOutOfRange(format!(
            "size {} is out of range: it must be between {MIN_SIZE} (2^4) and {MAX_SIZE} (2^27) constraints",
            req.size
        )));
    }
    if req.partitions == 0 || req.partitions > MAX_PARTITIONS {
        return Err(SubmitError::BadPartitions {
            got: req.partitions,
            max: MAX_PARTITIONS,
        });
    }
    Ok(kind)
}

/// A lower bound of a partition's domain at `size`, known without counting:
/// a chain fills exactly `size` padded constraints; a sha256 circuit takes
/// whole blocks (fewer than 2^15 constraints each) up to `size`, at least one.
fn domain_lower_bound(kind: CircuitKind, size: u64) -> u64 {
    let padded = match kind {
        CircuitKind::Chain => size,
        CircuitKind::Sha256 => size.saturating_sub(1 << 15).max(1 << 14),
    };
    padded.max(1).next_power_of_two()
}

const G1_BYTES: u64 = std::mem::size_of::<blstrs::G1Affine>() as u64;

/// Where a partition has to fit: the plan, less the parameters loaded.
#[derive(Debug, Clone, Copy)]
pub struct Room {
    pub plan: MemoryPlan,
    /// Bytes of parameters resident now.
    pub params_loaded: u64,
}

impl Room {
    fn refuse(&self, kind: CircuitKind, size: u64, pool_need: u64, working: u64) -> SubmitError {
        SubmitError::TooLarge {
            circuit: kind.to_string(),
            size,
            pool_need,
            pool_max: self.plan.pool,
            working,
            working_max: self.plan.working_left(self.params_loaded),
        }
    }

    fn check(
        &self,
        kind: CircuitKind,
        size: u64,
        pool: u64,
        working: u64,
    ) -> Result<(), SubmitError> {
        if pool > self.plan.pool || working > self.plan.working_left(self.params_loaded) {
            return Err(self.refuse(kind, size, pool, working));
        }
        Ok(())
    }

    /// Refuses what cannot fit before a core is spent counting constraints.
    pub fn check_bound(&self, kind: CircuitKind, size: u64) -> Result<(), SubmitError> {
        let m = domain_lower_bound(kind, size);
        self.check(kind, size, 3 * 32 * m, 2 * 32 * m + m * G1_BYTES)
    }

    /// Whether a partition of `shape` fits, its parameters (`params_bytes`,
    /// `None` when unknown) counted unless already loaded.
    pub fn check_shape(
        &self,
        kind: CircuitKind,
        size: u64,
        shape: &CircuitShape,
        params: ParamsNeed,
    ) -> Result<(), SubmitError> {
        let params_need = match params {
            ParamsNeed::Loaded => 0,
            ParamsNeed::Bytes(b) => b,
            ParamsNeed::Unknown => shape.domain_size() as u64 * G1_BYTES,
        };
        self.check(
            kind,
            size,
            pool_bytes(shape),
            working_bytes(shape) + params_need,
        )
    }
}

/// What a job's parameters add to its first partition's working memory.
#[derive(Debug, Clone, Copy)]
pub enum ParamsNeed {
    Loaded,
    Bytes(u64),
    /// Not on disk yet (generated on first use): one G1 point per domain element at least.
    Unknown,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(circuit: &str, size: u64, partitions: u32) -> SubmitRequest {
        SubmitRequest {
            circuit: circuit.into(),
            size,
            partitions,
            seed: 0,
            rs_seed: None,
        }
    }

    #[test]
    fn requests_out_of_bounds_are_refused_with_the_bound() {
        assert_eq!(
            check_request(&req("chain", 1024, 1)).ok(),
            Some(CircuitKind::Chain)
        );
        let e = check_request(&req("sha512", 1024, 1)).expect_err("unknown");
        assert!(matches!(e, SubmitError::UnknownCircuit(_)), "{e}");
        for size in [0, MIN_SIZE as u64 - 1, MAX_SIZE as u64 + 1] {
            let e = check_request(&req("chain", size, 1)).expect_err("size");
            assert!(e.to_string().contains("between 16 (2^4)"), "{e}");
        }
        for p in [0, MAX_PARTITIONS + 1] {
            let e = check_request(&req("chain", 1024, p)).expect_err("partitions");
            assert!(matches!(e, SubmitError::BadPartitions { got, .. } if got == p));
        }
    }

    #[test]
    fn the_room_is_the_plan_less_loaded_parameters() {
        let shape = circuit::shape(CircuitKind::Chain, 1024).expect("shape");
        let (pool, work) = (pool_bytes(&shape), working_bytes(&shape));
        let plan = |p: u64, w: u64| MemoryPlan {
            total: p + w,
            pool: p,
            working: w,
        };
        let fits = Room {
            plan: plan(pool, work),
            params_loaded: 0,
        };
        assert!(fits
            .check_shape(CircuitKind::Chain, 1024, &shape, ParamsNeed::Loaded)
            .is_ok());
        // Parameters not loaded yet count against working memory.
        let e = fits
            .check_shape(CircuitKind::Chain, 1024, &shape, ParamsNeed::Bytes(1))
            .expect_err("one byte over");
        let SubmitError::TooLarge {
            working,
            working_max,
            pool_max,
            ..
        } = e
        else {
            panic!("{e}");
        };
        assert_eq!((working, working_max, pool_max), (work + 1, work, pool));
        // Loaded parameters of other sets shrink the room.
        let crowded = Room {
            plan: plan(pool, work),
            params_loaded: 1,
        };
        assert!(crowded
            .check_shape(CircuitKind::Chain, 1024, &shape, ParamsNeed::Loaded)
            .is_err());
        // The pool share must hold the partition's buffers.
        let small_pool = Room {
            plan: plan(pool - 1, work),
            params_loaded: 0,
        };
        assert!(small_pool
            .check_shape(CircuitKind::Chain, 1024, &shape, ParamsNeed::Loaded)
            .is_err());
    }

    #[test]
    fn the_bound_never_refuses_what_the_exact_check_accepts() {
        for (kind, size) in [
            (CircuitKind::Chain, 1000),
            (CircuitKind::Chain, 1024),
            (CircuitKind::Sha256, 40_000),
            (CircuitKind::Sha256, 70_000),
        ] {
            let shape = circuit::shape(kind, size as usize).expect("shape");
            let room = Room {
                plan: MemoryPlan {
                    total: 0,
                    pool: pool_bytes(&shape),
                    working: working_bytes(&shape) + shape.domain_size() as u64 * G1_BYTES,
                },
                params_loaded: 0,
            };
            room.check_shape(kind, size, &shape, ParamsNeed::Unknown)
                .expect("exact fit");
            room.check_bound(kind, size)
                .expect("the bound is below the exact need");
        }
    }
}
