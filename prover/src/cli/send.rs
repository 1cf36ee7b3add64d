//! Sending a Filecoin job to a running daemon over its HTTP API, waiting for
//! it and writing its proof: what every `prover client` Filecoin command
//! does once its request is built (`super::filecoin` builds them, one per
//! kind), with the exit codes those commands document.

use super::exit;
use anyhow::{Context, Result};
use clap::Args;
use fleet_wire::api::{FilecoinSubmitRequest, JobState};
use prover::daemon::client::{ApiClient, ClientError};
use prover::daemon::config::Config;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a Filecoin client command does once the job is described.
#[derive(Debug, Args)]
pub struct FilecoinSend {
    /// The daemon's configuration (listen address and token are read from it).
    #[arg(long)]
    pub config: PathBuf,
    /// Where to write the proof (raw bytes, as filecoin-proofs returns it);
    /// written whole or not at all. Without it, hex on stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Seed of r, s (reproducible proofs; tests only). Default: the daemon's OS randomness.
    #[arg(long)]
    pub rs_seed: Option<u64>,
    /// How long to wait for the proof (the upload and the daemon's checks included).
    #[arg(long, default_value = "30m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// Sends a Filecoin job, waits for it and writes its proof. `input` is the
/// file the request was read from (`--c1`, `--vanilla`): the proof must not
/// overwrite it, and its folder must be there before the daemon proves.
pub fn send_filecoin(
    send: &FilecoinSend,
    input: (&'static str, &Path),
    req: &FilecoinSubmitRequest,
) -> Result<u8> {
    if let Some(code) = refused_out(send, input) {
        return Ok(code);
    }
    let config = Config::load(&send.config)?;
    let client = ApiClient::new(&config, send.timeout)?;
    let started = std::time::Instant::now();
    let resp = match client.submit_filecoin(req) {
        Ok(r) => r,
        Err(e @ ClientError::Api { .. }) => {
            let code = match &e {
                ClientError::Api { error, .. } if error == "bad_filecoin_input" => exit::C1_REFUSED,
                ClientError::Api { error, .. } if error == "params_missing" => {
                    exit::PARAMS_UNUSABLE
                }
                _ => exit::ERROR,
            };
            eprintln!("error: {e}");
            return Ok(code);
        }
        Err(e) => return Err(e.into()),
    };
    let left = send.timeout.saturating_sub(started.elapsed());
    let status = client.wait(&resp.job_id, left)?;
    let proof = match (status.state, status.result.as_ref()) {
        (JobState::Done, Some(r)) if r.verified => r.proof.clone(),
        _ => None,
    };
    let Some(proof) = proof else {
        let why = match status.state.is_finished() {
            true => status
                .error
                .clone()
                .unwrap_or_else(|| format!("{:?}", status.state)),
            false => format!(
                "not finished within {} (job {} is {:?}; `prover client job` follows it)",
                humantime::format_duration(send.timeout),
                status.job_id,
                status.state
            ),
        };
        eprintln!("error: {} job {}: {why}", req.kind(), status.job_id);
        return Ok(exit::JOB_FAILED);
    };
    match &send.out {
        Some(path) => {
            let bytes = hex::decode(&proof).context("the daemon's proof is not hex")?;
            prover::filecoin::write_output(path, &bytes)
                .with_context(|| format!("writing the proof to {}", path.display()))?;
        }
        None => println!("{proof}"),
    }
    eprintln!(
        "{} job {}: {} partition(s) proved on the {} backend in {:.1} s",
        status.circuit,
        status.job_id,
        status.partitions,
        status.result.as_ref().map_or("?", |r| r.backend.as_str()),
        started.elapsed().as_secs_f64()
    );
    Ok(exit::OK)
}

/// `--out` checked against the input it must not overwrite: a bad one is a
/// usage error (exit 2), said before anything is sent.
pub fn refused_out(send: &FilecoinSend, input: (&'static str, &Path)) -> Option<u8> {
    let e = super::out_path::check(&[("--out", send.out.as_deref())], &[input]).err()?;
    eprintln!("error: {e}");
    Some(exit::USAGE)
}
