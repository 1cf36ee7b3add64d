//! The prover daemon's HTTP API: request and response bodies shared by the
//! daemon (writer) and its clients (`prover client`, fleetctl's steps).
//!
//! Routes (all JSON unless noted):
//! - `POST /v1/jobs` [`SubmitRequest`] -> 202 [`SubmitResponse`]
//! - `POST /v1/filecoin/jobs` [`FilecoinSubmitRequest`] -> 202 [`SubmitResponse`]
//! - `GET /v1/jobs/{id}`, `GET /v1/jobs/{id}/wait?timeout=30s` -> [`JobStatus`]
//! - `DELETE /v1/jobs/{id}` -> [`JobStatus`] (state `cancelled` unless already finished)
//! - `GET /healthz` -> [`Health`]; `GET /readyz` -> [`Ready`] (200 or 503)
//! - `GET /status` -> [`Status`]; `GET /metrics` -> Prometheus text
//!
//! Every error is an [`ErrorBody`] with a 4xx/5xx status.

use crate::timing::Phase;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Bumped when a field changes meaning; carried in [`Status::api_version`].
pub const API_VERSION: u32 = 1;

/// Path prefix of the job routes.
pub const JOBS_PATH: &str = "/v1/jobs";
/// Route of Filecoin proof jobs (their bodies have their own size limit).
pub const FILECOIN_JOBS_PATH: &str = "/v1/filecoin/jobs";
pub const HEALTHZ_PATH: &str = "/healthz";
pub const READYZ_PATH: &str = "/readyz";
pub const STATUS_PATH: &str = "/status";
pub const METRICS_PATH: &str = "/metrics";

/// The sizes (in constraints) a bundled circuit may have: the daemon
/// refuses any other, and its clients check the same bounds before sending.
pub const CIRCUIT_SIZES: std::ops::RangeInclusive<u64> = 1 << 4..=1 << 27;
/// The most partitions one job may ask for.
pub const MAX_PARTITIONS: u32 = 1024;

/// A proving job: `partitions` independent proofs of the bundled `circuit`
/// sized for `size` constraints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    /// Bundled circuit name (`chain`, `sha256`).
    pub circuit: String,
    /// Constraint count to size the circuit for.
    pub size: u64,
    /// Number of partitions: independent proofs of the same statement, each
    /// with its own r, s.
    #[serde(default = "one")]
    pub partitions: u32,
    /// Seed of the public input and witness.
    #[serde(default)]
    pub seed: u64,
    /// Seed of the proof randomness: partition `i` uses
    /// `prove::partition_randomness(rs_seed, i)`. `None` draws the seed from
    /// the OS, so proof bytes are reproducible only when it is set (with
    /// `rs_seed = seed` they equal `prover prove --seed <seed>`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rs_seed: Option<u64>,
}

fn one() -> u32 {
    1
}

/// A Filecoin proof the daemon makes from the inputs a node hands over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FilecoinKind {
    /// PoRep C2: a sector's seal proof from its C1 output.
    PorepC2,
    /// One WindowPoSt partition from its sectors' vanilla proofs.
    WindowPost,
    /// A WinningPoSt from its sector's vanilla proof.
    WinningPost,
    /// A SnapDeals update proof from its partitions' vanilla proofs.
    SnapDeals,
}

impl FilecoinKind {
    pub const ALL: [FilecoinKind; 4] = [
        FilecoinKind::PorepC2,
        FilecoinKind::WindowPost,
        FilecoinKind::WinningPost,
        FilecoinKind::SnapDeals,
    ];

    /// The name jobs, records and the command line use.
    pub fn name(self) -> &'static str {
        match self {
            FilecoinKind::PorepC2 => "porep-c2",
            FilecoinKind::WindowPost => "window-post",
            FilecoinKind::WinningPost => "winning-post",
            FilecoinKind::SnapDeals => "snap-deals",
        }
    }

    /// A WinningPoSt is due within the epoch a block was won in: it goes
    /// ahead of every queued partition.
    pub fn is_urgent(self) -> bool {
        self == FilecoinKind::WinningPost
    }
}

impl std::fmt::Display for FilecoinKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for FilecoinKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown Filecoin proof `{}` (porep-c2, window-post, winning-post, snap-deals)",
                    s.escape_debug()
                )
            })
    }
}

/// A Filecoin proof job (`POST /v1/filecoin/jobs`): one variant per proof
/// kind, tagged by `kind`, each taking exactly its own fields (a field of
/// another kind is an unknown field, refused, never ignored). A new kind is
/// one more variant here and one arm in the prover's kind table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum FilecoinSubmitRequest {
    PorepC2(PorepC2Request),
    WindowPost(WindowPostRequest),
    WinningPost(WinningPostRequest),
    SnapDeals(SnapDealsRequest),
}

impl FilecoinSubmitRequest {
    pub fn kind(&self) -> FilecoinKind {
        match self {
            FilecoinSubmitRequest::PorepC2(_) => FilecoinKind::PorepC2,
            FilecoinSubmitRequest::WindowPost(_) => FilecoinKind::WindowPost,
            FilecoinSubmitRequest::WinningPost(_) => FilecoinKind::WinningPost,
            FilecoinSubmitRequest::SnapDeals(_) => FilecoinKind::SnapDeals,
        }
    }

    /// The prover id, 32 bytes as 64 hex digits.
    pub fn prover_id(&self) -> &str {
        match self {
            FilecoinSubmitRequest::PorepC2(r) => &r.prover_id,
            FilecoinSubmitRequest::WindowPost(r) => &r.prover_id,
            FilecoinSubmitRequest::WinningPost(r) => &r.prover_id,
            FilecoinSubmitRequest::SnapDeals(r) => &r.prover_id,
        }
    }

    /// Seed of r, s (reproducible proofs, for tests); `None` draws them
    /// from the OS, as a node must.
    pub fn rs_seed(&self) -> Option<u64> {
        match self {
            FilecoinSubmitRequest::PorepC2(r) => r.rs_seed,
            FilecoinSubmitRequest::WindowPost(r) => r.rs_seed,
            FilecoinSubmitRequest::WinningPost(r) => r.rs_seed,
            FilecoinSubmitRequest::SnapDeals(r) => r.rs_seed,
        }
    }
}

/// PoRep C2: a sector's seal proof from its C1 output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PorepC2Request {
    pub prover_id: String,
    /// The C1 output in any form `prover c2 --c1` reads (filecoin-proofs'
    /// `SealCommitPhase1Output` JSON, or the `{"SectorNum", "Phase1Out"}`
    /// wrapper).
    pub c1: serde_json::Value,
    /// The seal proof type (`StackedDrg2KiBV1_1`, ...), where the C1
    /// document does not name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registered_proof: Option<String>,
    /// The sector number, where the C1 document does not carry it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sector_id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rs_seed: Option<u64>,
}

/// One WindowPoSt partition from its sectors' vanilla proofs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowPostRequest {
    pub prover_id: String,
    /// A JSON array of `FallbackPoStSectorProof`.
    pub vanilla_proofs: serde_json::Value,
    /// The challenge randomness, 32 bytes as 64 hex digits.
    pub randomness: String,
    /// The sectors' size in bytes (2048, 8388608, ...).
    pub sector_size: u64,
    /// The partition's index in its deadline.
    #[serde(default)]
    pub partition: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rs_seed: Option<u64>,
}

/// A WinningPoSt from its sector's vanilla proof.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WinningPostRequest {
    pub prover_id: String,
    /// A JSON array of `FallbackPoStSectorProof`.
    pub vanilla_proofs: serde_json::Value,
    /// The challenge randomness, 32 bytes as 64 hex digits.
    pub randomness: String,
    /// The sector's size in bytes.
    pub sector_size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rs_seed: Option<u64>,
}

/// A SnapDeals update proof from its partitions' vanilla proofs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapDealsRequest {
    /// The miner's prover id (64 hex digits) where known: the update
    /// circuit does not use it; empty where not given.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prover_id: String,
    /// The update proof type (`StackedDrg32GiBV1`, ...; filecoin-proofs-api's
    /// `RegisteredUpdateProof` names).
    pub update_proof: String,
    /// The sector's CommR before the update, 32 bytes as 64 hex digits.
    pub comm_r_old: String,
    /// The sector's CommR after the update.
    pub comm_r_new: String,
    /// The new data's CommD.
    pub comm_d_new: String,
    /// A JSON array of the partitions' vanilla proofs (`PartitionProof`).
    pub vanilla_proofs: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rs_seed: Option<u64>,
}

/// Answer to an accepted submission (HTTP 202).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitResponse {
    pub job_id: String,
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Accepted, no partition started yet.
    Queued,
    /// At least one partition is being synthesised or proved.
    Running,
    /// Every partition proved and verified.
    Done,
    /// A partition failed (reason in [`JobStatus::error`]).
    Failed,
    /// Cancelled by `DELETE`; partitions already on a device finish, the rest are skipped.
    Cancelled,
}

impl JobState {
    /// Whether the job will not change any more.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            JobState::Done | JobState::Failed | JobState::Cancelled
        )
    }
}

/// A job as `GET /v1/jobs/{id}` reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobStatus {
    pub job_id: String,
    pub state: JobState,
    /// The bundled circuit, or the Filecoin proof kind (`porep-c2`, ...).
    pub circuit: String,
    /// Constraints per partition (a Filecoin job: its parameters' count).
    pub size: u64,
    /// The sector size of a Filecoin job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sector_size: Option<u64>,
    pub partitions: u32,
    /// Partitions proved so far.
    pub partitions_done: u32,
    /// Submission time, Unix milliseconds.
    pub submitted_ms: u64,
    /// Its place in the queues: `critical` (WinningPoSt), `high`
    /// (WindowPoSt) or `normal`. Absent from daemons older than it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    /// A Filecoin job whose submission read its parameter file: how long
    /// that took, ms (absent when the set was loaded already).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params_load_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Present once the job is `done`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<JobResult>,
}

/// The proofs of a finished job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobResult {
    /// One proof per partition, in partition order.
    pub proofs: Vec<PartitionProof>,
    /// A Filecoin job's proof as filecoin-proofs returns it (the
    /// partitions' proofs concatenated in order), hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
    /// Every proof passed bellperson's verifier against the parameters' key.
    pub verified: bool,
    /// `cpu` or `cuda`.
    pub backend: String,
    pub timing: TimingSummary,
}

/// The proof of one partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionProof {
    pub partition: u32,
    /// The Groth16 proof in bellperson's serialisation (A, B, C compressed), hex.
    pub proof: String,
    /// The public inputs the proof was verified against, each a scalar's
    /// canonical little-endian bytes, hex.
    pub public_inputs: Vec<String>,
    pub verified: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
}

/// Where a job's time went.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimingSummary {
    /// From submission to the last partition's verification.
    pub total_ms: f64,
    /// Per phase, summed over partitions (partitions overlap, so the sum
    /// can exceed `total_ms`).
    pub phases_ms: BTreeMap<Phase, f64>,
}

/// Body of every error answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// A short stable code: `bad_request`, `unknown_circuit`, `size_out_of_range`,
    /// `too_large_for_budget`, `params_missing`, `unauthorized`, `not_found`,
    /// `method_not_allowed`, `body_too_large`, `bad_filecoin_input` (a C1
    /// output or vanilla proof that is malformed, for another sector, or
    /// does not verify), `uri_too_long`, `headers_too_large`,
    /// `unsupported_media_type`, `queue_full`, `draining`, `busy`, `not_ready`,
    /// `no_device`, `internal`.
    pub error: String,
    /// A sentence for a human.
    pub detail: String,
}

/// `GET /healthz`: the process answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    pub alive: bool,
    pub version: String,
    pub build: String,
}

/// `GET /readyz`: 200 once the pool is allocated, preload parameters are
/// loaded and every configured device is initialised; 503 otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ready {
    pub ready: bool,
    /// Why not ready (`starting: loading parameters chain/1024`, `draining`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Life stage of the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DaemonState {
    Starting,
    Ready,
    Draining,
}

/// `GET /status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub api_version: u32,
    pub version: String,
    pub build: String,
    pub pid: u32,
    pub state: DaemonState,
    pub listen: String,
    pub uptime_s: f64,
    pub queue: QueueStats,
    pub budget: BudgetStats,
    pub pool: PoolStats,
    /// `cpu` or `cuda`.
    pub backend: String,
    /// One entry per device worker group (CPU workers appear as one entry).
    pub devices: Vec<DeviceState>,
    pub proofs_completed: u64,
    pub proofs_failed: u64,
    /// End of the last finished proof, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_proof_ms: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStats {
    /// Jobs accepted and not finished.
    pub depth: u64,
    pub max_jobs: u64,
    /// Jobs with at least one partition started.
    pub jobs_in_flight: u64,
    /// Partitions being synthesised, waiting for a device or on a device.
    pub partitions_in_flight: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetStats {
    pub total_bytes: u64,
    pub reserved_bytes: u64,
    pub available_bytes: u64,
    /// Requests blocked waiting for memory.
    pub waiters: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolStats {
    /// `mlock`, `cuda` or `heap`.
    pub allocator: String,
    /// Whether the pool's buffers are page-locked.
    pub pinned: bool,
    /// Bytes the pool holds (free and checked out).
    pub held_bytes: u64,
    /// Bytes checked out by partitions right now.
    pub in_use_bytes: u64,
    pub max_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceState {
    /// `cpu` or `cuda`.
    pub backend: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordinal: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub workers: u32,
    /// Workers proving a partition right now.
    pub busy: u32,
    pub partitions_done: u64,
    /// False once the device failed (or could not be opened): it proves
    /// nothing until the daemon restarts.
    #[serde(default = "yes")]
    pub in_rotation: bool,
    /// Why it is out of rotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The partitions its workers prove right now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proving: Vec<Proving>,
}

/// A partition on a device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proving {
    pub job_id: String,
    /// The job's circuit (`porep-c2:32GiB`, `chain`).
    pub circuit: String,
    pub partition: u32,
    /// `critical` (WinningPoSt), `high` (WindowPoSt) or `normal`.
    pub priority: String,
}

fn yes() -> bool {
    true
}

/// Longest timeout [`parse_timeout`] accepts (a day; the daemon caps waits lower).
pub const MAX_TIMEOUT_SECS: f64 = 86_400.0;

/// Parses the `timeout` query value of the wait route (`30s`, `2m`, `1500ms`,
/// or bare seconds), at most [`MAX_TIMEOUT_SECS`].
pub fn parse_timeout(s: &str) -> Option<std::time::Duration> {
    let s = s.trim();
    // A number longer than this is not a timeout anybody means.
    if s.len() > 32 {
        return None;
    }
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => (&s[..i], s[i..].trim()),
        None => (s, "s"),
    };
    let v: f64 = num.parse().ok()?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" | "" => v,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        _ => return None,
    };
    // Bounded before the conversion: from_secs_f64 panics past u64::MAX seconds.
    if !secs.is_finite() || !(0.0..=MAX_TIMEOUT_SECS).contains(&secs) {
        return None;
    }
    std::time::Duration::try_from_secs_f64(secs).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn submit_defaults_and_rejects_unknown_fields() {
        let r: SubmitRequest = serde_json::from_str(r#"{"circuit":"chain","size":1024}"#).unwrap();
        assert_eq!(r.partitions, 1);
        assert_eq!(r.seed, 0);
        assert_eq!(r.rs_seed, None);
        let e = serde_json::from_str::<SubmitRequest>(r#"{"circuit":"chain","size":1,"sizee":2}"#)
            .unwrap_err();
        assert!(e.to_string().contains("sizee"), "{e}");
    }

    #[test]
    fn timeout_units() {
        use std::time::Duration;
        assert_eq!(parse_timeout("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_timeout("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_timeout("1500ms"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_timeout("7"), Some(Duration::from_secs(7)));
        assert_eq!(parse_timeout("7 parsecs"), None);
        assert_eq!(parse_timeout("-1s"), None);
    }

    #[test]
    fn huge_nan_and_negative_timeouts_are_refused_without_panicking() {
        for t in [
            "99999999999999999999999s",
            "1e400",
            "NaN",
            "nan",
            "inf",
            "-0.5",
            "86401",
            "1.5.3s",
            ".",
            "",
            "9999999999999999999h",
            "1".repeat(40).as_str(),
        ] {
            assert_eq!(parse_timeout(t), None, "{t:?}");
        }
        assert_eq!(
            parse_timeout("86400"),
            Some(std::time::Duration::from_secs(86_400))
        );
    }

    #[test]
    fn job_state_is_snake_case_and_knows_when_finished() {
        assert_eq!(
            serde_json::to_string(&JobState::Cancelled).unwrap(),
            "\"cancelled\""
        );
        assert!(JobState::Done.is_finished());
        assert!(!JobState::Running.is_finished());
    }

    /// Each kind takes its own fields: another kind's field is refused by
    /// name, and the kind tag round-trips.
    #[test]
    fn a_filecoin_job_takes_exactly_its_kinds_fields() {
        let winning = r#"{"kind":"winning-post","prover_id":"00","vanilla_proofs":[],"randomness":"11","sector_size":2048}"#;
        let r: FilecoinSubmitRequest = serde_json::from_str(winning).unwrap();
        assert_eq!(r.kind(), FilecoinKind::WinningPost);
        assert_eq!(r.prover_id(), "00");
        let back: FilecoinSubmitRequest =
            serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
        let with_partition = winning.replace("2048}", "2048,\"partition\":1}");
        let e = serde_json::from_str::<FilecoinSubmitRequest>(&with_partition).unwrap_err();
        assert!(e.to_string().contains("unknown field `partition`"), "{e}");
        let c2_with_randomness =
            r#"{"kind":"porep-c2","prover_id":"00","c1":{},"randomness":"11"}"#;
        let e = serde_json::from_str::<FilecoinSubmitRequest>(c2_with_randomness).unwrap_err();
        assert!(e.to_string().contains("randomness"), "{e}");
        let missing =
            r#"{"kind":"window-post","prover_id":"00","randomness":"11","sector_size":2048}"#;
        let e = serde_json::from_str::<FilecoinSubmitRequest>(missing).unwrap_err();
        assert!(e.to_string().contains("vanilla_proofs"), "{e}");
        let e = serde_json::from_str::<FilecoinSubmitRequest>(r#"{"kind":"seal"}"#).unwrap_err();
        assert!(e.to_string().contains("unknown variant"), "{e}");
    }
}
