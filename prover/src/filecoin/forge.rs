//! **Test data**: a PoRep C1 output (`SealCommitPhase1Output`) of a
//! committed-capacity (all-zero) sector of any size, made in seconds
//! without sealing: its replica is never computed.
//!
//! C2 checks the openings a C1 output carries, not the replica they come
//! from, so only the opened part of the sector is made up:
//!
//! - **tree_d** is the tree of zero data: CommD is the root of zeros
//!   (checked against filecoin-proofs' zero-piece commitment) and every
//!   path is made of all-zero subtree roots.
//! - The **challenges** come from the replica id (the crates'
//!   `generate_replica_id` of prover id, sector id, ticket, CommD and PoRep
//!   id) and the seed, with the crates' own `PublicInputs::challenges` for
//!   each partition of the PoRep config.
//! - The **columns** ([`columns`]) of the challenged nodes' parents (the
//!   crates' `StackedBucketGraph`, built as filecoin-proofs builds it; no
//!   parent cache) get seeded random labels; each challenged node's labels
//!   are computed from its parents' as the vanilla verifier recomputes them.
//! - **tree_c** (leaves: the column hashes) and **tree_r_last** (leaves: the
//!   challenged nodes' last-layer labels, the data being zero) are
//!   sparse trees of the sector's shape ([`sparse`]) with zero leaves
//!   elsewhere; CommR = Poseidon(CommC, CommR_last) as the crates compute it.
//!
//! The result passes the crates' `verify_all_partitions` (checked here before
//! it is returned; and the tree_d and tree_r_last paths, which that
//! verifier does not hash, are checked too) and a C2 proved from it passes
//! filecoin-proofs' `verify_seal`. But no replica has these commitments: a
//! forged sector is test data, for benchmarks and tests of C2 at sizes that
//! take hours to seal. Never submit one to a chain. The C1 JSON itself is
//! exactly what filecoin-proofs writes (so every C2 reads it); what marks it
//! forged is [`Sidecar`], written beside it, and the name the tool gives it.
//!
//! Only interactive PoRep (the V1 and V1_1 types) is forged; synthetic and
//! non-interactive PoRep derive their challenges from CommR.

mod columns;
mod error;
mod sparse;

pub use error::ForgeError;

/// The first 16 bytes of every forged sector's ticket: the mark that keeps
/// a forged C1 output test data wherever it goes. A chain's tickets are
/// randomness, so a real sector carries it with probability 2^-128; the
/// daemon and `prover c2` refuse a marked C1 unless test parameters are
/// allowed ([`is_forged_ticket`]).
pub const FORGED_TICKET_MARK: [u8; 16] = *b"FORGED-TEST-DATA";

/// Whether `ticket` is a forged sector's ([`FORGED_TICKET_MARK`]).
pub fn is_forged_ticket(ticket: &[u8; 32]) -> bool {
    ticket[..FORGED_TICKET_MARK.len()] == FORGED_TICKET_MARK
}

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use filecoin_hashers::sha256::Sha256Hasher;
use filecoin_hashers::{Domain, HashFunction, Hasher};
use filecoin_proofs::constants::{
    DefaultPieceHasher, SectorShape2KiB, SectorShape32GiB, SectorShape512MiB, SectorShape64GiB,
    SectorShape8MiB, SECTOR_SIZE_2_KIB, SECTOR_SIZE_32_GIB, SECTOR_SIZE_512_MIB,
    SECTOR_SIZE_64_GIB, SECTOR_SIZE_8_MIB,
};
use filecoin_proofs::{
    commitment_from_fr, PaddedBytesAmount, SealCommitPhase1Output, UnpaddedBytesAmount,
    VanillaSealProof,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha20Rng;
use storage_proofs_core::merkle::{MerkleProof, MerkleProofTrait, MerkleTreeTrait};
use storage_proofs_core::proof::ProofScheme;
use storage_proofs_porep::stacked::{
    self, generate_replica_id, Challenges, ColumnProof, EncodingProof, LabelingProof,
    ReplicaColumnProof, StackedDrg,
};

use crate::filecoin::registered::SealProof;
use columns::Columns;
use sparse::SparseTree;

/// What the sidecar and the tool say of every forged C1 output.
pub const FORGED_NOTE: &str = "TEST DATA: a forged committed-capacity PoRep C1 output. No replica was computed: CommR commits to random labels of the challenged nodes' parents, not to a sealed sector. For C2 tests and benchmarks only; never submit it to a chain.";

/// The suffix the tool gives a forged C1 output's file, and the one its
/// sidecar adds to that name.
pub const C1_SUFFIX: &str = ".forged-cc-c1.json";
pub const SIDECAR_SUFFIX: &str = ".forged.json";

/// The sector a C1 output is forged for: what a real one's C1 takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CcSector {
    pub seal_proof: SealProof,
    pub prover_id: [u8; 32],
    pub sector_id: u64,
    pub ticket: [u8; 32],
    /// The interactive challenge seed (the chain's randomness after PreCommit).
    pub seed: [u8; 32],
}

impl CcSector {
    /// A sector of `seal_proof` whose prover id, sector id, ticket and seed
    /// are drawn from `rng_seed`, as `seal::seal_random_sector` draws them.
    pub fn seeded(seal_proof: SealProof, rng_seed: u64) -> Self {
        let mut rng = ChaCha20Rng::seed_from_u64(rng_seed);
        // Field elements in their 32 bytes, as Filecoin's own ids are.
        let mut field_bytes = || {
            let mut b: [u8; 32] = rng.gen();
            b[31] &= 0x3f;
            b
        };
        let (prover_id, mut ticket, seed) = (field_bytes(), field_bytes(), field_bytes());
        // ASCII: the ticket stays a field element.
        ticket[..FORGED_TICKET_MARK.len()].copy_from_slice(&FORGED_TICKET_MARK);
        CcSector {
            seal_proof,
            prover_id,
            ticket,
            seed,
            sector_id: rng.gen_range(1..1 << 40),
        }
    }
}

/// A forged C1 output and what its proof is checked against.
#[derive(Clone, Debug)]
pub struct Forged {
    pub sector: CcSector,
    /// The seed of the parents' random labels.
    pub label_seed: u64,
    pub comm_r: [u8; 32],
    pub comm_d: [u8; 32],
    pub replica_id: [u8; 32],
    pub partitions: usize,
    /// Challenges over all partitions (a node may be challenged twice).
    pub challenges: usize,
    /// Distinct nodes whose column is opened (challenged nodes and parents).
    pub opened_columns: usize,
    /// filecoin-proofs' `SealCommitPhase1Output` as serde JSON.
    pub c1_json: Vec<u8>,
    pub forge_ms: f64,
    /// The crates' `verify_all_partitions` on the result.
    pub verify_ms: f64,
}

/// The record written beside a forged C1 output (`<c1>.forged.json`): it
/// says the C1 is forged and gives what its C2 and `verify_seal` take.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sidecar {
    pub forged: bool,
    pub note: String,
    pub c1_file: String,
    pub registered_proof: String,
    pub sector_size: u64,
    pub prover_id: String,
    pub sector_id: u64,
    pub ticket: String,
    pub seed: String,
    pub comm_d: String,
    pub comm_r: String,
    pub replica_id: String,
    pub label_seed: u64,
    pub partitions: usize,
    pub challenges: usize,
    pub opened_columns: usize,
    pub c1_bytes: usize,
    pub forge_ms: f64,
    pub verify_ms: f64,
}

impl Forged {
    /// The sidecar of this C1 output, written as `c1_file`.
    pub fn sidecar(&self, c1_file: &str) -> Sidecar {
        Sidecar {
            forged: true,
            note: FORGED_NOTE.into(),
            c1_file: c1_file.into(),
            registered_proof: self.sector.seal_proof.to_string(),
            sector_size: self.sector.seal_proof.sector_size,
            prover_id: hex::encode(self.sector.prover_id),
            sector_id: self.sector.sector_id,
            ticket: hex::encode(self.sector.ticket),
            seed: hex::encode(self.sector.seed),
            comm_d: hex::encode(self.comm_d),
            comm_r: hex::encode(self.comm_r),
            replica_id: hex::encode(self.replica_id),
            label_seed: self.label_seed,
            partitions: self.partitions,
            challenges: self.challenges,
            opened_columns: self.opened_columns,
            c1_bytes: self.c1_json.len(),
            forge_ms: self.forge_ms,
            verify_ms: self.verify_ms,
        }
    }
}

/// Forges the C1 output of `sector`, committed capacity, the parents'
/// labels drawn from `label_seed` (one seed, one output, byte for byte).
pub fn forge_cc_c1(sector: &CcSector, label_seed: u64) -> Result<Forged, ForgeError> {
    match sector.seal_proof.sector_size {
        SECTOR_SIZE_2_KIB => forge_of::<SectorShape2KiB>(sector, label_seed),
        SECTOR_SIZE_8_MIB => forge_of::<SectorShape8MiB>(sector, label_seed),
        SECTOR_SIZE_512_MIB => forge_of::<SectorShape512MiB>(sector, label_seed),
        SECTOR_SIZE_32_GIB => forge_of::<SectorShape32GiB>(sector, label_seed),
        SECTOR_SIZE_64_GIB => forge_of::<SectorShape64GiB>(sector, label_seed),
        other => Err(ForgeError::SectorSize(other)),
    }
}

/// CommD of an all-zero sector of `sector_size` bytes: the root of
/// tree_d over zero leaves, one hash per level.
pub fn zero_comm_d(sector_size: u64) -> Result<[u8; 32], ForgeError> {
    Ok(zero_tree_d(nodes_of(sector_size)?)?.root().into())
}

/// filecoin-proofs' commitment of a zero piece filling a sector of
/// `sector_size` bytes (its `zero_padding`): an empty sector's CommD.
pub fn empty_comm_d(sector_size: u64) -> Result<[u8; 32], ForgeError> {
    let unpadded = UnpaddedBytesAmount::from(PaddedBytesAmount(sector_size));
    filecoin_proofs::pieces::zero_padding(unpadded)
        .map(|piece| piece.commitment)
        .map_err(|e| ForgeError::crates("computing the zero-piece commitment", &e))
}

/// The nodes of a sector of `sector_size` bytes (32 bytes each).
fn nodes_of(sector_size: u64) -> Result<usize, ForgeError> {
    usize::try_from(sector_size / 32)
        .ok()
        .filter(|n| n.is_power_of_two() && *n >= 2)
        .ok_or(ForgeError::SectorSize(sector_size))
}

/// tree_d of an all-zero sector of `nodes` nodes (binary, SHA-256).
fn zero_tree_d(nodes: usize) -> Result<SparseTree<Sha256Hasher>, ForgeError> {
    let arities = sparse::uniform_arities(2, nodes)
        .ok_or_else(|| ForgeError::Internal(format!("{nodes} nodes fill no binary tree")))?;
    SparseTree::new(arities, BTreeMap::new(), Default::default())
}

type Scheme<Tree> = StackedDrg<'static, Tree, DefaultPieceHasher>;
type TreeDomain<Tree> = <<Tree as MerkleTreeTrait>::Hasher as Hasher>::Domain;
/// The crates' inclusion proof in a tree of shape `Tree`.
type TreeProof<Tree> = MerkleProof<
    <Tree as MerkleTreeTrait>::Hasher,
    <Tree as MerkleTreeTrait>::Arity,
    <Tree as MerkleTreeTrait>::SubTreeArity,
    <Tree as MerkleTreeTrait>::TopTreeArity,
>;
type PublicInputs<Tree> =
    stacked::PublicInputs<TreeDomain<Tree>, <DefaultPieceHasher as Hasher>::Domain>;

fn forge_of<Tree: 'static + MerkleTreeTrait>(
    sector: &CcSector,
    label_seed: u64,
) -> Result<Forged, ForgeError> {
    let started = Instant::now();
    let seal_proof = sector.seal_proof;
    let config = seal_proof.porep_config();
    let (setup, pub_params) = stacked_params::<Tree>(&config, seal_proof)?;
    let tree_d = zero_tree_d(setup.nodes)?;
    let comm_d: [u8; 32] = tree_d.root().into();
    if comm_d != empty_comm_d(seal_proof.sector_size)? {
        return Err(ForgeError::Internal(
            "the zero tree_d root is not filecoin-proofs' zero-piece commitment".into(),
        ));
    }
    let replica_id = generate_replica_id::<Tree::Hasher, _>(
        &sector.prover_id,
        sector.sector_id,
        &sector.ticket,
        comm_d,
        &config.porep_id,
    );
    let mut public_inputs: PublicInputs<Tree> = stacked::PublicInputs {
        replica_id,
        seed: Some(sector.seed),
        tau: None,
        k: None,
    };
    // The verifier's own derivation, partition by partition.
    let challenges: Vec<Vec<usize>> = (0..usize::from(config.partitions))
        .map(|k| public_inputs.challenges(&pub_params.challenges, setup.nodes, Some(k)))
        .collect();
    let mut rng = ChaCha20Rng::seed_from_u64(label_seed);
    let opened = Opened::<Tree>::forge(
        &pub_params,
        &setup,
        replica_id,
        tree_d,
        &challenges,
        &mut rng,
    )?;
    let vanilla_proofs = challenges
        .iter()
        .map(|partition| partition.iter().map(|&c| opened.proof(c)).collect())
        .collect::<Result<Vec<Vec<_>>, _>>()?;
    let comm_r =
        <Tree::Hasher as Hasher>::Function::hash2(&opened.tree_c.root(), &opened.tree_r.root());
    let forge_ms = ms(started);

    let t = Instant::now();
    public_inputs.tau = Some(stacked::Tau {
        comm_d: opened.tree_d.root(),
        comm_r,
    });
    verify_forged(&pub_params, &public_inputs, &vanilla_proofs, seal_proof)?;
    let verify_ms = ms(t);

    let t = Instant::now();
    let output = SealCommitPhase1Output::<Tree> {
        vanilla_proofs,
        comm_r: commitment_from_fr(comm_r.into()),
        comm_d,
        replica_id,
        seed: sector.seed,
        ticket: sector.ticket,
    };
    let c1_json = serde_json::to_vec(&output)?;
    Ok(Forged {
        sector: *sector,
        label_seed,
        comm_r: output.comm_r,
        comm_d,
        replica_id: domain_bytes(&replica_id),
        partitions: challenges.len(),
        challenges: challenges.iter().map(Vec::len).sum(),
        opened_columns: opened.columns.len(),
        c1_json,
        forge_ms: forge_ms + ms(t),
        verify_ms,
    })
}

/// The stacked DRG's setup and public parameters (its graph: no parent
/// cache) as filecoin-proofs makes them for `config`; interactive only.
fn stacked_params<Tree: 'static + MerkleTreeTrait>(
    config: &filecoin_proofs::PoRepConfig,
    seal_proof: SealProof,
) -> Result<(stacked::SetupParams, stacked::PublicParams<Tree>), ForgeError> {
    let setup = filecoin_proofs::parameters::setup_params(config)
        .map_err(|e| ForgeError::crates("setting up the PoRep parameters", &e))?;
    let pub_params = <Scheme<Tree> as ProofScheme<'_>>::setup(&setup)
        .map_err(|e| ForgeError::crates("setting up the stacked DRG", &e))?;
    if !matches!(pub_params.challenges, Challenges::Interactive(_)) {
        return Err(ForgeError::NotInteractive { seal_proof });
    }
    Ok((setup, pub_params))
}

/// The crates' own verifier, as a C2 runs it before proving: a forged
/// output it refuses is this module's bug, and is never returned.
fn verify_forged<Tree: 'static + MerkleTreeTrait>(
    pub_params: &stacked::PublicParams<Tree>,
    public_inputs: &PublicInputs<Tree>,
    vanilla_proofs: &[Vec<VanillaSealProof<Tree>>],
    seal_proof: SealProof,
) -> Result<(), ForgeError> {
    let valid = Scheme::<Tree>::verify_all_partitions(pub_params, public_inputs, vanilla_proofs)
        .map_err(|e| ForgeError::crates("verifying the forged vanilla proofs", &e))?;
    if valid {
        Ok(())
    } else {
        Err(ForgeError::NotVerified { seal_proof })
    }
}

/// Everything a challenge's vanilla proof opens.
struct Opened<Tree: MerkleTreeTrait> {
    replica_id: TreeDomain<Tree>,
    columns: Columns<Tree::Hasher>,
    tree_d: SparseTree<Sha256Hasher>,
    tree_c: SparseTree<Tree::Hasher>,
    tree_r: SparseTree<Tree::Hasher>,
}

impl<Tree: 'static + MerkleTreeTrait> Opened<Tree> {
    /// The columns of every challenge and parent in `challenges` (the
    /// parents' labels drawn from `rng`), and tree_c and tree_r_last over
    /// them with zero leaves elsewhere; `tree_d` is the zero data's.
    fn forge(
        pub_params: &stacked::PublicParams<Tree>,
        setup: &stacked::SetupParams,
        replica_id: TreeDomain<Tree>,
        tree_d: SparseTree<Sha256Hasher>,
        challenges: &[Vec<usize>],
        rng: &mut ChaCha20Rng,
    ) -> Result<Self, ForgeError> {
        let challenged = challenges
            .iter()
            .flatten()
            .map(|&c| u32::try_from(c).map_err(|_| ForgeError::Internal(format!("challenge {c}"))))
            .collect::<Result<BTreeSet<u32>, _>>()?;
        let columns = Columns::<Tree::Hasher>::forge(
            &pub_params.graph,
            &replica_id,
            setup.num_layers,
            &challenged,
            rng,
        )?;
        let arities = sparse::shape_arities::<Tree>(setup.nodes)?;
        let zero = TreeDomain::<Tree>::default();
        Ok(Opened {
            replica_id,
            tree_c: SparseTree::new(arities.clone(), columns.hashes()?, zero)?,
            tree_r: SparseTree::new(arities, columns.last_labels()?, zero)?,
            tree_d,
            columns,
        })
    }

    /// The vanilla proof of `challenge`, laid out as the crates' prover
    /// lays it out (`prove_layers_generate`).
    fn proof(&self, challenge: usize) -> Result<VanillaSealProof<Tree>, ForgeError> {
        let node = u32::try_from(challenge)
            .map_err(|_| ForgeError::Internal(format!("challenge {challenge}")))?;
        let layers = self.columns.layers();
        let proof = stacked::Proof {
            comm_d_proofs: self.tree_d.proof(challenge)?,
            comm_r_last_proof: self.tree_r.proof(challenge)?,
            replica_column_proofs: self.column_proofs(node)?,
            labeling_proofs: (1..=layers)
                .map(|layer| self.labeling_proof(node, layer))
                .collect::<Result<_, _>>()?,
            encoding_proof: EncodingProof::new(
                layers as u32,
                u64::from(node),
                self.columns.parent_labels(node, layers)?,
            ),
        };
        // The vanilla verifier reads these two paths' leaves and indices but
        // does not hash them (the circuit does): check them here.
        if !proof.comm_d_proofs.validate(challenge) || !proof.comm_r_last_proof.validate(challenge)
        {
            return Err(ForgeError::Internal(format!(
                "challenge {challenge}'s tree_d or tree_r_last path does not verify"
            )));
        }
        Ok(proof)
    }

    /// The openings of a challenged node's column and its parents' in tree_c.
    fn column_proofs(&self, node: u32) -> Result<ReplicaColumnProof<TreeProof<Tree>>, ForgeError> {
        let parents = self.columns.parents(node)?;
        let of = |nodes: &[u32]| {
            nodes
                .iter()
                .map(|&p| self.column_proof(p))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(ReplicaColumnProof {
            c_x: self.column_proof(node)?,
            drg_parents: of(&parents.drg)?,
            exp_parents: of(&parents.exp)?,
        })
    }

    fn column_proof(&self, node: u32) -> Result<ColumnProof<TreeProof<Tree>>, ForgeError> {
        let rows = self.columns.rows(node)?.to_vec();
        Ok(ColumnProof::new(
            node,
            rows,
            self.tree_c.proof(node as usize)?,
        ))
    }

    /// The labelling proof of `node` in `layer`, checked by the crates' verifier.
    fn labeling_proof(
        &self,
        node: u32,
        layer: usize,
    ) -> Result<LabelingProof<Tree::Hasher>, ForgeError> {
        let label = self.columns.rows(node)?[layer - 1];
        self.columns
            .labeling_proof(node, layer)?
            .into_proof(&self.replica_id, &label)
    }
}

fn domain_bytes<D: Domain>(d: &D) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(AsRef::<[u8]>::as_ref(d));
    out
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}
