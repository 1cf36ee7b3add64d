//! `prover prove`, `verify` and `bench`: one-shot command-line plumbing
//! over [`prover::prove`] and [`prover::bench`].

use super::args::{BackendChoice, BenchArgs, ProveArgs, VerifyArgs};
use super::exit;
use anyhow::{bail, Context, Result};
use bellperson::groth16::{prepare_verifying_key, verify_proof, Parameters, Proof};
use blstrs::{Bls12, Scalar};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};
use fleet_wire::api::{JobState, SubmitRequest};
use fleet_wire::timing::Phase;
use prover::backend::cpu::CpuBackend;
use prover::backend::Backend;
use prover::circuit::{self, CircuitKind};
use prover::daemon::engine::one_shot::{self, Job, OneShot};
use prover::params::TestParams;
use std::path::PathBuf;
use std::sync::Arc;

/// Loads the parameters of `kind` at `size` from `dir`; generates TEST-ONLY
/// ones for a missing entry only when `test_params` says so.
pub fn load_params(
    kind: CircuitKind,
    size: usize,
    dir: &std::path::Path,
    test_params: bool,
) -> Result<(Arc<Parameters<Bls12>>, String)> {
    use prover::params::ParamStore;
    // Only a store that may write (TEST-ONLY parameters) makes its directory.
    let (store, test_params) = if test_params {
        let seed = prover::params::DEFAULT_SEED;
        (ParamStore::open(dir), TestParams::Generate { seed })
    } else {
        (ParamStore::open_existing(dir), TestParams::Refuse)
    };
    // The store's error names the directory and what failed.
    let store = store?.with_test_params(test_params);
    let params = store
        .get_or_generate(kind, size)
        .with_context(|| format!("parameters for {kind} at size {size}"))?;
    // From the store that loaded them: a file used without a sidecar (a
    // folder this process cannot write) has its checksum only there.
    let sha256 = store
        .meta(kind, size)
        .map(|m| m.sha256)
        .with_context(|| format!("reading the checksum of the {kind} parameters at size {size}"))?;
    Ok((params, sha256))
}

/// The backend `choice` names: CUDA needs a usable device.
pub fn make_backend(choice: BackendChoice, threads: Option<usize>) -> Result<Box<dyn Backend>> {
    let cpu = || -> Result<Box<dyn Backend>> {
        Ok(match threads {
            Some(t) => Box::new(CpuBackend::with_threads(t)?),
            None => Box::new(CpuBackend::new()),
        })
    };
    match choice {
        BackendChoice::Cpu => cpu(),
        BackendChoice::Auto if !prover::backend::cuda::cuda_available() => {
            tracing::info!("no usable CUDA device; proving on the CPU");
            cpu()
        }
        BackendChoice::Cuda | BackendChoice::Auto => {
            if !prover::backend::cuda::cuda_available() {
                bail!("--backend cuda: no CUDA driver, device or NVRTC library here");
            }
            let b = prover::backend::cuda::CudaBackend::new(0).context("opening CUDA device 0")?;
            Ok(Box::new(b))
        }
    }
}

fn timing_table(rows: &[(u32, std::collections::BTreeMap<Phase, f64>)]) -> Table {
    let phases: Vec<Phase> = Phase::ALL
        .iter()
        .copied()
        .filter(|p| rows.iter().any(|(_, m)| m.contains_key(p)))
        .collect();
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    let mut header = vec![Cell::new("phase (ms)")];
    header.extend(
        rows.iter()
            .map(|(i, _)| Cell::new(format!("partition {i}"))),
    );
    t.set_header(header);
    for p in phases {
        let mut row = vec![Cell::new(p.as_str())];
        row.extend(rows.iter().map(|(_, m)| {
            Cell::new(m.get(&p).map(|v| format!("{v:.1}")).unwrap_or_default())
                .set_alignment(CellAlignment::Right)
        }));
        t.add_row(row);
    }
    t
}

/// `prover prove`: one job of a bundled circuit through the engine in this
/// process (the daemon's per-partition stages and timing records).
pub fn run_prove(args: ProveArgs) -> Result<u8> {
    let kind = args.params.circuit;
    let size = args.params.size;
    let backend = make_backend(args.backend, args.threads)?;
    let opts = OneShot {
        backend: backend.into(),
        filecoin_cache: PathBuf::from(prover::filecoin::cache::DEFAULT_CACHE_DIR),
        allow_test_params: false,
        compiled: true,
        timing_log: args.timing_log.clone(),
        budget: None,
    };
    let job = Job::Bundled {
        req: SubmitRequest {
            circuit: kind.to_string(),
            size: size as u64,
            partitions: args.partitions,
            seed: args.seed,
            // r, s of partition i are `partition_randomness(seed, i)`.
            rs_seed: Some(args.seed),
        },
        params_dir: args.params.params_dir.clone(),
        test_params: match args.test_params {
            true => TestParams::Generate {
                seed: prover::params::DEFAULT_SEED,
            },
            false => TestParams::Refuse,
        },
    };
    let finished =
        one_shot::run(opts, job).with_context(|| format!("proving {kind} at size {size}"))?;
    let rows: Vec<_> = finished
        .partitions
        .iter()
        .map(|r| (r.partition, r.phases_ms.clone()))
        .collect();
    println!("{}", timing_table(&rows));
    let status = &finished.status;
    let result = match (status.state, status.result.as_ref()) {
        (JobState::Done, Some(r)) => r,
        _ => {
            let why = status.error.as_deref().unwrap_or("not proved");
            eprintln!("error: {kind} size {size}: {why}");
            return Ok(exit::ERROR);
        }
    };
    println!(
        "circuit {kind} size {size}: {} partition(s) on {} in {:.1} ms, verified: {}",
        args.partitions, result.backend, result.timing.total_ms, result.verified
    );
    let proof: String = result.proofs.iter().map(|p| p.proof.as_str()).collect();
    println!("proof {proof}");
    // Each public input as the verifier takes it (ONE excluded): a scalar's
    // canonical little-endian bytes, hex, as the daemon's `public_inputs`.
    let inputs = result
        .proofs
        .first()
        .map(|p| p.public_inputs.join(","))
        .unwrap_or_default();
    println!("public_inputs {inputs}");
    Ok(if result.verified {
        exit::OK
    } else {
        exit::VERIFY_FAILED
    })
}

/// The proofs in `--proof`, decoded, or why they cannot be: checked before
/// the parameter directory is touched.
fn decode_proofs(hex_text: &str) -> std::result::Result<Vec<Proof<Bls12>>, String> {
    let bytes = hex::decode(hex_text.trim()).map_err(|e| format!("--proof is not hex: {e}"))?;
    if bytes.is_empty() || bytes.len() % 192 != 0 {
        return Err(format!(
            "--proof holds {} bytes; expected a multiple of 192 (one proof per partition)",
            bytes.len()
        ));
    }
    bytes
        .chunks(192)
        .enumerate()
        .map(|(i, chunk)| {
            Proof::<Bls12>::read(chunk).map_err(|e| format!("proof {i} cannot be decoded: {e}"))
        })
        .collect()
}

/// `prover verify`: exit 0 when every proof verifies, 3 when one does not or
/// cannot even be decoded, 1 when the check itself could not run.
pub fn run_verify(args: VerifyArgs) -> Result<u8> {
    let kind = args.params.circuit;
    let size = args.params.size;
    let proofs = match decode_proofs(&args.proof) {
        Ok(proofs) => proofs,
        Err(reason) => {
            eprintln!("INVALID: {reason}");
            return Ok(exit::VERIFY_FAILED);
        }
    };
    let (params, _) = load_params(kind, size, &args.params.params_dir, false)?;
    let (_, inputs): (_, Vec<Scalar>) = circuit::bundled(kind, size, args.seed)?;
    let pvk = prepare_verifying_key(&params.vk);
    let mut all_ok = true;
    for (i, proof) in proofs.iter().enumerate() {
        let ok = verify_proof(&pvk, proof, &inputs).context("verifying")?;
        println!("partition {i}: {}", if ok { "valid" } else { "INVALID" });
        all_ok &= ok;
    }
    Ok(if all_ok {
        exit::OK
    } else {
        exit::VERIFY_FAILED
    })
}

impl From<BenchArgs> for prover::bench::BenchConfig {
    fn from(a: BenchArgs) -> Self {
        prover::bench::BenchConfig {
            circuits: a.circuits,
            log_sizes: a.log_sizes,
            params_dir: a.params_dir,
            repeat: a.repeat,
            baseline: !a.no_baseline,
            cuda: a.cuda,
            cpu: !a.no_cpu,
            test_params: a.test_params,
            params_in_memory: a.params_in_memory,
            compiled: !a.no_compiled,
        }
    }
}

/// `prover bench`.
pub fn run_bench(args: BenchArgs) -> Result<u8> {
    let json = args.json.clone();
    let rows = prover::bench::run(&args.into())?;
    println!("{}", prover::bench::render(&rows));
    if rows.iter().any(|r| r.compile_ms.is_some()) {
        println!("synthesis: the bellperson way against compiled constraints");
        println!("{}", prover::bench::render_synthesis(&rows));
    }
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&rows)?;
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    let all_identical = rows.iter().all(|r| {
        r.identical != Some(false)
            && r.cuda_identical != Some(false)
            && r.compiled_identical != Some(false)
    });
    Ok(if all_identical {
        exit::OK
    } else {
        exit::VERIFY_FAILED
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn undecodable_proofs_are_reported_before_anything_is_loaded() {
        assert!(decode_proofs("zz")
            .expect_err("not hex")
            .contains("not hex"));
        assert!(decode_proofs("00")
            .expect_err("short")
            .contains("multiple of 192"));
        // 192 bytes of 0xff: a compressed point with invalid flags / off the curve.
        let bad = "ff".repeat(192);
        let err = decode_proofs(&bad).expect_err("off curve");
        assert!(err.contains("proof 0 cannot be decoded"), "{err}");
    }
}
