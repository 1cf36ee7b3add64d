//! The blank (witness-free) circuit of a Filecoin parameter set: what its
//! TEST-ONLY parameters are generated from, and what a daemon records the
//! constraints of when it preloads the set, so that even the first proof
//! (a WinningPoSt due within its epoch) synthesises from the recording.

use filecoin_proofs::constants::DefaultPieceHasher;
use storage_proofs_core::compound_proof::{self, CompoundProof};
use storage_proofs_core::merkle::MerkleTreeTrait;
use storage_proofs_porep::stacked::{StackedCompound, StackedDrg};
use storage_proofs_post::fallback::FallbackPoStCompound;
use storage_proofs_update::constants::TreeRHasher;

use crate::compiled::CompiledR1cs;
use crate::filecoin::post::{self, PostKind};
use crate::filecoin::registered::SealProof;
use crate::filecoin::{crates_err, FilCircuit, FilecoinError};

type PorepCompound<Tree> = StackedCompound<Tree, DefaultPieceHasher>;
type PorepScheme<'a, Tree> = StackedDrg<'a, Tree, DefaultPieceHasher>;

/// The blank PoRep circuit of `seal_proof` (its sector size's tree `Tree`).
pub fn porep<Tree: 'static + MerkleTreeTrait>(
    seal_proof: SealProof,
) -> Result<impl bellperson::Circuit<blstrs::Scalar> + Clone + Send, FilecoinError> {
    let config = seal_proof.porep_config();
    let setup = compound_proof::SetupParams {
        vanilla_params: filecoin_proofs::parameters::setup_params(&config)
            .map_err(crates_err("setting up the PoRep parameters"))?,
        partitions: Some(usize::from(config.partitions)),
        priority: false,
    };
    let pub_params =
        <PorepCompound<Tree> as CompoundProof<PorepScheme<'_, Tree>, _>>::setup(&setup)
            .map_err(crates_err("setting up the compound PoRep"))?;
    Ok(<PorepCompound<Tree> as CompoundProof<
        PorepScheme<'_, Tree>,
        _,
    >>::blank_circuit(&pub_params.vanilla_params))
}

/// The blank circuit of a PoSt of `kind` at `sector_size`.
pub fn post<Tree: 'static + MerkleTreeTrait>(
    kind: PostKind,
    sector_size: u64,
) -> Result<impl bellperson::Circuit<blstrs::Scalar> + Clone + Send, FilecoinError> {
    let config = post::post_config(kind, sector_size)?;
    let pub_params = post::public_params::<Tree>(&config, config.sector_count)?;
    Ok(FallbackPoStCompound::<Tree>::blank_circuit(
        &pub_params.vanilla_params,
    ))
}

/// The constraints of `circuit`'s blank circuit, recorded (assignments are
/// never asked for). Every partition of the set has these constraints: the
/// parameters were made from this circuit.
pub fn record(circuit: FilCircuit) -> Result<CompiledR1cs, FilecoinError> {
    match circuit {
        FilCircuit::PoRep(p) => crate::filecoin::with_tree!(p.sector_size, record_porep, p),
        FilCircuit::Post(kind, size) => {
            crate::filecoin::with_tree!(size, record_post, kind, size)
        }
        FilCircuit::Snap(size) => crate::filecoin::with_tree!(size, record_snap, size),
    }
}

fn recorded(
    r: Result<CompiledR1cs, crate::compiled::CompileError>,
) -> Result<CompiledR1cs, FilecoinError> {
    r.map_err(|e| FilecoinError::ProofCrates {
        context: "recording the blank circuit's constraints",
        reason: e.to_string(),
    })
}

fn record_porep<Tree: 'static + MerkleTreeTrait>(
    seal_proof: SealProof,
) -> Result<CompiledR1cs, FilecoinError> {
    recorded(crate::compiled::compile(porep::<Tree>(seal_proof)?))
}

fn record_post<Tree: 'static + MerkleTreeTrait>(
    kind: PostKind,
    sector_size: u64,
) -> Result<CompiledR1cs, FilecoinError> {
    recorded(crate::compiled::compile(post::<Tree>(kind, sector_size)?))
}

fn record_snap<Tree: 'static + MerkleTreeTrait<Hasher = TreeRHasher>>(
    sector_size: u64,
) -> Result<CompiledR1cs, FilecoinError> {
    recorded(crate::compiled::compile(
        crate::filecoin::snap::blank_circuit::<Tree>(sector_size),
    ))
}
