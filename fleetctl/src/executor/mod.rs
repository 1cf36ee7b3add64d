//! Dispatcher and one task per host; canary, batches, failure budget.
