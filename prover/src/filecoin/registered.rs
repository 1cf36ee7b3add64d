//! Filecoin's registered seal proofs: the name a node gives a sector's proof
//! type, and what it fixes (sector size, PoRep id, API version).
//!
//! The numbering is the chain's (`RegisteredSealProof` of the actors): the
//! V1 types 0..=4, the V1_1 types 5..=9, each in the order 2 KiB, 8 MiB,
//! 512 MiB, 32 GiB, 64 GiB. A PoRep id is that number as 8 little-endian bytes
//! followed by 24 zero bytes. Synthetic and non-interactive PoRep are not
//! accepted: their C2 output is not a plain concatenation of partition proofs.
//!
//! The sector sizes ([`SECTOR_SIZES`]) and their names are every kind's; a
//! kind whose proof types have a numbering of their own keeps it in its
//! module.

use std::fmt;
use std::str::FromStr;

use filecoin_proofs::constants::{
    SECTOR_SIZE_2_KIB, SECTOR_SIZE_32_GIB, SECTOR_SIZE_512_MIB, SECTOR_SIZE_64_GIB,
    SECTOR_SIZE_8_MIB,
};
use filecoin_proofs::PoRepConfig;
use storage_proofs_core::api_version::ApiVersion;

/// Sector sizes with a Filecoin PoRep, in ascending order, with their names.
pub const SECTOR_SIZES: [(u64, &str); 5] = [
    (SECTOR_SIZE_2_KIB, "2KiB"),
    (SECTOR_SIZE_8_MIB, "8MiB"),
    (SECTOR_SIZE_512_MIB, "512MiB"),
    (SECTOR_SIZE_32_GIB, "32GiB"),
    (SECTOR_SIZE_64_GIB, "64GiB"),
];

/// The two PoRep versions whose C2 output is the partitions' proofs concatenated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SealVersion {
    V1,
    V1_1,
}

/// One registered seal proof type, e.g. `StackedDrg2KiBV1_1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SealProof {
    pub sector_size: u64,
    pub version: SealVersion,
}

/// Why a seal proof name or sector size was refused.
///
/// Refusals name the cause, not the value given (it may be kilobytes long);
/// a proof type this prover knows and refuses is named, being one of ours.
#[derive(Debug, thiserror::Error)]
pub enum RegisteredError {
    #[error("unknown registered seal proof ({chars} characters): valid are {valid}")]
    UnknownName { chars: usize, valid: String },
    #[error(
        "registered seal proof `{name}` is a {feature}, which this prover refuses: its C2 output is not the partitions' proofs concatenated (valid are the V1 and V1_1 types, e.g. StackedDrg32GiBV1_1)"
    )]
    Unsupported { name: String, feature: &'static str },
    #[error(
        "unknown sector size ({chars} characters): valid are 2KiB, 8MiB, 512MiB, 32GiB, 64GiB"
    )]
    UnknownSize { chars: usize },
}

/// The suffixes filecoin-proofs-api gives the seal proof types this prover
/// refuses, after the sector size (`StackedDrg32GiBV1_1_Feat_SyntheticPoRep`).
const REFUSED_FEATURES: [(&str, &str); 2] = [
    ("V1_1_Feat_SyntheticPoRep", "synthetic PoRep"),
    ("V1_2_Feat_NonInteractivePoRep", "non-interactive PoRep"),
];

/// The refused feature `s` names, if it is one of a known sector size.
fn refused_feature(s: &str) -> Option<(String, &'static str)> {
    let rest = s.strip_prefix("StackedDrg")?;
    SECTOR_SIZES.iter().find_map(|(_, size)| {
        let suffix = rest.strip_prefix(size)?;
        REFUSED_FEATURES
            .iter()
            .find(|(name, _)| *name == suffix)
            .map(|(_, feature)| (s.to_string(), *feature))
    })
}

impl SealProof {
    /// Every accepted type.
    pub fn all() -> impl Iterator<Item = SealProof> {
        [SealVersion::V1, SealVersion::V1_1]
            .into_iter()
            .flat_map(|version| {
                SECTOR_SIZES
                    .into_iter()
                    .map(move |(sector_size, _)| SealProof {
                        sector_size,
                        version,
                    })
            })
    }

    /// The V1_1 type of a sector size (what nodes seal with today).
    pub fn current(sector_size: u64) -> Option<SealProof> {
        size_name(sector_size).map(|_| SealProof {
            sector_size,
            version: SealVersion::V1_1,
        })
    }

    /// The chain's number of this type.
    pub fn number(&self) -> u64 {
        let index = SECTOR_SIZES
            .iter()
            .position(|(s, _)| *s == self.sector_size)
            .unwrap_or(0) as u64;
        match self.version {
            SealVersion::V1 => index,
            SealVersion::V1_1 => 5 + index,
        }
    }

    pub fn porep_id(&self) -> [u8; 32] {
        let mut id = [0u8; 32];
        id[..8].copy_from_slice(&self.number().to_le_bytes());
        id
    }

    pub fn api_version(&self) -> ApiVersion {
        match self.version {
            SealVersion::V1 => ApiVersion::V1_0_0,
            SealVersion::V1_1 => ApiVersion::V1_1_0,
        }
    }

    /// filecoin-proofs' configuration of this type (partitions from its table).
    pub fn porep_config(&self) -> PoRepConfig {
        PoRepConfig::new_groth16(self.sector_size, self.porep_id(), self.api_version())
    }

    /// The sector size as Filecoin writes it (`2KiB`).
    pub fn size_name(&self) -> &'static str {
        size_name(self.sector_size).unwrap_or("?")
    }
}

impl fmt::Display for SealProof {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = match self.version {
            SealVersion::V1 => "V1",
            SealVersion::V1_1 => "V1_1",
        };
        write!(f, "StackedDrg{}{v}", self.size_name())
    }
}

impl FromStr for SealProof {
    type Err = RegisteredError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some((name, feature)) = refused_feature(s) {
            return Err(RegisteredError::Unsupported { name, feature });
        }
        find_by_name(SealProof::all, s)
            .map_err(|(chars, valid)| RegisteredError::UnknownName { chars, valid })
    }
}

/// The member of `all` whose name is `name`; else the name's length (never
/// the name itself: it is input) and the valid names, for the caller's
/// error. One rule for every proof numbering parsed by name.
pub(crate) fn find_by_name<T: fmt::Display, I: Iterator<Item = T>>(
    all: fn() -> I,
    name: &str,
) -> Result<T, (usize, String)> {
    all().find(|p| p.to_string() == name).ok_or_else(|| {
        let valid = all().map(|p| p.to_string()).collect::<Vec<_>>().join(", ");
        (name.chars().count(), valid)
    })
}

/// `2KiB` for 2048.
pub fn size_name(sector_size: u64) -> Option<&'static str> {
    SECTOR_SIZES
        .iter()
        .find(|(s, _)| *s == sector_size)
        .map(|(_, n)| *n)
}

/// 2048 for `2KiB` (also `2048`).
pub fn parse_sector_size(s: &str) -> Result<u64, RegisteredError> {
    SECTOR_SIZES
        .iter()
        .find(|(size, name)| *name == s || size.to_string() == s)
        .map(|(size, _)| *size)
        .ok_or_else(|| RegisteredError::UnknownSize {
            chars: s.chars().count(),
        })
}

/// The PoSt of `kind` over sectors of `sector_size`: one parameter set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PostSet {
    pub kind: PostKind,
    pub sector_size: u64,
}

/// Which PoSt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PostKind {
    Winning,
    Window,
}

impl PostKind {
    pub fn name(self) -> &'static str {
        self.job_kind().name()
    }

    /// The job kind of this PoSt (one list of names, in `fleet_wire`).
    pub fn job_kind(self) -> fleet_wire::api::FilecoinKind {
        match self {
            PostKind::Winning => fleet_wire::api::FilecoinKind::WinningPost,
            PostKind::Window => fleet_wire::api::FilecoinKind::WindowPost,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_name_is_refused_by_its_length_with_every_valid_name() {
        let hostile = "StackedDrg3KiBV1_1<script>";
        let e = hostile.parse::<SealProof>().expect_err("not a seal proof");
        let msg = e.to_string();
        assert!(msg.contains("26 characters"), "{msg}");
        assert!(!msg.contains("<script>"), "the input is echoed: {msg}");
        for p in SealProof::all() {
            assert!(msg.contains(&p.to_string()), "{p} missing: {msg}");
        }
    }

    #[test]
    fn names_numbers_and_porep_ids_follow_the_chain_table() {
        let p: SealProof = "StackedDrg2KiBV1_1".parse().expect("name");
        assert_eq!(p.sector_size, 2048);
        assert_eq!(p.number(), 5);
        assert_eq!(p.porep_id()[..8], 5u64.to_le_bytes());
        assert!(p.porep_id()[8..].iter().all(|b| *b == 0));
        let p: SealProof = "StackedDrg32GiBV1".parse().expect("name");
        assert_eq!(p.number(), 3);
        assert_eq!(SealProof::current(1 << 23).map(|p| p.number()), Some(6));
        for p in SealProof::all() {
            assert_eq!(p.to_string().parse::<SealProof>().expect("round trip"), p);
        }
        let err = "StackedDrg2KiBV1_2"
            .parse::<SealProof>()
            .expect_err("unknown");
        assert!(err.to_string().contains("StackedDrg64GiBV1_1"), "{err}");
        assert_eq!(parse_sector_size("8MiB").expect("size"), 1 << 23);
        assert!(parse_sector_size("4KiB").is_err());
    }

    #[test]
    fn synthetic_and_non_interactive_porep_are_refused_by_name() {
        for (name, says) in [
            ("StackedDrg32GiBV1_1_Feat_SyntheticPoRep", "synthetic PoRep"),
            (
                "StackedDrg2KiBV1_2_Feat_NonInteractivePoRep",
                "non-interactive PoRep",
            ),
        ] {
            let err = name.parse::<SealProof>().expect_err("refused");
            assert!(matches!(err, RegisteredError::Unsupported { .. }), "{err}");
            let text = err.to_string();
            assert!(text.contains(name) && text.contains(says), "{text}");
        }
        // Not a known size: an unknown name, not echoed.
        let err = "StackedDrg3KiBV1_1_Feat_SyntheticPoRep"
            .parse::<SealProof>()
            .expect_err("unknown");
        assert!(!err.to_string().contains("3KiB"), "{err}");
        let long = "x".repeat(49_000);
        assert!(
            long.parse::<SealProof>()
                .expect_err("unknown")
                .to_string()
                .len()
                < 400
        );
        assert!(
            parse_sector_size(&long)
                .expect_err("unknown")
                .to_string()
                .len()
                < 200
        );
    }
}
