//! Rollout steps, one file each, idempotent and bounded in time.
