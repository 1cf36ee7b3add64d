//! Writes a **forged** PoRep C1 output of a committed-capacity sector of any
//! size, in seconds and without sealing (`prover::filecoin::forge`): test
//! data for C2 tests and benchmarks at sizes that take hours to seal.
//!
//! ```text
//! cargo run --release -p prover --example forge-c1 -- \
//!     --sector-size 32GiB --out 32GiB.forged-cc-c1.json [--seed N] \
//!     [--prover-id HEX] [--sector-id N] [--ticket HEX] [--interactive-seed HEX]
//! ```
//!
//! `--out` holds filecoin-proofs' `SealCommitPhase1Output` JSON, exactly as
//! `seal_commit_phase1` writes it (every C2 reads it); `<out>.forged.json`
//! beside it says it is forged and gives what its C2 and `verify_seal` take
//! (registered proof, prover id, sector id, commitments). The output is
//! then read back and checked as `prover c2` checks a C1 (replica id, the
//! proof crates' vanilla verifier) unless `--no-check`. One JSON line on
//! stdout reports it, marked `"forged": true`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Parser;
use prover::filecoin::forge::{self, CcSector, C1_SUFFIX, FORGED_NOTE, SIDECAR_SUFFIX};
use prover::filecoin::registered::parse_sector_size;
use prover::filecoin::{c1, porep, write_output, SealProof};

#[derive(Parser, Debug)]
#[command(about = "Forge a committed-capacity PoRep C1 output (TEST DATA) without sealing")]
struct Args {
    /// Sector size (2KiB, 8MiB, 512MiB, 32GiB, 64GiB); its V1_1 proof type.
    #[arg(long, default_value = "32GiB", conflicts_with = "registered_proof")]
    sector_size: String,
    /// A seal proof type instead (e.g. StackedDrg32GiBV1 for the V1 graph).
    #[arg(long)]
    registered_proof: Option<SealProof>,
    /// The C1 output's file (default: `<size>.forged-cc-c1.json`).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Seeds the prover id, sector id, ticket, interactive seed and labels.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Prover id as 64 hex digits (default: drawn from --seed).
    #[arg(long, value_parser = c1::parse_prover_id)]
    prover_id: Option<[u8; 32]>,
    /// Sector number (default: drawn from --seed).
    #[arg(long)]
    sector_id: Option<u64>,
    /// Ticket as 64 hex digits (default: drawn from --seed).
    #[arg(long, value_parser = hex32("ticket"))]
    ticket: Option<[u8; 32]>,
    /// Interactive challenge seed as 64 hex digits (default: drawn from --seed).
    #[arg(long, value_parser = hex32("interactive seed"))]
    interactive_seed: Option<[u8; 32]>,
    /// Skip reading the output back through `prover c2`'s C1 check.
    #[arg(long)]
    no_check: bool,
}

fn hex32(what: &'static str) -> impl Fn(&str) -> Result<[u8; 32], String> + Clone {
    move |s| c1::parse_hex32(what, s)
}

impl Args {
    fn seal_proof(&self) -> Result<SealProof> {
        if let Some(p) = self.registered_proof {
            return Ok(p);
        }
        let size = parse_sector_size(&self.sector_size)?;
        SealProof::current(size).context("no PoRep of that sector size")
    }

    /// The sector drawn from `--seed`, with any id the arguments give.
    fn sector(&self) -> Result<CcSector> {
        let mut sector = CcSector::seeded(self.seal_proof()?, self.seed);
        sector.prover_id = self.prover_id.unwrap_or(sector.prover_id);
        sector.sector_id = self.sector_id.unwrap_or(sector.sector_id);
        sector.ticket = self.ticket.unwrap_or(sector.ticket);
        sector.seed = self.interactive_seed.unwrap_or(sector.seed);
        Ok(sector)
    }
}

/// `path` with `suffix` added to its file name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// `prover c2`'s own C1 check of the file as written: replica id, vanilla proofs.
fn check(path: &Path, sector: &CcSector) -> Result<f64> {
    let t = Instant::now();
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let doc = c1::parse(&bytes, Some(sector.seal_proof), Some(sector.sector_id))?;
    porep::prepare_c2(&doc, sector.prover_id)?;
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

fn run(args: &Args) -> Result<()> {
    let started = Instant::now();
    let sector = args.sector()?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{}{C1_SUFFIX}", sector.seal_proof.size_name())));
    if !out.to_string_lossy().ends_with(C1_SUFFIX) {
        eprintln!(
            "note: {} does not end in {C1_SUFFIX}; its sidecar still marks it forged",
            out.display()
        );
    }
    let forged = forge::forge_cc_c1(&sector, args.seed)?;
    let sidecar_path = with_suffix(&out, SIDECAR_SUFFIX);
    let c1_name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let sidecar = forged.sidecar(&c1_name);
    write_output(&out, &forged.c1_json)?;
    let mut sidecar_json = serde_json::to_vec_pretty(&sidecar)?;
    sidecar_json.push(b'\n');
    write_output(&sidecar_path, &sidecar_json)?;
    let check_ms = if args.no_check {
        None
    } else {
        Some(check(&out, &sector)?)
    };
    println!(
        "{}",
        serde_json::json!({
            "forged": true,
            "note": FORGED_NOTE,
            "c1": out,
            "sidecar": sidecar_path,
            "registered_proof": sidecar.registered_proof,
            "prover_id": sidecar.prover_id,
            "sector_id": sidecar.sector_id,
            "comm_d": sidecar.comm_d,
            "comm_r": sidecar.comm_r,
            "partitions": forged.partitions,
            "challenges": forged.challenges,
            "opened_columns": forged.opened_columns,
            "c1_bytes": forged.c1_json.len(),
            "forge_ms": forged.forge_ms,
            "verify_ms": forged.verify_ms,
            "check_ms": check_ms,
            "total_ms": started.elapsed().as_secs_f64() * 1e3,
            "c2": format!(
                "prover c2 --c1 {} --registered-proof {} --sector-id {} --prover-id {} --out PROOF",
                out.display(), sidecar.registered_proof, sidecar.sector_id, sidecar.prover_id
            ),
        })
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("forge-c1: {e:#}");
            ExitCode::FAILURE
        }
    }
}
