//! Fleet-wide timing: collect, report, export.
