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
mod ctx;
mod daemon_log;
pub mod drain;
pub mod gap_probe;
pub mod gap_record;
pub mod handover;
pub mod health;
mod layout;
pub mod lock;
mod outcome;
pub mod params;
pub mod prepare;
mod proc;
mod progress;
mod release;
pub mod remote;
pub mod rollback;
pub mod smoke;
pub mod start;
pub mod upload;
pub mod verify;
pub mod wait_release;

use serde::{Deserialize, Serialize};

pub use collect_timing::CollectTimingParams;
pub use ctx::{Faults, StepCtx};
pub use drain::DrainParams;
pub use handover::HandoverParams;
pub use health::HealthParams;
pub use layout::Layout;
pub use lock::{acquire_lock, peek_lock, release_lock, LockGuard};
pub use outcome::{Cause, Failed, StepError, StepOutcome};
pub use params::ByteSize;
pub use prepare::PrepareParams;
pub use proc::MemInfo;
pub use progress::{Drained, HostProgress, Sent, Started};
pub use release::{release_id, sha256_file, Release};
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
                    $($name => StepSpec::$variant(source.params($name)?),)*
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
    Handover(HandoverParams) = "handover",
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
/// value of its one-key map, held to its bounds ([`params::Check`]).
trait ParamSource {
    type Error;
    fn params<P: serde::de::DeserializeOwned + Default + params::Check>(
        &mut self,
        step: &str,
    ) -> Result<P, Self::Error>;
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
            fn params<P: Default>(&mut self, _step: &str) -> Result<P, E> {
                Ok(P::default())
            }
        }

        /// `- drain:` (null) means the defaults, like `- drain: {}`.
        struct Value<'a, 'de, A>(&'a mut A, std::marker::PhantomData<&'de ()>);

        impl<'de, A: MapAccess<'de>> ParamSource for Value<'_, 'de, A> {
            type Error = A::Error;
            fn params<P: serde::de::DeserializeOwned + Default + params::Check>(
                &mut self,
                step: &str,
            ) -> Result<P, A::Error> {
                let p = self.0.next_value::<Option<P>>()?.unwrap_or_default();
                p.check()
                    .map_err(|e| de::Error::custom(format!("{step}: {e}")))?;
                Ok(p)
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
        StepSpec::Handover(p) => handover::run(p, ctx).await,
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
        StepSpec::Handover(p) => handover::describe(p, ctx),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn playbook_steps_parse_with_humane_units_and_defaults() {
        let yaml = "- upload: {keep_releases: 5}\n- prepare: {arch: sm_90}\n- handover: {margin: 8GiB, wait: 15m}\n- drain: {timeout: 45s}\n- wait_release: {tolerance: 512MiB, min_available: 2GiB}\n- start: {}\n- verify: {fail_patterns: [OOM]}\n- smoke: {size: 2048}\n- health: {}\n- rollback: {}\n- collect_timing: {store: t, chunk_bytes: 65536}\n";
        let steps: Vec<StepSpec> = serde_yaml::from_str(yaml).unwrap();
        assert_eq!(steps.len(), 11);
        let StepSpec::Upload(u) = &steps[0] else {
            panic!("{:?}", steps[0])
        };
        assert_eq!(u.keep_releases, 5);
        let StepSpec::Prepare(p) = &steps[1] else {
            panic!("{:?}", steps[1])
        };
        assert_eq!(p.arch.as_deref(), Some("sm_90"));
        let StepSpec::Handover(h) = &steps[2] else {
            panic!("{:?}", steps[2])
        };
        assert_eq!(
            (h.margin, h.wait),
            (ByteSize::gib(8), Duration::from_secs(900))
        );
        assert_eq!(h.timeout, HandoverParams::default().timeout);
        let StepSpec::Drain(d) = &steps[3] else {
            panic!("{:?}", steps[3])
        };
        assert_eq!(d.timeout, Duration::from_secs(45));
        assert_eq!(d.kill_wait, DrainParams::default().kill_wait);
        let StepSpec::WaitRelease(w) = &steps[4] else {
            panic!("{:?}", steps[4])
        };
        assert_eq!(w.tolerance, ByteSize::mib(512));
        assert_eq!(w.min_available, Some(ByteSize::gib(2)));
        let StepSpec::CollectTiming(c) = &steps[10] else {
            panic!("{:?}", steps[10])
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
    fn every_number_of_a_step_is_bounded_and_the_defaults_are_within() {
        for name in STEP_NAMES {
            let spec: StepSpec = serde_yaml::from_str(name).unwrap();
            let again: Vec<StepSpec> = serde_yaml::from_str(&format!("- {name}: {{}}\n")).unwrap();
            assert_eq!(again, [spec], "{name}");
        }
        let err = |yaml: &str| {
            serde_yaml::from_str::<Vec<StepSpec>>(yaml)
                .unwrap_err()
                .to_string()
        };
        for (yaml, says) in [
            (
                "- drain: {timeout: 0s}",
                "drain: `timeout` must be from 1s to 1day, not 0s",
            ),
            (
                "- drain: {poll: 0s}",
                "drain: `poll` must be from 10ms to 1m, not 0s",
            ),
            (
                "- prepare: {timeout: 2days}",
                "prepare: `timeout` must be from 1s to 1day, not 2days",
            ),
            (
                "- upload: {keep_releases: 5000}",
                "upload: `keep_releases` must be from 0 to 1000, not 5000",
            ),
            (
                "- handover: {margin: 100TiB}",
                "handover: `margin` must be from 0B to 64TiB, not 100TiB",
            ),
            (
                "- handover: {wait: 2days}",
                "handover: `wait` must be from 0s to 1day, not 2days",
            ),
            (
                "- wait_release: {min_available: 65TiB}",
                "wait_release: `min_available` must be from 0B to 64TiB, not 65TiB",
            ),
            (
                "- verify: {settle: 25h}",
                "verify: `settle` must be from 0s to 1day, not 1day 1h",
            ),
            (
                "- rollback: {drain: {kill_wait: 2days}}",
                "rollback: drain: `kill_wait` must be from 0s to 1day, not 2days",
            ),
            (
                "- rollback: {start_timeout: 0s}",
                "rollback: `start_timeout` must be from 1s to 1day, not 0s",
            ),
            (
                "- collect_timing: {chunk_bytes: 1}",
                "collect_timing: `chunk_bytes` must be from 4KiB to 256MiB, not 1B",
            ),
            (
                "- smoke: {size: 1073741824}",
                "`size` must be from 16 to 134217728, not 1073741824",
            ),
            (
                "- health: {timeout: 0s}",
                "health: `timeout` must be from 1s to 1day, not 0s",
            ),
            (
                "- start: {timeout: 0s}",
                "start: `timeout` must be from 1s to 1day, not 0s",
            ),
        ] {
            let e = err(yaml);
            assert!(e.contains(says), "{yaml}: `{says}` not in: {e}");
        }
        // The edges are inside.
        serde_yaml::from_str::<Vec<StepSpec>>(
            "- drain: {timeout: 1s, poll: 10ms, kill_wait: 0s}\n- upload: {keep_releases: 0, timeout: 1day}\n",
        )
        .unwrap();
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
