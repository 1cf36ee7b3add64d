//! Ctrl-C as the dispatcher hands it to every host task.

/// Ctrl-C level: the first asks hosts to stop after their current step,
/// the second aborts the running steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stop {
    Run,
    Finish,
    Abort,
}
