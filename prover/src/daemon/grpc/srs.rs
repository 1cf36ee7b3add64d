//! Circuit ids as Curio names parameter sets (`porep-32g`, `winning-2k`: a
//! kind's prefix, from the kind table [`crate::filecoin::kind::curio_circuit`],
//! then a sector size `2k`, `8m`, `512m`, `32g` or `64g`), resolved to the
//! Filecoin parameter file that proves them.

use crate::filecoin::cache::CacheEntry;
use crate::filecoin::kind;
use crate::filecoin::registered::SECTOR_SIZES;
use crate::filecoin::{FilCircuit, FilecoinError};
use std::path::Path;

/// The suffix of each sector size, in [`SECTOR_SIZES`] order.
const SUFFIXES: [&str; 5] = ["2k", "8m", "512m", "32g", "64g"];

/// What a circuit id names: a kind (its prefix in the kind table) and a
/// sector size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CircuitId {
    prefix: &'static str,
    sector_size: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum SrsError {
    #[error(
        "circuit_id: unknown `{0}`: expected {prefixes} followed by 2k, 8m, 512m, 32g or 64g",
        prefixes = expected_prefixes()
    )]
    Unknown(String),
}

/// The kinds' prefixes as the refusal lists them, in the kind table's
/// order: each with its `-`, the last after `or`.
fn expected_prefixes() -> String {
    let prefixes: Vec<String> = kind::curio_prefixes().map(|p| format!("{p}-")).collect();
    match prefixes.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => prefixes.concat(),
    }
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
        let prefix = kind::curio_prefixes()
            .find(|p| *p == kind)
            .ok_or_else(unknown)?;
        Ok(CircuitId {
            prefix,
            sector_size: SECTOR_SIZES[i].0,
        })
    }

    /// Every id this daemon can load, in a stable order.
    pub fn all() -> impl Iterator<Item = CircuitId> {
        SECTOR_SIZES.into_iter().flat_map(|(sector_size, _)| {
            kind::curio_prefixes().map(move |prefix| CircuitId {
                prefix,
                sector_size,
            })
        })
    }

    pub fn name(self) -> String {
        let i = SECTOR_SIZES
            .iter()
            .position(|(b, _)| *b == self.sector_size)
            .unwrap_or(0);
        format!("{}-{}", self.prefix, SUFFIXES[i])
    }

    /// The Filecoin circuit of this id.
    pub fn circuit(self) -> Result<Result<FilCircuit, FilecoinError>, SrsError> {
        kind::curio_circuit(self.prefix, self.sector_size)
            .ok_or_else(|| SrsError::Unknown(self.name()))
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
    use crate::filecoin::SealProof;

    #[test]
    fn ids_round_trip_and_unknown_ones_are_named() {
        for id in CircuitId::all() {
            assert_eq!(CircuitId::parse(&id.name()).unwrap(), id);
        }
        let porep = CircuitId::parse("porep-32g").unwrap();
        assert_eq!(
            porep.circuit().unwrap().unwrap(),
            FilCircuit::PoRep(SealProof::current(32 << 30).unwrap())
        );
        assert!(CircuitId::parse("porep-4k").is_err());
        assert!(CircuitId::parse("nope").is_err());
        let e = CircuitId::parse(&"x".repeat(10_000))
            .unwrap_err()
            .to_string();
        assert!(e.len() < 300, "{e}");
        // Curio sees this text; the kinds' list comes from the kind table.
        assert_eq!(
            CircuitId::parse("wpost-3g").unwrap_err().to_string(),
            "circuit_id: unknown `wpost-3g`: expected porep-, wpost-, winning- or snap- followed by 2k, 8m, 512m, 32g or 64g"
        );
        let entry = CircuitId::parse("winning-2k")
            .unwrap()
            .cache_entry(Path::new("/nonexistent"))
            .expect("a known id")
            .expect("a cache entry");
        assert!(
            entry.params_name().contains("proof-of-spacetime-fallback"),
            "{}",
            entry.params_name()
        );
    }
}
