//! Audit log of every step on every host, JSON lines.
