//! A SnapDeals update of a committed-capacity sector for tests and
//! benchmarks: the CC sector sealed with `filecoin-proofs` (or, as TEST
//! DATA, its sector key forged by [`super::forge_key`] where sealing would
//! take too long), seeded random data encoded into it with its
//! `encode_into`, the vanilla partition proofs from
//! `generate_partition_proofs`, and the judges (filecoin-proofs' own
//! verifier and its own prover, the benchmark's baseline). Nothing here
//! proves: that is [`super`]'s.

use std::fs::{self, File};
use std::path::Path;
use std::time::Instant;

use filecoin_proofs::{
    encode_into, generate_partition_proofs, verify_empty_sector_update_proof, SectorUpdateConfig,
    UnpaddedBytesAmount,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use storage_proofs_core::merkle::MerkleTreeTrait;
use storage_proofs_update::constants::TreeRHasher;

use crate::filecoin::registered::SealProof;
use crate::filecoin::seal::{io_err, seal_cc_sector, stage, Sealed};
use crate::filecoin::snap::forge_key::{forge_sector_key, FORGED_KEY_NOTE};
use crate::filecoin::UpdateProof;
use crate::filecoin::{crates_err, FilecoinError};

/// How a vector's sector key (the CC replica the update starts from) is
/// made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SectorKey {
    /// Sealed with filecoin-proofs (PC1, PC2, C1): a real CC sector.
    #[default]
    Sealed,
    /// TEST DATA: forged by [`super::forge_key`] (random field elements and
    /// their tree_r_last; never sealed), in seconds at any size.
    Forged,
}

/// A SnapDeals update of a committed-capacity sector: what the update
/// proof is made from and checked against.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct SnapVector {
    pub update_proof: UpdateProof,
    /// How the sector key was made; vectors written before the choice
    /// existed were all sealed.
    #[serde(default)]
    pub sector_key_made: SectorKey,
    /// [`FORGED_KEY_NOTE`] where the sector key was forged (TEST DATA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The CC sector (its CommR is the update's old one); a forged key's
    /// is described at [`super::forge_key::ForgedKey::sector_key`].
    pub sector_key: Sealed,
    pub comm_r_old: [u8; 32],
    pub comm_r_new: [u8; 32],
    pub comm_d_new: [u8; 32],
    /// One bincode `PartitionProof` per partition, as filecoin-proofs-api's
    /// `generate_partition_proofs` returns them.
    pub vanilla: Vec<Vec<u8>>,
    /// Making the sector key: sealing it, or forging it.
    pub seal_s: f64,
    pub encode_s: f64,
    pub vanilla_s: f64,
}

/// Makes a committed-capacity sector key of `update_proof`'s size in
/// `work_dir/sector-key` (sealed, or forged as TEST DATA, as `key` says),
/// then encodes seeded random data into it with filecoin-proofs'
/// `encode_into` (the new replica in `work_dir/update`) and generates its
/// vanilla partition proofs with `generate_partition_proofs`. `work_dir`
/// must be empty or missing.
pub fn snap_vector(
    update_proof: UpdateProof,
    key: SectorKey,
    rng_seed: u64,
    work_dir: &Path,
) -> Result<SnapVector, FilecoinError> {
    let key_dir = work_dir.join("sector-key");
    let t = Instant::now();
    let sector_key = match key {
        SectorKey::Sealed => {
            let seal_proof = SealProof::current(update_proof.sector_size)
                .ok_or(FilecoinError::SectorSize(update_proof.sector_size))?;
            seal_cc_sector(seal_proof, rng_seed, &key_dir)?
        }
        SectorKey::Forged => forge_sector_key(update_proof, rng_seed, &key_dir)?.sector_key,
    };
    let seal_s = t.elapsed().as_secs_f64();
    let key_made = key;
    crate::filecoin::with_tree!(
        update_proof.sector_size,
        snap_vector_of,
        update_proof,
        key_made,
        sector_key,
        seal_s,
        rng_seed,
        work_dir
    )
}

fn snap_vector_of<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>>(
    update_proof: UpdateProof,
    key_made: SectorKey,
    sector_key: Sealed,
    seal_s: f64,
    rng_seed: u64,
    work_dir: &Path,
) -> Result<SnapVector, FilecoinError> {
    let porep_config = update_proof.porep_config();
    let config = SectorUpdateConfig::from_porep_config(&porep_config);
    let (key_dir, dir) = (work_dir.join("sector-key"), work_dir.join("update"));
    let (key, key_cache) = (key_dir.join("sealed"), key_dir.join("cache"));
    let (replica, cache) = (dir.join("replica"), dir.join("cache"));
    fs::create_dir_all(&cache).map_err(io_err("creating the update folder"))?;

    let unpadded = UnpaddedBytesAmount::from(porep_config.padded_bytes_amount());
    let mut data = vec![0u8; u64::from(unpadded) as usize];
    // Another stream than the sector key's, so the deal data is not its ids.
    ChaCha20Rng::seed_from_u64(rng_seed ^ 0x5a4d_da7a).fill(&mut data[..]);
    let staged = dir.join("staged");
    let pieces = vec![stage(&data, unpadded, &dir.join("piece"), &staged)?];
    // encode_into maps the new replica: it must have the sector's length.
    let len = fs::metadata(&key)
        .map_err(io_err("reading the sector key"))?
        .len();
    File::create(&replica)
        .and_then(|f| f.set_len(len))
        .map_err(io_err("creating the new replica"))?;

    let t = Instant::now();
    let encoded = encode_into::<Tree>(
        &config, &replica, &cache, &key, &key_cache, &staged, &pieces,
    )
    .map_err(crates_err("encoding the new data (encode_into)"))?;
    let encode_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let proofs = generate_partition_proofs::<Tree>(
        config,
        sector_key.comm_r,
        encoded.comm_r_new,
        encoded.comm_d_new,
        &key,
        &key_cache,
        &replica,
        &cache,
    )
    .map_err(crates_err("generating the vanilla update proofs"))?;
    let vanilla_s = t.elapsed().as_secs_f64();
    let vanilla =
        crate::filecoin::bincode_each(&proofs, "writing the vanilla update proofs as bincode")?;
    Ok(SnapVector {
        update_proof,
        sector_key_made: key_made,
        note: (key_made == SectorKey::Forged).then(|| FORGED_KEY_NOTE.to_string()),
        comm_r_old: sector_key.comm_r,
        sector_key,
        comm_r_new: encoded.comm_r_new,
        comm_d_new: encoded.comm_d_new,
        vanilla,
        seal_s,
        encode_s,
        vanilla_s,
    })
}

/// `filecoin-proofs`' `verify_empty_sector_update_proof` on `proof` for
/// `vector`'s update. It reads the verifying key from the folder
/// `FIL_PROOFS_PARAMETER_CACHE` named when filecoin-proofs first read its
/// settings.
pub fn verify_snap(vector: &SnapVector, proof: &[u8]) -> Result<bool, FilecoinError> {
    crate::filecoin::with_tree!(
        vector.update_proof.sector_size,
        verify_snap_of,
        vector,
        proof
    )
}

fn verify_snap_of<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>>(
    vector: &SnapVector,
    proof: &[u8],
) -> Result<bool, FilecoinError> {
    verify_empty_sector_update_proof::<Tree>(
        &vector.update_proof.porep_config(),
        proof,
        vector.comm_r_old,
        vector.comm_r_new,
        vector.comm_d_new,
    )
    .map_err(crates_err("verify_empty_sector_update_proof"))
}

/// `filecoin-proofs`' own `generate_empty_sector_update_proof_with_vanilla`
/// on `vector`'s vanilla proofs: the baseline the benchmark compares with.
pub fn filecoin_snap(vector: &SnapVector) -> Result<Vec<u8>, FilecoinError> {
    crate::filecoin::with_tree!(vector.update_proof.sector_size, filecoin_snap_of, vector)
}

fn filecoin_snap_of<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>>(
    vector: &SnapVector,
) -> Result<Vec<u8>, FilecoinError> {
    let proofs = vector
        .vanilla
        .iter()
        .map(|b| bincode::deserialize(b))
        .collect::<Result<Vec<storage_proofs_update::PartitionProof<Tree>>, _>>()
        .map_err(|e| FilecoinError::ProofCrates {
            context: "reading the vanilla update proofs",
            reason: e.to_string(),
        })?;
    filecoin_proofs::generate_empty_sector_update_proof_with_vanilla::<Tree>(
        &vector.update_proof.porep_config(),
        proofs,
        vector.comm_r_old,
        vector.comm_r_new,
        vector.comm_d_new,
    )
    .map(|p| p.0)
    .map_err(crates_err(
        "generate_empty_sector_update_proof_with_vanilla",
    ))
}
