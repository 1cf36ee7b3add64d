//! `prover prove`, `verify` and `bench`: one-shot command-line plumbing
//! over [`prover::prove`] and [`prover::bench`].

use super::args::{BackendChoice, BenchArgs, ProveArgs, VerifyArgs};
use super::exit;
use anyhow::{bail, Context, Result};
use bellperson::groth16::{prepare_verifying_key, verify_proof, Parameters, Proof};
use blstrs::{Bls12, Scalar};
use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, Table};
use ff::PrimeField;
use fleet_wire::timing::{Phase, ProofRecord, TimelineKind, TIMING_SCHEMA_VERSION};
use prover::backend::cpu::CpuBackend;
use prover::backend::{Backend, BackendTimes};
use prover::circuit::{self, CircuitKind};
use prover::params::TestParams;
use prover::prove::{self, partition_randomness};
use prover::synthesis;
use prover::sys::clock;
use prover::timing::{self, PartitionTimer, TimingLog};
use std::sync::Arc;
use std::time::Instant;

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

/// `prover prove`.
pub fn run_prove(args: ProveArgs) -> Result<u8> {
    let kind = args.params.circuit;
    let size = args.params.size;
    // The checksum is the key under which a device keeps the bases resident
    // across partitions.
    let (params, params_sha256) =
        load_params(kind, size, &args.params.params_dir, args.test_params)?;
    // The job starts once its parameters are in memory, as in the daemon.
    let submitted = Instant::now();
    let backend = make_backend(args.backend, args.threads)?;
    let log = args
        .timing_log
        .as_ref()
        .map(|p| TimingLog::open(p, timing::DEFAULT_MAX_BYTES, timing::DEFAULT_KEEP))
        .transpose()?;
    let tag = timing::job_tag(
        format!("cli-{}-{}", std::process::id(), clock::unix_millis()),
        kind.to_string(),
        size as u64,
    );
    let shape = prove::shape_of_key(params.as_ref());
    let pool = synthesis::heap_pool(u64::MAX);
    let pvk = prepare_verifying_key(&params.vk);

    let mut proofs = Vec::new();
    let mut rows = Vec::new();
    let mut all_ok = true;
    for partition in 0..args.partitions {
        let mut timer = PartitionTimer::new(tag.clone(), partition, args.partitions, submitted);
        timer.picked_up();
        let (c, inputs) = circuit::bundled(kind, size, args.seed)?;
        let mut events = vec![timer.event(TimelineKind::SynthesisStart, None)];
        let t = Instant::now();
        let bufs = synthesis::SynthesisBuffers::checkout(&pool, "prove", &shape)?;
        timer.since(Phase::PoolCheckout, t);
        let syn = synthesis::synthesize_into(c, &shape, bufs)?;
        timer.add(Phase::Synthesis, syn.synthesis_ms);
        events.push(timer.event(TimelineKind::SynthesisEnd, None));
        let (domain, pinned) = (syn.domain() as u64, syn.pinned());
        let (r, s) = partition_randomness(args.seed, partition);
        let mut bt = BackendTimes::default();
        events.push(timer.event(TimelineKind::GpuStart, backend.device()));
        let key = prove::IdentifiedKey {
            key: params.as_ref(),
            sha256: &params_sha256,
        };
        let proof = prove::prove_synthesized(backend.as_ref(), &key, syn, r, s, &mut bt)?;
        events.push(timer.event(TimelineKind::GpuEnd, backend.device()));
        timer.merge_backend(&bt);
        let ok = verify_proof(&pvk, &proof, &inputs).context("verifying")?;
        all_ok &= ok;
        let rec = timer.finish(domain, backend.kind(), backend.device(), pinned, None);
        if let Some(log) = &log {
            for e in &events {
                log.event(e)?;
            }
            log.partition(&rec)?;
        } else {
            tracing::info!("{rec}");
        }
        rows.push((partition, rec.phases_ms));
        proofs.push(proof);
    }
    let total_ms = submitted.elapsed().as_secs_f64() * 1e3;
    let fin = ProofRecord {
        v: TIMING_SCHEMA_VERSION,
        ts_ms: clock::unix_millis(),
        tag,
        partitions: args.partitions,
        backend: backend.kind().as_str().to_string(),
        verified: Some(all_ok),
        total_ms,
        error: (!all_ok).then(|| "proof did not verify".to_string()),
    };
    match &log {
        Some(log) => log.proof(&fin)?,
        None => tracing::info!("{fin}"),
    }
    let mut bytes = Vec::new();
    for p in &proofs {
        p.write(&mut bytes).context("encoding the proof")?;
    }
    println!("{}", timing_table(&rows));
    println!(
        "circuit {kind} size {size}: {} partition(s) on {} in {total_ms:.1} ms, verified: {all_ok}",
        args.partitions,
        backend.kind().as_str()
    );
    println!("proof {}", hex::encode(bytes));
    // Each public input as the verifier takes it (ONE excluded): a scalar's
    // canonical little-endian bytes, hex, as the daemon's `public_inputs`.
    let (_, inputs) = circuit::bundled(kind, size, args.seed)?;
    println!("public_inputs {}", public_inputs_hex(&inputs).join(","));
    if let Some(log) = log {
        log.close()?;
    }
    Ok(if all_ok {
        exit::OK
    } else {
        exit::VERIFY_FAILED
    })
}

/// Each public input's canonical little-endian bytes, hex.
pub fn public_inputs_hex(inputs: &[Scalar]) -> Vec<String> {
    inputs.iter().map(|x| hex::encode(x.to_repr())).collect()
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
