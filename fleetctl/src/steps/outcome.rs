//! How a step ends: done, forced or skipped, or failed with a [`Cause`] and
//! what the failure kept intact.

use crate::transport::{QuoteError, TransportError};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// How a step ended when it did not fail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum StepOutcome {
    Done {
        detail: String,
    },
    /// Done, but only by force: `flag` is the word the final table puts in
    /// the step's cell (`SIGKILL`), because a forced drain may have cut
    /// proofs short and the detail line alone scrolls by unseen.
    Forced {
        detail: String,
        flag: String,
    },
    Skipped {
        reason: String,
    },
}

impl StepOutcome {
    pub fn done(detail: impl Into<String>) -> StepOutcome {
        StepOutcome::Done {
            detail: detail.into(),
        }
    }
    pub fn forced(flag: impl Into<String>, detail: impl Into<String>) -> StepOutcome {
        StepOutcome::Forced {
            detail: detail.into(),
            flag: flag.into(),
        }
    }
    /// What the step did or why it was skipped, in words.
    pub fn text(&self) -> &str {
        match self {
            StepOutcome::Done { detail } | StepOutcome::Forced { detail, .. } => detail,
            StepOutcome::Skipped { reason } => reason,
        }
    }
    pub fn skipped(reason: impl Into<String>) -> StepOutcome {
        StepOutcome::Skipped {
            reason: reason.into(),
        }
    }
}

/// Why a step failed, before the host and step are attached.
#[derive(Debug, thiserror::Error)]
pub enum Cause {
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error(transparent)]
    Quote(#[from] QuoteError),
    /// A check on the host did not pass; the text has the numbers seen.
    #[error("{0}")]
    Check(String),
    #[error(transparent)]
    Input(#[from] crate::input::InputError),
    #[error("local file {}: {source}", path.display())]
    Local {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A failed step on one host.
#[derive(Debug, thiserror::Error)]
#[error("{host}: step {step} failed: {cause}; kept intact: {kept}")]
pub struct StepError {
    pub host: String,
    pub step: &'static str,
    #[source]
    pub cause: Cause,
    /// What the failure left untouched (the operator's starting point).
    pub kept: String,
}

/// A step's failure: the cause and what it kept intact.
pub type Failed = (Cause, String);

/// Attaches what was kept intact to any cause.
pub(crate) fn kept<T, E: Into<Cause>>(r: Result<T, E>, kept: &str) -> Result<T, Failed> {
    r.map_err(|e| (e.into(), kept.to_owned()))
}
