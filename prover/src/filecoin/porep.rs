//! PoRep C2: a C1 output in, the sector's seal proof out, every partition's
//! circuit built by the proof crates (`StackedCompound::circuit`, as
//! `seal_commit_phase2` builds it) and proven by this crate's prover.
//!
//! Before any proving the C1 output is checked against the sector it is
//! said to be for (its replica id is recomputed from prover id, sector id,
//! ticket, CommD and PoRep id) and its vanilla proofs are verified; after
//! proving, every partition's proof is verified against the parameters'
//! verifying key. The output is laid out as `seal_commit_phase2` lays it out:
//! the partitions' Groth16 proofs, 192 bytes each, concatenated in order.

use std::path::Path;
use std::time::Instant;

use bellperson::groth16::{prepare_verifying_key, verify_proof, Proof};
use blstrs::{Bls12, Scalar};
use filecoin_hashers::{Domain, Hasher};
use filecoin_proofs::constants::{DefaultPieceDomain, DefaultPieceHasher};
use filecoin_proofs::{as_safe_commitment, SealCommitPhase1Output};
use storage_proofs_core::compound_proof::{self, CompoundProof};
use storage_proofs_core::merkle::MerkleTreeTrait;
use storage_proofs_core::proof::ProofScheme;
use storage_proofs_porep::stacked::{self, generate_replica_id, StackedCompound, StackedDrg};

use crate::backend::{Backend, BackendTimes};
use crate::filecoin::c1::C1Document;
use crate::filecoin::cache::{self, CacheEntry, Provenance};
use crate::filecoin::registered::SealProof;
use crate::filecoin::FilecoinError;
use crate::pool::PinnedPool;
use crate::prove::{self, IdentifiedKey};
use crate::synthesis;

/// Bytes of one Groth16 proof in Filecoin's (bellperson's compressed) encoding.
pub const PROOF_BYTES: usize = 192;

/// How a C2 is to be run.
#[derive(Clone, Debug)]
pub struct C2Options {
    /// Accept TEST-ONLY parameters (those `prover setup` generated).
    pub allow_test_params: bool,
    /// Draw each partition's r, s from this seed (reproducible proofs, for
    /// tests); `None` draws them from the OS, as a node must.
    pub seed: Option<u64>,
}

/// What one partition took.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PartitionReport {
    pub partition: usize,
    pub constraints: usize,
    pub domain_log2: u32,
    pub aux: usize,
    pub circuit_ms: f64,
    pub synthesis_ms: f64,
    pub prove_ms: f64,
    pub device_ms: f64,
    pub verify_ms: f64,
}

/// The seal proof and how it was made.
#[derive(Clone, Debug, serde::Serialize)]
pub struct C2Output {
    #[serde(skip)]
    pub proof: Vec<u8>,
    pub seal_proof: String,
    pub sector_size: u64,
    pub sector_id: u64,
    pub params_file: String,
    pub params: Provenance,
    pub backend: &'static str,
    pub check_ms: f64,
    pub load_params_ms: f64,
    pub partitions: Vec<PartitionReport>,
    pub total_ms: f64,
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn proof_err(context: &'static str) -> impl FnOnce(anyhow::Error) -> FilecoinError {
    move |e| FilecoinError::ProofCrates {
        context,
        reason: format!("{e:#}"),
    }
}

/// Filecoin's cache entry of a seal proof type's circuit.
pub fn cache_entry(cache_dir: &Path, seal_proof: SealProof) -> Result<CacheEntry, FilecoinError> {
    crate::filecoin::with_tree!(
        seal_proof.sector_size,
        cache_entry_of,
        cache_dir,
        seal_proof
    )
}

fn cache_entry_of<Tree: 'static + MerkleTreeTrait>(
    cache_dir: &Path,
    seal_proof: SealProof,
) -> Result<CacheEntry, FilecoinError> {
    let id = seal_proof
        .porep_config()
        .get_cache_identifier::<Tree>()
        .map_err(proof_err("computing the parameters' cache identifier"))?;
    Ok(CacheEntry::new(cache_dir, id, seal_proof.to_string()))
}

/// Runs C2 for `doc` (of `prover_id`'s sector `doc.sector_id`) with the
/// parameters in `cache_dir`, on `backend`, synthesising into `pool`.
pub fn seal_commit_phase2(
    doc: &C1Document,
    prover_id: [u8; 32],
    cache_dir: &Path,
    backend: &dyn Backend,
    pool: &PinnedPool,
    options: &C2Options,
) -> Result<C2Output, FilecoinError> {
    crate::filecoin::with_tree!(
        doc.seal_proof.sector_size,
        c2_of,
        doc,
        prover_id,
        cache_dir,
        backend,
        pool,
        options
    )
}

fn c2_of<Tree: 'static + MerkleTreeTrait>(
    doc: &C1Document,
    prover_id: [u8; 32],
    cache_dir: &Path,
    backend: &dyn Backend,
    pool: &PinnedPool,
    options: &C2Options,
) -> Result<C2Output, FilecoinError> {
    let started = Instant::now();
    let seal_proof = doc.seal_proof;
    let sector_id = doc.sector_id;
    let c1: SealCommitPhase1Output<Tree> =
        serde_json::from_value(doc.output.clone()).map_err(|source| FilecoinError::C1Shape {
            seal_proof,
            reason: source.to_string(),
        })?;
    let config = seal_proof.porep_config();
    let partitions = usize::from(config.partitions);
    if c1.comm_d == [0; 32] || c1.comm_r == [0; 32] || c1.seed == [0; 32] {
        return Err(FilecoinError::C1Field {
            field: "comm_d, comm_r or seed",
            reason: "all zero".into(),
        });
    }
    if c1.vanilla_proofs.len() != partitions || c1.vanilla_proofs.iter().any(|p| p.is_empty()) {
        return Err(FilecoinError::C1Field {
            field: "vanilla_proofs",
            reason: format!(
                "{} partitions (some may be empty); a {seal_proof} C1 output has {partitions}",
                c1.vanilla_proofs.len()
            ),
        });
    }
    let expected_replica = generate_replica_id::<Tree::Hasher, _>(
        &prover_id,
        sector_id,
        &c1.ticket,
        c1.comm_d,
        &config.porep_id,
    );
    if expected_replica != c1.replica_id {
        return Err(FilecoinError::NotThisSector {
            sector_id,
            prover_id: hex::encode(prover_id),
            seal_proof,
        });
    }
    let comm_r = as_safe_commitment::<<Tree::Hasher as Hasher>::Domain, _>(&c1.comm_r, "comm_r")
        .map_err(|e| FilecoinError::C1Field {
            field: "comm_r",
            reason: format!("{e:#}"),
        })?;
    let comm_d =
        DefaultPieceDomain::try_from_bytes(&c1.comm_d).map_err(|e| FilecoinError::C1Field {
            field: "comm_d",
            reason: format!("{e:#}"),
        })?;
    let public_inputs = stacked::PublicInputs {
        replica_id: c1.replica_id,
        tau: Some(stacked::Tau { comm_d, comm_r }),
        k: None,
        seed: Some(c1.seed),
    };
    let setup = compound_proof::SetupParams {
        vanilla_params: filecoin_proofs::parameters::setup_params(&config)
            .map_err(proof_err("setting up the PoRep parameters"))?,
        partitions: Some(partitions),
        priority: false,
    };
    let pub_params = <StackedCompound<Tree, DefaultPieceHasher> as CompoundProof<
        StackedDrg<'_, Tree, DefaultPieceHasher>,
        _,
    >>::setup(&setup)
    .map_err(proof_err("setting up the compound PoRep"))?;
    // A C1 whose vanilla proofs do not verify cannot give a valid proof:
    // say so before minutes of proving, naming the input as the cause.
    let valid = StackedDrg::<Tree, DefaultPieceHasher>::verify_all_partitions(
        &pub_params.vanilla_params,
        &public_inputs,
        &c1.vanilla_proofs,
    )
    .map_err(proof_err("verifying the C1 output's vanilla proofs"))?;
    if !valid {
        return Err(FilecoinError::VanillaInvalid { seal_proof });
    }
    let check_ms = ms(started);

    let t = Instant::now();
    let entry = cache_entry_of::<Tree>(cache_dir, seal_proof)?;
    let loaded = cache::load(&entry, options.allow_test_params)?;
    if loaded.provenance.is_test_only() {
        tracing::warn!(file = %entry.params.display(), "{}", crate::setup::TEST_ONLY_WARNING);
    }
    let load_params_ms = ms(t);
    let pvk = prepare_verifying_key(&loaded.params.vk);
    let key = IdentifiedKey {
        key: &loaded.params,
        sha256: &loaded.sha256,
    };
    let shape = prove::shape_of_key(&key);

    let mut proof_bytes = Vec::with_capacity(partitions * PROOF_BYTES);
    let mut reports = Vec::with_capacity(partitions);
    for (k, vanilla) in c1.vanilla_proofs.iter().enumerate() {
        let t = Instant::now();
        let circuit = <StackedCompound<Tree, DefaultPieceHasher> as CompoundProof<
            StackedDrg<'_, Tree, DefaultPieceHasher>,
            _,
        >>::circuit(
            &public_inputs,
            (),
            vanilla,
            &pub_params.vanilla_params,
            Some(k),
        )
        .map_err(proof_err("building a partition's circuit"))?;
        let inputs: Vec<Scalar> = <StackedCompound<Tree, DefaultPieceHasher> as CompoundProof<
            StackedDrg<'_, Tree, DefaultPieceHasher>,
            _,
        >>::generate_public_inputs(
            &public_inputs, &pub_params.vanilla_params, Some(k)
        )
        .map_err(proof_err("computing a partition's public inputs"))?;
        let circuit_ms = ms(t);
        let syn =
            synthesis::synthesize(circuit, &shape, pool).map_err(|e| FilecoinError::Prove {
                partition: k,
                source: e.into(),
            })?;
        let (constraints, synthesis_ms) = (syn.num_constraints, syn.synthesis_ms);
        let (r, s) = prove::Blinding::from_seed(options.seed).for_partition(k as u32);
        let t = Instant::now();
        let mut times = BackendTimes::default();
        let proof =
            prove::prove_synthesized(backend, &key, syn, r, s, &mut times).map_err(|source| {
                FilecoinError::Prove {
                    partition: k,
                    source,
                }
            })?;
        let prove_ms = ms(t);
        let t = Instant::now();
        if !verify_proof(&pvk, &proof, &inputs).unwrap_or(false) {
            return Err(FilecoinError::ProofRejected { partition: k });
        }
        let verify_ms = ms(t);
        write_proof(&proof, &mut proof_bytes);
        reports.push(PartitionReport {
            partition: k,
            constraints,
            domain_log2: shape.log2_domain(),
            aux: shape.num_aux,
            circuit_ms,
            synthesis_ms,
            prove_ms,
            device_ms: times.device_ms,
            verify_ms,
        });
    }
    Ok(C2Output {
        proof: proof_bytes,
        seal_proof: seal_proof.to_string(),
        sector_size: seal_proof.sector_size,
        sector_id,
        params_file: entry.params_name(),
        params: loaded.provenance,
        backend: backend.kind().as_str(),
        check_ms,
        load_params_ms,
        partitions: reports,
        total_ms: ms(started),
    })
}

fn write_proof(proof: &Proof<Bls12>, out: &mut Vec<u8>) {
    // Writing into a Vec cannot fail.
    let _ = proof.write(out);
}
