//! Circuit ids as Curio names parameter sets (`porep-32g`, `wpost-32g`,
//! `winning-32g`, `snap-32g`; the test sizes `-2k`, `-8m`, `-512m`, and
//! `-64g`), resolved to the Filecoin parameter file that proves them.

use crate::filecoin::cache::CacheEntry;
use crate::filecoin::post::PostKind;
use crate::filecoin::registered::SECTOR_SIZES;
use crate::filecoin::{FilCircuit, FilecoinError, SealProof, UpdateProof};
use std::path::Path;

/// The suffix of each sector size, in [`SECTOR_SIZES`] order.
const SUFFIXES: [&str; 5] = ["2k", "8m", "512m", "32g", "64g"];

/// What a circuit id names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CircuitId {
    Porep(u64),
    WindowPost(u64),
    WinningPost(u64),
    Snap(u64),
}

#[derive(Debug, thiserror::Error)]
pub enum SrsError {
    #[error("circuit_id: unknown `{0}`: expected porep-, wpost-, winning- or snap- followed by 2k, 8m, 512m, 32g or 64g")]
    Unknown(String),
}

impl CircuitId {
    pub fn parse(id: &str) -> Result<CircuitId, SrsError> {
        let unknown = || {
            SrsError::Unknown(
                id.chars()
                    .take(64)
                    .collect::<String>()
                    .escape_debug()
                    .to_string(),
            )
        };
        let (kind, size) = id.rsplit_once('-').ok_or_else(unknown)?;
        let i = SUFFIXES
            .iter()
            .position(|s| *s == size)
            .ok_or_else(unknown)?;
        let bytes = SECTOR_SIZES[i].0;
        Ok(match kind {
            "porep" => CircuitId::Porep(bytes),
            "wpost" => CircuitId::WindowPost(bytes),
            "winning" => CircuitId::WinningPost(bytes),
            "snap" => CircuitId::Snap(bytes),
            _ => return Err(unknown()),
        })
    }

    /// Every id this daemon can load, in a stable order.
    pub fn all() -> impl Iterator<Item = CircuitId> {
        SECTOR_SIZES.into_iter().flat_map(|(s, _)| {
            [
                CircuitId::Porep(s),
                CircuitId::WindowPost(s),
                CircuitId::WinningPost(s),
                CircuitId::Snap(s),
            ]
        })
    }

    pub fn name(self) -> String {
        let (kind, size) = match self {
            CircuitId::Porep(s) => ("porep", s),
            CircuitId::WindowPost(s) => ("wpost", s),
            CircuitId::WinningPost(s) => ("winning", s),
            CircuitId::Snap(s) => ("snap", s),
        };
        let i = SECTOR_SIZES
            .iter()
            .position(|(b, _)| *b == size)
            .unwrap_or(0);
        format!("{kind}-{}", SUFFIXES[i])
    }

    /// The Filecoin circuit of this id (a PoRep's parameters are the same
    /// for V1 and V1_1: the current proof type names them).
    pub fn circuit(self) -> Result<Result<FilCircuit, FilecoinError>, SrsError> {
        Ok(match self {
            CircuitId::Porep(s) => SealProof::current(s)
                .map(FilCircuit::PoRep)
                .ok_or(FilecoinError::SectorSize(s)),
            CircuitId::WindowPost(s) => Ok(FilCircuit::Post(PostKind::Window, s)),
            CircuitId::WinningPost(s) => Ok(FilCircuit::Post(PostKind::Winning, s)),
            CircuitId::Snap(s) => UpdateProof::of_size(s)
                .map(FilCircuit::Snap)
                .ok_or(FilecoinError::SectorSize(s)),
        })
    }

    /// The parameter file of this circuit in `cache_dir`.
    pub fn cache_entry(
        self,
        cache_dir: &Path,
    ) -> Result<Result<CacheEntry, FilecoinError>, SrsError> {
        Ok(self
            .circuit()?
            .and_then(|c| crate::filecoin::kind::param_set(c).cache_entry(cache_dir)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_unknown_ones_are_named() {
        for id in CircuitId::all() {
            assert_eq!(CircuitId::parse(&id.name()).unwrap(), id);
        }
        assert_eq!(
            CircuitId::parse("porep-32g").unwrap(),
            CircuitId::Porep(32 << 30)
        );
        assert!(CircuitId::parse("porep-4k").is_err());
        assert!(CircuitId::parse("nope").is_err());
        let e = CircuitId::parse(&"x".repeat(10_000))
            .unwrap_err()
            .to_string();
        assert!(e.len() < 300, "{e}");
        let snap = CircuitId::Snap(2048)
            .cache_entry(Path::new("/nonexistent"))
            .expect("a known id")
            .expect("a cache entry");
        assert!(
            snap.params_name().contains("empty-sector-update"),
            "{}",
            snap.params_name()
        );
    }
}
