//! Sealing a sector of seeded random data with `filecoin-proofs` (PC1, PC2,
//! C1) and checking a seal proof with its `verify_seal`: the inputs and the
//! judge of the C2 tests and benchmarks. Likewise the PoSt vanilla proofs of
//! a sealed sector. Nothing here proves: that is the kinds' modules' (a kind
//! whose inputs start from a sealed sector builds its own vector on
//! [`seal_cc_sector`] or [`seal_random_sector`], in its module).

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{Seek, Write};
use std::path::Path;
use std::time::Instant;

use filecoin_proofs::{
    add_piece, generate_fallback_sector_challenges, generate_piece_commitment,
    generate_single_vanilla_proof, seal_commit_phase1, seal_pre_commit_phase1,
    seal_pre_commit_phase2, verify_seal, verify_window_post, verify_winning_post, PieceInfo,
    PrivateReplicaInfo, PublicReplicaInfo, SealCommitPhase1Output, UnpaddedBytesAmount,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use storage_proofs_core::merkle::MerkleTreeTrait;
use storage_proofs_core::sector::SectorId;

use crate::filecoin::post::{post_config, PostKind};
use crate::filecoin::registered::SealProof;
use crate::filecoin::{crates_err, FilecoinError};

/// A sealed sector's C1 output and what its proof is checked against.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Sealed {
    pub seal_proof: String,
    pub prover_id: [u8; 32],
    pub sector_id: u64,
    pub comm_r: [u8; 32],
    pub comm_d: [u8; 32],
    pub ticket: [u8; 32],
    pub seed: [u8; 32],
    /// filecoin-proofs' `SealCommitPhase1Output` as serde JSON.
    #[serde(skip)]
    pub c1_json: Vec<u8>,
    pub pc1_s: f64,
    pub pc2_s: f64,
    pub c1_s: f64,
}

pub(crate) fn io_err(context: &'static str) -> impl FnOnce(std::io::Error) -> FilecoinError {
    move |e| FilecoinError::ProofCrates {
        context,
        reason: e.to_string(),
    }
}

/// Seals one sector of `seal_proof`'s size, its data, ticket, seed, prover
/// id and sector id drawn from `rng_seed`, in `work_dir` (which must be
/// empty or missing; it holds the staged, sealed and cache files).
pub fn seal_random_sector(
    seal_proof: SealProof,
    rng_seed: u64,
    work_dir: &Path,
) -> Result<Sealed, FilecoinError> {
    seal_sector(seal_proof, rng_seed, work_dir, None, Data::Random)
}

/// [`seal_random_sector`] of a committed-capacity sector: its data all
/// zero, as a sector sealed to be updated later with SnapDeals is.
pub fn seal_cc_sector(
    seal_proof: SealProof,
    rng_seed: u64,
    work_dir: &Path,
) -> Result<Sealed, FilecoinError> {
    seal_sector(seal_proof, rng_seed, work_dir, None, Data::Zero)
}

/// What a sealed sector holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Data {
    /// Drawn from the seed.
    Random,
    /// Zeros: a committed-capacity sector.
    Zero,
}

/// [`seal_random_sector`] for miner `actor_id`: its prover id is the one
/// Filecoin derives from the miner's ID address, as Curio sends it.
pub fn seal_random_sector_of_miner(
    seal_proof: SealProof,
    rng_seed: u64,
    work_dir: &Path,
    actor_id: u64,
) -> Result<Sealed, FilecoinError> {
    let prover_id = crate::filecoin::c1::prover_id_of_miner(actor_id);
    seal_sector(
        seal_proof,
        rng_seed,
        work_dir,
        Some(prover_id),
        Data::Random,
    )
}

fn seal_sector(
    seal_proof: SealProof,
    rng_seed: u64,
    work_dir: &Path,
    prover_id: Option<[u8; 32]>,
    data: Data,
) -> Result<Sealed, FilecoinError> {
    crate::filecoin::with_tree!(
        seal_proof.sector_size,
        seal_of,
        seal_proof,
        rng_seed,
        work_dir,
        prover_id,
        data
    )
}

fn seal_of<Tree: 'static + MerkleTreeTrait>(
    seal_proof: SealProof,
    rng_seed: u64,
    work_dir: &Path,
    prover_id_of: Option<[u8; 32]>,
    data_kind: Data,
) -> Result<Sealed, FilecoinError> {
    let config = seal_proof.porep_config();
    let mut rng = ChaCha20Rng::seed_from_u64(rng_seed);
    let cache = work_dir.join("cache");
    fs::create_dir_all(&cache).map_err(io_err("creating the sealing folder"))?;
    let (staged, sealed, piece) = (
        work_dir.join("staged"),
        work_dir.join("sealed"),
        work_dir.join("piece"),
    );
    let unpadded = UnpaddedBytesAmount::from(config.padded_bytes_amount());
    let mut data = vec![0u8; u64::from(unpadded) as usize];
    // The seeded random sector draws its data first: its ids and ticket
    // stay what they were before CC sectors existed (shipped fixtures).
    if data_kind == Data::Random {
        rng.fill(&mut data[..]);
    }
    // A prover id and ticket are field elements in their 32 bytes: clear
    // the top bits, as Filecoin's own ids are.
    let mut prover_id: [u8; 32] = rng.gen();
    prover_id[31] &= 0x3f;
    let prover_id = prover_id_of.unwrap_or(prover_id);
    let mut ticket: [u8; 32] = rng.gen();
    ticket[31] &= 0x3f;
    let mut seed: [u8; 32] = rng.gen();
    seed[31] &= 0x3f;
    let sector_id: u64 = rng.gen_range(1..1 << 40);

    let pieces = vec![stage(&data, unpadded, &piece, &staged)?];
    File::create(&sealed).map_err(io_err("creating the sealed sector"))?;

    let t = Instant::now();
    let pc1 = seal_pre_commit_phase1::<_, _, _, Tree>(
        &config,
        &cache,
        &staged,
        &sealed,
        prover_id,
        SectorId::from(sector_id),
        ticket,
        &pieces,
    )
    .map_err(crates_err("PC1"))?;
    let pc1_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let pc2 = seal_pre_commit_phase2(&config, pc1, &cache, &sealed).map_err(crates_err("PC2"))?;
    let pc2_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let c1: SealCommitPhase1Output<Tree> = seal_commit_phase1(
        &config,
        &cache,
        &sealed,
        prover_id,
        SectorId::from(sector_id),
        ticket,
        seed,
        pc2.clone(),
        &pieces,
    )
    .map_err(crates_err("C1"))?;
    let c1_s = t.elapsed().as_secs_f64();
    let c1_json = serde_json::to_vec(&c1).map_err(|e| FilecoinError::ProofCrates {
        context: "writing the C1 output as JSON",
        reason: e.to_string(),
    })?;
    Ok(Sealed {
        seal_proof: seal_proof.to_string(),
        prover_id,
        sector_id,
        comm_r: pc2.comm_r,
        comm_d: pc2.comm_d,
        ticket,
        seed,
        c1_json,
        pc1_s,
        pc2_s,
        c1_s,
    })
}

/// Writes `data` as one piece to `piece` and stages it into `staged`
/// (fr32-padded, as `add_piece` lays out a sector); its piece info.
pub(crate) fn stage(
    data: &[u8],
    unpadded: UnpaddedBytesAmount,
    piece: &Path,
    staged: &Path,
) -> Result<PieceInfo, FilecoinError> {
    let mut piece_file = File::create(piece).map_err(io_err("writing the piece"))?;
    piece_file
        .write_all(data)
        .and_then(|_| piece_file.rewind())
        .map_err(io_err("writing the piece"))?;
    let piece_file = File::open(piece).map_err(io_err("reading the piece"))?;
    let piece_info = generate_piece_commitment(&piece_file, unpadded)
        .map_err(crates_err("generating the piece commitment"))?;
    let piece_file = File::open(piece).map_err(io_err("reading the piece"))?;
    let staged_file = File::create(staged).map_err(io_err("creating the staged sector"))?;
    add_piece(&piece_file, &staged_file, unpadded, &[]).map_err(crates_err("adding the piece"))?;
    Ok(piece_info)
}

/// `filecoin-proofs`' `verify_seal` on `proof` for `sealed`'s sector. It
/// reads the verifying key from the folder `FIL_PROOFS_PARAMETER_CACHE`
/// named when filecoin-proofs first read its settings.
pub fn verify(sealed: &Sealed, proof: &[u8]) -> Result<bool, FilecoinError> {
    let seal_proof: SealProof =
        sealed
            .seal_proof
            .parse()
            .map_err(|e: crate::filecoin::registered::RegisteredError| {
                FilecoinError::ProofCrates {
                    context: "reading the seal proof type",
                    reason: e.to_string(),
                }
            })?;
    crate::filecoin::with_tree!(seal_proof.sector_size, verify_of, seal_proof, sealed, proof)
}

fn verify_of<Tree: 'static + MerkleTreeTrait>(
    seal_proof: SealProof,
    sealed: &Sealed,
    proof: &[u8],
) -> Result<bool, FilecoinError> {
    verify_seal::<Tree>(
        &seal_proof.porep_config(),
        sealed.comm_r,
        sealed.comm_d,
        sealed.prover_id,
        SectorId::from(sealed.sector_id),
        sealed.ticket,
        sealed.seed,
        proof,
    )
    .map_err(crates_err("verify_seal"))
}

/// `filecoin-proofs`' own `seal_commit_phase2` (bellperson's prover, on the
/// CPU as this build has no GPU features): the baseline C2 is compared with.
pub fn filecoin_c2(sealed: &Sealed) -> Result<Vec<u8>, FilecoinError> {
    let seal_proof: SealProof =
        sealed
            .seal_proof
            .parse()
            .map_err(|e: crate::filecoin::registered::RegisteredError| {
                FilecoinError::ProofCrates {
                    context: "reading the seal proof type",
                    reason: e.to_string(),
                }
            })?;
    crate::filecoin::with_tree!(seal_proof.sector_size, filecoin_c2_of, seal_proof, sealed)
}

fn filecoin_c2_of<Tree: 'static + MerkleTreeTrait>(
    seal_proof: SealProof,
    sealed: &Sealed,
) -> Result<Vec<u8>, FilecoinError> {
    let c1: SealCommitPhase1Output<Tree> =
        serde_json::from_slice(&sealed.c1_json).map_err(|e| FilecoinError::C1Shape {
            seal_proof,
            reason: e.to_string(),
        })?;
    filecoin_proofs::seal_commit_phase2(
        &seal_proof.porep_config(),
        c1,
        sealed.prover_id,
        SectorId::from(sealed.sector_id),
    )
    .map(|out| out.proof)
    .map_err(crates_err("seal_commit_phase2"))
}

/// The vanilla proof of `sealed`'s sector (sealed in `work_dir` by
/// [`seal_random_sector`], its trees still there) for a PoSt of `kind`
/// with `randomness`, as the JSON array the PoSt prover takes.
pub fn post_vanilla(
    kind: PostKind,
    sealed: &Sealed,
    work_dir: &Path,
    randomness: [u8; 32],
) -> Result<Vec<u8>, FilecoinError> {
    let size = sector_size_of(sealed)?;
    crate::filecoin::with_tree!(size, post_vanilla_of, kind, sealed, work_dir, randomness)
}

fn sector_size_of(sealed: &Sealed) -> Result<u64, FilecoinError> {
    sealed
        .seal_proof
        .parse::<SealProof>()
        .map(|p| p.sector_size)
        .map_err(|e| FilecoinError::ProofCrates {
            context: "reading the seal proof type",
            reason: e.to_string(),
        })
}

fn post_vanilla_of<Tree: 'static + MerkleTreeTrait>(
    kind: PostKind,
    sealed: &Sealed,
    work_dir: &Path,
    randomness: [u8; 32],
) -> Result<Vec<u8>, FilecoinError> {
    let config = post_config(kind, sector_size_of(sealed)?)?;
    let sector = SectorId::from(sealed.sector_id);
    let replica = PrivateReplicaInfo::<Tree>::new(
        work_dir.join("sealed"),
        sealed.comm_r,
        work_dir.join("cache"),
    )
    .map_err(crates_err("opening the sealed replica"))?;
    let challenges = generate_fallback_sector_challenges::<Tree>(
        &config,
        &randomness,
        &[sector],
        sealed.prover_id,
    )
    .map_err(crates_err("generating the PoSt challenges"))?;
    let challenges = challenges.get(&sector).ok_or(FilecoinError::ProofCrates {
        context: "generating the PoSt challenges",
        reason: "no challenges for the sector".into(),
    })?;
    let proof = generate_single_vanilla_proof::<Tree>(&config, sector, &replica, challenges)
        .map_err(crates_err("generating the vanilla PoSt proof"))?;
    serde_json::to_vec(&vec![proof]).map_err(|e| FilecoinError::ProofCrates {
        context: "writing the vanilla proofs as JSON",
        reason: e.to_string(),
    })
}

/// [`post_vanilla`]'s proof in bincode, as filecoin-proofs-api's
/// `generate_single_vanilla_proof` returns it (what Curio sends).
pub fn post_vanilla_bincode(
    kind: PostKind,
    sealed: &Sealed,
    work_dir: &Path,
    randomness: [u8; 32],
) -> Result<Vec<u8>, FilecoinError> {
    let json = post_vanilla(kind, sealed, work_dir, randomness)?;
    let size = sector_size_of(sealed)?;
    crate::filecoin::with_tree!(size, json_to_bincode, &json)
}

fn json_to_bincode<Tree: 'static + MerkleTreeTrait>(json: &[u8]) -> Result<Vec<u8>, FilecoinError> {
    let bad = |reason: String| FilecoinError::ProofCrates {
        context: "re-encoding the vanilla proof as bincode",
        reason,
    };
    let mut proofs: Vec<filecoin_proofs::FallbackPoStSectorProof<Tree>> =
        serde_json::from_slice(json).map_err(|e| bad(e.to_string()))?;
    let proof = proofs.pop().ok_or_else(|| bad("no proof".into()))?;
    bincode::serialize(&proof).map_err(|e| bad(e.to_string()))
}

/// `filecoin-proofs`' `verify_winning_post` / `verify_window_post` on
/// `proof` over `sealed`'s sector alone.
pub fn verify_post(
    kind: PostKind,
    sealed: &Sealed,
    randomness: [u8; 32],
    proof: &[u8],
) -> Result<bool, FilecoinError> {
    let size = sector_size_of(sealed)?;
    crate::filecoin::with_tree!(size, verify_post_of, kind, sealed, randomness, proof)
}

fn verify_post_of<Tree: 'static + MerkleTreeTrait>(
    kind: PostKind,
    sealed: &Sealed,
    randomness: [u8; 32],
    proof: &[u8],
) -> Result<bool, FilecoinError> {
    let config = post_config(kind, sector_size_of(sealed)?)?;
    let sector = SectorId::from(sealed.sector_id);
    let public = PublicReplicaInfo::new(sealed.comm_r).map_err(crates_err("the sector's CommR"))?;
    match kind {
        PostKind::Winning => verify_winning_post::<Tree>(
            &config,
            &randomness,
            &[(sector, public)],
            sealed.prover_id,
            proof,
        ),
        PostKind::Window => verify_window_post::<Tree>(
            &config,
            &randomness,
            &BTreeMap::from([(sector, public)]),
            sealed.prover_id,
            proof,
        ),
    }
    .map_err(crates_err("verifying the PoSt"))
}
