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
    /// Hex sha256 of the binary: what the host's copy is checked against.
    pub binary_sha256: String,
    /// The release id on the host, its folder under `releases/`: covers the
    /// binary and the config shipped with it ([`release_id`]). A release is
    /// immutable on a host: a changed config is a new release, staged and
    /// checked beside the serving one.
    pub id: String,
    /// Daemon config shipped beside the binary as `prover.toml`; `None`
    /// keeps whatever config the host has at its `config_path`.
    pub config: Option<PathBuf>,
    /// Hex sha256 of `config`, hashed once when the release was made.
    pub config_sha256: Option<String>,
    /// The binary compressed for `upload`, made once and shared by every
    /// host's copy of this release.
    pub compressed: CompressedOnce,
}

/// The id of a release: the binary's sha256 alone when no config is
/// shipped (so a binary-only release keeps the id it always had), else the
/// sha256 of both files' names and sums, one line each
/// (`prover <sha>\nprover.toml <sha>\n`). Either way 64 lowercase hex
/// digits, the form the host-side release checks accept (`remote`).
pub fn release_id(binary_sha256: &str, config_sha256: Option<&str>) -> String {
    match config_sha256 {
        None => binary_sha256.to_owned(),
        Some(config) => {
            let mut hasher = Sha256::new();
            hasher.update(format!("prover {binary_sha256}\nprover.toml {config}\n"));
            hex::encode(hasher.finalize())
        }
    }
}

impl Release {
    /// Checks the binary is a program ([`crate::input::check_elf`]) and
    /// hashes it and the config, if any.
    pub fn from_files(binary: &Path, config: Option<&Path>) -> Result<Release, Cause> {
        crate::input::check_elf("binary", binary)?;
        let sha256 = sha256_file(binary)?;
        Release::shipped(binary, sha256, config, Default::default())
    }

    /// The release a run ships to a host: the build (hashed once per run)
    /// and the host's config file, hashed here.
    pub fn shipped(
        binary: &Path,
        binary_sha256: String,
        config: Option<&Path>,
        compressed: CompressedOnce,
    ) -> Result<Release, Cause> {
        let config_sha256 = config.map(sha256_file).transpose()?;
        Ok(Release {
            binary: binary.to_owned(),
            id: release_id(&binary_sha256, config_sha256.as_deref()),
            binary_sha256,
            config: config.map(Path::to_owned),
            config_sha256,
            compressed,
        })
    }

    /// A release already on the host (nothing is shipped): the steps act on
    /// the folder `id` names; empty when there is none.
    pub fn on_host(id: String, config: Option<PathBuf>) -> Release {
        Release {
            binary: PathBuf::new(),
            binary_sha256: String::new(),
            id,
            config,
            config_sha256: None,
            compressed: Default::default(),
        }
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
    fn a_release_id_covers_the_config_shipped_with_the_binary() {
        let bin = "ab".repeat(32);
        // Without a config: the binary's own sum, as before configs counted.
        assert_eq!(release_id(&bin, None), bin);
        let one = release_id(&bin, Some(&"01".repeat(32)));
        let two = release_id(&bin, Some(&"02".repeat(32)));
        assert_ne!(one, two, "a changed config is a new release");
        assert_ne!(one, bin);
        assert!(
            one.len() == 64
                && one
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
            "{one}"
        );
        assert_eq!(one, release_id(&bin, Some(&"01".repeat(32))));
    }

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
