//! SnapDeals' registered update proof types: one per sector size, with a
//! numbering of their own (filecoin-proofs-api's `RegisteredUpdateProof`,
//! which Curio's requests carry): `StackedDrg2KiBV1` .. `StackedDrg64GiBV1`
//! are 0..=4, in the order of [`SECTOR_SIZES`]. They live with the kind
//! that proves them; `crate::filecoin` re-exports [`UpdateProof`].

use std::fmt;
use std::str::FromStr;

use filecoin_proofs::PoRepConfig;
use storage_proofs_core::api_version::ApiVersion;

use crate::filecoin::registered::{find_by_name, size_name, SECTOR_SIZES};

/// Why an update proof name or number was refused; the value given is not
/// echoed (it may be kilobytes long).
#[derive(Debug, thiserror::Error)]
pub enum UpdateProofError {
    #[error("unknown registered update proof number {number}: valid are 0 (StackedDrg2KiBV1) to 4 (StackedDrg64GiBV1)")]
    UnknownNumber { number: u64 },
    #[error("unknown registered update proof ({chars} characters): valid are {valid}, or their numbers 0 to 4")]
    UnknownName { chars: usize, valid: String },
}

/// A registered SnapDeals update proof type, e.g. `StackedDrg32GiBV1`: one
/// per sector size, numbered as filecoin-proofs-api's
/// `RegisteredUpdateProof` (and the chain's actors) number them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UpdateProof {
    pub sector_size: u64,
}

impl UpdateProof {
    /// Every type, in the order of their numbers.
    pub fn all() -> impl Iterator<Item = UpdateProof> {
        SECTOR_SIZES
            .into_iter()
            .map(|(sector_size, _)| UpdateProof { sector_size })
    }

    /// The type of a sector size.
    pub fn of_size(sector_size: u64) -> Option<UpdateProof> {
        size_name(sector_size).map(|_| UpdateProof { sector_size })
    }

    /// The type numbered `number` (0 for 2 KiB .. 4 for 64 GiB).
    pub fn from_number(number: u64) -> Result<UpdateProof, UpdateProofError> {
        usize::try_from(number)
            .ok()
            .and_then(|i| SECTOR_SIZES.get(i))
            .map(|(sector_size, _)| UpdateProof {
                sector_size: *sector_size,
            })
            .ok_or(UpdateProofError::UnknownNumber { number })
    }

    /// Its number.
    pub fn number(&self) -> u64 {
        SECTOR_SIZES
            .iter()
            .position(|(s, _)| *s == self.sector_size)
            .unwrap_or(0) as u64
    }

    /// The sector size as Filecoin writes it (`2KiB`).
    pub fn size_name(&self) -> &'static str {
        size_name(self.sector_size).unwrap_or("?")
    }

    /// The PoRep configuration filecoin-proofs' update functions take, as
    /// filecoin-proofs-api's `as_v1_config` builds it (API 1.2, the PoRep id
    /// the type's number). The update reads only its sector size.
    pub fn porep_config(&self) -> PoRepConfig {
        let mut porep_id = [0u8; 32];
        porep_id[..8].copy_from_slice(&self.number().to_le_bytes());
        PoRepConfig::new_groth16(self.sector_size, porep_id, ApiVersion::V1_2_0)
    }
}

/// Written and read as its name (`StackedDrg32GiBV1`).
impl serde::Serialize for UpdateProof {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for UpdateProof {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for UpdateProof {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StackedDrg{}V1", self.size_name())
    }
}

impl FromStr for UpdateProof {
    type Err = UpdateProofError;

    /// A name (`StackedDrg2KiBV1`) or a number (`0`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Ok(number) = s.parse::<u64>() {
            return UpdateProof::from_number(number);
        }
        find_by_name(UpdateProof::all, s)
            .map_err(|(chars, valid)| UpdateProofError::UnknownName { chars, valid })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_name_is_refused_by_its_length_with_every_valid_name() {
        let e = "StackedDrg3KiBV1<script>"
            .parse::<UpdateProof>()
            .expect_err("not an update proof");
        let msg = e.to_string();
        assert!(msg.contains("24 characters"), "{msg}");
        assert!(!msg.contains("<script>"), "the input is echoed: {msg}");
        for p in UpdateProof::all() {
            assert!(msg.contains(&p.to_string()), "{p} missing: {msg}");
        }
    }

    #[test]
    fn update_proofs_follow_filecoin_proofs_api_numbering() {
        let names: Vec<(u64, String, u64)> = UpdateProof::all()
            .map(|p| (p.number(), p.to_string(), p.sector_size))
            .collect();
        assert_eq!(
            names,
            [
                (0, "StackedDrg2KiBV1".to_string(), 2048),
                (1, "StackedDrg8MiBV1".to_string(), 8 << 20),
                (2, "StackedDrg512MiBV1".to_string(), 512 << 20),
                (3, "StackedDrg32GiBV1".to_string(), 32 << 30),
                (4, "StackedDrg64GiBV1".to_string(), 64 << 30),
            ]
        );
        for p in UpdateProof::all() {
            assert_eq!(UpdateProof::from_number(p.number()).expect("number"), p);
            assert_eq!(p.to_string().parse::<UpdateProof>().expect("name"), p);
            assert_eq!(p.number().to_string().parse::<UpdateProof>().expect("n"), p);
            assert_eq!(u64::from(p.porep_config().sector_size), p.sector_size);
        }
        assert_eq!(UpdateProof::of_size(32 << 30).map(|p| p.number()), Some(3));
        assert!(UpdateProof::of_size(4096).is_none());
        let err = UpdateProof::from_number(5).expect_err("5");
        assert!(err.to_string().contains("number 5"), "{err}");
        // A seal proof's name is not an update proof's.
        let err = "StackedDrg2KiBV1_1"
            .parse::<UpdateProof>()
            .expect_err("seal");
        assert!(err.to_string().contains("StackedDrg64GiBV1"), "{err}");
        let long = "y".repeat(10_000);
        let err = long.parse::<UpdateProof>().expect_err("long");
        assert!(err.to_string().len() < 300 && !err.to_string().contains("yyy"));
    }
}
