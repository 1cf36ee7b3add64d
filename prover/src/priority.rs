//! Where a job's partitions queue in the daemon's engine. Its own file
//! because two layers name it: a Filecoin kind says how urgent its proofs
//! are ([`crate::statement::Statement::priority`]), the engine
//! queues by it ([`crate::daemon::engine`]), and neither imports the other
//! for it.

/// Where a job's partitions queue. A WinningPoSt (critical) goes ahead of
/// every queued partition and is synthesised by a worker of its own; a
/// WindowPoSt (high) ahead of the PoRep and bundled partitions waiting for
/// a synthesis worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    Normal,
    High,
    Critical,
}

impl Priority {
    pub fn name(self) -> &'static str {
        match self {
            Priority::Normal => "normal",
            Priority::High => "high",
            Priority::Critical => "critical",
        }
    }
}
