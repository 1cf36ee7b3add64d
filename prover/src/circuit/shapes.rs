//! The one cache of counted circuit shapes, shared by the parameter store,
//! admission and synthesis: counting a large sha256 circuit takes a while,
//! and every user must see the same shape for a (circuit, size).

use super::{shape, CircuitError, CircuitKind, CircuitShape};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::Duration;

/// Counted shapes, and a lock so one count runs at a time: whatever clients
/// send, counting takes one core at most.
#[derive(Debug, Default)]
pub struct ShapeCache {
    shapes: Mutex<HashMap<(CircuitKind, usize), CircuitShape>>,
    counting: Mutex<()>,
}

impl ShapeCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// The shape when it was counted already.
    pub fn cached(&self, kind: CircuitKind, size: usize) -> Option<CircuitShape> {
        self.shapes.lock().get(&(kind, size)).copied()
    }

    /// The shape of `kind` at `size`, counted once; waits for a count in
    /// progress as long as it takes.
    pub fn get(&self, kind: CircuitKind, size: usize) -> Result<CircuitShape, CircuitError> {
        if let Some(s) = self.cached(kind, size) {
            return Ok(s);
        }
        let _counting = self.counting.lock();
        self.count_locked(kind, size)
    }

    /// As [`get`](Self::get), but waits at most `wait` for another count to
    /// finish: `Ok(None)` when it did not.
    pub fn get_within(
        &self,
        kind: CircuitKind,
        size: usize,
        wait: Duration,
    ) -> Result<Option<CircuitShape>, CircuitError> {
        if let Some(s) = self.cached(kind, size) {
            return Ok(Some(s));
        }
        let Some(_counting) = self.counting.try_lock_for(wait) else {
            return Ok(None);
        };
        self.count_locked(kind, size).map(Some)
    }

    fn count_locked(&self, kind: CircuitKind, size: usize) -> Result<CircuitShape, CircuitError> {
        // Counted by whoever held the lock before us?
        if let Some(s) = self.cached(kind, size) {
            return Ok(s);
        }
        let s = shape(kind, size)?;
        self.shapes.lock().insert((kind, size), s);
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_shape_is_counted_once_and_errors_are_not_cached() {
        let cache = ShapeCache::new();
        assert!(cache.cached(CircuitKind::Chain, 64).is_none());
        let s = cache.get(CircuitKind::Chain, 64).expect("shape");
        assert_eq!(cache.cached(CircuitKind::Chain, 64), Some(s));
        assert_eq!(s, shape(CircuitKind::Chain, 64).expect("direct count"));
        assert!(cache.get(CircuitKind::Chain, 3).is_err());
        assert!(cache.cached(CircuitKind::Chain, 3).is_none());
    }

    #[test]
    fn a_count_in_progress_makes_a_bounded_wait_give_up() {
        let cache = Arc::new(ShapeCache::new());
        let held = cache.counting.lock();
        let c = cache.clone();
        let r = std::thread::spawn(move || {
            c.get_within(CircuitKind::Chain, 64, Duration::from_millis(1))
        })
        .join()
        .expect("thread");
        assert!(matches!(r, Ok(None)), "{r:?}");
        drop(held);
        assert!(matches!(
            cache.get_within(CircuitKind::Chain, 64, Duration::from_millis(1)),
            Ok(Some(_))
        ));
    }
}
