//! Errors of the lab fleet: each names the host (or the lab-wide step) and,
//! for a failed command, the command line and its stderr.

use std::path::PathBuf;
use std::time::Duration;

/// Everything that can go wrong while building, poking or tearing down a lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("the lab fleet needs root (namespaces, veth links, sshd); running as uid {uid}")]
    NotRoot { uid: u32 },

    #[error("a lab needs between 1 and {max} hosts, not {requested}")]
    HostCount { requested: usize, max: usize },

    #[error("host index {index} is out of range: the lab has {count} hosts (h01 is index 0)")]
    NoSuchHost { index: usize, count: usize },

    #[error("lab directory {path} is unusable: {reason}")]
    BaseDir { path: PathBuf, reason: String },

    #[error("{host}: `{command}` failed ({status}): {stderr}")]
    Command {
        host: String,
        command: String,
        status: String,
        stderr: String,
    },

    #[error("{host}: cannot run `{command}`: {source}")]
    Spawn {
        host: String,
        command: String,
        #[source]
        source: std::io::Error,
    },

    #[error("{host}: `{command}` did not finish within {waited:?}")]
    CommandTimeout {
        host: String,
        command: String,
        waited: Duration,
    },

    #[error("{path}: cannot {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },

    #[error("{host}: {what} within {waited:?}; {detail}")]
    Timeout {
        host: String,
        what: &'static str,
        waited: Duration,
        detail: String,
    },

    #[error("{host}: the host's init exited during start-up ({status}); init log: {log}")]
    InitExited {
        host: String,
        status: String,
        log: String,
    },

    #[error("no free 10.x.y.0/24 subnet left for a lab (tried {tried})")]
    NoFreeSubnet { tried: usize },

    #[error(
        "{host}: network emulation is unavailable: this kernel has no netem qdisc \
         (sch_netem not built or not loadable); `{command}` said: {stderr}"
    )]
    NetemUnsupported {
        host: String,
        command: String,
        stderr: String,
    },

    #[error(
        "{host}: /data cannot be resized to {requested} bytes: {reason} \
         (it currently holds {used} bytes)"
    )]
    DataSize {
        host: String,
        requested: u64,
        used: u64,
        reason: String,
    },

    #[error("lab state file {path}: {reason}")]
    State { path: PathBuf, reason: String },

    #[error("no lab with id {id} under {base}")]
    UnknownLab { id: String, base: PathBuf },

    #[error("teardown of lab {id} was incomplete: {}", problems.join("; "))]
    Teardown { id: String, problems: Vec<String> },
}

impl LabError {
    pub(crate) fn io(
        path: impl Into<PathBuf>,
        action: &'static str,
        source: std::io::Error,
    ) -> Self {
        LabError::Io {
            path: path.into(),
            action,
            source,
        }
    }
}
