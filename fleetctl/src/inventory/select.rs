//! `--limit`: pick hosts by name, group, `tag:NAME`, glob or `@FILE` (a
//! retry file), separated by `,` or `:` as Ansible writes them; `!PATTERN`
//! leaves hosts out and `&PATTERN` keeps only those it matches.

use super::resolve::ResolvedInventory;
use super::retry;
use crate::input::InputError;
use std::path::Path;

/// A `--limit` that picked nothing, or a pattern that is not a valid glob.
#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    #[error("--limit {pattern:?}: {reason}\n  hosts: {hosts}\n  groups: {groups}\n  tags: {tags}")]
    NoMatch {
        pattern: String,
        reason: String,
        hosts: String,
        groups: String,
        tags: String,
    },
    #[error("--limit {pattern:?}: not a valid glob: {source}")]
    Glob {
        pattern: String,
        #[source]
        source: glob::PatternError,
    },
    #[error("{file}: no hosts in the inventory")]
    Empty { file: String },
    #[error("--limit {pattern:?}: {}", NO_PATTERN)]
    NoPattern { pattern: String },
    #[error("--limit @FILE: {0}")]
    RetryFile(#[source] InputError),
    #[error("--limit @{file}:{line}: `{name}` is no host of the inventory (hosts: {hosts})")]
    RetryHost {
        file: String,
        line: u64,
        name: String,
        hosts: String,
    },
    #[error("--limit @{file}: names no host")]
    RetryEmpty { file: String },
}

/// The patterns of a `--limit`, separated as Ansible separates them: by `,`
/// or by `:` (`all:!h3`, `lab:&h1`). A `:` does not separate inside a glob's
/// `[...]`, after `tag` (`tag:NAME`, fleetctl's own form) or in `@FILE`,
/// which runs to the next `,`.
pub fn patterns(limit: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut depth) = (0, 0usize);
    for (i, c) in limit.char_indices() {
        let token = limit[start..i].trim_start();
        let colon_ends = |t: &str| {
            let bare = t.trim_start_matches(['!', '&']).trim();
            bare != "tag" && !bare.starts_with('@')
        };
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' | ':' if depth == 0 && (c == ',' || colon_ends(token)) => {
                out.push(limit[start..i].trim());
                start = i + c.len_utf8();
                depth = 0;
            }
            _ => {}
        }
    }
    out.push(limit[start..].trim());
    out.retain(|p| !p.is_empty());
    out
}

/// What is wrong with a `--limit` of no pattern.
pub const NO_PATTERN: &str =
    "no host pattern in it; leave --limit out (or write `all`) to act on every host";

/// A `--limit` must name at least one pattern. An empty one (`--limit ''`,
/// an unset variable in a script, only commas) said nothing about which
/// hosts were meant, and was taken as every host. Checked by the command
/// line (as a usage error) and again by [`select`], for other callers.
pub fn check_limit(limit: &str) -> Result<(), SelectError> {
    if patterns(limit).is_empty() {
        return Err(SelectError::NoPattern {
            pattern: limit.to_owned(),
        });
    }
    Ok(())
}

/// Indices (inventory order) of the hosts `limit` selects; `None` or `all`
/// selects every host, a limit without a pattern none ([`check_limit`]). Every comma-separated pattern must match something,
/// so a typo is an error rather than a smaller rollout.
pub fn select(inv: &ResolvedInventory, limit: Option<&str>) -> Result<Vec<usize>, SelectError> {
    if inv.hosts.is_empty() {
        return Err(SelectError::Empty {
            file: inv.file.clone(),
        });
    }
    if let Some(l) = limit {
        check_limit(l)?;
    }
    let Some(limit) = limit.map(str::trim).filter(|l| *l != "all") else {
        return Ok((0..inv.hosts.len()).collect());
    };
    // As Ansible reads it: the union of the plain patterns (every host when
    // there are only `!` ones), narrowed by each `&PATTERN`, less each `!PATTERN`.
    let n = inv.hosts.len();
    let (mut union, mut any_plain) = (vec![false; n], false);
    let (mut within, mut without) = (vec![true; n], vec![false; n]);
    for pattern in patterns(limit) {
        let (kind, bare) = match pattern.as_bytes()[0] {
            b'!' => ('!', pattern[1..].trim()),
            b'&' => ('&', pattern[1..].trim()),
            _ => (' ', pattern),
        };
        let hits = if bare.is_empty() {
            Vec::new()
        } else if let Some(file) = bare.strip_prefix('@') {
            retry_hosts(inv, Path::new(file.trim()))?
        } else {
            matches(inv, bare)?
        };
        if hits.is_empty() {
            return Err(no_match(
                inv,
                limit,
                &format!("`{pattern}` matches no host, group or tag"),
            ));
        }
        match kind {
            '!' => hits.iter().for_each(|&i| without[i] = true),
            '&' => {
                let mut keep = vec![false; n];
                hits.iter().for_each(|&i| keep[i] = true);
                (0..n).for_each(|i| within[i] &= keep[i]);
            }
            _ => {
                any_plain = true;
                hits.iter().for_each(|&i| union[i] = true);
            }
        }
    }
    let out: Vec<usize> = (0..n)
        .filter(|&i| (union[i] || !any_plain) && within[i] && !without[i])
        .collect();
    if out.is_empty() {
        return Err(no_match(inv, limit, "selects no host"));
    }
    Ok(out)
}

/// The hosts a retry file names; each name must be a host of the
/// inventory (a name from another inventory is a mistake worth stopping
/// for, not a host to drop silently).
fn retry_hosts(inv: &ResolvedInventory, file: &Path) -> Result<Vec<usize>, SelectError> {
    let names = retry::read(file).map_err(SelectError::RetryFile)?;
    let mut hits = Vec::new();
    for (line, name) in names {
        match inv.hosts.iter().position(|h| h.host.name == name) {
            Some(i) => hits.push(i),
            None => {
                return Err(SelectError::RetryHost {
                    file: file.display().to_string(),
                    line,
                    // The file is not ours: never repeat a long line whole.
                    name: name.chars().take(64).collect(),
                    hosts: inv
                        .hosts
                        .iter()
                        .map(|h| h.host.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
        }
    }
    if hits.is_empty() {
        return Err(SelectError::RetryEmpty {
            file: file.display().to_string(),
        });
    }
    Ok(hits)
}

fn matches(inv: &ResolvedInventory, pattern: &str) -> Result<Vec<usize>, SelectError> {
    let hosts = &inv.hosts;
    if pattern == "all" && !inv.groups.iter().any(|(g, _)| g == "all") {
        return Ok((0..hosts.len()).collect());
    }
    if let Some(tag) = pattern.strip_prefix("tag:") {
        return Ok((0..hosts.len())
            .filter(|&i| hosts[i].host.tags.iter().any(|t| t == tag))
            .collect());
    }
    if let Some((_, members)) = inv.groups.iter().find(|(g, _)| g == pattern) {
        return Ok((0..hosts.len())
            .filter(|&i| members.contains(&hosts[i].host.name))
            .collect());
    }
    if pattern.contains(['*', '?', '[']) {
        let glob = glob::Pattern::new(pattern).map_err(|source| SelectError::Glob {
            pattern: pattern.to_string(),
            source,
        })?;
        return Ok((0..hosts.len())
            .filter(|&i| glob.matches(&hosts[i].host.name))
            .collect());
    }
    Ok((0..hosts.len())
        .filter(|&i| hosts[i].host.name == pattern)
        .collect())
}

fn no_match(inv: &ResolvedInventory, pattern: &str, reason: &str) -> SelectError {
    let mut tags: Vec<&str> = inv
        .hosts
        .iter()
        .flat_map(|h| h.host.tags.iter().map(String::as_str))
        .collect();
    tags.sort_unstable();
    tags.dedup();
    let none = |s: String| {
        if s.is_empty() {
            "(none)".to_string()
        } else {
            s
        }
    };
    SelectError::NoMatch {
        pattern: pattern.to_string(),
        reason: reason.to_string(),
        hosts: none(
            inv.hosts
                .iter()
                .map(|h| h.host.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        ),
        groups: none(
            inv.groups
                .iter()
                .map(|(g, _)| g.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        ),
        tags: none(tags.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::{raw, resolve};
    use std::path::{Path, PathBuf};

    fn inv() -> ResolvedInventory {
        let text = "
groups:
  gpu: { hosts: [gpu-01, gpu-02], children: [canary] }
  canary: { hosts: [gpu-03] }
  cpu: { hosts: [cpu-01] }
hosts:
  gpu-01: { tags: [canary] }
  gpu-02: {}
  gpu-03: {}
  gpu-10: {}
  cpu-01: {}
";
        let raw = raw::parse(Path::new("i.yaml"), text).unwrap();
        let bases = resolve::Bases {
            file: "i.yaml".into(),
            inventory_dir: PathBuf::from("/"),
            cwd: PathBuf::from("/"),
        };
        resolve::resolve(&raw, &bases, &[]).unwrap()
    }

    fn names(limit: Option<&str>) -> Vec<String> {
        let inv = inv();
        select(&inv, limit)
            .unwrap()
            .into_iter()
            .map(|i| inv.hosts[i].host.name.clone())
            .collect()
    }

    #[test]
    fn selects_by_name_group_tag_glob_in_inventory_order() {
        assert_eq!(names(None).len(), 5);
        assert_eq!(names(Some("all")).len(), 5);
        assert_eq!(names(Some("gpu-02")), vec!["gpu-02"]);
        assert_eq!(
            names(Some("gpu")),
            vec!["gpu-01", "gpu-02", "gpu-03"],
            "children included"
        );
        assert_eq!(names(Some("tag:canary")), vec!["gpu-01"]);
        assert_eq!(names(Some("gpu-0*")), vec!["gpu-01", "gpu-02", "gpu-03"]);
        assert_eq!(names(Some("cpu-01, gpu-1?")), vec!["gpu-10", "cpu-01"]);
        assert_eq!(names(Some("canary,gpu-03")), vec!["gpu-03"]);
    }

    #[test]
    fn a_limit_without_a_pattern_is_refused_not_taken_as_every_host() {
        for empty in ["", "  ", ",", " , ,\t"] {
            let e = select(&inv(), Some(empty)).unwrap_err().to_string();
            assert_eq!(e, format!("--limit {empty:?}: {NO_PATTERN}"));
        }
        assert_eq!(names(Some(" all ")).len(), 5);
        assert_eq!(names(None).len(), 5);
    }

    #[test]
    fn exclusions_and_intersections_as_ansible_writes_them() {
        assert_eq!(names(Some("gpu,!gpu-02")), vec!["gpu-01", "gpu-03"]);
        assert_eq!(
            names(Some("!gpu-02, gpu")),
            vec!["gpu-01", "gpu-03"],
            "order does not matter"
        );
        assert_eq!(
            names(Some("!gpu")),
            vec!["gpu-10", "cpu-01"],
            "only exclusions: from all"
        );
        assert_eq!(
            names(Some("all,!tag:canary,!cpu")),
            vec!["gpu-02", "gpu-03", "gpu-10"]
        );
        assert_eq!(names(Some("gpu-0*,&gpu,!canary")), vec!["gpu-01", "gpu-02"]);
        assert_eq!(names(Some("gpu-*,&tag:canary")), vec!["gpu-01"]);
        let inv = inv();
        let e = select(&inv, Some("gpu,!gpu-99")).unwrap_err().to_string();
        assert!(e.contains("`!gpu-99` matches no host"), "{e}");
        let e = select(&inv, Some("gpu,!gpu")).unwrap_err().to_string();
        assert!(e.contains("selects no host"), "{e}");
        assert!(select(&inv, Some("gpu,!")).is_err(), "a bare ! is a typo");
    }

    /// Regression (issue 51, item 12): Ansible's colon forms.
    #[test]
    fn ansible_colon_forms_select_as_their_comma_forms() {
        assert_eq!(names(Some("all:!gpu-02")), names(Some("all,!gpu-02")));
        assert_eq!(names(Some("all:!gpu-02")).len(), 4);
        assert_eq!(names(Some("gpu:&tag:canary")), vec!["gpu-01"]);
        assert_eq!(names(Some("gpu:&gpu-01")), vec!["gpu-01"]);
        assert_eq!(
            names(Some("gpu:cpu:!canary")),
            vec!["gpu-01", "gpu-02", "cpu-01"]
        );
        assert_eq!(
            names(Some("!canary:gpu")),
            vec!["gpu-01", "gpu-02"],
            "order does not matter"
        );
        assert_eq!(names(Some("tag:canary:gpu-02")), vec!["gpu-01", "gpu-02"]);
        assert_eq!(
            names(Some("gpu-0[1:2]")).len(),
            2,
            "a colon in a glob class"
        );
        assert_eq!(patterns("a: b ,:c"), vec!["a", "b", "c"]);
        assert_eq!(patterns("@x:y.retry,h"), vec!["@x:y.retry", "h"]);
        assert!(check_limit("::").is_err());
    }

    #[test]
    fn a_retry_file_selects_its_hosts_and_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("site.retry");
        std::fs::write(&f, "gpu-03\ncpu-01\n").unwrap();
        let at = format!("@{}", f.display());
        assert_eq!(names(Some(&at)), vec!["gpu-03", "cpu-01"]);
        assert_eq!(names(Some(&format!("{at},!cpu-01"))), vec!["gpu-03"]);
        std::fs::write(&f, "gpu-03\ngpu-99\n").unwrap();
        let e = select(&inv(), Some(&at)).unwrap_err().to_string();
        assert!(e.contains("site.retry:2: `gpu-99` is no host"), "{e}");
        std::fs::write(&f, "\n").unwrap();
        let e = select(&inv(), Some(&at)).unwrap_err().to_string();
        assert!(e.ends_with("names no host"), "{e}");
        std::fs::write(&f, vec![b'a'; retry::MAX_BYTES as usize + 1]).unwrap();
        let e = select(&inv(), Some(&at)).unwrap_err().to_string();
        assert!(e.contains("more than the 1048576 allowed"), "{e}");
    }

    #[test]
    fn a_pattern_matching_nothing_is_an_error_listing_what_exists() {
        let inv = inv();
        let e = select(&inv, Some("gpu-01,gpu-9*")).unwrap_err().to_string();
        assert!(e.contains("`gpu-9*` matches no host, group or tag"), "{e}");
        assert!(e.contains("groups: gpu, canary, cpu"), "{e}");
        assert!(e.contains("tags: canary"), "{e}");
        let e = select(&inv, Some("tag:nope")).unwrap_err().to_string();
        assert!(e.contains("matches no host"), "{e}");
        assert!(select(&inv, Some("gpu-[")).is_err());
    }
}
