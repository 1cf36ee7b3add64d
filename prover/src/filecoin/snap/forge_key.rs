//! **Test data**: a FORGED SnapDeals sector key — a "sealed" committed-
//! capacity replica that was never sealed — so a SnapDeals vector of any
//! size is made in seconds instead of a PC1 (minutes at 512 MiB, hours at
//! 32 GiB).
//!
//! filecoin-proofs' `encode_into` and `generate_partition_proofs` read
//! this of a sector key, and nothing else (filecoin-proofs 19.1, built
//! without `fixed-rows-to-discard`):
//!
//! - the **sealed file**: one field element per 32-byte node. It is added
//!   to the new data (times rho) node by node, and its nodes are the leaves
//!   the update's TreeROld openings prove. Here: seeded random field
//!   elements (`Domain::random` on ChaCha20), not labels of any replica id.
//! - **`p_aux`** (bincode `PersistentAux`): CommC and CommR_last. CommR old
//!   is the crates' `hash2(CommC, CommR_last)` (Poseidon), as sealing
//!   computes it. Here CommC is a random field element: there is no tree_c.
//! - **`t_aux`** (bincode `TemporaryAux`): `get_t_aux` reads it for the
//!   tree_d config (whose id and rows_to_discard the update's new tree_d
//!   reuses) and the tree_r_last config (the old tree the openings come
//!   from). Written with the configs sealing writes (same ids, sizes and
//!   rows_to_discard); the label list is empty, as the forged key has no
//!   layers and neither function opens a label or tree_c file.
//! - **tree_r_last** (`sc-02-data-tree-r-last[-i].dat`): the level-cache
//!   tree over the sealed file, built with the crates' own
//!   `StackedDrg::generate_tree_r_last` on the sealed file as its source
//!   and `storage_proofs_update`'s `prepare_tree_r_data` (the way
//!   `encode_into` builds the new replica's tree), so shape, store config
//!   and file names are those a sealed sector has.
//!
//! So the update proven from a forged key verifies (filecoin-proofs'
//! `verify_empty_sector_update_proof` accepts it), but no sector was ever
//! sealed to this CommR: never submit it, or anything made from it, to a
//! chain. A vector made from a forged key says so ([`FORGED_KEY_NOTE`]).

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::marker::PhantomData;
use std::path::Path;
use std::time::Instant;

use filecoin_hashers::poseidon::PoseidonDomain;
use filecoin_hashers::{Domain, HashFunction, Hasher};
use filecoin_proofs::constants::DefaultPieceHasher;
use filecoin_proofs::{get_base_tree_size, DefaultBinaryTree, SectorSize, StoreConfig};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use storage_proofs_core::cache_key::CacheKey;
use storage_proofs_core::merkle::{get_base_tree_count, DiskStore, MerkleTreeTrait};
use storage_proofs_core::util::{default_rows_to_discard, NODE_SIZE};
use storage_proofs_core::Data;
use storage_proofs_porep::stacked::{Labels, PersistentAux, StackedDrg, TemporaryAux};
use storage_proofs_update::constants::TreeRHasher;
use typenum::Unsigned;

use crate::filecoin::forge::FORGED_TICKET_MARK;
use crate::filecoin::registered::SealProof;
use crate::filecoin::seal::{io_err, Sealed};
use crate::filecoin::UpdateProof;
use crate::filecoin::{crates_err, FilecoinError};

/// What marks a SnapDeals vector whose sector key was forged.
pub const FORGED_KEY_NOTE: &str = "TEST DATA: the sector key was FORGED (random field elements, never sealed; CommR old = Poseidon(random CommC, its tree_r_last root)). For SnapDeals tests and benchmarks only; never submit it, or a proof of it, to a chain.";

/// A forged sector key's commitments, and how long forging took.
#[derive(Clone, Debug)]
pub struct ForgedKey {
    /// The CC sector the key stands for. TEST DATA: its `comm_r` is
    /// Poseidon(`comm_c`, `comm_r_last`); its `comm_d` is all zero (no data
    /// was sealed; SnapDeals never reads it); its ticket carries
    /// [`FORGED_TICKET_MARK`]; prover id, sector id, seed and the seal
    /// timings are zero (the forging time is [`ForgedKey::forge_s`]).
    pub sector_key: Sealed,
    pub comm_c: [u8; 32],
    pub comm_r_last: [u8; 32],
    /// Writing the sealed file, tree_r_last, p_aux and t_aux.
    pub forge_s: f64,
}

/// Forges a sector key of `update_proof`'s sector size in `key_dir`
/// (`sealed`, and `cache/` with `p_aux`, `t_aux` and tree_r_last), as
/// [`crate::filecoin::seal::seal_cc_sector`] leaves one there, from
/// `rng_seed`. `key_dir` must be empty or missing. TEST DATA: see the
/// module's header.
pub fn forge_sector_key(
    update_proof: UpdateProof,
    rng_seed: u64,
    key_dir: &Path,
) -> Result<ForgedKey, FilecoinError> {
    let seal_proof = SealProof::current(update_proof.sector_size)
        .ok_or(FilecoinError::SectorSize(update_proof.sector_size))?;
    crate::filecoin::with_tree!(
        update_proof.sector_size,
        forge_of,
        seal_proof,
        rng_seed,
        key_dir
    )
}

fn forge_of<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>>(
    seal_proof: SealProof,
    rng_seed: u64,
    key_dir: &Path,
) -> Result<ForgedKey, FilecoinError> {
    let t = Instant::now();
    let sector_size = SectorSize(seal_proof.sector_size);
    let (sealed, cache) = (key_dir.join("sealed"), key_dir.join("cache"));
    fs::create_dir_all(&cache).map_err(io_err("creating the forged sector key's folder"))?;
    let nodes = seal_proof.sector_size as usize / NODE_SIZE;
    let tree_count = get_base_tree_count::<Tree>();
    let base_nodes = nodes / tree_count;

    // The sealed file: random field elements (Domain::random reduces into
    // Fr, so every node is a canonical little-endian Fr as bytes_into_fr
    // wants it), streamed so a 32 GiB key needs no 32 GiB buffer.
    let mut rng = ChaCha20Rng::seed_from_u64(rng_seed);
    let comm_c = PoseidonDomain::random(&mut rng);
    let mut out =
        BufWriter::new(File::create(&sealed).map_err(io_err("creating the forged sealed file"))?);
    for _ in 0..nodes {
        out.write_all(PoseidonDomain::random(&mut rng).as_ref())
            .map_err(io_err("writing the forged sealed file"))?;
    }
    out.into_inner()
        .map_err(|e| io_err("writing the forged sealed file")(e.into_error()))?
        .sync_all()
        .map_err(io_err("writing the forged sealed file"))?;

    // The configs sealing persists (StackedDrg's transform_and_replicate_
    // layers): tree_d over the whole sector, rows kept; tree_r_last and
    // tree_c per base tree, tree_r_last level-cached.
    let size_err = crates_err("sizing the forged key's trees");
    let tree_d_config = StoreConfig {
        path: cache.clone(),
        id: CacheKey::CommDTree.to_string(),
        size: Some(get_base_tree_size::<DefaultBinaryTree>(sector_size).map_err(size_err)?),
        rows_to_discard: 0,
    };
    let tree_r_size =
        get_base_tree_size::<Tree>(sector_size).map_err(crates_err("sizing tree_r_last"))?;
    let tree_r_last_config = StoreConfig {
        path: cache.clone(),
        id: CacheKey::CommRLastTree.to_string(),
        size: Some(tree_r_size),
        rows_to_discard: default_rows_to_discard(base_nodes, Tree::Arity::to_usize()),
    };
    let tree_c_config = StoreConfig {
        path: cache.clone(),
        id: CacheKey::CommCTree.to_string(),
        size: Some(tree_r_size),
        rows_to_discard: 0,
    };

    // tree_r_last over the sealed file, read in place as the tree's source
    // (the DiskStore opened from a path is never deleted).
    let source: DiskStore<PoseidonDomain> = DiskStore::new_from_disk_with_path(nodes, &sealed)
        .map_err(crates_err("opening the forged sealed file"))?;
    let tree_r_last = StackedDrg::<Tree, DefaultPieceHasher>::generate_tree_r_last(
        &mut Data::empty(),
        base_nodes,
        tree_count,
        tree_r_last_config.clone(),
        sealed.clone(),
        &source,
        Some(storage_proofs_update::vanilla::prepare_tree_r_data::<Tree>),
    )
    .map_err(crates_err("building the forged key's tree_r_last"))?;
    let comm_r_last = tree_r_last.root();
    drop(tree_r_last);
    // CommR as sealing computes it: comm_r = H(comm_c || comm_r_last).
    let comm_r = <TreeRHasher as Hasher>::Function::hash2(&comm_c, &comm_r_last);

    let p_aux = PersistentAux {
        comm_c,
        comm_r_last,
    };
    let t_aux = TemporaryAux::<Tree, DefaultPieceHasher> {
        labels: Labels {
            labels: Vec::new(),
            _h: PhantomData,
        },
        tree_d_config,
        tree_r_last_config,
        tree_c_config,
        _g: PhantomData,
    };
    // bincode 1, as filecoin-proofs' persist_p_aux / persist_t_aux write.
    let bincode_err = |e: bincode::Error| FilecoinError::ProofCrates {
        context: "writing the forged key's p_aux / t_aux",
        reason: e.to_string(),
    };
    let p_aux = bincode::serialize(&p_aux).map_err(bincode_err)?;
    let t_aux = bincode::serialize(&t_aux).map_err(bincode_err)?;
    fs::write(cache.join(CacheKey::PAux.to_string()), p_aux)
        .map_err(io_err("writing the forged key's p_aux"))?;
    fs::write(cache.join(CacheKey::TAux.to_string()), t_aux)
        .map_err(io_err("writing the forged key's t_aux"))?;

    let bytes = |d: PoseidonDomain| {
        let mut b = [0u8; 32];
        b.copy_from_slice(d.as_ref());
        b
    };
    let mut ticket = [0u8; 32];
    ticket[..FORGED_TICKET_MARK.len()].copy_from_slice(&FORGED_TICKET_MARK);
    let forge_s = t.elapsed().as_secs_f64();
    Ok(ForgedKey {
        sector_key: Sealed {
            seal_proof: seal_proof.to_string(),
            prover_id: [0; 32],
            sector_id: 0,
            comm_r: bytes(comm_r),
            comm_d: [0; 32],
            ticket,
            seed: [0; 32],
            c1_json: Vec::new(),
            pc1_s: 0.0,
            pc2_s: 0.0,
            c1_s: 0.0,
        },
        comm_c: bytes(comm_c),
        comm_r_last: bytes(comm_r_last),
        forge_s,
    })
}

/// A sector key's CommR from its cache the crates' way: filecoin-proofs'
/// `PrivateReplicaInfo` reads `p_aux` (CommC, CommR_last), and CommR is
/// their Poseidon `hash2`. Also checks the stored tree_r_last, reopened as
/// PoSt reopens it over `sealed`, has the root `p_aux` names. For a check
/// of a (forged or sealed) key; `claimed` is the CommR the key was made with
/// (PrivateReplicaInfo refuses an all-zero one).
pub fn comm_r_of_key(
    update_proof: UpdateProof,
    sealed: &Path,
    cache: &Path,
    claimed: [u8; 32],
) -> Result<[u8; 32], FilecoinError> {
    crate::filecoin::with_tree!(
        update_proof.sector_size,
        comm_r_of_key_of,
        update_proof,
        sealed,
        cache,
        claimed
    )
}

fn comm_r_of_key_of<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>>(
    update_proof: UpdateProof,
    sealed: &Path,
    cache: &Path,
    claimed: [u8; 32],
) -> Result<[u8; 32], FilecoinError> {
    let info = filecoin_proofs::PrivateReplicaInfo::<Tree>::new(
        sealed.to_path_buf(),
        claimed,
        cache.to_path_buf(),
    )
    .map_err(crates_err("reading the sector key's p_aux"))?;
    let tree = info
        .merkle_tree(SectorSize(update_proof.sector_size))
        .map_err(crates_err("reopening the sector key's tree_r_last"))?;
    if tree.root() != info.safe_comm_r_last() {
        return Err(FilecoinError::ProofCrates {
            context: "reopening the sector key's tree_r_last",
            reason: "its root is not p_aux's CommR_last".into(),
        });
    }
    let comm_r =
        <TreeRHasher as Hasher>::Function::hash2(&info.safe_comm_c(), &info.safe_comm_r_last());
    let mut out = [0u8; 32];
    comm_r
        .write_bytes(&mut out)
        .map_err(crates_err("writing CommR"))?;
    Ok(out)
}
