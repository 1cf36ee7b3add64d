//! SnapDeals: the proof that a committed-capacity sector's replica was
//! re-encoded with deal data (`EmptySectorUpdate`), from its vanilla
//! partition proofs, as filecoin-proofs'
//! `generate_empty_sector_update_proof_with_vanilla` builds it: every
//! partition's circuit built by the proof crates
//! (`EmptySectorUpdateCompound::circuit`) and proven by this crate's prover.
//!
//! Input ([`SnapRequest`]): the update proof type, which fixes the sector
//! size and so the partitions (1 for 2 KiB, 4 for 8 MiB, 16 for 512 MiB and
//! up); the sector's old CommR (its sector key's), new CommR and
//! new CommD; and one vanilla `PartitionProof` per partition, either bincode
//! (one byte string each, as filecoin-proofs-api's `generate_partition_proofs`
//! returns them and Curio hands them over) or a JSON array of them.
//!
//! Before any proving the commitments are checked to be field elements, the
//! vanilla proofs' shape is checked against the sector size's (the proof
//! crates' verifier indexes them unchecked, and a client's malformed input
//! must be refused, not panic a thread) and the proofs are verified as
//! `verify_partition_proofs` verifies them. After proving, every partition's
//! proof is verified against the parameters' verifying key. Output: the
//! partitions' Groth16 proofs, 192 bytes each, concatenated in order.
//!
//! Its proof types and their numbering are [`update_proof`], its parameter
//! set (blank circuit, shape) [`set`].

pub mod forge_key;
pub mod set;
pub mod update_proof;
pub mod vector;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::Instant;

use bellperson::{Circuit, ConstraintSystem, SynthesisError};
use blstrs::Scalar;
use ff::PrimeField;
use filecoin_hashers::Domain;
use filecoin_proofs::{as_safe_commitment, SectorUpdateConfig};
use fleet_wire::api::FilecoinKind;
use storage_proofs_core::compound_proof::{self, CompoundProof};
use storage_proofs_core::merkle::{MerkleProofTrait, MerkleTreeTrait};
use storage_proofs_core::parameter_cache::CacheableParameters;
use storage_proofs_core::proof::ProofScheme;
use storage_proofs_update::constants::{TreeDDomain, TreeRDomain, TreeRHasher};
use storage_proofs_update::{
    EmptySectorUpdate, EmptySectorUpdateCircuit, EmptySectorUpdateCompound, PartitionProof,
    PublicInputs, PublicParams, SetupParams,
};
use typenum::Unsigned;

use crate::circuit::CircuitShape;
use crate::filecoin::cache::CacheEntry;
use crate::filecoin::set::ParamSet;
use crate::filecoin::statement::FilStatement;
use crate::filecoin::{bounded_reason, crates_err, FilecoinError};
use crate::pool::PinnedPool;
use crate::statement::{Mode, Partition, Statement, StatementError};

pub use update_proof::{UpdateProof, UpdateProofError};

/// The most vanilla proof bytes a request may carry, all partitions
/// together: a 32 GiB update's 16 partitions are ~10 MB of bincode, ~4 times
/// that as JSON.
pub const MAX_VANILLA_BYTES: usize = crate::filecoin::c1::MAX_C1_BYTES;

/// The vanilla partition proofs of an update, in partition order, in either
/// form a node has them.
#[derive(Clone, Debug)]
pub enum SnapVanilla {
    /// One bincode (1.x) `PartitionProof` per partition: filecoin-proofs-api's
    /// `PartitionProofBytes`, what Curio sends.
    Bincode(Vec<Vec<u8>>),
    /// A JSON array of `PartitionProof` (serde's form).
    Json(Vec<u8>),
}

impl SnapVanilla {
    /// The job request's `vanilla_proofs`: a JSON array of `PartitionProof`
    /// objects, or of strings, each one partition's bincode in hex (what
    /// Curio's gRPC request carries, passed on as it came).
    pub fn from_value(value: &serde_json::Value) -> Result<SnapVanilla, FilecoinError> {
        let refuse = |reason: String| FilecoinError::SnapField {
            field: "vanilla_proofs",
            reason,
        };
        let items = value
            .as_array()
            .ok_or_else(|| refuse("is not a JSON array (one proof per partition)".into()))?;
        if items.first().is_some_and(serde_json::Value::is_string) {
            let parts = items
                .iter()
                .enumerate()
                .map(|(k, item)| {
                    let text = item.as_str().ok_or_else(|| {
                        refuse(format!("partition {k} is not a hex string like the others"))
                    })?;
                    hex::decode(text)
                        .map_err(|e| refuse(format!("partition {k} is not hex bincode: {e}")))
                })
                .collect::<Result<_, _>>()?;
            return Ok(SnapVanilla::Bincode(parts));
        }
        serde_json::to_vec(value)
            .map(SnapVanilla::Json)
            .map_err(|e| refuse(bounded_reason(&e.to_string())))
    }

    /// One bincode `PartitionProof` per partition, as Curio sends them: the
    /// JSON form decoded with the merkle tree of `sector_size` and encoded.
    pub fn into_bincode(self, sector_size: u64) -> Result<Vec<Vec<u8>>, FilecoinError> {
        match self {
            SnapVanilla::Bincode(parts) => Ok(parts),
            SnapVanilla::Json(bytes) => {
                crate::filecoin::with_tree!(sector_size, json_to_bincode, &bytes)
            }
        }
    }

    fn bytes(&self) -> usize {
        match self {
            SnapVanilla::Bincode(parts) => parts.iter().map(Vec::len).sum(),
            SnapVanilla::Json(bytes) => bytes.len(),
        }
    }
}

fn json_to_bincode<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>>(
    json: &[u8],
) -> Result<Vec<Vec<u8>>, FilecoinError> {
    let proofs: Vec<PartitionProof<Tree>> =
        serde_json::from_slice(json).map_err(|e| FilecoinError::SnapField {
            field: "vanilla_proofs",
            reason: bounded_reason(&e.to_string()),
        })?;
    crate::filecoin::bincode_each(&proofs, "writing the vanilla update proofs as bincode")
}

/// A SnapDeals update proof to make.
#[derive(Clone, Debug)]
pub struct SnapRequest {
    pub update_proof: UpdateProof,
    /// CommR before the update: the sector key's.
    pub comm_r_old: [u8; 32],
    /// CommR of the updated replica.
    pub comm_r_new: [u8; 32],
    /// CommD of the data the sector now holds.
    pub comm_d_new: [u8; 32],
    pub vanilla: SnapVanilla,
}

/// Filecoin's cache entry of the update circuit of `update_proof`'s sector size.
pub fn cache_entry(
    cache_dir: &Path,
    update_proof: UpdateProof,
) -> Result<CacheEntry, FilecoinError> {
    crate::filecoin::with_tree!(
        update_proof.sector_size,
        cache_entry_of,
        cache_dir,
        update_proof
    )
}

fn cache_entry_of<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>>(
    cache_dir: &Path,
    update_proof: UpdateProof,
) -> Result<CacheEntry, FilecoinError> {
    // The identifier filecoin-proofs' parameter lookup (`get_empty_sector_
    // update_params`) derives: the compound's prefix and the SHA-256 of the
    // public parameters' identifier.
    let id = <EmptySectorUpdateCompound<Tree> as CacheableParameters<
        EmptySectorUpdateCircuit<Tree>,
        PublicParams,
    >>::cache_identifier(&PublicParams::from_sector_size(update_proof.sector_size));
    Ok(CacheEntry::new(
        cache_dir,
        id,
        format!("SnapDeals {update_proof}"),
    ))
}

/// filecoin-proofs' configuration of the update (partitions, `h`).
fn update_config(update_proof: UpdateProof) -> SectorUpdateConfig {
    SectorUpdateConfig::from_porep_config(&update_proof.porep_config())
}

type CompoundParams<Tree> = compound_proof::PublicParams<'static, EmptySectorUpdate<Tree>>;

/// The update's compound public parameters, as filecoin-proofs sets them up.
fn public_params<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>>(
    update_proof: UpdateProof,
    config: &SectorUpdateConfig,
) -> Result<CompoundParams<Tree>, FilecoinError> {
    EmptySectorUpdateCompound::<Tree>::setup(&compound_proof::SetupParams {
        vanilla_params: SetupParams {
            sector_bytes: update_proof.sector_size,
        },
        partitions: Some(usize::from(config.update_partitions)),
        priority: false,
    })
    .map_err(crates_err("setting up the compound SnapDeals update"))
}

/// Checks `request` (commitments, the vanilla proofs' form and shape) and
/// verifies its vanilla proofs: what is left is proving its partitions.
pub fn prepare_snap(request: &SnapRequest) -> Result<Box<dyn FilStatement>, FilecoinError> {
    crate::filecoin::with_tree!(request.update_proof.sector_size, prepare_of, request)
}

/// Checked vanilla proofs of one sector's update.
struct SnapStatement<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>> {
    update_proof: UpdateProof,
    public_inputs: PublicInputs,
    pub_params: CompoundParams<Tree>,
    vanilla: Vec<PartitionProof<Tree>>,
}

impl<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>> FilStatement for SnapStatement<Tree> {
    fn kind(&self) -> FilecoinKind {
        FilecoinKind::SnapDeals
    }

    fn param_set(&self) -> &dyn ParamSet {
        &self.update_proof
    }
}

impl<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>> Statement for SnapStatement<Tree> {
    fn partitions(&self) -> usize {
        self.vanilla.len()
    }

    fn synthesize(
        &self,
        k: usize,
        shape: &CircuitShape,
        pool: &PinnedPool,
        mode: Mode<'_>,
    ) -> Result<Partition, StatementError> {
        let t = Instant::now();
        let vanilla = self.vanilla.get(k).ok_or(FilecoinError::SnapField {
            field: "vanilla_proofs",
            reason: format!("no partition {k}"),
        })?;
        let inputs: Vec<Scalar> = EmptySectorUpdateCompound::<Tree>::generate_public_inputs(
            &self.public_inputs,
            &self.pub_params.vanilla_params,
            Some(k),
        )
        .map_err(crates_err(
            "computing a SnapDeals partition's public inputs",
        ))?;
        let circuit = PartitionCircuit {
            statement: self,
            vanilla,
            k,
        };
        Partition::synthesize(k, circuit, inputs, t, shape, pool, mode)
    }
}

/// Partition `k`'s circuit, built by the crates when it is synthesised (the
/// crates' circuit is not `Clone`; recording the constraints needs a copy).
struct PartitionCircuit<'a, Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>> {
    statement: &'a SnapStatement<Tree>,
    vanilla: &'a PartitionProof<Tree>,
    k: usize,
}

impl<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>> Clone for PartitionCircuit<'_, Tree> {
    fn clone(&self) -> Self {
        PartitionCircuit { ..*self }
    }
}

impl<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>> Circuit<Scalar>
    for PartitionCircuit<'_, Tree>
{
    fn synthesize<CS: ConstraintSystem<Scalar>>(self, cs: &mut CS) -> Result<(), SynthesisError> {
        let s = self.statement;
        EmptySectorUpdateCompound::<Tree>::circuit(
            &s.public_inputs,
            (),
            self.vanilla,
            &s.pub_params.vanilla_params,
            Some(self.k),
        )
        .map_err(|e| {
            SynthesisError::IoError(std::io::Error::other(format!(
                "building SnapDeals partition {}'s circuit: {e:#}",
                self.k
            )))
        })?
        .synthesize(cs)
    }
}

fn prepare_of<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>>(
    request: &SnapRequest,
) -> Result<Box<dyn FilStatement>, FilecoinError> {
    let update_proof = request.update_proof;
    let comm_r_old = commitment::<TreeRDomain>(&request.comm_r_old, "comm_r_old")?;
    let comm_r_new = commitment::<TreeRDomain>(&request.comm_r_new, "comm_r_new")?;
    let comm_d_new = commitment::<TreeDDomain>(&request.comm_d_new, "comm_d_new")?;
    let config = update_config(update_proof);
    let partitions = usize::from(config.update_partitions);
    let vanilla = parse_vanilla::<Tree>(&request.vanilla, update_proof, partitions)?;
    let pub_params = public_params::<Tree>(update_proof, &config)?;
    for (k, proof) in vanilla.iter().enumerate() {
        check_shape(&pub_params.vanilla_params, k, proof)?;
    }
    // `k` is each partition's own wherever it is read (the verifier and
    // the circuits override it); filecoin-proofs sets the count here.
    let public_inputs = PublicInputs {
        k: partitions,
        comm_r_old,
        comm_d_new,
        comm_r_new,
        h: config.h,
    };
    verify_vanilla(update_proof, &pub_params, &public_inputs, &vanilla)?;
    Ok(Box::new(SnapStatement::<Tree> {
        update_proof,
        public_inputs,
        pub_params,
        vanilla,
    }))
}

/// A commitment as the crates take it: a field element, not all zero (as
/// filecoin-proofs' `get_sector_update_inputs` requires).
fn commitment<D: Domain>(bytes: &[u8; 32], field: &'static str) -> Result<D, FilecoinError> {
    if *bytes == [0; 32] {
        return Err(FilecoinError::SnapField {
            field,
            reason: "all zero".into(),
        });
    }
    as_safe_commitment::<D, _>(bytes, field).map_err(|_| FilecoinError::SnapField {
        field,
        reason: "not a field element (a CommR or CommD is one, its top bits clear)".into(),
    })
}

/// The vanilla proofs of `vanilla`, one per partition of `update_proof`.
fn parse_vanilla<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>>(
    vanilla: &SnapVanilla,
    update_proof: UpdateProof,
    partitions: usize,
) -> Result<Vec<PartitionProof<Tree>>, FilecoinError> {
    let refuse = |reason: String| FilecoinError::SnapField {
        field: "vanilla_proofs",
        reason,
    };
    if vanilla.bytes() > MAX_VANILLA_BYTES {
        return Err(refuse(format!(
            "{} bytes, more than the {MAX_VANILLA_BYTES} accepted",
            vanilla.bytes()
        )));
    }
    let wrong_count = |n: usize| {
        refuse(format!(
            "{n} partition proofs; a {update_proof} update has {partitions} (proofs of another sector size?)"
        ))
    };
    let proofs: Vec<PartitionProof<Tree>> = match vanilla {
        SnapVanilla::Bincode(parts) => {
            if parts.len() != partitions {
                return Err(wrong_count(parts.len()));
            }
            parts
                .iter()
                .enumerate()
                .map(|(k, bytes)| from_bincode(k, bytes, update_proof))
                .collect::<Result<_, _>>()?
        }
        SnapVanilla::Json(bytes) => serde_json::from_slice(bytes).map_err(|e| {
            refuse(format!(
                "not a JSON array of {} PartitionProof: {}",
                update_proof.size_name(),
                bounded_reason(&e.to_string())
            ))
        })?,
    };
    if proofs.len() != partitions {
        return Err(wrong_count(proofs.len()));
    }
    Ok(proofs)
}

/// Partition `k`'s proof from its bincode, exactly as filecoin-proofs-api
/// writes it (`bincode::serialize`: little-endian, fixed-width integers),
/// every byte read: trailing bytes are a damaged input, not padding.
fn from_bincode<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>>(
    k: usize,
    bytes: &[u8],
    update_proof: UpdateProof,
) -> Result<PartitionProof<Tree>, FilecoinError> {
    use bincode::Options;
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .with_limit(bytes.len() as u64)
        .reject_trailing_bytes()
        .deserialize(bytes)
        .map_err(|e| FilecoinError::SnapField {
            field: "vanilla_proofs",
            reason: format!(
                "partition {k} is not a bincode PartitionProof of a {} sector: {}",
                update_proof.size_name(),
                bounded_reason(&e.to_string())
            ),
        })
}

/// Whether `d`'s bytes are a field element: the crates convert every value
/// of a proof to one with `expect`.
fn canonical<D: Domain>(d: &D) -> bool {
    let bytes = d.into_bytes();
    let mut repr = <Scalar as PrimeField>::Repr::default();
    if bytes.len() != repr.as_ref().len() {
        return false;
    }
    repr.as_mut().copy_from_slice(&bytes);
    Scalar::from_repr_vartime(repr).is_some()
}

/// What the crates' verifier and circuit take for granted of partition
/// `k`'s proof, checked: the sector size's counts of apex leafs and
/// challenges, merkle paths of its trees' heights and arities, and field
/// elements throughout.
fn check_shape<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>>(
    params: &PublicParams,
    k: usize,
    proof: &PartitionProof<Tree>,
) -> Result<(), FilecoinError> {
    let refuse = |reason: String| FilecoinError::SnapField {
        field: "vanilla_proofs",
        reason: format!("partition {k}: {reason}"),
    };
    if proof.apex_leafs.len() != params.apex_leaf_count {
        return Err(refuse(format!(
            "{} apex leafs; this sector size's partition has {}",
            proof.apex_leafs.len(),
            params.apex_leaf_count
        )));
    }
    if proof.challenge_proofs.len() != params.challenge_count {
        return Err(refuse(format!(
            "{} challenge proofs; this sector size's partition has {}",
            proof.challenge_proofs.len(),
            params.challenge_count
        )));
    }
    if !canonical(&proof.comm_c) {
        return Err(refuse("its comm_c is not a field element".into()));
    }
    if let Some(i) = proof.apex_leafs.iter().position(|l| !canonical(l)) {
        return Err(refuse(format!("apex leaf {i} is not a field element")));
    }
    let leaves = params.sector_nodes;
    for (i, c) in proof.challenge_proofs.iter().enumerate() {
        for (name, shape) in [
            ("proof_r_old", merkle_shape(&c.proof_r_old, leaves)),
            ("proof_d_new", merkle_shape(&c.proof_d_new, leaves)),
            ("proof_r_new", merkle_shape(&c.proof_r_new, leaves)),
        ] {
            shape.map_err(|why| refuse(format!("challenge {i}'s {name} {why}")))?;
        }
    }
    Ok(())
}

/// Checks a merkle proof over `leaves` leaves has its tree's path: the
/// height, at each level one sibling fewer than the level's arity and an
/// index below it, and field elements throughout.
fn merkle_shape<P: MerkleProofTrait>(p: &P, leaves: usize) -> Result<(), String> {
    let path = p.path();
    let levels = p.expected_len(leaves);
    if path.len() != levels {
        return Err(format!(
            "has a path of {} levels; this sector size's tree has {levels}",
            path.len()
        ));
    }
    for (level, ((siblings, index), arity)) in
        path.iter().zip(level_arities::<P>(levels)).enumerate()
    {
        if siblings.len() + 1 != arity || *index >= arity {
            return Err(format!("is not of arity {arity} at level {level}"));
        }
        if !siblings.iter().all(canonical) {
            return Err(format!(
                "has a value at level {level} that is not a field element"
            ));
        }
    }
    if !canonical(&p.leaf()) || !canonical(&p.root()) {
        return Err("has a leaf or root that is not a field element".into());
    }
    Ok(())
}

/// The arity of each of a `levels`-high path of `P`'s tree: the base
/// tree's, then one level of the sub-tree's and one of the top tree's where
/// the tree has them.
fn level_arities<P: MerkleProofTrait>(levels: usize) -> Vec<usize> {
    let (sub, top) = (P::SubTreeArity::to_usize(), P::TopTreeArity::to_usize());
    let upper: Vec<usize> = [sub, top].into_iter().filter(|a| *a > 0).collect();
    let mut arities = vec![P::Arity::to_usize(); levels.saturating_sub(upper.len())];
    arities.extend(upper);
    arities
}

/// Verifies the vanilla proofs as filecoin-proofs' `verify_partition_proofs`
/// does. A panic in the crates' verifier (an input the shape check let
/// through) is the input's fault: refused, not a crash.
fn verify_vanilla<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>>(
    update_proof: UpdateProof,
    pub_params: &CompoundParams<Tree>,
    public_inputs: &PublicInputs,
    vanilla: &[PartitionProof<Tree>],
) -> Result<(), FilecoinError> {
    let verdict = catch_unwind(AssertUnwindSafe(|| {
        EmptySectorUpdate::<Tree>::verify_all_partitions(
            &pub_params.vanilla_params,
            public_inputs,
            vanilla,
        )
    }));
    match verdict {
        Ok(Ok(true)) => Ok(()),
        Ok(Ok(false)) => Err(FilecoinError::VanillaSnapInvalid { update_proof }),
        Ok(Err(e)) => Err(FilecoinError::SnapField {
            field: "vanilla_proofs",
            reason: bounded_reason(&format!("{e:#}")),
        }),
        Err(_) => Err(FilecoinError::SnapField {
            field: "vanilla_proofs",
            reason: "malformed: the proof crates' verifier could not read them".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use filecoin_proofs::constants::SectorShape2KiB;
    use storage_proofs_update::ChallengeProof;

    fn two_kib() -> UpdateProof {
        UpdateProof::from_number(0).expect("StackedDrg2KiBV1")
    }

    /// A 2 KiB partition proof of the right counts whose merkle proofs are
    /// empty: well-formed bincode and JSON, refused by the shape check.
    fn hollow() -> PartitionProof<SectorShape2KiB> {
        let challenge = ChallengeProof::<SectorShape2KiB> {
            proof_r_old: Default::default(),
            proof_d_new: Default::default(),
            proof_r_new: Default::default(),
        };
        PartitionProof {
            comm_c: TreeRDomain::default(),
            apex_leafs: vec![TreeDDomain::default(); 8],
            challenge_proofs: vec![challenge; 10],
        }
    }

    fn bincode_of(p: &PartitionProof<SectorShape2KiB>) -> Vec<u8> {
        bincode::serialize(p).expect("bincode")
    }

    fn request(vanilla: SnapVanilla) -> SnapRequest {
        SnapRequest {
            update_proof: two_kib(),
            comm_r_old: [1; 32],
            comm_r_new: [2; 32],
            comm_d_new: [3; 32],
            vanilla,
        }
    }

    /// Why `request` is refused, checking the message is one bounded line.
    fn refusal(request: &SnapRequest) -> String {
        match prepare_snap(request) {
            Ok(_) => panic!("accepted"),
            Err(e) => {
                let text = e.to_string();
                assert!(text.len() < 600 && !text.contains('\n'), "{text}");
                text
            }
        }
    }

    /// The names filecoin-proofs loads the update's parameters by, each
    /// listed in its parameters.json (so the cache checks their digests).
    #[test]
    fn cache_entries_are_the_names_parameters_json_lists() {
        let dir = Path::new("/nonexistent");
        for p in UpdateProof::all() {
            let entry = cache_entry(dir, p).expect("entry");
            let name = entry.params_name();
            assert!(
                name.starts_with("v28-empty-sector-update-merkletree-poseidon_hasher-"),
                "{name}"
            );
            assert!(
                crate::filecoin::cache::production_digest(&name).is_some(),
                "{p}: {name}"
            );
            let vk = entry
                .vk
                .file_name()
                .expect("vk")
                .to_string_lossy()
                .into_owned();
            assert!(
                crate::filecoin::cache::production_digest(&vk).is_some(),
                "{p}: {vk}"
            );
        }
        let big = cache_entry(dir, "StackedDrg32GiBV1".parse().expect("32GiB")).expect("entry");
        assert_eq!(
            big.params_name(),
            "v28-empty-sector-update-merkletree-poseidon_hasher-8-8-0-3b7f44a9362e3985369454947bc94022e118211e49fd672d52bec1cbfd599d18.params"
        );
    }

    #[test]
    fn partitions_follow_the_sector_size() {
        let parts = |n: u64| {
            let p = UpdateProof::from_number(n).expect("number");
            usize::from(update_config(p).update_partitions)
        };
        assert_eq!(
            (parts(0), parts(1), parts(2), parts(3), parts(4)),
            (1, 4, 16, 16, 16)
        );
    }

    #[test]
    fn damaged_bincode_is_refused_naming_the_partition_not_echoing_it() {
        let good = bincode_of(&hollow());
        let mut trailing = good.clone();
        trailing.push(0);
        let cases = [
            ("truncated", good[..good.len() / 2].to_vec()),
            ("a byte too many", trailing),
            ("not bincode at all", vec![0xab; 20_000]),
            ("empty", Vec::new()),
        ];
        for (what, bytes) in cases {
            let text = refusal(&request(SnapVanilla::Bincode(vec![bytes])));
            assert!(
                text.contains("SnapDeals input's vanilla_proofs")
                    && text
                        .contains("partition 0 is not a bincode PartitionProof of a 2KiB sector"),
                "{what}: {text}"
            );
            assert!(
                !text.contains("171, 171") && !text.contains("abab"),
                "{what}: {text}"
            );
        }
        // Well-formed, but its merkle proofs are not a 2 KiB sector's.
        let text = refusal(&request(SnapVanilla::Bincode(vec![good.clone()])));
        assert!(
            text.contains("partition 0: challenge 0's proof_r_old has a path of 0 levels"),
            "{text}"
        );
        let text = refusal(&request(SnapVanilla::Bincode(vec![good.clone(), good])));
        assert!(
            text.contains("2 partition proofs; a StackedDrg2KiBV1 update has 1"),
            "{text}"
        );
    }

    #[test]
    fn the_json_form_is_read_and_checked_as_the_bincode_one() {
        let json = serde_json::to_vec(&vec![hollow()]).expect("json");
        let text = refusal(&request(SnapVanilla::Json(json)));
        assert!(
            text.contains("challenge 0's proof_r_old has a path of 0"),
            "{text}"
        );
        let text = refusal(&request(SnapVanilla::Json(b"[{\"comm_c\": 7}]".to_vec())));
        assert!(
            text.contains("not a JSON array of 2KiB PartitionProof"),
            "{text}"
        );
        let text = refusal(&request(SnapVanilla::Json(b"[]".to_vec())));
        assert!(text.contains("0 partition proofs"), "{text}");
    }

    #[test]
    fn counts_and_field_elements_are_checked_before_the_crates_see_them() {
        let mut few = hollow();
        few.challenge_proofs.truncate(3);
        let mut not_fr = hollow();
        not_fr.comm_c = TreeRDomain::try_from_bytes(&[0xff; 32]).expect("32 bytes");
        let mut apex = hollow();
        apex.apex_leafs.pop();
        for (p, says) in [
            (
                few,
                "3 challenge proofs; this sector size's partition has 10",
            ),
            (not_fr, "its comm_c is not a field element"),
            (apex, "7 apex leafs; this sector size's partition has 8"),
        ] {
            let text = refusal(&request(SnapVanilla::Bincode(vec![bincode_of(&p)])));
            assert!(text.contains(says), "{says}: {text}");
        }
    }

    #[test]
    fn commitments_must_be_non_zero_field_elements() {
        let vanilla = SnapVanilla::Bincode(vec![bincode_of(&hollow())]);
        let mut zero = request(vanilla.clone());
        zero.comm_r_new = [0; 32];
        assert!(refusal(&zero).contains("comm_r_new: all zero"));
        let mut high = request(vanilla);
        high.comm_d_new = [0xff; 32];
        assert!(refusal(&high).contains("comm_d_new: not a field element"));
    }

    #[test]
    fn paths_are_checked_level_by_level_against_the_trees_arities() {
        type R32 = <filecoin_proofs::constants::SectorShape32GiB as MerkleTreeTrait>::Proof;
        type R64 = <filecoin_proofs::constants::SectorShape64GiB as MerkleTreeTrait>::Proof;
        type D = storage_proofs_core::merkle::MerkleProof<
            filecoin_hashers::sha256::Sha256Hasher,
            typenum::U2,
        >;
        assert_eq!(level_arities::<R32>(10), [8, 8, 8, 8, 8, 8, 8, 8, 8, 8]);
        assert_eq!(level_arities::<R64>(11)[9..], [8, 2]);
        assert_eq!(level_arities::<D>(30), vec![2; 30]);
    }
}
