//! The other half of the PoRep C2 benchmark (docs/BENCHMARKS.md): seals a
//! sector with `filecoin-proofs`, runs its own `seal_commit_phase2` on the
//! same C1 output as `prover c2`, and judges proofs with its `verify_seal`.
//!
//! ```text
//! fil_bench seal SEAL_PROOF WORK_DIR OUT_DIR   # OUT_DIR/c1.json, OUT_DIR/sector.json
//! fil_bench filecoin-c2 OUT_DIR PROOF_FILE     # filecoin-proofs' own C2, timed
//! fil_bench verify OUT_DIR PROOF_FILE          # exit 0 accepted, 3 rejected
//! fil_bench forge SEAL_PROOF SEED OUT_DIR      # a FORGED committed-capacity C1 (TEST DATA), as `seal` writes it
//! fil_bench post-vanilla KIND WORK_DIR OUT_DIR # OUT_DIR/KIND-vanilla.json
//! fil_bench verify-post KIND OUT_DIR PROOF_FILE  # exit 0 accepted, 3 rejected
//! fil_bench snap UPDATE_PROOF WORK_DIR OUT_DIR  # a CC sector sealed and updated: OUT_DIR/snap.json, OUT_DIR/snap-args.txt
//! fil_bench snap-forged UPDATE_PROOF WORK_DIR OUT_DIR  # as `snap` on a FORGED sector key (TEST DATA, never sealed)
//! fil_bench filecoin-snap OUT_DIR PROOF_FILE   # filecoin-proofs' own update proof, timed
//! fil_bench verify-snap OUT_DIR PROOF_FILE     # exit 0 accepted, 3 rejected
//! ```
//!
//! KIND is `winning` or `window`; the PoSt randomness is [`POST_RANDOMNESS`]
//! (`prover post --randomness` takes it as 64 hex digits, all `07`).
//!
//! `FIL_PROOFS_PARAMETER_CACHE` names the parameter folder filecoin-proofs uses.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use prover::filecoin::forge;
use prover::filecoin::post::PostKind;
use prover::filecoin::seal::{self, Sealed};
use prover::filecoin::snap::vector as snap_vector;
use prover::filecoin::SealProof;

/// The PoSt challenge randomness of `post-vanilla` and `verify-post`.
const POST_RANDOMNESS: [u8; 32] = [7; 32];

fn post_kind(s: &str) -> Result<PostKind> {
    match s {
        "winning" => Ok(PostKind::Winning),
        "window" => Ok(PostKind::Window),
        _ => bail!("PoSt kind {s:?}: winning or window"),
    }
}

fn load(dir: &Path) -> Result<Sealed> {
    let meta = std::fs::read(dir.join("sector.json")).context("reading sector.json")?;
    let mut sealed: Sealed = serde_json::from_slice(&meta).context("parsing sector.json")?;
    sealed.c1_json = std::fs::read(dir.join("c1.json")).context("reading c1.json")?;
    Ok(sealed)
}

fn kind_arg(kind: PostKind) -> &'static str {
    match kind {
        PostKind::Winning => "winning",
        PostKind::Window => "window",
    }
}

fn run(args: &[String]) -> Result<u8> {
    match args {
        [cmd, proof, work, out] if cmd == "seal" => {
            let proof: SealProof = proof.parse()?;
            let (work, out) = (PathBuf::from(work), PathBuf::from(out));
            std::fs::create_dir_all(&out)?;
            let t = Instant::now();
            let sealed = seal::seal_random_sector(proof, 26, &work)?;
            std::fs::write(out.join("c1.json"), &sealed.c1_json)?;
            std::fs::write(out.join("sector.json"), serde_json::to_vec_pretty(&sealed)?)?;
            println!(
                "{}",
                serde_json::json!({
                    "sealed": proof.to_string(), "sector_id": sealed.sector_id,
                    "prover_id": hex::encode(sealed.prover_id),
                    "pc1_s": sealed.pc1_s, "pc2_s": sealed.pc2_s, "c1_s": sealed.c1_s,
                    "c1_bytes": sealed.c1_json.len(), "total_s": t.elapsed().as_secs_f64(),
                })
            );
            Ok(0)
        }
        [cmd, proof, seed, out] if cmd == "forge" => {
            // Test data: a committed-capacity C1 whose replica was never
            // computed (prover::filecoin::forge), for sizes too large to seal.
            let proof: SealProof = proof.parse()?;
            let seed: u64 = seed.parse().context("SEED is a number")?;
            let out = PathBuf::from(out);
            std::fs::create_dir_all(&out)?;
            let sector = forge::CcSector::seeded(proof, seed);
            let forged = forge::forge_cc_c1(&sector, seed)?;
            let sealed = Sealed {
                seal_proof: proof.to_string(),
                prover_id: sector.prover_id,
                sector_id: sector.sector_id,
                comm_r: forged.comm_r,
                comm_d: forged.comm_d,
                ticket: sector.ticket,
                seed: sector.seed,
                c1_json: Vec::new(),
                pc1_s: 0.0,
                pc2_s: 0.0,
                c1_s: forged.forge_ms / 1e3,
            };
            std::fs::write(out.join("c1.json"), &forged.c1_json)?;
            std::fs::write(out.join("sector.json"), serde_json::to_vec_pretty(&sealed)?)?;
            let sidecar = forged.sidecar("c1.json");
            std::fs::write(out.join("c1.json.forged.json"), serde_json::to_vec_pretty(&sidecar)?)?;
            println!("{}", serde_json::to_string(&sidecar)?);
            Ok(0)
        }
        [cmd, dir, proof_file] if cmd == "filecoin-c2" => {
            let sealed = load(Path::new(dir))?;
            let t = Instant::now();
            let proof = seal::filecoin_c2(&sealed)?;
            let secs = t.elapsed().as_secs_f64();
            std::fs::write(proof_file, &proof)?;
            println!(
                "{}",
                serde_json::json!({"seal_commit_phase2_s": secs, "bytes": proof.len()})
            );
            Ok(0)
        }
        [cmd, dir, proof_file] if cmd == "verify" => {
            let sealed = load(Path::new(dir))?;
            let proof = std::fs::read(proof_file).context("reading the proof")?;
            let t = Instant::now();
            let ok = seal::verify(&sealed, &proof)?;
            println!(
                "{}",
                serde_json::json!({"verify_seal": ok, "proof": proof_file, "s": t.elapsed().as_secs_f64()})
            );
            Ok(if ok { 0 } else { 3 })
        }
        [cmd, kind, work, dir] if cmd == "post-vanilla" => {
            let kind = post_kind(kind)?;
            let sealed = load(Path::new(dir))?;
            let vanilla = seal::post_vanilla(kind, &sealed, Path::new(work), POST_RANDOMNESS)?;
            let out = Path::new(dir).join(format!("{}-vanilla.json", kind_arg(kind)));
            std::fs::write(&out, &vanilla)?;
            println!(
                "{}",
                serde_json::json!({"vanilla": out, "bytes": vanilla.len(), "randomness": hex::encode(POST_RANDOMNESS)})
            );
            Ok(0)
        }
        [cmd, kind, dir, proof_file] if cmd == "verify-post" => {
            let kind = post_kind(kind)?;
            let sealed = load(Path::new(dir))?;
            let proof = std::fs::read(proof_file).context("reading the proof")?;
            let ok = seal::verify_post(kind, &sealed, POST_RANDOMNESS, &proof)?;
            println!("{}", serde_json::json!({"verify_post": ok, "kind": kind_arg(kind), "proof": proof_file}));
            Ok(if ok { 0 } else { 3 })
        }
        [cmd, proof, work, out] if cmd == "snap" || cmd == "snap-forged" => {
            let proof: prover::filecoin::UpdateProof = proof.parse()?;
            let out = PathBuf::from(out);
            std::fs::create_dir_all(&out)?;
            // snap-forged: test data, a sector key never sealed
            // (prover::filecoin::snap::forge_key), for sizes whose sealing
            // does not fit a benchmark's time; snap.json says so.
            let key = if cmd == "snap-forged" {
                snap_vector::SectorKey::Forged
            } else {
                snap_vector::SectorKey::Sealed
            };
            let v = snap_vector::snap_vector(proof, key, 26, Path::new(work))?;
            std::fs::write(out.join("snap.json"), serde_json::to_vec(&v)?)?;
            let hex: Vec<String> = v.vanilla.iter().map(hex::encode).collect();
            std::fs::write(out.join("snap-vanilla.json"), serde_json::to_vec(&hex)?)?;
            // `prover snap` / `prover client snap` arguments, one per line.
            let args = format!(
                "--update-proof\n{proof}\n--comm-r-old\n{}\n--comm-r-new\n{}\n--comm-d-new\n{}\n--vanilla\n{}\n",
                hex::encode(v.comm_r_old),
                hex::encode(v.comm_r_new),
                hex::encode(v.comm_d_new),
                out.join("snap-vanilla.json").display()
            );
            std::fs::write(out.join("snap-args.txt"), args)?;
            println!(
                "{}",
                serde_json::json!({"snap": proof.to_string(), "partitions": v.vanilla.len(),
                    "sector_key": v.sector_key_made, "note": v.note,
                    "seal_s": v.seal_s, "encode_s": v.encode_s, "vanilla_s": v.vanilla_s})
            );
            Ok(0)
        }
        [cmd, dir, proof_file] if cmd == "filecoin-snap" || cmd == "verify-snap" => {
            let text = std::fs::read(Path::new(dir).join("snap.json")).context("reading snap.json")?;
            let v: snap_vector::SnapVector = serde_json::from_slice(&text).context("parsing snap.json")?;
            if cmd == "filecoin-snap" {
                let t = Instant::now();
                let proof = snap_vector::filecoin_snap(&v)?;
                let secs = t.elapsed().as_secs_f64();
                std::fs::write(proof_file, &proof)?;
                println!("{}", serde_json::json!({"update_proof_s": secs, "bytes": proof.len()}));
                return Ok(0);
            }
            let proof = std::fs::read(proof_file).context("reading the proof")?;
            let ok = snap_vector::verify_snap(&v, &proof)?;
            println!("{}", serde_json::json!({"verify_snap": ok, "proof": proof_file}));
            Ok(if ok { 0 } else { 3 })
        }
        _ => bail!("usage: fil_bench seal SEAL_PROOF WORK_DIR OUT_DIR | forge SEAL_PROOF SEED OUT_DIR | filecoin-c2 OUT_DIR PROOF_FILE | verify OUT_DIR PROOF_FILE | post-vanilla KIND WORK_DIR OUT_DIR | verify-post KIND OUT_DIR PROOF_FILE | snap UPDATE_PROOF WORK_DIR OUT_DIR | snap-forged UPDATE_PROOF WORK_DIR OUT_DIR | filecoin-snap OUT_DIR PROOF_FILE | verify-snap OUT_DIR PROOF_FILE"),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
