//! What a host's earlier steps recorded for the later ones within one run.

use super::gap_record::GapProbe;
use super::proc::MemInfo;
use std::time::Instant;

/// What `drain` saw before it signalled the daemon: `wait_release` compares against it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drained {
    pub pid: u32,
    /// Host memory just before the signal.
    pub before: MemInfo,
    /// What the daemon itself held then: `VmLck` (mlock pool), `RssShmem`
    /// (`cuMemHostAlloc` buffers show up as shared memory) and `RssAnon`
    /// (registered CUDA slabs, the mlock pool and the heap: anonymous).
    pub vm_lck: u64,
    pub rss_shmem: u64,
    pub rss_anon: u64,
    pub killed: bool,
}

impl Drained {
    /// `Shmem` expected once the daemon's memory is back.
    pub fn shmem_baseline(&self) -> u64 {
        self.before.shmem.saturating_sub(self.rss_shmem)
    }
    /// `Mlocked` expected once the daemon's memory is back.
    pub fn mlocked_baseline(&self) -> u64 {
        self.before.mlocked.saturating_sub(self.vm_lck)
    }
    /// Bytes the host gets back once the daemon is gone: all its resident
    /// anonymous and shared memory. Registered pinned memory is only
    /// `RssAnon`, so this, not `Shmem` or `Mlocked`, is what shows that
    /// it came back. (`VmLck` is part of `RssAnon`; it counts alone only
    /// when an older status file gave no `RssAnon`.)
    pub fn returned(&self) -> u64 {
        self.rss_anon.max(self.vm_lck) + self.rss_shmem
    }
}

/// What `start` did: `verify` checks exactly this process and log range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    pub pid: u32,
    pub release: String,
    /// Size of `logs/prover.log` before the start: the new run's lines follow it.
    pub log_offset: u64,
}

/// Where a handover stands (`handover` started the new daemon beside the
/// old one; `drain` sees it take over).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handover {
    /// The successor is started up and waits for the old daemon to let go.
    Waiting { successor: u32 },
    /// The successor took over from `from`, which may still be exiting.
    Done { successor: u32, from: u32 },
}

/// Per-host state carried from step to step within one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostProgress {
    /// The release `current` pointed at before `start` switched it.
    pub previous_release: Option<String>,
    pub drained: Option<Drained>,
    pub started: Option<Started>,
    pub handover: Option<Handover>,
    /// When the old daemon stopped taking work (just before `drain`'s
    /// SIGTERM, or `drain` finding none running).
    pub serving_stopped: Option<Instant>,
    /// When `verify` first saw the new daemon ready.
    pub serving_again: Option<Instant>,
    /// The probe of the daemon's address that `drain` started just before
    /// it stopped the old daemon: the serving gap as clients saw it, read
    /// when the host is done ([`super::gap_probe`]). Without one (it could
    /// not start), the gap falls back to `serving_stopped`..`serving_again`.
    pub gap_probe: Option<GapProbe>,
    /// What `upload` sent, until the host task reports it.
    pub uploaded: Option<Sent>,
}

impl HostProgress {
    /// The serving gap by the steps' clock: from the old daemon refusing
    /// new work to the new one ready; `None` until both ends are known.
    /// Only a fallback for [`super::gap_probe`], which sees what clients see.
    pub fn serving_gap(&self) -> Option<std::time::Duration> {
        Some(
            self.serving_again?
                .saturating_duration_since(self.serving_stopped?),
        )
    }
}

/// What one upload put on the link: recorded in the audit log and the
/// summary beside the step's time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// Bytes of the files as they land on the host (binary and config).
    pub file_bytes: u64,
    /// Bytes sent for them.
    pub sent_bytes: u64,
    /// `gzip` or `plain`.
    pub encoding: &'static str,
    /// Why a compressed upload went plain.
    pub plain_because: Option<String>,
}
