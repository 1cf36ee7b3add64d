//! What one PoRep partition's witness pass costs per core at its real
//! size, measured on a few of its challenges rather than the whole
//! partition (a 32 GiB partition's recording alone is ~9 GB): the crates'
//! own partition circuit built over the first 1, 2, … challenges of a C1
//! output (a sealed or forged sector, `fil_bench seal` / `fil_bench forge`),
//! its constraints recorded, then the production witness-only pass
//! (`prover::compiled::assign`, unchecked) timed on one thread. A partition
//! is its first challenge plus a step per further challenge (the
//! preflight's rule, `prover::filecoin::need`), so the whole partition's
//! witness and a C2's (all partitions) per core follow from two counts.
//!
//! ```text
//! cargo run --release -p prover --example witness_cost -- OUT_DIR [CHALLENGES] [REPS]
//! ```
//!
//! OUT_DIR holds `c1.json` and `sector.json`; CHALLENGES (default 2, at
//! most the partition's) and REPS (default 3, the best is kept) are small
//! numbers. Prints one JSON line per challenge count and a summary line;
//! for the largest count the recording is also made in pieces of its
//! challenges on every core (`prover::compiled::compile_split`, as a
//! daemon's first partition records), timed and compared with the whole
//! recording's digest, and its checked witness pass timed whole (one
//! thread) and in the same pieces (`prover::compiled::assign_split`), the
//! values compared, and its digest timed on one thread and on all.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use bellperson::Circuit as _;
use filecoin_hashers::{Domain, Hasher};
use filecoin_proofs::constants::{self as fc, DefaultPieceDomain, DefaultPieceHasher};
use filecoin_proofs::{as_safe_commitment, SealCommitPhase1Output};
use prover::circuit::split::piece_range;
use prover::circuit::{CircuitShape, SplitWitness};
use prover::compiled::{assign, assign_split, compile, compile_split};
use prover::filecoin::seal::Sealed;
use prover::filecoin::SealProof;
use prover::pool::PinnedVec;
use storage_proofs_core::compound_proof::{self, CompoundProof};
use storage_proofs_core::merkle::MerkleTreeTrait;
use storage_proofs_porep::stacked::{self, StackedCompound, StackedDrg};

type Compound<Tree> = StackedCompound<Tree, DefaultPieceHasher>;
type Scheme<'a, Tree> = StackedDrg<'a, Tree, DefaultPieceHasher>;

/// Bounds on the command line's small numbers.
const MAX_CHALLENGES: usize = 18;
const MAX_REPS: usize = 20;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn number(arg: Option<&String>, default: usize, max: usize, what: &str) -> Result<usize> {
    let n = match arg {
        None => default,
        Some(s) => s.parse().with_context(|| format!("{what} is a number"))?,
    };
    if n == 0 || n > max {
        bail!("{what} must be from 1 to {max}");
    }
    Ok(n)
}

fn run(args: &[String]) -> Result<()> {
    let Some(dir) = args.first() else {
        bail!("usage: witness_cost OUT_DIR [CHALLENGES] [REPS]");
    };
    let challenges = number(args.get(1), 2, MAX_CHALLENGES, "CHALLENGES")?;
    let reps = number(args.get(2), 3, MAX_REPS, "REPS")?;
    let dir = Path::new(dir);
    let sealed: Sealed = serde_json::from_slice(
        &std::fs::read(dir.join("sector.json")).context("reading sector.json")?,
    )
    .context("sector.json")?;
    let c1 = std::fs::read(dir.join("c1.json")).context("reading c1.json")?;
    let proof: SealProof = sealed.seal_proof.parse()?;
    match proof.sector_size {
        fc::SECTOR_SIZE_2_KIB => measure::<fc::SectorShape2KiB>(proof, &c1, challenges, reps),
        fc::SECTOR_SIZE_8_MIB => measure::<fc::SectorShape8MiB>(proof, &c1, challenges, reps),
        fc::SECTOR_SIZE_512_MIB => measure::<fc::SectorShape512MiB>(proof, &c1, challenges, reps),
        fc::SECTOR_SIZE_32_GIB => measure::<fc::SectorShape32GiB>(proof, &c1, challenges, reps),
        fc::SECTOR_SIZE_64_GIB => measure::<fc::SectorShape64GiB>(proof, &c1, challenges, reps),
        other => bail!("sector size {other} has no PoRep"),
    }
}

fn measure<Tree: 'static + MerkleTreeTrait>(
    proof: SealProof,
    c1_json: &[u8],
    challenges: usize,
    reps: usize,
) -> Result<()> {
    let c1: SealCommitPhase1Output<Tree> =
        serde_json::from_slice(c1_json).context("c1.json is not this size's C1 output")?;
    let config = proof.porep_config();
    let partitions = usize::from(config.partitions);
    let pub_params = <Compound<Tree> as CompoundProof<Scheme<'_, Tree>, _>>::setup(
        &compound_proof::SetupParams {
            vanilla_params: filecoin_proofs::parameters::setup_params(&config)?,
            partitions: Some(partitions),
            priority: false,
        },
    )?;
    let comm_r = as_safe_commitment::<<Tree::Hasher as Hasher>::Domain, _>(&c1.comm_r, "comm_r")?;
    let comm_d = DefaultPieceDomain::try_from_bytes(&c1.comm_d)?;
    let inputs = stacked::PublicInputs {
        replica_id: c1.replica_id,
        tau: Some(stacked::Tau { comm_d, comm_r }),
        k: None,
        seed: Some(c1.seed),
    };
    let own = c1.vanilla_proofs.first().map_or(0, Vec::len);
    if challenges > own {
        bail!("CHALLENGES {challenges}: a partition of {proof} has {own}");
    }
    let pool = prover::synthesis::heap_pool(16 << 30);
    let mut best = Vec::new();
    for k in 1..=challenges {
        let vanilla = c1.vanilla_proofs[0][..k].to_vec();
        let circuit = || {
            <Compound<Tree> as CompoundProof<Scheme<'_, Tree>, _>>::circuit(
                &inputs,
                (),
                &vanilla,
                &pub_params.vanilla_params,
                Some(0),
            )
        };
        let t = Instant::now();
        let r1cs = compile(circuit()?)?;
        let record_ms = t.elapsed().as_secs_f64() * 1e3;
        let slot = |n: usize| -> Result<PinnedVec<blstrs::Scalar>> {
            let buf = pool.checkout("witness_cost", n.max(1) * 32)?;
            Ok(PinnedVec::new(buf)?)
        };
        let (mut ins, mut aux) = (slot(r1cs.num_inputs)?, slot(r1cs.num_aux)?);
        let mut witness_ms = f64::INFINITY;
        for _ in 0..reps {
            let built = circuit()?;
            let t = Instant::now();
            assign(built, &r1cs, &mut ins, &mut aux, false)?;
            witness_ms = witness_ms.min(t.elapsed().as_secs_f64() * 1e3);
        }
        println!(
            "{}",
            serde_json::json!({
                "seal_proof": proof.to_string(), "challenges": k,
                "constraints": r1cs.num_constraints, "aux": r1cs.num_aux,
                "record_ms": record_ms, "witness_ms_one_thread": witness_ms,
            })
        );
        best.push((r1cs.num_constraints, witness_ms));
        if k == challenges && k > 1 {
            let sliced = Sliced {
                inputs: &inputs,
                vanilla: &vanilla,
                params: &pub_params.vanilla_params,
            };
            let shape = CircuitShape::of(sliced.clone())?;
            let pieces = sliced.pieces(rayon::current_num_threads());
            let t = Instant::now();
            let split = compile_split(&sliced, pieces, &shape)?;
            let split_ms = t.elapsed().as_secs_f64() * 1e3;
            if split.digest != r1cs.digest {
                bail!("the recording in pieces differs from the whole recording");
            }
            // The digest that names a recording, on one thread and on all.
            let t = Instant::now();
            let one = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
            if one.install(|| split.structure_digest()) != split.digest {
                bail!("the digest depends on the number of threads");
            }
            let digest_one_ms = t.elapsed().as_secs_f64() * 1e3;
            let t = Instant::now();
            split.structure_digest();
            let digest_ms = t.elapsed().as_secs_f64() * 1e3;
            // The checked pass a recording partition runs: the whole
            // circuit on one thread, or in the pieces it was recorded in.
            let t = Instant::now();
            assign(sliced.clone(), &split, &mut ins, &mut aux, true)?;
            let checked_ms = t.elapsed().as_secs_f64() * 1e3;
            let (mut ins2, mut aux2) = (slot(split.num_inputs)?, slot(split.num_aux)?);
            let t = Instant::now();
            assign_split(&sliced, pieces, &split, &mut ins2, &mut aux2, true)?;
            let checked_pieces_ms = t.elapsed().as_secs_f64() * 1e3;
            if ins.as_slice() != ins2.as_slice() || aux.as_slice() != aux2.as_slice() {
                bail!("the checked pass in pieces gave other values than the whole one");
            }
            println!(
                "{}",
                serde_json::json!({
                    "seal_proof": proof.to_string(), "challenges": k,
                    "record_ms_one_thread": record_ms, "record_in_pieces_ms": split_ms,
                    "pieces": pieces, "threads": rayon::current_num_threads(),
                    "same_digest": true,
                    "checked_ms_one_thread": checked_ms,
                    "checked_in_pieces_ms": checked_pieces_ms, "same_values": true,
                    "recording_bytes": split.bytes(), "digest_ms_one_thread": digest_one_ms,
                    "digest_ms": digest_ms,
                })
            );
        }
    }
    // A partition: its first challenge plus a step per further one.
    let (c1_count, w1) = best[0];
    let (step_c, step_w) = match best.get(1) {
        Some(&(c2, w2)) => (c2.saturating_sub(c1_count), (w2 - w1).max(0.0)),
        None => (0, 0.0),
    };
    let rest = own.saturating_sub(1) as f64;
    let partition_ms = w1 + rest * step_w;
    let constraints = c1_count as f64 + rest * step_c as f64;
    println!(
        "{}",
        serde_json::json!({
            "seal_proof": proof.to_string(),
            "challenges_per_partition": own, "partitions": partitions,
            "per_challenge_ms_one_thread": step_w,
            "partition_constraints_extended": constraints,
            "partition_witness_core_s": partition_ms / 1e3,
            "c2_witness_core_s": partition_ms * partitions as f64 / 1e3,
            "constraints_per_core_s": constraints / (partition_ms / 1e3),
        })
    );
    Ok(())
}

/// The partition circuit over a slice of its challenges, in pieces of them
/// (as the prover's PoRep statement cuts a partition).
struct Sliced<'a, Tree: 'static + MerkleTreeTrait> {
    inputs: &'a stacked::PublicInputs<<Tree::Hasher as Hasher>::Domain, DefaultPieceDomain>,
    vanilla: &'a [stacked::Proof<Tree, DefaultPieceHasher>],
    params: &'a stacked::PublicParams<Tree>,
}

impl<Tree: 'static + MerkleTreeTrait> Clone for Sliced<'_, Tree> {
    fn clone(&self) -> Self {
        Sliced {
            inputs: self.inputs,
            vanilla: self.vanilla,
            params: self.params,
        }
    }
}

impl<Tree: 'static + MerkleTreeTrait> Sliced<'_, Tree> {
    fn over(
        &self,
        vanilla: &[stacked::Proof<Tree, DefaultPieceHasher>],
    ) -> Result<stacked::StackedCircuit<Tree, DefaultPieceHasher>, bellperson::SynthesisError> {
        <Compound<Tree> as CompoundProof<Scheme<'_, Tree>, _>>::circuit(
            self.inputs,
            (),
            &vanilla.to_vec(),
            self.params,
            Some(0),
        )
        .map_err(|_| bellperson::SynthesisError::AssignmentMissing)
    }
}

impl<Tree: 'static + MerkleTreeTrait> bellperson::Circuit<blstrs::Scalar> for Sliced<'_, Tree> {
    fn synthesize<CS: bellperson::ConstraintSystem<blstrs::Scalar>>(
        self,
        cs: &mut CS,
    ) -> Result<(), bellperson::SynthesisError> {
        self.over(self.vanilla)?.synthesize(cs)
    }
}

impl<Tree: 'static + MerkleTreeTrait> SplitWitness for Sliced<'_, Tree> {
    fn repeats_preamble(&self) -> bool {
        true
    }

    fn pieces(&self, max: usize) -> usize {
        max.clamp(1, self.vanilla.len().max(1))
    }

    fn synthesize_piece<CS: bellperson::ConstraintSystem<blstrs::Scalar>>(
        &self,
        piece: usize,
        pieces: usize,
        cs: &mut CS,
    ) -> Result<(), bellperson::SynthesisError> {
        let range = piece_range(self.vanilla.len(), piece, pieces);
        self.over(&self.vanilla[range])?.synthesize(cs)
    }
}
