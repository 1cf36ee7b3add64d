//! `smoke`: prove one small statement through the running daemon with the
//! deployed client, and check that it was verified and left a timing record.
//! The statement is a bundled circuit (`prover client submit`, the default)
//! or a Filecoin PoRep C2 (`prover client c2`): the 2 KiB one built into
//! fleetctl, or a request document the playbook names.

use super::ctx::StepCtx;
use super::outcome::{kept, Cause, Failed, StepOutcome};
use super::params::{self as bounds, Check};
use super::params::{duration, show};
use super::remote::{self, q};
use crate::transport::TransportError;
use fleet_wire::api::FilecoinSubmitRequest;
use fleet_wire::exit;
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the smoke proves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SmokeProof {
    /// A bundled circuit (`chain`, `sha256`) of `size` constraints.
    Bundled { circuit: String, size: u64 },
    /// The PoRep C2 of the request document at `fixture` (on this machine),
    /// or, without one, of the 2 KiB request built into fleetctl; with
    /// `grpc`, sent as Curio sends it, one `Prove` call to the daemon's gRPC
    /// service (`prover client c2 --grpc`), so the path Curio's proofs take
    /// is what the smoke checks.
    PorepC2 {
        fixture: Option<PathBuf>,
        grpc: bool,
    },
}

/// The step's parameters, resolved from what the playbook wrote
/// ([`RawSmoke`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawSmoke", into = "RawSmoke")]
pub struct SmokeParams {
    pub proof: SmokeProof,
    /// The client's deadline.
    pub timeout: Duration,
}

/// `kind:` of a `smoke` step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SmokeKind {
    #[default]
    Bundled,
    PorepC2,
}

/// A `smoke` step's parameters as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct RawSmoke {
    kind: SmokeKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    circuit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fixture: Option<PathBuf>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    grpc: bool,
    #[serde(with = "duration")]
    timeout: Duration,
}

const DEFAULT_CIRCUIT: &str = "chain";
const DEFAULT_SIZE: u64 = 1024;
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

impl Default for RawSmoke {
    fn default() -> Self {
        RawSmoke {
            kind: SmokeKind::Bundled,
            circuit: None,
            size: None,
            fixture: None,
            grpc: false,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

impl Default for SmokeParams {
    fn default() -> Self {
        SmokeParams {
            proof: SmokeProof::Bundled {
                circuit: DEFAULT_CIRCUIT.to_owned(),
                size: DEFAULT_SIZE,
            },
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

impl Check for SmokeParams {
    fn check(&self) -> Result<(), String> {
        bounds::duration_in("timeout", self.timeout, &bounds::TIMEOUTS)?;
        match &self.proof {
            // The daemon's own bounds on a circuit's size.
            SmokeProof::Bundled { size, .. } => {
                bounds::in_range("size", *size, &fleet_wire::api::CIRCUIT_SIZES)
            }
            SmokeProof::PorepC2 { .. } => Ok(()),
        }
    }
}

impl TryFrom<RawSmoke> for SmokeParams {
    type Error = String;

    fn try_from(raw: RawSmoke) -> Result<Self, String> {
        let proof = match raw.kind {
            SmokeKind::Bundled => {
                if raw.fixture.is_some() {
                    return Err(
                        "smoke: `fixture` goes with `kind: porep-c2` (a bundled circuit needs none)"
                            .to_owned(),
                    );
                }
                if raw.grpc {
                    return Err(
                        "smoke: `grpc` goes with `kind: porep-c2` (Curio's Prove carries Filecoin proofs only)"
                            .to_owned(),
                    );
                }
                SmokeProof::Bundled {
                    circuit: raw.circuit.unwrap_or_else(|| DEFAULT_CIRCUIT.to_owned()),
                    size: raw.size.unwrap_or(DEFAULT_SIZE),
                }
            }
            SmokeKind::PorepC2 => {
                let bundled_only = [
                    ("circuit", raw.circuit.is_some()),
                    ("size", raw.size.is_some()),
                ];
                if let Some((field, _)) = bundled_only.iter().find(|(_, set)| *set) {
                    return Err(format!(
                        "smoke: `{field}` goes with `kind: bundled`; a porep-c2 smoke proves its `fixture` (default: the built-in 2 KiB one)"
                    ));
                }
                SmokeProof::PorepC2 {
                    fixture: raw.fixture,
                    grpc: raw.grpc,
                }
            }
        };
        Ok(SmokeParams {
            proof,
            timeout: raw.timeout,
        })
    }
}

impl From<SmokeParams> for RawSmoke {
    fn from(p: SmokeParams) -> RawSmoke {
        let timeout = p.timeout;
        match p.proof {
            SmokeProof::Bundled { circuit, size } => RawSmoke {
                kind: SmokeKind::Bundled,
                circuit: Some(circuit),
                size: Some(size),
                fixture: None,
                grpc: false,
                timeout,
            },
            SmokeProof::PorepC2 { fixture, grpc } => RawSmoke {
                kind: SmokeKind::PorepC2,
                circuit: None,
                size: None,
                fixture,
                grpc,
                timeout,
            },
        }
    }
}

/// The PoRep C2 built into fleetctl: the C1 output of a seeded 2 KiB sector
/// with its prover id and sector number, as `POST /v1/filecoin/jobs` takes
/// it (made and checked by `prover/tests/filecoin.rs`, see
/// `fixtures/filecoin/README.md`).
const BUILT_IN_C2: &str = include_str!("../../../fixtures/filecoin/porep-c2-2KiB.json");

/// Largest request document a smoke reads (a 32 GiB sector's C1 output is
/// tens of MB; a smoke should be far smaller).
pub const MAX_FIXTURE_BYTES: u64 = 64 << 20;

/// A PoRep C2 smoke's fixture that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    #[error("smoke fixture {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Not a regular file: a FIFO would block the playbook's load.
    #[error(transparent)]
    Input(crate::input::InputError),
    #[error("smoke fixture {}: larger than {} MiB", path.display(), MAX_FIXTURE_BYTES >> 20)]
    TooLarge { path: PathBuf },
    #[error("smoke fixture {source_name}: not a porep-c2 request (the JSON body of POST /v1/filecoin/jobs): {reason}")]
    Invalid { source_name: String, reason: String },
}

/// A PoRep C2 request, split into what `prover client c2` takes: the C1
/// output on its stdin, the rest as flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct C2Request {
    /// Where it came from, for messages.
    pub source: String,
    pub c1: Vec<u8>,
    pub prover_id: String,
    pub sector_id: Option<u64>,
    pub registered_proof: Option<String>,
    pub rs_seed: Option<u64>,
}

impl C2Request {
    /// The request at `fixture`, or the built-in one.
    pub fn load(fixture: Option<&Path>) -> Result<C2Request, FixtureError> {
        let Some(path) = fixture else {
            return Self::parse("built-in porep-c2-2KiB.json", BUILT_IN_C2.as_bytes());
        };
        let read = |source| FixtureError::Read {
            path: path.to_owned(),
            source,
        };
        let (file, _) = crate::input::open_regular("smoke fixture", path).map_err(|e| match e {
            crate::input::InputError::Io { source, .. } => read(source),
            other => FixtureError::Input(other),
        })?;
        let mut bytes = Vec::new();
        file.take(MAX_FIXTURE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(read)?;
        if bytes.len() as u64 > MAX_FIXTURE_BYTES {
            return Err(FixtureError::TooLarge {
                path: path.to_owned(),
            });
        }
        Self::parse(&path.display().to_string(), &bytes)
    }

    fn parse(source: &str, bytes: &[u8]) -> Result<C2Request, FixtureError> {
        let invalid = |reason: String| FixtureError::Invalid {
            source_name: source.to_owned(),
            reason,
        };
        // `prover client c2` sends only a C2's fields: a request of another
        // kind, or with another kind's fields, is refused here.
        let req = match serde_json::from_slice(bytes).map_err(|e| invalid(e.to_string()))? {
            FilecoinSubmitRequest::PorepC2(req) => req,
            other => return Err(invalid(format!("its kind is {}", other.kind()))),
        };
        let hex = req.prover_id.len() == 64 && req.prover_id.bytes().all(|b| b.is_ascii_hexdigit());
        if !hex {
            return Err(invalid(
                "prover_id must be 32 bytes as 64 hex digits".to_owned(),
            ));
        }
        let c1 = serde_json::to_vec(&req.c1).map_err(|e| invalid(e.to_string()))?;
        Ok(C2Request {
            source: source.to_owned(),
            c1,
            prover_id: req.prover_id,
            sector_id: req.sector_id,
            registered_proof: req.registered_proof,
            rs_seed: req.rs_seed,
        })
    }

    /// `porep-c2 of SOURCE (StackedDrg2KiBV1_1 sector 7)`.
    fn label(&self) -> String {
        let proof = self.registered_proof.as_deref().unwrap_or("its proof type");
        match self.sector_id {
            Some(n) => format!("porep-c2 of {} ({proof} sector {n})", self.source),
            None => format!("porep-c2 of {} ({proof})", self.source),
        }
    }
}

pub fn describe(p: &SmokeParams, _ctx: &StepCtx<'_>) -> String {
    let wait = humantime::format_duration(p.timeout);
    match &p.proof {
        SmokeProof::Bundled { circuit, size } => format!(
            "submit a `{circuit}` proof of size {size} and wait up to {wait} for `verified: true` and a new timing record"
        ),
        SmokeProof::PorepC2 { fixture, grpc } => format!(
            "send the PoRep C2 of {} with `prover client c2`{} and wait up to {wait} for its verified proof and a new timing record",
            fixture.as_ref().map_or_else(|| "the built-in 2 KiB fixture".to_owned(), |f| f.display().to_string()),
            if *grpc { " over the daemon's gRPC service (Prove, as Curio sends it)" } else { "" }
        ),
    }
}

const KEPT: &str = "the daemon keeps running as it is";

fn check(text: String) -> Failed {
    (Cause::Check(text), KEPT.to_owned())
}

pub(super) async fn run(p: &SmokeParams, ctx: &mut StepCtx<'_>) -> Result<StepOutcome, Failed> {
    let timing = ctx.layout().timing();
    let before = kept(remote::file_size(ctx, &timing).await, KEPT)?;
    let start = Instant::now();
    let proved = match &p.proof {
        SmokeProof::Bundled { circuit, size } => bundled(ctx, circuit, *size, p.timeout).await?,
        SmokeProof::PorepC2 { fixture, grpc } => {
            let req = C2Request::load(fixture.as_deref()).map_err(|e| check(e.to_string()))?;
            porep_c2(ctx, &req, *grpc, p.timeout).await?
        }
    };
    let took = start.elapsed();
    let after = kept(remote::file_size(ctx, &timing).await, KEPT)?;
    // A smaller file was rotated: everything in it is new.
    let from = if after < before { 0 } else { before };
    let fresh = kept(
        ctx.transport
            .read_range(&timing, from, 1 << 20, remote::QUICK)
            .await,
        KEPT,
    )?;
    let records = String::from_utf8_lossy(&fresh)
        .lines()
        .filter(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
        .count();
    if records == 0 {
        return Err(check(format!(
            "proof verified but no new timing record in {timing}"
        )));
    }
    Ok(StepOutcome::done(format!(
        "{proved} verified in {}; {records} new timing record(s)",
        show(took)
    )))
}

/// `--timeout` of the client: whole seconds, at least one.
fn client_timeout(timeout: Duration) -> String {
    format!("{}s", timeout.as_secs().max(1))
}

/// The client enforces its own deadline; ours is a backstop past it.
fn backstop(timeout: Duration) -> Duration {
    timeout + Duration::from_secs(15)
}

/// `prover client submit --wait`: the proof of a bundled circuit.
async fn bundled(
    ctx: &StepCtx<'_>,
    circuit: &str,
    size: u64,
    timeout: Duration,
) -> Result<String, Failed> {
    let layout = ctx.layout();
    let script = format!(
        "cd {} && exec {} client submit --config {} --circuit {} --size {} --wait --timeout {}",
        kept(q(&layout.install), KEPT)?,
        kept(q(&layout.current_binary()), KEPT)?,
        kept(q(&layout.config), KEPT)?,
        kept(q(circuit), KEPT)?,
        size,
        client_timeout(timeout)
    );
    let out = kept(
        ctx.transport
            .run_script_ok(&script, backstop(timeout))
            .await,
        KEPT,
    )?;
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        check(format!(
            "client output is not JSON ({e}): {}",
            out.stdout_text()
        ))
    })?;
    if verified(&doc) != Some(true) {
        return Err(check(format!(
            "proof not verified: {}",
            short(&out.stdout_text())
        )));
    }
    Ok(format!("{circuit} proof of size {size}"))
}

/// Bytes of one partition's Groth16 proof in a C2 (A, B, C compressed).
const PARTITION_PROOF_BYTES: usize = 192;

/// The command line of `prover client c2` for `req` on the host.
fn c2_script(
    ctx: &StepCtx<'_>,
    req: &C2Request,
    grpc: bool,
    timeout: Duration,
) -> Result<String, Failed> {
    let layout = ctx.layout();
    let mut script = format!(
        "cd {} && exec {} client c2 --config {} --c1 - --prover-id {} --timeout {}",
        kept(q(&layout.install), KEPT)?,
        kept(q(&layout.current_binary()), KEPT)?,
        kept(q(&layout.config), KEPT)?,
        kept(q(&req.prover_id), KEPT)?,
        client_timeout(timeout)
    );
    if let Some(n) = req.sector_id {
        script.push_str(&format!(" --sector-id {n}"));
    }
    if let Some(proof) = &req.registered_proof {
        script.push_str(&format!(" --registered-proof {}", kept(q(proof), KEPT)?));
    }
    if grpc {
        // Curio's request has no r, s seed: a fixture's `rs_seed` stays
        // out, and the daemon blinds the proof with its own randomness.
        script.push_str(" --grpc");
    } else if let Some(seed) = req.rs_seed {
        script.push_str(&format!(" --rs-seed {seed}"));
    }
    Ok(script)
}

/// `prover client c2`, the C1 output on its stdin: nothing is written on
/// the host but the daemon's logs.
async fn porep_c2(
    ctx: &StepCtx<'_>,
    req: &C2Request,
    grpc: bool,
    timeout: Duration,
) -> Result<String, Failed> {
    let script = c2_script(ctx, req, grpc, timeout)?;
    let out = kept(
        ctx.transport
            .run_script_with_input(&script, &req.c1, backstop(timeout))
            .await,
        KEPT,
    )?;
    if !out.success() {
        let stderr = out.stderr_text();
        return Err(match c2_refusal(out.status, &stderr, req) {
            Some(why) => check(why),
            None => (
                Cause::Transport(TransportError::Failed {
                    host: ctx.transport.host().to_owned(),
                    command: script,
                    status: out.status,
                    stderr,
                }),
                KEPT.to_owned(),
            ),
        });
    }
    let proof = out.stdout_text();
    let proof = proof.trim();
    let hex = !proof.is_empty() && proof.bytes().all(|b| b.is_ascii_hexdigit());
    let partitions = proof.len() / (2 * PARTITION_PROOF_BYTES);
    if !hex || partitions == 0 || proof.len() % (2 * PARTITION_PROOF_BYTES) != 0 {
        return Err(check(format!(
            "{}: the client's output is not a C2 proof (hex, {PARTITION_PROOF_BYTES} bytes per partition): {}",
            req.label(),
            short(proof)
        )));
    }
    Ok(format!("{}: {partitions} partition(s)", req.label()))
}

/// What a `prover client c2` exit code other than 0 and 1 says, in words,
/// with the client's own error line; `None` for the codes it shares with
/// every command (left to the transport's classification).
fn c2_refusal(status: Option<i32>, stderr: &str, req: &C2Request) -> Option<String> {
    let said = client_error(stderr);
    let proof = req
        .registered_proof
        .as_deref()
        .unwrap_or("the fixture's proof type");
    let code = status.and_then(|s| u8::try_from(s).ok())?;
    Some(match code {
        exit::PARAMS_UNUSABLE => format!(
            "{}: the daemon has no usable parameters for {proof} (params_missing: {said}); fix: put the parameter files of that sector size in the daemon's [filecoin] param_cache (as `lotus fetch-params` does), or, on a test host, generate TEST-ONLY ones with `prover setup --filecoin {proof} --param-cache DIR` and set [filecoin] allow_test_params = true",
            req.label()
        ),
        exit::C1_REFUSED => format!(
            "{}: the daemon refused the C1 output (bad_filecoin_input: {said}); fix: use a fixture whose prover id, sector number and proof type are the sector's",
            req.label()
        ),
        exit::JOB_FAILED => format!("{}: the C2 job failed: {said}", req.label()),
        _ => return None,
    })
}

/// The client's `error: …` line (else its last line), bounded.
fn client_error(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let line = lines
        .iter()
        .find_map(|l| l.strip_prefix("error: "))
        .or_else(|| lines.last().copied())
        .unwrap_or("(nothing on stderr)");
    short(line)
}

/// `verified` at the top of the client's document or in its job result.
fn verified(doc: &serde_json::Value) -> Option<bool> {
    doc.get("verified")
        .or_else(|| doc.get("result").and_then(|r| r.get("verified")))
        .and_then(serde_json::Value::as_bool)
}

fn short(s: &str) -> String {
    s.chars().take(400).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verified_is_found_at_top_or_in_the_result() {
        assert_eq!(verified(&serde_json::json!({"verified": true})), Some(true));
        assert_eq!(
            verified(&serde_json::json!({"result": {"verified": false}})),
            Some(false)
        );
        assert_eq!(verified(&serde_json::json!({"state": "failed"})), None);
    }

    /// As a playbook reads a `smoke` step: parsed, then held to its bounds.
    fn parse(yaml: &str) -> Result<SmokeParams, String> {
        let p: SmokeParams = serde_yaml::from_str(yaml).map_err(|e| e.to_string())?;
        p.check().map(|()| p)
    }

    #[test]
    fn the_smoke_kind_is_bundled_by_default_or_porep_c2() {
        assert_eq!(parse("{}").unwrap(), SmokeParams::default());
        let p = parse("{circuit: sha256, size: 2048, timeout: 30s}").unwrap();
        assert_eq!(
            p.proof,
            SmokeProof::Bundled {
                circuit: "sha256".into(),
                size: 2048
            }
        );
        assert_eq!(p.timeout, Duration::from_secs(30));
        let p = parse("{kind: porep-c2}").unwrap();
        assert_eq!(
            p.proof,
            SmokeProof::PorepC2 {
                fixture: None,
                grpc: false
            }
        );
        let p = parse("{kind: porep-c2, grpc: true}").unwrap();
        assert_eq!(
            p.proof,
            SmokeProof::PorepC2 {
                fixture: None,
                grpc: true
            }
        );
        assert_eq!(p.timeout, DEFAULT_TIMEOUT);
        let p = parse("{kind: porep-c2, fixture: sectors/c2.json, timeout: 5m}").unwrap();
        assert_eq!(
            p.proof,
            SmokeProof::PorepC2 {
                fixture: Some("sectors/c2.json".into()),
                grpc: false
            }
        );
        for p in [
            SmokeParams::default(),
            parse("{kind: porep-c2, fixture: a.json}").unwrap(),
            parse("{kind: porep-c2, grpc: true}").unwrap(),
        ] {
            let text = serde_yaml::to_string(&p).unwrap();
            assert_eq!(parse(&text).unwrap(), p, "{text}");
        }
    }

    #[test]
    fn fields_of_the_other_kind_unknown_kinds_and_a_zero_timeout_are_refused() {
        for (yaml, says) in [
            (
                "{kind: porep-c2, size: 1024}",
                "`size` goes with `kind: bundled`",
            ),
            (
                "{kind: porep-c2, circuit: chain}",
                "`circuit` goes with `kind: bundled`",
            ),
            ("{fixture: c2.json}", "`fixture` goes with `kind: porep-c2`"),
            ("{grpc: true}", "`grpc` goes with `kind: porep-c2`"),
            ("{kind: window-post}", "unknown variant `window-post`"),
            ("{kind: porep-c2, c1: x.json}", "unknown field `c1`"),
            ("{timeout: 0s}", "`timeout` must be from 1s to 1day, not 0s"),
            ("{size: 8}", "`size` must be from 16 to 134217728, not 8"),
        ] {
            let err = parse(yaml).unwrap_err();
            assert!(err.contains(says), "{yaml}: `{says}` not in: {err}");
        }
    }

    #[test]
    fn the_built_in_fixture_is_a_2kib_porep_c2_request() {
        let req = C2Request::load(None).unwrap();
        assert_eq!(req.registered_proof.as_deref(), Some("StackedDrg2KiBV1_1"));
        assert!(req.sector_id.is_some());
        assert_eq!(req.prover_id.len(), 64);
        assert_eq!(req.rs_seed, None, "a smoke proof's r, s come from the OS");
        let c1: serde_json::Value = serde_json::from_slice(&req.c1).unwrap();
        assert!(c1.get("vanilla_proofs").is_some(), "{c1}");
    }

    #[test]
    fn fixtures_that_are_no_porep_c2_request_are_refused_naming_the_cause() {
        let dir = tempfile::tempdir().unwrap();
        let good: serde_json::Value = serde_json::from_str(BUILT_IN_C2).unwrap();
        let with = |edit: &dyn Fn(&mut serde_json::Value)| {
            let mut doc = good.clone();
            edit(&mut doc);
            serde_json::to_vec(&doc).unwrap()
        };
        let cases: [(&str, Vec<u8>, &str); 6] = [
            ("not json", b"{\"kind\": ".to_vec(), "EOF"),
            (
                "a winning post",
                with(&|d| d["kind"] = "winning-post".into()),
                "unknown field `c1`",
            ),
            (
                "post fields",
                with(&|d| d["randomness"] = "00".into()),
                "unknown field `randomness`",
            ),
            (
                "short prover id",
                with(&|d| d["prover_id"] = "abcd".into()),
                "64 hex digits",
            ),
            (
                "no c1",
                with(&|d| {
                    d.as_object_mut().unwrap().remove("c1");
                }),
                "missing field `c1`",
            ),
            (
                "unknown field",
                with(&|d| d["sector"] = 1.into()),
                "unknown field `sector`",
            ),
        ];
        for (what, bytes, says) in cases {
            let path = dir.path().join(format!("{what}.json"));
            std::fs::write(&path, bytes).unwrap();
            let err = C2Request::load(Some(&path)).unwrap_err().to_string();
            assert!(err.contains(says), "{what}: `{says}` not in: {err}");
            assert!(err.contains(&path.display().to_string()), "{err}");
        }
        let missing = dir.path().join("missing.json");
        let err = C2Request::load(Some(&missing)).unwrap_err().to_string();
        assert!(err.contains("missing.json"), "{err}");
        let huge = dir.path().join("huge.json");
        std::fs::File::create(&huge)
            .and_then(|f| f.set_len(MAX_FIXTURE_BYTES + 1))
            .unwrap();
        let err = C2Request::load(Some(&huge)).unwrap_err().to_string();
        assert!(err.contains("larger than"), "{err}");
    }

    #[test]
    fn missing_parameters_and_a_refused_c1_are_said_with_their_fix() {
        let req = C2Request::load(None).unwrap();
        let stderr = "error: the daemon answered 422 params_missing: no file v28-stacked-proof-of-replication.params in /var/tmp/filecoin-proof-parameters\n";
        let why = c2_refusal(Some(i32::from(exit::PARAMS_UNUSABLE)), stderr, &req).unwrap();
        for part in [
            "no usable parameters for StackedDrg2KiBV1_1",
            "v28-stacked-proof-of-replication.params",
            "prover setup --filecoin StackedDrg2KiBV1_1",
            "allow_test_params = true",
        ] {
            assert!(why.contains(part), "`{part}` not in: {why}");
        }
        let why = c2_refusal(
            Some(i32::from(exit::C1_REFUSED)),
            "error: bad_filecoin_input: not for sector 9\n",
            &req,
        )
        .unwrap();
        assert!(
            why.contains("refused the C1 output") && why.contains("not for sector 9"),
            "{why}"
        );
        let why = c2_refusal(
            Some(i32::from(exit::JOB_FAILED)),
            "error: partition 0 failed\n",
            &req,
        )
        .unwrap();
        assert!(
            why.contains("the C2 job failed: partition 0 failed"),
            "{why}"
        );
        // Codes every command shares (1, a shell's 127) are the transport's to classify.
        assert_eq!(c2_refusal(Some(1), "error: connection refused", &req), None);
        assert_eq!(c2_refusal(Some(127), "sh: prover: not found", &req), None);
        assert_eq!(c2_refusal(None, "", &req), None);
    }
}
