//! How the memory budget is split, decided once: the pinned pool may hold
//! `pool` bytes, and the rest, `working`, is for the partitions' working sets
//! and the loaded parameters. The config check, the daemon's start-up and
//! admission all use this one rule.

/// The budget's split between the pool and working memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryPlan {
    pub total: u64,
    pub pool: u64,
    pub working: u64,
}

/// `pool.max_bytes` leaves nothing for working memory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{pool} bytes leave nothing of the {total}-byte memory budget for proving's working memory; \
     set it below the budget (default: half)"
)]
pub struct PlanError {
    pub pool: u64,
    pub total: u64,
}

impl MemoryPlan {
    /// The pool's share: `pool_max` when set (it must be below `total`), else half.
    pub fn new(total: u64, pool_max: Option<u64>) -> Result<Self, PlanError> {
        let pool = match pool_max {
            None => total / 2,
            Some(p) if p < total => p,
            Some(p) => return Err(PlanError { pool: p, total }),
        };
        Ok(MemoryPlan {
            total,
            pool,
            working: total - pool,
        })
    }

    /// Working memory left once `loaded` bytes of parameters are resident.
    pub fn working_left(&self, loaded: u64) -> u64 {
        self.working.saturating_sub(loaded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_takes_half_unless_told_and_never_all() {
        let p = MemoryPlan::new(1000, None).expect("plan");
        assert_eq!((p.total, p.pool, p.working), (1000, 500, 500));
        let p = MemoryPlan::new(1000, Some(900)).expect("plan");
        assert_eq!((p.pool, p.working), (900, 100));
        assert_eq!(p.working_left(60), 40);
        assert_eq!(p.working_left(600), 0);
        let e = MemoryPlan::new(1000, Some(1000)).expect_err("all of it");
        assert_eq!(
            e,
            PlanError {
                pool: 1000,
                total: 1000
            }
        );
        assert!(e
            .to_string()
            .contains("leave nothing of the 1000-byte memory budget"));
        assert!(MemoryPlan::new(1000, Some(5000)).is_err());
    }
}
