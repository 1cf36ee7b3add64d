//! Pool of page-locked host buffers reused across jobs.
