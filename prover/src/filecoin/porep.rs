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

pub mod set;

use std::path::Path;
use std::time::Instant;

use bellperson::Circuit;
use blstrs::Scalar;
use filecoin_hashers::{Domain, Hasher};
use filecoin_proofs::constants::{DefaultPieceDomain, DefaultPieceHasher};
use filecoin_proofs::{as_safe_commitment, SealCommitPhase1Output, VanillaSealProof};
use fleet_wire::api::FilecoinKind;
use storage_proofs_core::compound_proof::{self, CompoundProof};
use storage_proofs_core::merkle::MerkleTreeTrait;
use storage_proofs_core::proof::ProofScheme;
use storage_proofs_porep::stacked::{
    self, generate_replica_id, StackedCircuit, StackedCompound, StackedDrg,
};

use crate::circuit::split::piece_range;
use crate::circuit::{CircuitShape, SplitWitness};
use crate::filecoin::c1::C1Document;
use crate::filecoin::cache::CacheEntry;
use crate::filecoin::registered::SealProof;
use crate::filecoin::set::ParamSet;
use crate::filecoin::statement::FilStatement;
use crate::filecoin::{crates_err, FilecoinError};
use crate::pool::PinnedPool;
use crate::statement::{Mode, Partition, Statement, StatementError};

pub use crate::filecoin::statement::PROOF_BYTES;

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
        .map_err(crates_err("computing the parameters' cache identifier"))?;
    Ok(CacheEntry::new(cache_dir, id, seal_proof.to_string()))
}

/// Checks `doc` against the sector it is said to be for (`prover_id`'s
/// sector `doc.sector_id`: its replica id is recomputed from those, its
/// ticket, CommD and PoRep id) and verifies its vanilla proofs: what is
/// left is proving its partitions.
pub fn prepare_c2(
    doc: &C1Document,
    prover_id: [u8; 32],
) -> Result<Box<dyn FilStatement>, FilecoinError> {
    crate::filecoin::with_tree!(doc.seal_proof.sector_size, prepare_of, doc, prover_id)
}

type Scheme<Tree> = StackedDrg<'static, Tree, DefaultPieceHasher>;
type Compound<Tree> = StackedCompound<Tree, DefaultPieceHasher>;
type PublicInputs<Tree> = stacked::PublicInputs<
    <<Tree as MerkleTreeTrait>::Hasher as Hasher>::Domain,
    <DefaultPieceHasher as Hasher>::Domain,
>;

/// A checked C1 output of one sector.
struct C2Statement<Tree: 'static + MerkleTreeTrait> {
    seal_proof: SealProof,
    /// A forged sector's C1 (its ticket carries the forge's mark).
    forged: bool,
    public_inputs: PublicInputs<Tree>,
    pub_params: compound_proof::PublicParams<'static, Scheme<Tree>>,
    vanilla: Vec<Vec<VanillaSealProof<Tree>>>,
}

impl<Tree: 'static + MerkleTreeTrait> FilStatement for C2Statement<Tree> {
    fn kind(&self) -> FilecoinKind {
        FilecoinKind::PorepC2
    }

    fn test_data(&self) -> bool {
        self.forged
    }

    fn param_set(&self) -> &dyn ParamSet {
        &self.seal_proof
    }
}

impl<Tree: 'static + MerkleTreeTrait> Statement for C2Statement<Tree> {
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
        let vanilla = self.vanilla.get(k).ok_or(FilecoinError::C1Field {
            field: "vanilla_proofs",
            reason: format!("no partition {k}"),
        })?;
        let inputs: Vec<Scalar> =
            <Compound<Tree> as CompoundProof<Scheme<Tree>, _>>::generate_public_inputs(
                &self.public_inputs,
                &self.pub_params.vanilla_params,
                Some(k),
            )
            .map_err(crates_err("computing a partition's public inputs"))?;
        // Checked or not, in pieces of its challenges (checked in pieces
        // where the recording was made in as many, else whole).
        if let Mode::Compiled {
            r1cs,
            check,
            defer_abc,
        } = mode
        {
            let circuit = Challenges {
                statement: self,
                vanilla,
                k,
            };
            return Partition::synthesize_split(
                k, circuit, inputs, t, shape, pool, r1cs, check, defer_abc,
            );
        }
        if let Mode::Record { defer_abc } = mode {
            let circuit = Challenges {
                statement: self,
                vanilla,
                k,
            };
            // The parameters' shape is padded; the pieces are matched
            // against the circuit's own count (seconds, once per set).
            let counted = self.seal_proof.shape()?;
            return Partition::record_split(
                k, circuit, inputs, t, shape, &counted, pool, defer_abc,
            );
        }
        let circuit = self
            .circuit(vanilla, k)
            .map_err(crates_err("building a partition's circuit"))?;
        Partition::synthesize(k, circuit, inputs, t, shape, pool, mode)
    }
}

impl<Tree: 'static + MerkleTreeTrait> C2Statement<Tree> {
    /// Partition `k`'s circuit over `vanilla`, its challenges' vanilla
    /// proofs (all of them, or some for a piece of the witness).
    fn circuit(
        &self,
        vanilla: &[VanillaSealProof<Tree>],
        k: usize,
    ) -> anyhow::Result<StackedCircuit<Tree, DefaultPieceHasher>> {
        <Compound<Tree> as CompoundProof<Scheme<Tree>, _>>::circuit(
            &self.public_inputs,
            (),
            &vanilla.to_vec(),
            &self.pub_params.vanilla_params,
            Some(k),
        )
    }

    /// [`Self::circuit`] inside a synthesis, where errors are bellperson's.
    fn circuit_in_synthesis(
        &self,
        vanilla: &[VanillaSealProof<Tree>],
        k: usize,
    ) -> Result<StackedCircuit<Tree, DefaultPieceHasher>, bellperson::SynthesisError> {
        self.circuit(vanilla, k).map_err(|e| {
            bellperson::SynthesisError::IoError(std::io::Error::other(format!(
                "building partition {k}'s circuit: {e:#}"
            )))
        })
    }
}

/// A PoRep partition's circuit, whose witness comes in pieces of its
/// challenges: the crates' own circuit built over some of the challenges
/// allocates the statement's preamble (replica id, commitments) and then
/// those challenges, so every piece repeats the preamble and
/// `compiled::assign_split` drops the repeats (checked value for value).
/// A 32 GiB partition has 18 challenges, the test sizes 2.
struct Challenges<'a, Tree: 'static + MerkleTreeTrait> {
    statement: &'a C2Statement<Tree>,
    vanilla: &'a [VanillaSealProof<Tree>],
    k: usize,
}

impl<Tree: 'static + MerkleTreeTrait> bellperson::Circuit<Scalar> for Challenges<'_, Tree> {
    fn synthesize<CS: bellperson::ConstraintSystem<Scalar>>(
        self,
        cs: &mut CS,
    ) -> Result<(), bellperson::SynthesisError> {
        self.statement
            .circuit_in_synthesis(self.vanilla, self.k)?
            .synthesize(cs)
    }
}

impl<Tree: 'static + MerkleTreeTrait> SplitWitness for Challenges<'_, Tree> {
    fn repeats_preamble(&self) -> bool {
        true
    }

    fn pieces(&self, max: usize) -> usize {
        max.clamp(1, self.vanilla.len().max(1))
    }

    fn synthesize_piece<CS: bellperson::ConstraintSystem<Scalar>>(
        &self,
        piece: usize,
        pieces: usize,
        cs: &mut CS,
    ) -> Result<(), bellperson::SynthesisError> {
        let range = piece_range(self.vanilla.len(), piece, pieces);
        self.statement
            .circuit_in_synthesis(&self.vanilla[range], self.k)?
            .synthesize(cs)
    }
}

fn prepare_of<Tree: 'static + MerkleTreeTrait>(
    doc: &C1Document,
    prover_id: [u8; 32],
) -> Result<Box<dyn FilStatement>, FilecoinError> {
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
            .map_err(crates_err("setting up the PoRep parameters"))?,
        partitions: Some(partitions),
        priority: false,
    };
    let pub_params = <Compound<Tree> as CompoundProof<Scheme<Tree>, _>>::setup(&setup)
        .map_err(crates_err("setting up the compound PoRep"))?;
    // A C1 whose vanilla proofs do not verify cannot give a valid proof:
    // say so before minutes of proving, naming the input as the cause.
    let valid = Scheme::<Tree>::verify_all_partitions(
        &pub_params.vanilla_params,
        &public_inputs,
        &c1.vanilla_proofs,
    )
    .map_err(crates_err("verifying the C1 output's vanilla proofs"))?;
    if !valid {
        return Err(FilecoinError::VanillaInvalid { seal_proof });
    }
    Ok(Box::new(C2Statement::<Tree> {
        seal_proof,
        forged: crate::filecoin::forge::is_forged_ticket(&c1.ticket),
        public_inputs,
        pub_params,
        vanilla: c1.vanilla_proofs,
    }))
}
