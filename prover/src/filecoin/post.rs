//! Window and Winning PoSt from vanilla proofs, as `filecoin-proofs`'
//! `generate_winning_post_with_vanilla` and
//! `generate_single_window_post_with_vanilla` build them, proven by this
//! crate's prover one partition at a time.
//!
//! Input: the vanilla proofs as a JSON array of `FallbackPoStSectorProof`
//! (one per sector: WinningPoSt one sector, a WindowPoSt partition up to
//! the partition's sector count), the challenge randomness and the prover
//! id. The vanilla proofs are verified before proving and every proof
//! after, against the parameters' verifying key. Output: the Groth16
//! proof bytes, as those functions return them.

pub mod set;

use std::path::Path;
use std::time::Instant;

use blstrs::Scalar;
use filecoin_hashers::HashFunction;
use filecoin_hashers::Hasher;
use filecoin_proofs::constants::{
    WINDOW_POST_CHALLENGE_COUNT, WINDOW_POST_SECTOR_COUNT, WINNING_POST_CHALLENGE_COUNT,
    WINNING_POST_SECTOR_COUNT,
};
use filecoin_proofs::{
    as_safe_commitment, partition_vanilla_proofs, single_partition_vanilla_proofs,
    FallbackPoStSectorProof, PoStConfig, PoStType, VanillaProof,
};
use fleet_wire::api::FilecoinKind;
use storage_proofs_core::api_version::ApiVersion;
use storage_proofs_core::compound_proof::{self, CompoundProof};
use storage_proofs_core::merkle::{MerkleProofTrait, MerkleTreeTrait};
use storage_proofs_core::proof::ProofScheme;
use storage_proofs_post::fallback::{self, FallbackPoSt, FallbackPoStCompound, PublicSector};

use crate::circuit::CircuitShape;
use crate::filecoin::cache::CacheEntry;
use crate::filecoin::statement::FilStatement;
use crate::filecoin::{crates_err, FilecoinError};
use crate::pool::PinnedPool;
use crate::priority::Priority;
use crate::statement::{Mode, Partition, Statement, StatementError};

/// Which PoSt (declared with the other proof types, in `registered`).
pub use crate::filecoin::registered::PostKind;
use crate::filecoin::registered::PostSet;
use crate::filecoin::set::ParamSet;

impl PostKind {
    /// A WinningPoSt must reach the chain within its epoch (critical), a
    /// WindowPoSt within its deadline (high).
    pub fn priority(self) -> Priority {
        match self {
            PostKind::Winning => Priority::Critical,
            PostKind::Window => Priority::High,
        }
    }
}

/// A PoSt to prove.
#[derive(Clone, Debug)]
pub struct PostRequest {
    pub kind: PostKind,
    pub sector_size: u64,
    /// The vanilla proofs: a JSON array of `FallbackPoStSectorProof`.
    pub vanilla_json: Vec<u8>,
    pub randomness: [u8; 32],
    pub prover_id: [u8; 32],
    /// The WindowPoSt partition these sectors are (0 for WinningPoSt).
    pub partition: usize,
}

/// Filecoin's PoSt configuration of `kind` at `sector_size` (the current,
/// V1_1 API: WinningPoSt on API 1.0, WindowPoSt on 1.2, as the chain uses them).
pub fn post_config(kind: PostKind, sector_size: u64) -> Result<PoStConfig, FilecoinError> {
    crate::filecoin::registered::size_name(sector_size)
        .ok_or(FilecoinError::SectorSize(sector_size))?;
    Ok(match kind {
        PostKind::Winning => PoStConfig {
            sector_size: sector_size.into(),
            challenge_count: WINNING_POST_CHALLENGE_COUNT,
            sector_count: WINNING_POST_SECTOR_COUNT,
            typ: PoStType::Winning,
            priority: false,
            api_version: ApiVersion::V1_0_0,
        },
        PostKind::Window => PoStConfig {
            sector_size: sector_size.into(),
            challenge_count: WINDOW_POST_CHALLENGE_COUNT,
            sector_count: *WINDOW_POST_SECTOR_COUNT
                .read()
                .map_err(|_| FilecoinError::ProofCrates {
                    context: "reading the WindowPoSt sector counts",
                    reason: "lock poisoned".into(),
                })?
                .get(&sector_size)
                .ok_or(FilecoinError::SectorSize(sector_size))?,
            typ: PoStType::Window,
            priority: false,
            api_version: ApiVersion::V1_2_0,
        },
    })
}

/// Filecoin's cache entry of a PoSt circuit.
pub fn cache_entry(
    cache_dir: &Path,
    kind: PostKind,
    sector_size: u64,
) -> Result<CacheEntry, FilecoinError> {
    crate::filecoin::with_tree!(sector_size, cache_entry_of, cache_dir, kind, sector_size)
}

fn cache_entry_of<Tree: 'static + MerkleTreeTrait>(
    cache_dir: &Path,
    kind: PostKind,
    sector_size: u64,
) -> Result<CacheEntry, FilecoinError> {
    let id = post_config(kind, sector_size)?
        .get_cache_identifier::<Tree>()
        .map_err(crates_err("computing the parameters' cache identifier"))?;
    let what = format!(
        "{} of {} sectors",
        kind.name(),
        crate::filecoin::registered::size_name(sector_size).unwrap_or("?")
    );
    Ok(CacheEntry::new(cache_dir, id, what))
}

/// The compound public parameters of a PoSt of `config` over `sectors` sectors.
pub(crate) fn public_params<'a, Tree: 'static + MerkleTreeTrait>(
    config: &PoStConfig,
    sectors: usize,
) -> Result<compound_proof::PublicParams<'a, FallbackPoSt<'a, Tree>>, FilecoinError> {
    // filecoin-proofs' own setup of each kind (one definition of the rules).
    let (vanilla_params, partitions) = match config.typ {
        PoStType::Winning => (
            filecoin_proofs::parameters::winning_post_setup_params(config)
                .map_err(crates_err("setting up the WinningPoSt parameters"))?,
            None,
        ),
        _ => {
            let n = sectors.div_ceil(config.sector_count.max(1));
            (
                filecoin_proofs::parameters::window_post_setup_params(config),
                (n > 1).then_some(n),
            )
        }
    };
    FallbackPoStCompound::<Tree>::setup(&compound_proof::SetupParams {
        vanilla_params,
        partitions,
        priority: false,
    })
    .map_err(crates_err("setting up the compound PoSt"))
}

/// Checks `request` (sector count, randomness, prover id) and verifies its
/// vanilla proofs: what is left is proving its partitions.
pub fn prepare_post(request: &PostRequest) -> Result<Box<dyn FilStatement>, FilecoinError> {
    crate::filecoin::with_tree!(request.sector_size, prepare_of, request)
}

/// The vanilla proofs of `vanilla_json` (a JSON array of
/// `FallbackPoStSectorProof` of a `sector_size` sector) one bincode each, as
/// filecoin-proofs-api's `generate_single_vanilla_proof` returns them and
/// Curio sends them.
pub fn vanilla_bincode(
    vanilla_json: &[u8],
    sector_size: u64,
) -> Result<Vec<Vec<u8>>, FilecoinError> {
    crate::filecoin::with_tree!(sector_size, vanilla_bincode_of, vanilla_json)
}

fn vanilla_bincode_of<Tree: 'static + MerkleTreeTrait>(
    vanilla_json: &[u8],
) -> Result<Vec<Vec<u8>>, FilecoinError> {
    let proofs: Vec<filecoin_proofs::FallbackPoStSectorProof<Tree>> =
        serde_json::from_slice(vanilla_json).map_err(|e| FilecoinError::VanillaPostInvalid {
            reason: crate::filecoin::bounded_reason(&e.to_string()),
        })?;
    crate::filecoin::bincode_each(&proofs, "writing the vanilla PoSt proofs as bincode")
}

type PostInputs<Tree> =
    fallback::PublicInputs<<<Tree as MerkleTreeTrait>::Hasher as Hasher>::Domain>;

/// Checked vanilla PoSt proofs, partitioned as the circuit takes them.
struct PostStatement<Tree: 'static + MerkleTreeTrait> {
    set: PostSet,
    first_partition: usize,
    pub_inputs: PostInputs<Tree>,
    verifier_inputs: PostInputs<Tree>,
    pub_params: compound_proof::PublicParams<'static, FallbackPoSt<'static, Tree>>,
    partitioned: Vec<VanillaProof<Tree>>,
}

impl<Tree: 'static + MerkleTreeTrait> FilStatement for PostStatement<Tree> {
    fn kind(&self) -> FilecoinKind {
        self.set.kind.job_kind()
    }

    fn param_set(&self) -> &dyn ParamSet {
        &self.set
    }

    fn sectors(&self) -> usize {
        self.pub_inputs.sectors.len()
    }
}

impl<Tree: 'static + MerkleTreeTrait> Statement for PostStatement<Tree> {
    fn priority(&self) -> Priority {
        self.set.kind.priority()
    }

    fn partitions(&self) -> usize {
        self.partitioned.len()
    }

    fn partition_number(&self, k: usize) -> usize {
        self.first_partition + k
    }

    fn synthesize(
        &self,
        k: usize,
        shape: &CircuitShape,
        pool: &PinnedPool,
        mode: Mode<'_>,
    ) -> Result<Partition, StatementError> {
        let t = Instant::now();
        let part = self
            .partitioned
            .get(k)
            .ok_or(FilecoinError::VanillaPostInvalid {
                reason: format!("no partition {k}"),
            })?;
        let circuit = FallbackPoStCompound::<Tree>::circuit(
            &self.pub_inputs,
            Default::default(),
            part,
            &self.pub_params.vanilla_params,
            Some(k),
        )
        .map_err(crates_err("building a PoSt circuit"))?;
        let inputs: Vec<Scalar> = FallbackPoStCompound::<Tree>::generate_public_inputs(
            &self.verifier_inputs,
            &self.pub_params.vanilla_params,
            Some(k),
        )
        .map_err(crates_err("computing a PoSt's public inputs"))?;
        Partition::synthesize(k, circuit, inputs, t, shape, pool, mode)
    }
}

/// What the proof crates' verifier would refuse in the vanilla proofs' form,
/// checked here first: a sector proof of another PoSt kind (a WindowPoSt's
/// 10 challenges handed in as a WinningPoSt's 66, which the crates'
/// partitioning accepts and only proving then fails), no inclusion proofs
/// (the crates index the first one), roots that disagree with CommR, paths
/// of another sector size. The crates log each of these as an ERROR line of
/// their own; a client's malformed input is refused here without one.
fn check_vanilla_shape<Tree: 'static + MerkleTreeTrait>(
    kind: PostKind,
    config: &PoStConfig,
    vanilla: &[FallbackPoStSectorProof<Tree>],
) -> Result<(), FilecoinError> {
    let refuse = |i: usize, reason: String| FilecoinError::PostField {
        field: "vanilla proofs",
        reason: format!("sector proof {i}: {reason}"),
    };
    let leaves = u64::from(config.sector_size) as usize / storage_proofs_core::util::NODE_SIZE;
    for (i, p) in vanilla.iter().enumerate() {
        let [sector] = p.vanilla_proof.sectors.as_slice() else {
            return Err(refuse(
                i,
                format!(
                    "{} sector proofs inside, not 1 (as generate_single_vanilla_proof gives)",
                    p.vanilla_proof.sectors.len()
                ),
            ));
        };
        let proofs = &sector.inclusion_proofs;
        if proofs.len() != config.challenge_count {
            return Err(refuse(
                i,
                format!(
                    "{} challenges' inclusion proofs; a {} has {} a sector{}",
                    proofs.len(),
                    kind.name(),
                    config.challenge_count,
                    match kind {
                        PostKind::Winning => " (vanilla proofs of a WindowPoSt?)",
                        PostKind::Window => " (vanilla proofs of a WinningPoSt?)",
                    }
                ),
            ));
        }
        let root = proofs[0].root();
        let comm_r = <Tree::Hasher as Hasher>::Function::hash2(&sector.comm_c, &root);
        if comm_r != p.comm_r {
            return Err(refuse(
                i,
                "its CommC and tree root do not hash to its CommR".into(),
            ));
        }
        if let Some(n) = proofs.iter().position(|q| q.root() != root) {
            return Err(refuse(i, format!("inclusion proof {n} has another root")));
        }
        if let Some(n) = proofs
            .iter()
            .position(|q| q.path().len() != q.expected_len(leaves))
        {
            return Err(refuse(
                i,
                format!(
                    "inclusion proof {n} has a path of another length than a {} sector's",
                    crate::filecoin::registered::size_name(u64::from(config.sector_size))
                        .unwrap_or("?")
                ),
            ));
        }
    }
    Ok(())
}

fn prepare_of<Tree: 'static + MerkleTreeTrait>(
    request: &PostRequest,
) -> Result<Box<dyn FilStatement>, FilecoinError> {
    let config = post_config(request.kind, request.sector_size)?;
    if request.vanilla_json.len() > crate::filecoin::c1::MAX_C1_BYTES {
        return Err(FilecoinError::PostField {
            field: "vanilla proofs",
            reason: format!("{} bytes, more than accepted", request.vanilla_json.len()),
        });
    }
    let vanilla: Vec<FallbackPoStSectorProof<Tree>> = serde_json::from_slice(&request.vanilla_json)
        .map_err(|e| FilecoinError::PostField {
            field: "vanilla proofs",
            reason: format!(
                "not a JSON array of FallbackPoStSectorProof: {}",
                crate::filecoin::bounded_reason(&e.to_string())
            ),
        })?;
    if vanilla.is_empty() || vanilla.len() > config.sector_count {
        return Err(FilecoinError::PostField {
            field: "vanilla proofs",
            reason: format!(
                "{} sectors; a {} partition proves 1 to {}",
                vanilla.len(),
                request.kind.name(),
                config.sector_count
            ),
        });
    }
    if request.kind == PostKind::Winning
        && (vanilla.len() != config.sector_count || request.partition != 0)
    {
        return Err(FilecoinError::PostField {
            field: "vanilla proofs",
            reason: format!(
                "WinningPoSt proves exactly {} sector(s), as partition 0",
                config.sector_count
            ),
        });
    }
    check_vanilla_shape::<Tree>(request.kind, &config, &vanilla)?;
    let randomness = as_safe_commitment::<<Tree::Hasher as Hasher>::Domain, _>(
        &request.randomness,
        "randomness",
    )
    .map_err(|e| FilecoinError::PostField {
        field: "randomness",
        reason: format!("{e:#}"),
    })?;
    let prover_id =
        as_safe_commitment::<<Tree::Hasher as Hasher>::Domain, _>(&request.prover_id, "prover_id")
            .map_err(|e| FilecoinError::PostField {
                field: "prover id",
                reason: format!("{e:#}"),
            })?;
    let sectors: Vec<PublicSector<_>> = vanilla
        .iter()
        .map(|p| PublicSector {
            id: p.sector_id,
            comm_r: p.comm_r,
        })
        .collect();
    let pub_params = public_params::<Tree>(&config, vanilla.len())?;
    // Both filecoin-proofs functions verify the vanilla proofs while they
    // partition them: a wrong one is refused here, before proving.
    let (pub_inputs, partitioned) = match request.kind {
        PostKind::Winning => {
            let pub_inputs = fallback::PublicInputs {
                randomness,
                prover_id,
                sectors,
                k: None,
            };
            let parts = partition_vanilla_proofs(
                &config,
                &pub_params.vanilla_params,
                &pub_inputs,
                pub_params.partitions.unwrap_or(1),
                &vanilla,
            )
            .map_err(|e| FilecoinError::VanillaPostInvalid {
                reason: crate::filecoin::bounded_reason(&format!("{e:#}")),
            })?;
            (pub_inputs, parts)
        }
        PostKind::Window => {
            let pub_inputs = fallback::PublicInputs {
                randomness,
                prover_id,
                sectors,
                k: Some(request.partition),
            };
            let part = single_partition_vanilla_proofs(
                &config,
                &pub_params.vanilla_params,
                &pub_inputs,
                &vanilla,
            )
            .map_err(|e| FilecoinError::VanillaPostInvalid {
                reason: crate::filecoin::bounded_reason(&format!("{e:#}")),
            })?;
            (pub_inputs, vec![part])
        }
    };
    let valid = FallbackPoSt::<Tree>::verify_all_partitions(
        &pub_params.vanilla_params,
        &pub_inputs,
        &partitioned,
    )
    .map_err(|e| FilecoinError::VanillaPostInvalid {
        reason: crate::filecoin::bounded_reason(&format!("{e:#}")),
    })?;
    if !valid {
        return Err(FilecoinError::VanillaPostInvalid {
            reason: "they do not verify for this randomness, prover id and sectors".into(),
        });
    }

    // The public inputs a verifier computes: `verify_winning_post` lists
    // the sector once per challenge slot of the circuit (its setup turns
    // 66 challenges of 1 sector into 1 challenge of 66 "sectors"), where the
    // prover's inputs name it once.
    let verifier_inputs = match request.kind {
        PostKind::Winning => fallback::PublicInputs {
            sectors: pub_inputs
                .sectors
                .iter()
                .cycle()
                .take(pub_params.vanilla_params.sector_count * pub_inputs.sectors.len())
                .cloned()
                .collect(),
            ..pub_inputs.clone()
        },
        PostKind::Window => pub_inputs.clone(),
    };
    Ok(Box::new(PostStatement::<Tree> {
        set: PostSet {
            kind: request.kind,
            sector_size: request.sector_size,
        },
        first_partition: request.partition,
        pub_inputs,
        verifier_inputs,
        pub_params,
        partitioned,
    }))
}
