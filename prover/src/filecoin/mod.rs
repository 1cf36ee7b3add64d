//! Filecoin's own proofs through this prover: PoRep C2 from a C1 output
//! ([`porep`]), Winning and Window PoSt ([`post`]) and SnapDeals
//! ([`snap`]) from vanilla proofs, with Groth16 parameters read in place from a Filecoin
//! parameter cache folder ([`cache`]) or, for test sector sizes,
//! generated TEST-ONLY under Filecoin's file names ([`setup`]).
//!
//! The circuits are the proof crates' own (`storage-proofs-porep`, `-post`
//! and `-update` 19.1, built without GPU features): this module only builds them through their
//! public `CompoundProof` API and hands them to [`crate::synthesis`] and
//! [`crate::prove`] like any other bellperson circuit.

pub mod c1;
pub mod cache;
pub mod forge;
pub mod kind;
pub mod need;
pub mod porep;
pub mod post;
pub mod registered;
pub mod seal;
pub mod set;
pub mod setup;
pub mod snap;
pub mod statement;

use std::path::PathBuf;

use crate::params::ParamsError;
use crate::prove::ProveError;
use crate::setup::SetupError;
pub use registered::SealProof;
// From the update proof's own file, not `snap`, which imports this module.
pub use snap::update_proof::UpdateProof;

/// Calls `$f::<Tree>(args)` with the merkle tree shape of a sector size
/// (the sizes of [`registered::SECTOR_SIZES`]; any other is an error).
macro_rules! with_tree {
    ($size:expr, $f:ident, $($arg:expr),* $(,)?) => {{
        use filecoin_proofs::constants as fc;
        match $size {
            fc::SECTOR_SIZE_2_KIB => $f::<fc::SectorShape2KiB>($($arg),*),
            fc::SECTOR_SIZE_8_MIB => $f::<fc::SectorShape8MiB>($($arg),*),
            fc::SECTOR_SIZE_512_MIB => $f::<fc::SectorShape512MiB>($($arg),*),
            fc::SECTOR_SIZE_32_GIB => $f::<fc::SectorShape32GiB>($($arg),*),
            fc::SECTOR_SIZE_64_GIB => $f::<fc::SectorShape64GiB>($($arg),*),
            other => Err($crate::filecoin::FilecoinError::SectorSize(other)),
        }
    }};
}
pub(crate) use with_tree;

/// Each of `items` as bincode (1.x: little-endian, fixed-width integers),
/// the form filecoin-proofs-api hands vanilla proofs out in and Curio sends
/// them; `what` names them in the error.
pub(crate) fn bincode_each<T: serde::Serialize>(
    items: &[T],
    what: &'static str,
) -> Result<Vec<Vec<u8>>, FilecoinError> {
    items
        .iter()
        .map(|item| {
            bincode::serialize(item).map_err(|e| FilecoinError::ProofCrates {
                context: what,
                reason: e.to_string(),
            })
        })
        .collect()
}

/// A Filecoin parameter set by name, as the command line, the config and
/// Curio's circuit ids give it (the kind table, `kind::param_set`, says
/// what it is):
/// a seal proof type (`StackedDrg2KiBV1_1`), a PoSt of a sector size
/// (`winning-post:2KiB`, `window-post:2KiB`) or the SnapDeals update of one
/// (`snap-deals:2KiB`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilCircuit {
    PoRep(SealProof),
    Post(registered::PostKind, u64),
    Snap(UpdateProof),
}

impl std::str::FromStr for FilCircuit {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some((kind, size)) = s.split_once(':') {
            let size = || registered::parse_sector_size(size).map_err(|e| e.to_string());
            return match kind {
                "winning-post" => Ok(FilCircuit::Post(registered::PostKind::Winning, size()?)),
                "window-post" => Ok(FilCircuit::Post(registered::PostKind::Window, size()?)),
                "snap-deals" => {
                    let size = size()?;
                    UpdateProof::of_size(size)
                        .map(FilCircuit::Snap)
                        .ok_or_else(|| FilecoinError::SectorSize(size).to_string())
                }
                _ => Err("unknown kind before `:`: winning-post, window-post or snap-deals".into()),
            };
        }
        s.parse::<SealProof>()
            .map(FilCircuit::PoRep)
            .map_err(|e| format!("{e}; or winning-post:SIZE / window-post:SIZE / snap-deals:SIZE"))
    }
}

impl serde::Serialize for FilCircuit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Read as its text form (`StackedDrg32GiBV1_1`, `winning-post:32GiB`), as
/// the command line takes it.
impl<'de> serde::Deserialize<'de> for FilCircuit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl std::fmt::Display for FilCircuit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FilCircuit::PoRep(p) => write!(f, "{p}"),
            FilCircuit::Post(kind, size) => f.write_str(&job_label(kind.job_kind(), *size)),
            FilCircuit::Snap(u) => f.write_str(&job_label(
                fleet_wire::api::FilecoinKind::SnapDeals,
                u.sector_size,
            )),
        }
    }
}

/// A Filecoin proof's name in jobs and timing records: its kind and sector
/// size (`porep-c2:2KiB`, `winning-post:32GiB`).
pub fn job_label(kind: fleet_wire::api::FilecoinKind, sector_size: u64) -> String {
    match registered::size_name(sector_size) {
        Some(size) => format!("{kind}:{size}"),
        None => format!("{kind}:{sector_size}B"),
    }
}

/// Writes `bytes` to `path` whole or not at all (a synced temporary file
/// renamed into place): a proof or report is never left half-written.
pub fn write_output(path: &std::path::Path, bytes: &[u8]) -> Result<(), ParamsError> {
    crate::params::file::write_atomic(path, |w| w.write_all(bytes)).map(|_| ())
}

/// The error of a call into the proof crates (they answer `anyhow`), with
/// what it was doing and the chain of causes, bounded ([`bounded_reason`]).
pub(crate) fn crates_err(context: &'static str) -> impl FnOnce(anyhow::Error) -> FilecoinError {
    move |e| FilecoinError::ProofCrates {
        context,
        reason: bounded_reason(&format!("{e:#}")),
    }
}

/// The most of a cause from the proof crates or serde a message carries.
pub const MAX_REASON_CHARS: usize = 300;

/// A cause as a message may carry it: one line of at most
/// [`MAX_REASON_CHARS`] characters. The proof crates' errors can hold a
/// whole input in `Debug` form (tens of KB); a message names the field and
/// the cause, never the input.
pub fn bounded_reason(reason: &str) -> String {
    let line = reason.lines().next().unwrap_or_default();
    let mut out: String = line.chars().take(MAX_REASON_CHARS).collect();
    if out.len() < reason.len() {
        out.push_str(" …");
    }
    out
}

impl FilecoinError {
    /// Whether the input was refused (the request, the C1 output, the
    /// vanilla proofs): the client's to fix, never the host's. The command
    /// line's exit code follows it; a new kind's input errors go here.
    pub fn refuses_input(&self) -> bool {
        matches!(
            self,
            FilecoinError::C1(_)
                | FilecoinError::C1Shape { .. }
                | FilecoinError::C1Field { .. }
                | FilecoinError::PostField { .. }
                | FilecoinError::SnapField { .. }
                | FilecoinError::RequestField { .. }
                | FilecoinError::NotThisSector { .. }
                | FilecoinError::ForgedTestData
                | FilecoinError::VanillaInvalid { .. }
                | FilecoinError::VanillaPostInvalid { .. }
                | FilecoinError::VanillaSnapInvalid { .. }
        )
    }

    /// Whether the host's parameter files are what failed (missing,
    /// unreadable, not Filecoin's): the host's to fix. The daemon answers
    /// these 422 / FAILED_PRECONDITION, and every other refusal of a
    /// submission as the input's.
    pub fn is_parameters(&self) -> bool {
        matches!(
            self,
            FilecoinError::Cache(_) | FilecoinError::Params(_) | FilecoinError::Setup(_)
        )
    }
}

/// Why a Filecoin proof could not be made.
#[derive(Debug, thiserror::Error)]
pub enum FilecoinError {
    #[error("sector size {0} has no Filecoin PoRep (valid: 2KiB, 8MiB, 512MiB, 32GiB, 64GiB)")]
    SectorSize(u64),
    #[error(transparent)]
    C1(#[from] c1::C1Error),
    #[error("the C1 output is not a {seal_proof} SealCommitPhase1Output: {reason}")]
    C1Shape {
        seal_proof: SealProof,
        reason: String,
    },
    #[error("the C1 output's {field}: {reason}")]
    C1Field { field: &'static str, reason: String },
    #[error("the PoSt input's {field}: {reason}")]
    PostField { field: &'static str, reason: String },
    #[error("the SnapDeals input's {field}: {reason}")]
    SnapField { field: &'static str, reason: String },
    #[error("the job's {field}: {reason}")]
    RequestField { field: &'static str, reason: String },
    #[error(
        "the C1 output is of a FORGED sector (test data: its ticket carries the forge's mark and no replica has its CommR); it is proved only where test parameters are allowed ([filecoin] allow_test_params, --allow-test-params)"
    )]
    ForgedTestData,
    #[error(
        "the C1 output is not for sector {sector_id} of prover {prover_id} ({seal_proof}): its replica id differs from the one those, its ticket and its CommD give (another sector's C1, or a wrong --sector-id / --prover-id / --registered-proof)"
    )]
    NotThisSector {
        sector_id: u64,
        prover_id: String,
        seal_proof: SealProof,
    },
    #[error(
        "the C1 output's vanilla proofs do not verify for {seal_proof} (the C1 output is altered or damaged)"
    )]
    VanillaInvalid { seal_proof: SealProof },
    #[error("the vanilla PoSt proofs are refused: {reason}")]
    VanillaPostInvalid { reason: String },
    #[error(
        "the SnapDeals vanilla proofs do not verify for {update_proof} with these commitments (CommR old, CommR new or CommD new is another sector's, or the proofs are altered or damaged)"
    )]
    VanillaSnapInvalid { update_proof: UpdateProof },
    #[error("{context}: {reason}")]
    ProofCrates {
        context: &'static str,
        reason: String,
    },
    #[error(transparent)]
    Cache(#[from] cache::CacheError),
    #[error(transparent)]
    Params(#[from] ParamsError),
    #[error(transparent)]
    Setup(#[from] SetupError),
    #[error(transparent)]
    Preflight(#[from] crate::setup::preflight::PreflightError),
    #[error("{path} exists: the parameter cache is never written over")]
    Exists { path: PathBuf },
    #[error("proving partition {partition}: {source}")]
    Prove {
        partition: usize,
        #[source]
        source: ProveError,
    },
    #[error(
        "partition {partition}'s proof does not verify against the parameters' verifying key; nothing was written"
    )]
    ProofRejected { partition: usize },
    #[error("synthesising partition {partition}: its thread panicked; nothing was written")]
    SynthesisPanicked { partition: usize },
}
