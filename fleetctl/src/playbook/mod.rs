//! Playbooks: an ordered list of typed steps plus a rollout strategy.
//!
//! [`raw`] reads the file (file:line:column errors); [`Playbook`] is the
//! resolved form with defaults applied; [`Strategy::batches`] cuts the
//! selected hosts into the canary batch and the batches after it.

pub mod raw;

pub use raw::BatchSize;

use crate::inventory::Host;
use crate::steps::smoke::{C2Request, FixtureError, SmokeProof};
use crate::steps::StepSpec;
use std::path::Path;

/// A playbook compiled into the binary, named by its bare name (`-p rollout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Builtin {
    pub name: &'static str,
    /// The YAML as it is in `playbooks/NAME.yaml`.
    pub text: &'static str,
}

const BUILTINS: &[Builtin] = &[
    Builtin {
        name: "rollout",
        text: include_str!("../../../playbooks/rollout.yaml"),
    },
    Builtin {
        name: "restart",
        text: include_str!("../../../playbooks/restart.yaml"),
    },
    Builtin {
        name: "rollback",
        text: include_str!("../../../playbooks/rollback.yaml"),
    },
    Builtin {
        name: "health",
        text: include_str!("../../../playbooks/health.yaml"),
    },
    Builtin {
        name: "stop",
        text: include_str!("../../../playbooks/stop.yaml"),
    },
    Builtin {
        name: "collect-timing",
        text: include_str!("../../../playbooks/collect-timing.yaml"),
    },
];

/// The names of the built-in playbooks, in the order `--help` lists them.
pub fn builtin_names() -> impl Iterator<Item = &'static str> {
    BUILTINS.iter().map(|b| b.name)
}

/// The built-in playbook called `name`: the one lookup of a built-in, for
/// `-p` and for the playbooks an experiment runs alike. Any other name is
/// an error listing the built-ins.
pub fn builtin(name: &str) -> Result<&'static Builtin, PlaybookError> {
    BUILTINS
        .iter()
        .find(|b| b.name == name)
        .ok_or_else(|| PlaybookError::NotBuiltin {
            name: name.to_owned(),
            builtins: builtin_names().collect::<Vec<_>>().join(", "),
        })
}

impl Builtin {
    /// The playbook, read and checked as a file would be.
    pub fn load(&self) -> Result<Playbook, PlaybookError> {
        let shown = format!("playbooks/{}.yaml (built in)", self.name);
        checked(Playbook::from_raw(
            raw::parse(Path::new(&shown), self.text)?,
            shown,
        ))
    }
}

/// How hosts are taken through the steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Strategy {
    /// Hosts run first, alone in their batch (hosts tagged `canary` first).
    pub canary: usize,
    /// Hosts per batch after the canary.
    pub batch: BatchSize,
    /// Failed hosts tolerated; one more halts the run after its batch.
    pub max_fail: usize,
    /// Roll a failed host back to the build it ran before.
    pub rollback_on_failure: bool,
    /// Longest a host may be out of service (drain start to new daemon
    /// ready); longer fails the host, which is then rolled back.
    pub max_serving_gap: Option<std::time::Duration>,
    /// Stage every host first (the steps before the first drain), this
    /// many at a time; the batches then only swap daemons.
    pub stage: Option<usize>,
}

impl Default for Strategy {
    fn default() -> Self {
        Strategy {
            canary: 0,
            batch: BatchSize::Percent(100),
            max_fail: 0,
            rollback_on_failure: true,
            max_serving_gap: None,
            stage: None,
        }
    }
}

impl Strategy {
    /// The strategy as written, each key left out taken from `defaults`:
    /// the one merge of a playbook's `strategy:` and an experiment's
    /// `promote.strategy:`.
    pub fn from_raw(raw: &raw::RawStrategy, defaults: &Strategy) -> Strategy {
        Strategy {
            canary: raw.canary.unwrap_or(defaults.canary),
            batch: raw.batch.unwrap_or(defaults.batch),
            max_fail: raw.max_fail.unwrap_or(defaults.max_fail),
            rollback_on_failure: raw
                .rollback_on_failure
                .unwrap_or(defaults.rollback_on_failure),
            max_serving_gap: raw.max_serving_gap.or(defaults.max_serving_gap),
            // Staging 0 at a time would stage nothing and wait forever.
            stage: raw.stage.map(|n| n.max(1)).or(defaults.stage),
        }
    }

    /// Hosts per batch for `total` selected hosts (at least 1).
    pub fn batch_len(&self, total: usize) -> usize {
        match self.batch {
            BatchSize::Count(n) => n.max(1),
            BatchSize::Percent(p) => (total * p as usize).div_ceil(100).max(1),
        }
    }

    /// Splits `hosts` (inventory order) into batches of indices: the canary
    /// batch first (hosts tagged `canary` before the others), then batches of
    /// [`Strategy::batch_len`] in order.
    pub fn batches(&self, hosts: &[Host]) -> Vec<Vec<usize>> {
        let mut order: Vec<usize> = (0..hosts.len()).collect();
        // Stable: tagged canaries first, inventory order otherwise.
        order.sort_by_key(|&i| !hosts[i].tags.iter().any(|t| t == "canary"));
        let canary = self.canary.min(order.len());
        let mut out = Vec::new();
        if canary > 0 {
            out.push(order[..canary].to_vec());
        }
        let rest: Vec<usize> = {
            let mut r = order[canary..].to_vec();
            r.sort_unstable();
            r
        };
        for chunk in rest.chunks(self.batch_len(hosts.len())) {
            out.push(chunk.to_vec());
        }
        out
    }
}

/// A playbook ready to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Playbook {
    pub name: String,
    pub description: Option<String>,
    /// Where it was read from (a path, or `built-in NAME`).
    pub source: String,
    pub strategy: Strategy,
    pub steps: Vec<StepSpec>,
}

impl Playbook {
    /// Whether any step ships the binary (then the binary must exist locally).
    pub fn uploads(&self) -> bool {
        self.steps.iter().any(|s| matches!(s, StepSpec::Upload(_)))
    }

    /// Whether a step changes what runs on the host: a host that fails after
    /// one of these is rolled back.
    pub fn changes_daemon(step: &StepSpec) -> bool {
        matches!(
            step,
            StepSpec::Handover(_) | StepSpec::Drain(_) | StepSpec::Start(_)
        )
    }

    /// How many leading steps run before anything touches the daemon
    /// (upload, prepare): what staging runs for every host up front.
    pub fn stage_len(&self) -> usize {
        self.steps
            .iter()
            .take_while(|s| matches!(s, StepSpec::Upload(_) | StepSpec::Prepare(_)))
            .count()
    }

    fn from_raw(raw: raw::RawPlaybook, source: String) -> Playbook {
        Playbook {
            name: raw.name,
            description: raw.description,
            source,
            strategy: Strategy::from_raw(&raw.strategy, &Strategy::default()),
            steps: raw.steps,
        }
    }
}

/// Failure to find or read a playbook.
#[derive(Debug, thiserror::Error)]
pub enum PlaybookError {
    #[error(transparent)]
    Raw(#[from] raw::RawError),
    #[error(
        "playbook `{name}`: not a built-in playbook ({builtins}); \
         a playbook file is named by a path with a `/`, e.g. `./{name}`"
    )]
    NotBuiltin { name: String, builtins: String },
    #[error("{source_name}: no steps")]
    NoSteps { source_name: String },
    #[error("{source_name}: {source}")]
    SmokeFixture {
        source_name: String,
        #[source]
        source: FixtureError,
    },
}

/// Reads the playbook `-p` names. A value with a `/` is a file path
/// (`./mine.yaml`, `/etc/fleet/rollout.yaml`); any other is a built-in's
/// bare name. Telling them apart by the `/` alone means a file in the
/// current directory never shadows a built-in, and a typo of a built-in's
/// name is never read as a missing file.
pub fn load(name_or_path: &str) -> Result<Playbook, PlaybookError> {
    if name_or_path.contains('/') {
        let path = Path::new(name_or_path);
        checked(Playbook::from_raw(
            raw::read(path)?,
            path.display().to_string(),
        ))
    } else {
        builtin(name_or_path)?.load()
    }
}

/// What every playbook must be before a run: some steps, and every local
/// file they send readable.
fn checked(pb: Playbook) -> Result<Playbook, PlaybookError> {
    if pb.steps.is_empty() {
        return Err(PlaybookError::NoSteps {
            source_name: pb.source,
        });
    }
    pb.check_fixtures()?;
    Ok(pb)
}

impl Playbook {
    /// Reads every file a step sends from this machine (a PoRep C2 smoke's
    /// fixture), so a bad one stops the run before any host is touched.
    fn check_fixtures(&self) -> Result<(), PlaybookError> {
        for step in &self.steps {
            if let StepSpec::Smoke(p) = step {
                if let SmokeProof::PorepC2 { fixture, .. } = &p.proof {
                    C2Request::load(fixture.as_deref()).map_err(|source| {
                        PlaybookError::SmokeFixture {
                            source_name: self.source.clone(),
                            source,
                        }
                    })?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(n: usize, canary_tagged: &[usize]) -> Vec<Host> {
        (0..n)
            .map(|i| Host {
                tags: if canary_tagged.contains(&i) {
                    vec!["canary".into()]
                } else {
                    vec![]
                },
                ..Host::local(format!("h{i}"), "/opt/prover")
            })
            .collect()
    }

    fn strategy(canary: usize, batch: BatchSize) -> Strategy {
        Strategy {
            canary,
            batch,
            ..Strategy::default()
        }
    }

    #[test]
    fn a_written_strategy_keeps_its_keys_and_takes_the_rest_from_the_defaults() {
        let defaults = Strategy {
            max_fail: 2,
            max_serving_gap: Some(std::time::Duration::from_secs(9)),
            stage: Some(4),
            ..strategy(0, BatchSize::Count(5))
        };
        let raw: raw::RawStrategy =
            serde_yaml::from_str("{ batch: 2, rollback_on_failure: false }").unwrap();
        let s = Strategy::from_raw(&raw, &defaults);
        assert_eq!(
            s,
            Strategy {
                batch: BatchSize::Count(2),
                rollback_on_failure: false,
                ..defaults.clone()
            }
        );
        let raw: raw::RawStrategy = serde_yaml::from_str("{ stage: 0 }").unwrap();
        assert_eq!(Strategy::from_raw(&raw, &defaults).stage, Some(1));
    }

    #[test]
    fn canary_then_batches_of_three() {
        let b = strategy(1, BatchSize::Count(3)).batches(&hosts(8, &[]));
        assert_eq!(b, vec![vec![0], vec![1, 2, 3], vec![4, 5, 6], vec![7]]);
    }

    #[test]
    fn tagged_canaries_go_first() {
        let b = strategy(2, BatchSize::Count(4)).batches(&hosts(6, &[4]));
        assert_eq!(b, vec![vec![4, 0], vec![1, 2, 3, 5]]);
    }

    #[test]
    fn percentages_round_up_and_count_all_selected_hosts() {
        let s = strategy(0, BatchSize::Percent(25));
        assert_eq!(s.batch_len(8), 2);
        assert_eq!(s.batch_len(10), 3);
        assert_eq!(s.batch_len(1), 1);
        assert_eq!(s.batches(&hosts(10, &[])).len(), 4);
        let all = Strategy::default().batches(&hosts(5, &[]));
        assert_eq!(all, vec![vec![0, 1, 2, 3, 4]]);
        let more_canaries_than_hosts = strategy(9, BatchSize::Count(2)).batches(&hosts(3, &[]));
        assert_eq!(more_canaries_than_hosts, vec![vec![0, 1, 2]]);
    }

    #[test]
    fn builtin_playbooks_parse_and_unknown_names_are_refused() {
        for name in builtin_names() {
            let pb = load(name).unwrap();
            assert!(!pb.steps.is_empty(), "{name}");
            assert_eq!(pb, builtin(name).unwrap().load().unwrap());
        }
        let r = load("rollout").unwrap();
        let names: Vec<&str> = r.steps.iter().map(StepSpec::name).collect();
        assert_eq!(
            names,
            [
                "upload",
                "prepare",
                "handover",
                "drain",
                "wait_release",
                "start",
                "verify",
                "smoke",
                "health"
            ]
        );
        assert!(r.uploads());
        let e = load("nope").unwrap_err().to_string();
        assert_eq!(
            e,
            "playbook `nope`: not a built-in playbook (rollout, restart, rollback, health, \
             stop, collect-timing); a playbook file is named by a path with a `/`, e.g. `./nope`"
        );
    }

    #[test]
    fn a_bare_name_is_a_built_in_and_a_path_with_a_slash_is_a_file() {
        let dir = tempfile::tempdir().unwrap();
        // A file named like a built-in, in the current directory or not,
        // is read only when named by a path.
        let path = dir.path().join("rollout");
        std::fs::write(&path, "name: mine\nsteps:\n  - health: {}\n").unwrap();
        assert_eq!(load(path.to_str().unwrap()).unwrap().name, "mine");
        assert_eq!(load("rollout").unwrap().name, "rollout");
        // The old ways to a built-in are no longer names of one.
        for old in ["rollout.yaml", "playbooks/rollout.yaml"] {
            assert!(load(old).is_err(), "{old}");
        }
        let e = load("mine.yaml").unwrap_err().to_string();
        assert!(
            e.starts_with("playbook `mine.yaml`: not a built-in playbook (rollout,"),
            "{e}"
        );
        let missing = dir.path().join("absent.yaml");
        let e = load(missing.to_str().unwrap()).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("cannot read playbook {}: ", missing.display())),
            "{e}"
        );
    }

    #[test]
    fn a_porep_c2_smoke_fixture_is_read_when_the_playbook_loads() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, smoke: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, format!("name: c2\nsteps:\n  - smoke: {smoke}\n")).unwrap();
            path.to_str().unwrap().to_owned()
        };
        let built_in = load(&write("built-in.yaml", "{kind: porep-c2}")).unwrap();
        assert_eq!(
            built_in.steps,
            [StepSpec::Smoke(crate::steps::SmokeParams {
                proof: SmokeProof::PorepC2 {
                    fixture: None,
                    grpc: false,
                },
                timeout: std::time::Duration::from_secs(120),
            })]
        );
        let missing = dir.path().join("no-such-c2.json");
        let path = write(
            "missing.yaml",
            &format!(
                "{{kind: porep-c2, fixture: {:?}}}",
                missing.to_str().unwrap()
            ),
        );
        let e = load(&path).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{path}: smoke fixture {}", missing.display())),
            "{e}"
        );
        // A FIFO as the fixture is refused, not waited on.
        let fifo = dir.path().join("c2.fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates the node.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let path = write(
            "fifo.yaml",
            &format!("{{kind: porep-c2, fixture: {:?}}}", fifo.to_str().unwrap()),
        );
        assert_eq!(
            load(&path).unwrap_err().to_string(),
            format!(
                "{path}: smoke fixture {}: is a FIFO, not a regular file",
                fifo.display()
            )
        );
    }
}
