//! Where a command writes its result (`--out`, `--report`), checked before
//! any proving: a missing folder would only show once the proof is made
//! (and lost), and an output that is one of the inputs would overwrite it.

use std::path::{Path, PathBuf};

/// Why an output path is refused.
#[derive(Debug, thiserror::Error)]
pub enum OutPathError {
    #[error("{flag} {path}: the folder {dir} does not exist (nothing was proven)")]
    NoFolder {
        flag: &'static str,
        path: PathBuf,
        dir: PathBuf,
    },
    #[error("{flag} {path} is a folder, not a file")]
    IsFolder { flag: &'static str, path: PathBuf },
    #[error("{flag} {path} is the input {input_flag}: it would be overwritten")]
    IsInput {
        flag: &'static str,
        path: PathBuf,
        input_flag: &'static str,
    },
    #[error("{flag} and {other} name the same file {path}")]
    Twice {
        flag: &'static str,
        other: &'static str,
        path: PathBuf,
    },
}

/// The file `path` names, resolved through its folder (which must exist):
/// two spellings of one file compare equal, whether or not it exists yet.
fn resolved(flag: &'static str, path: &Path) -> Result<PathBuf, OutPathError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let no_folder = || OutPathError::NoFolder {
        flag,
        path: path.to_owned(),
        dir: dir.to_owned(),
    };
    let dir = std::fs::canonicalize(dir).map_err(|_| no_folder())?;
    if !dir.is_dir() {
        return Err(no_folder());
    }
    let Some(name) = path.file_name() else {
        return Err(OutPathError::IsFolder {
            flag,
            path: path.to_owned(),
        });
    };
    let full = dir.join(name);
    // A link to the input (or an existing name for it) resolves to it.
    Ok(std::fs::canonicalize(&full).unwrap_or(full))
}

/// Checks `outputs` (flag, path) against `inputs` (flag, path; `-` is
/// standard input and never a file) and each other.
pub fn check(
    outputs: &[(&'static str, Option<&Path>)],
    inputs: &[(&'static str, &Path)],
) -> Result<(), OutPathError> {
    let inputs: Vec<(&'static str, PathBuf)> = inputs
        .iter()
        .filter(|(_, p)| *p != Path::new("-"))
        .filter_map(|(f, p)| std::fs::canonicalize(p).ok().map(|c| (*f, c)))
        .collect();
    let mut seen: Vec<(&'static str, PathBuf)> = Vec::new();
    for (flag, path) in outputs {
        let Some(path) = path else { continue };
        let full = resolved(flag, path)?;
        if full.is_dir() {
            return Err(OutPathError::IsFolder {
                flag,
                path: path.to_path_buf(),
            });
        }
        if let Some((input_flag, _)) = inputs.iter().find(|(_, p)| *p == full) {
            return Err(OutPathError::IsInput {
                flag,
                path: path.to_path_buf(),
                input_flag,
            });
        }
        if let Some((other, _)) = seen.iter().find(|(_, p)| *p == full) {
            return Err(OutPathError::Twice {
                flag,
                other,
                path: path.to_path_buf(),
            });
        }
        seen.push((flag, full));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_are_refused_in_a_missing_folder_over_an_input_or_twice() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c1 = dir.path().join("c1.json");
        std::fs::write(&c1, b"{}").expect("write");
        let inputs = [("--c1", c1.as_path())];
        let missing = dir.path().join("no/such/proof");
        let err = check(&[("--out", Some(&missing))], &inputs).expect_err("no folder");
        assert!(matches!(err, OutPathError::NoFolder { .. }), "{err}");
        let err = check(&[("--out", Some(&c1))], &inputs).expect_err("the input");
        assert!(matches!(err, OutPathError::IsInput { .. }), "{err}");
        // Another spelling of the same file.
        let other = dir.path().join(".").join("c1.json");
        assert!(check(&[("--out", Some(&other))], &inputs).is_err());
        let proof = dir.path().join("proof");
        let err = check(
            &[("--out", Some(&proof)), ("--report", Some(&proof))],
            &inputs,
        )
        .expect_err("twice");
        assert!(matches!(err, OutPathError::Twice { .. }), "{err}");
        let err = check(&[("--out", Some(dir.path()))], &inputs).expect_err("folder");
        assert!(matches!(err, OutPathError::IsFolder { .. }), "{err}");
        check(
            &[("--out", Some(&proof)), ("--report", None)],
            &[("--c1", Path::new("-"))],
        )
        .expect("a new file in an existing folder");
    }
}
