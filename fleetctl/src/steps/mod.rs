//! Rollout steps, one file each, idempotent and bounded in time.
//!
//! A playbook names steps as [`StepSpec`]s; the executor gives each host a
//! [`StepCtx`] (its transport, the release, and what earlier steps on that
//! host recorded) and calls [`run`] for each step in order, or [`describe`]
//! for `fleetctl plan`. Every step returns [`StepOutcome::Done`] (or
//! [`StepOutcome::Forced`]) or [`StepOutcome::Skipped`], or a [`StepError`]
//! saying what was kept intact.

pub mod collect_timing;
pub mod compress;
pub mod drain;
pub mod health;
pub mod lock;
pub mod params;
pub mod prepare;
pub mod remote;
pub mod rollback;
pub mod smoke;
pub mod start;
pub mod upload;
pub mod verify;
pub mod wait_release;

use crate::inventory::Host;
use crate::transport::{QuoteError, Transport, TransportError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub use collect_timing::CollectTimingParams;
pub use drain::DrainParams;
pub use health::HealthParams;
pub use lock::{acquire_lock, release_lock, LockGuard};
pub use params::ByteSize;
pub use prepare::PrepareParams;
pub use remote::{Layout, MemInfo};
pub use rollback::RollbackParams;
pub use smoke::SmokeParams;
pub use start::StartParams;
pub use upload::UploadParams;
pub use verify::VerifyParams;
pub use wait_release::WaitReleaseParams;

/// Declares every step once: its variant, its parameters and the name
/// playbooks call it by. The enum, [`STEP_NAMES`], [`StepSpec::name`] and
/// both directions of (de)serialization come from this one list.
macro_rules! steps {
    ($($variant:ident($params:ty) = $name:literal,)*) => {
        /// One step of a playbook, as written: `- upload: {keep_releases: 3}`, or
        /// just `- health` for the defaults. (De)serialized by hand as a one-key map,
        /// because YAML libraries otherwise want `!upload` tags for enums.
        #[derive(Debug, Clone, PartialEq)]
        pub enum StepSpec {
            $($variant($params),)*
        }

        /// Step names as written in playbooks.
        pub const STEP_NAMES: &[&str] = &[$($name,)*];

        impl StepSpec {
            /// The step's name as written in a playbook.
            pub fn name(&self) -> &'static str {
                match self {
                    $(StepSpec::$variant(_) => $name,)*
                }
            }

            /// The step called `name`, its parameters taken from `source`;
            /// `None` for a name no step has.
            fn from_name<S: ParamSource>(
                name: &str,
                source: &mut S,
            ) -> Result<Option<StepSpec>, S::Error> {
                Ok(Some(match name {
                    $($name => StepSpec::$variant(source.params()?),)*
                    _ => return Ok(None),
                }))
            }

            fn serialize_entry<M: serde::ser::SerializeMap>(&self, map: &mut M) -> Result<(), M::Error> {
                match self {
                    $(StepSpec::$variant(p) => map.serialize_entry($name, p),)*
                }
            }
        }
    };
}

steps! {
    Upload(UploadParams) = "upload",
    Prepare(PrepareParams) = "prepare",
    Drain(DrainParams) = "drain",
    WaitRelease(WaitReleaseParams) = "wait_release",
    Start(StartParams) = "start",
    Verify(VerifyParams) = "verify",
    Smoke(SmokeParams) = "smoke",
    Health(HealthParams) = "health",
    Rollback(RollbackParams) = "rollback",
    CollectTiming(CollectTimingParams) = "collect_timing",
}

/// Where a step's parameters come from: a bare name (the defaults) or the
/// value of its one-key map.
trait ParamSource {
    type Error;
    fn params<P: serde::de::DeserializeOwned + Default>(&mut self) -> Result<P, Self::Error>;
}

impl Serialize for StepSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(1))?;
        self.serialize_entry(&mut map)?;
        map.end()
    }
}

impl<'de> Deserialize<'de> for StepSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<StepSpec, D::Error> {
        use serde::de::{self, MapAccess, Visitor};

        struct SpecVisitor;

        /// A bare `- health`: the defaults.
        struct Defaults<E>(std::marker::PhantomData<E>);

        impl<E> ParamSource for Defaults<E> {
            type Error = E;
            fn params<P: Default>(&mut self) -> Result<P, E> {
                Ok(P::default())
            }
        }

        /// `- drain:` (null) means the defaults, like `- drain: {}`.
        struct Value<'a, 'de, A>(&'a mut A, std::marker::PhantomData<&'de ()>);

        impl<'de, A: MapAccess<'de>> ParamSource for Value<'_, 'de, A> {
            type Error = A::Error;
            fn params<P: serde::de::DeserializeOwned + Default>(&mut self) -> Result<P, A::Error> {
                Ok(self.0.next_value::<Option<P>>()?.unwrap_or_default())
            }
        }

        impl<'de> Visitor<'de> for SpecVisitor {
            type Value = StepSpec;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    "a step: a one-key map like `drain: {timeout: 30s}`, or a bare step name",
                )
            }

            fn visit_str<E: de::Error>(self, name: &str) -> Result<StepSpec, E> {
                StepSpec::from_name(name, &mut Defaults(std::marker::PhantomData))?
                    .ok_or_else(|| de::Error::unknown_variant(name, STEP_NAMES))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StepSpec, A::Error> {
                let Some(name) = map.next_key::<String>()? else {
                    return Err(de::Error::invalid_length(0, &"exactly one step name"));
                };
                let spec =
                    StepSpec::from_name(&name, &mut Value(&mut map, std::marker::PhantomData))?
                        .ok_or_else(|| de::Error::unknown_variant(&name, STEP_NAMES))?;
                if let Some(extra) = map.next_key::<String>()? {
                    return Err(de::Error::custom(format!(
                        "one step per list item: found `{extra}` after `{name}` (start a new `- {extra}: ...` item)"
                    )));
                }
                Ok(spec)
            }
        }

        d.deserialize_any(SpecVisitor)
    }
}

/// How a step ended when it did not fail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum StepOutcome {
    Done {
        detail: String,
    },
    /// Done, but only by force: `flag` is the word the final table puts in
    /// the step's cell (`SIGKILL`), because a forced drain may have cut
    /// proofs short and the detail line alone scrolls by unseen.
    Forced {
        detail: String,
        flag: String,
    },
    Skipped {
        reason: String,
    },
}

impl StepOutcome {
    pub fn done(detail: impl Into<String>) -> StepOutcome {
        StepOutcome::Done {
            detail: detail.into(),
        }
    }
    pub fn forced(flag: impl Into<String>, detail: impl Into<String>) -> StepOutcome {
        StepOutcome::Forced {
            detail: detail.into(),
            flag: flag.into(),
        }
    }
    /// What the step did or why it was skipped, in words.
    pub fn text(&self) -> &str {
        match self {
            StepOutcome::Done { detail } | StepOutcome::Forced { detail, .. } => detail,
            StepOutcome::Skipped { reason } => reason,
        }
    }
    pub fn skipped(reason: impl Into<String>) -> StepOutcome {
        StepOutcome::Skipped {
            reason: reason.into(),
        }
    }
}

/// Why a step failed, before the host and step are attached.
#[derive(Debug, thiserror::Error)]
pub enum Cause {
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error(transparent)]
    Quote(#[from] QuoteError),
    /// A check on the host did not pass; the text has the numbers seen.
    #[error("{0}")]
    Check(String),
    #[error("local file {}: {source}", path.display())]
    Local {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A failed step on one host.
#[derive(Debug, thiserror::Error)]
#[error("{host}: step {step} failed: {cause}; kept intact: {kept}")]
pub struct StepError {
    pub host: String,
    pub step: &'static str,
    #[source]
    pub cause: Cause,
    /// What the failure left untouched (the operator's starting point).
    pub kept: String,
}

/// The build being rolled out, as it is on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    pub binary: PathBuf,
    /// Hex sha256 of the binary: the release id on every host.
    pub sha256: String,
    /// Daemon config shipped beside the binary as `prover.toml`; `None`
    /// keeps whatever config the host has at its `config_path`.
    pub config: Option<PathBuf>,
    /// The binary compressed for `upload`, made once and shared by every
    /// host's copy of this release.
    pub compressed: compress::CompressedOnce,
}

impl Release {
    /// Hashes the binary; the config, if any, is checked to exist.
    pub fn from_files(binary: &Path, config: Option<&Path>) -> Result<Release, Cause> {
        let sha256 = sha256_file(binary)?;
        if let Some(config) = config {
            std::fs::metadata(config).map_err(|source| Cause::Local {
                path: config.to_owned(),
                source,
            })?;
        }
        Ok(Release {
            binary: binary.to_owned(),
            sha256,
            config: config.map(Path::to_owned),
            compressed: Default::default(),
        })
    }
}

/// Hex sha256 of a local file, streamed.
pub fn sha256_file(path: &Path) -> Result<String, Cause> {
    let local = |source| Cause::Local {
        path: path.to_owned(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(local)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(local)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

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

/// Per-host state carried from step to step within one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostProgress {
    /// The release `current` pointed at before `start` switched it.
    pub previous_release: Option<String>,
    pub drained: Option<Drained>,
    pub started: Option<Started>,
    /// When the old daemon stopped taking work (just before `drain`'s
    /// SIGTERM, or `drain` finding none running).
    pub serving_stopped: Option<Instant>,
    /// When `verify` first saw the new daemon ready.
    pub serving_again: Option<Instant>,
    /// What `upload` sent, until the host task reports it.
    pub uploaded: Option<upload::Sent>,
}

impl HostProgress {
    /// The serving gap: from the old daemon refusing new work to the new
    /// one ready; `None` until both ends are known.
    pub fn serving_gap(&self) -> Option<std::time::Duration> {
        Some(
            self.serving_again?
                .saturating_duration_since(self.serving_stopped?),
        )
    }
}

/// Test hooks that inject faults no healthy host produces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Faults {
    /// Flip one byte of the binary on its way to the host.
    pub corrupt_upload: bool,
}

/// Everything a step sees on one host.
#[derive(Debug)]
pub struct StepCtx<'a> {
    pub host: &'a Host,
    pub transport: &'a Transport,
    pub release: &'a Release,
    pub state: HostProgress,
    /// Dry run: describe, read what is cheap to read, change nothing.
    pub check: bool,
    pub faults: Faults,
}

impl<'a> StepCtx<'a> {
    pub fn new(host: &'a Host, transport: &'a Transport, release: &'a Release) -> StepCtx<'a> {
        StepCtx {
            host,
            transport,
            release,
            state: HostProgress::default(),
            check: false,
            faults: Faults::default(),
        }
    }

    pub fn layout(&self) -> Layout {
        Layout::new(self.host)
    }
}

/// Runs one step on the context's host.
pub async fn run(spec: &StepSpec, ctx: &mut StepCtx<'_>) -> Result<StepOutcome, StepError> {
    if ctx.check && !matches!(spec, StepSpec::Upload(_)) {
        return Ok(StepOutcome::skipped(format!(
            "check mode: would {}",
            describe(spec, ctx)
        )));
    }
    let result = match spec {
        StepSpec::Upload(p) => upload::run(p, ctx).await,
        StepSpec::Prepare(p) => prepare::run(p, ctx).await,
        StepSpec::Drain(p) => drain::run(p, ctx).await,
        StepSpec::WaitRelease(p) => wait_release::run(p, ctx).await,
        StepSpec::Start(p) => start::run(p, ctx).await,
        StepSpec::Verify(p) => verify::run(p, ctx).await,
        StepSpec::Smoke(p) => smoke::run(p, ctx).await,
        StepSpec::Health(p) => health::run(p, ctx).await,
        StepSpec::Rollback(p) => rollback::run(p, ctx).await,
        StepSpec::CollectTiming(p) => collect_timing::run(p, ctx).await,
    };
    result.map_err(|(cause, kept)| StepError {
        host: ctx.host.name.clone(),
        step: spec.name(),
        cause,
        kept,
    })
}

/// One line saying what the step would do on this host.
pub fn describe(spec: &StepSpec, ctx: &StepCtx<'_>) -> String {
    match spec {
        StepSpec::Upload(p) => upload::describe(p, ctx),
        StepSpec::Prepare(p) => prepare::describe(p, ctx),
        StepSpec::Drain(p) => drain::describe(p, ctx),
        StepSpec::WaitRelease(p) => wait_release::describe(p, ctx),
        StepSpec::Start(p) => start::describe(p, ctx),
        StepSpec::Verify(p) => verify::describe(p, ctx),
        StepSpec::Smoke(p) => smoke::describe(p, ctx),
        StepSpec::Health(p) => health::describe(p, ctx),
        StepSpec::Rollback(p) => rollback::describe(p, ctx),
        StepSpec::CollectTiming(p) => collect_timing::describe(p, ctx),
    }
}

/// A step's failure: the cause and what it kept intact.
pub type Failed = (Cause, String);

/// Attaches what was kept intact to any cause.
pub(crate) fn kept<T, E: Into<Cause>>(r: Result<T, E>, kept: &str) -> Result<T, Failed> {
    r.map_err(|e| (e.into(), kept.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn playbook_steps_parse_with_humane_units_and_defaults() {
        let yaml = "- upload: {keep_releases: 5}\n- prepare: {arch: sm_90}\n- drain: {timeout: 45s}\n- wait_release: {tolerance: 512MiB, min_available: 2GiB}\n- start: {}\n- verify: {fail_patterns: [OOM]}\n- smoke: {size: 2048}\n- health: {}\n- rollback: {}\n- collect_timing: {store: t, chunk_bytes: 65536}\n";
        let steps: Vec<StepSpec> = serde_yaml::from_str(yaml).unwrap();
        assert_eq!(steps.len(), 10);
        let StepSpec::Upload(u) = &steps[0] else {
            panic!("{:?}", steps[0])
        };
        assert_eq!(u.keep_releases, 5);
        let StepSpec::Prepare(p) = &steps[1] else {
            panic!("{:?}", steps[1])
        };
        assert_eq!(p.arch.as_deref(), Some("sm_90"));
        let StepSpec::Drain(d) = &steps[2] else {
            panic!("{:?}", steps[2])
        };
        assert_eq!(d.timeout, Duration::from_secs(45));
        assert_eq!(d.kill_wait, DrainParams::default().kill_wait);
        let StepSpec::WaitRelease(w) = &steps[3] else {
            panic!("{:?}", steps[3])
        };
        assert_eq!(w.tolerance, ByteSize::mib(512));
        assert_eq!(w.min_available, Some(ByteSize::gib(2)));
        let StepSpec::CollectTiming(c) = &steps[9] else {
            panic!("{:?}", steps[9])
        };
        assert_eq!((c.store.to_str(), c.chunk_bytes), (Some("t"), 65536));
        assert_eq!(c.timeout, CollectTimingParams::default().timeout);
        let names: Vec<_> = steps.iter().map(StepSpec::name).collect();
        assert_eq!(names, STEP_NAMES);
    }

    #[test]
    fn bare_names_and_empty_values_mean_defaults() {
        let steps: Vec<StepSpec> =
            serde_yaml::from_str("- health\n- drain:\n- start: {}\n").unwrap();
        assert_eq!(
            steps,
            [
                StepSpec::Health(HealthParams::default()),
                StepSpec::Drain(DrainParams::default()),
                StepSpec::Start(StartParams::default())
            ]
        );
        let err = serde_yaml::from_str::<Vec<StepSpec>>("- drain: {}\n  start: {}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("one step per list item"), "{err}");
    }

    #[test]
    fn unknown_steps_and_fields_are_rejected() {
        let err = serde_yaml::from_str::<Vec<StepSpec>>("- drain: {timout: 30s}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("timout"), "{err}");
        assert!(serde_yaml::from_str::<Vec<StepSpec>>("- reboot: {}\n").is_err());
        let err = serde_yaml::from_str::<Vec<StepSpec>>("- drain: {timeout: soon}\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("invalid duration"), "{err}");
    }

    #[test]
    fn specs_serialize_back_to_the_same_steps() {
        let steps = vec![
            StepSpec::Drain(DrainParams::default()),
            StepSpec::WaitRelease(WaitReleaseParams::default()),
        ];
        let text = serde_yaml::to_string(&steps).unwrap();
        let back: Vec<StepSpec> = serde_yaml::from_str(&text).unwrap();
        assert_eq!(back, steps);
    }
}
