//! The build being rolled out, hashed on this machine.

use super::compress::CompressedOnce;
use super::outcome::Cause;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The build being rolled out, as it is on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    pub binary: PathBuf,
    /// Hex sha256 of the binary: the release id on every host.
    pub sha256: String,
    /// Daemon config shipped beside the binary as `prover.toml`; `None`
    /// keeps whatever config the host has at its `config_path`.
    pub config: Option<PathBuf>,
    /// The binary compressed for `upload`, made once and shared by every
    /// host's copy of this release.
    pub compressed: CompressedOnce,
}

impl Release {
    /// Checks the binary is a program ([`crate::input::check_elf`]) and
    /// hashes it; the config, if any, is checked to exist.
    pub fn from_files(binary: &Path, config: Option<&Path>) -> Result<Release, Cause> {
        crate::input::check_elf("binary", binary)?;
        let sha256 = sha256_file(binary)?;
        if let Some(config) = config {
            std::fs::metadata(config).map_err(|source| Cause::Local {
                path: config.to_owned(),
                source,
            })?;
        }
        Ok(Release {
            binary: binary.to_owned(),
            sha256,
            config: config.map(Path::to_owned),
            compressed: Default::default(),
        })
    }
}

/// Hex sha256 of a local file (the build, a config shipped with it),
/// streamed. Only a regular file: a FIFO would block the hash for good.
pub fn sha256_file(path: &Path) -> Result<String, Cause> {
    let local = |source| Cause::Local {
        path: path.to_owned(),
        source,
    };
    let (mut file, _) = crate::input::open_regular("local file", path).map_err(|e| match e {
        crate::input::InputError::Io { source, .. } => local(source),
        other => Cause::Input(other),
    })?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(local)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_regular_file_is_hashed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("prover.toml");
        std::fs::write(&file, b"abc").unwrap();
        assert_eq!(
            sha256_file(&file).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            sha256_file(dir.path()).unwrap_err().to_string(),
            format!(
                "local file {}: is a directory, not a regular file",
                dir.path().display()
            )
        );
        let missing = dir.path().join("absent");
        assert!(sha256_file(&missing)
            .unwrap_err()
            .to_string()
            .starts_with(&format!("local file {}: ", missing.display())));
    }
}
