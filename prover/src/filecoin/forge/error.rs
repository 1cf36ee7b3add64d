//! Why a C1 output could not be forged: its own module, so that the
//! forge's parts ([`super::columns`], [`super::sparse`]) name it without
//! naming the forge that uses them.

use crate::filecoin::bounded_reason;
use crate::filecoin::registered::SealProof;

/// Why a C1 output could not be forged.
#[derive(Debug, thiserror::Error)]
pub enum ForgeError {
    #[error("sector size {0} has no Filecoin PoRep (valid: 2KiB, 8MiB, 512MiB, 32GiB, 64GiB)")]
    SectorSize(u64),
    #[error("{seal_proof} does not derive its challenges interactively; only V1 and V1_1 PoRep can be forged")]
    NotInteractive { seal_proof: SealProof },
    #[error("{context}: {reason}")]
    ProofCrates {
        context: &'static str,
        reason: String,
    },
    /// A forged C1 output the crates refuse: a bug here, never the input's.
    #[error("the forged {seal_proof} C1 output does not pass the crates' vanilla verification")]
    NotVerified { seal_proof: SealProof },
    /// An inconsistency of this module's own (a bug), named.
    #[error("forging the C1 output: {0}")]
    Internal(String),
    #[error("writing the C1 output as JSON: {0}")]
    Json(#[from] serde_json::Error),
}

impl ForgeError {
    pub(super) fn crates(context: &'static str, e: &anyhow::Error) -> Self {
        ForgeError::ProofCrates {
            context,
            reason: bounded_reason(&format!("{e:#}")),
        }
    }
}
