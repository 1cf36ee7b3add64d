//! `docs/ARCHITECTURE.md` names only files and folders that exist.
//!
//! Two kinds of names are checked. In the folder tree (the fenced block
//! under "Folder tree"), the first word of each line is an entry, placed by
//! its indentation under the crate folder or the entry above it, and must
//! exist at exactly that path; every other file name on the line must exist
//! under that entry (or its folder). Elsewhere, every path in backticks or
//! in the diagrams that looks like a file (`a/b.rs`, `x.md`, `scripts/y.sh`)
//! or a folder (`steps/`) must exist at that path from the repository root
//! or, for a name relative to a crate, at the end of some path of the repo.
//! The remote layout section names paths on a fleet host and is left out.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the repository")
        .to_path_buf()
}

/// Every file and folder of the repository, relative, `/`-separated
/// (build output and VCS folders left out).
fn all_paths(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') || name == "target" {
                continue;
            }
            let rel = p
                .strip_prefix(root)
                .map(|r| r.to_string_lossy().replace('\\', "/"))
                .unwrap_or_default();
            if p.is_dir() {
                out.push(format!("{rel}/"));
                stack.push(p);
            } else {
                out.push(rel);
            }
        }
    }
    out
}

/// Whether `word` reads as a file or folder name (not a type, a command, a URL).
fn looks_like_path(word: &str) -> bool {
    const EXT: [&str; 8] = [".rs", ".md", ".sh", ".py", ".toml", ".cu", ".cuh", ".yaml"];
    let plain = word
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_-./<>".contains(c));
    plain
        && !word.contains("://")
        && !word.contains('<')
        && !word.starts_with('.')
        && (EXT.iter().any(|e| word.ends_with(e))
            || (word.ends_with('/') && word.len() > 1 && !word.starts_with('/')))
}

/// The words of a line, split on what cannot be part of a path.
fn words(line: &str) -> impl Iterator<Item = &str> {
    line.split(|c: char| {
        c.is_whitespace() || "`,;:()[]{}*\"'|".contains(c) || (!c.is_ascii() && c != '/')
    })
    .map(|w| w.trim_end_matches('.'))
    .filter(|w| !w.is_empty())
}

/// Whether some path of the repo is `name` or ends in `/name`, under `under`.
fn exists_under(paths: &[String], under: &str, name: &str) -> bool {
    let full = format!("{under}{name}");
    paths
        .iter()
        .any(|p| p == &full || (p.starts_with(under) && p.ends_with(&format!("/{name}"))))
}

/// Lines of the folder tree indented this far or more continue a description.
const ENTRY_INDENT: usize = 12;

/// The names in `text` that do not exist in the repository.
fn missing_names(text: &str, paths: &[String]) -> Vec<String> {
    let mut missing = Vec::new();
    let mut in_tree = false;
    let mut in_fence = false;
    // (indent, path) of the tree entries above the current line.
    let mut stack: Vec<(usize, String)> = Vec::new();
    let mut after_tree_heading = false;
    // The remote layout names paths on a fleet host, not in the repository.
    let mut on_a_host = false;
    for (n, line) in text.lines().enumerate() {
        if line.starts_with("## ") {
            after_tree_heading = line.contains("Folder tree");
            on_a_host = line.contains("Remote layout");
        }
        if on_a_host {
            continue;
        }
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            in_tree = in_fence && after_tree_heading;
            stack.clear();
            continue;
        }
        if in_tree && !line.trim().is_empty() {
            let indent = line.len() - line.trim_start().len();
            let mut ws = words(line);
            let first = ws.next().unwrap_or_default();
            // Entries sit a few columns in; deeper lines continue the
            // description of the entry above.
            let entry_line = looks_like_path(first) && indent < ENTRY_INDENT;
            let base = if entry_line {
                while stack.last().is_some_and(|(i, _)| *i >= indent) {
                    stack.pop();
                }
                let parent = stack.last().map(|(_, p)| p.clone()).unwrap_or_default();
                let full = format!("{parent}{first}");
                if !paths.contains(&full) {
                    missing.push(format!("line {}: tree entry {full}", n + 1));
                }
                if first.ends_with('/') {
                    stack.push((indent, full.clone()));
                    full
                } else {
                    parent
                }
            } else {
                stack.last().map(|(_, p)| p.clone()).unwrap_or_default()
            };
            let rest: Vec<&str> = if entry_line {
                ws.collect()
            } else {
                words(line).collect()
            };
            for w in rest.into_iter().filter(|w| looks_like_path(w)) {
                if !exists_under(paths, &base, w) && !paths.iter().any(|p| p == w) {
                    missing.push(format!("line {}: {w} under {base}", n + 1));
                }
            }
            continue;
        }
        for w in words(line).filter(|w| looks_like_path(w)) {
            if !exists_under(paths, "", w) {
                missing.push(format!("line {}: {w}", n + 1));
            }
        }
    }
    missing
}

#[test]
fn architecture_md_names_only_paths_that_exist() {
    let root = repo();
    let paths = all_paths(&root);
    let text = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let missing = missing_names(&text, &paths);
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md names paths that do not exist:\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn the_checker_finds_a_name_that_does_not_exist() {
    let paths: Vec<String> = [
        "prover/",
        "prover/src/",
        "prover/src/prove.rs",
        "docs/",
        "docs/timing.md",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let text = "See `docs/timing.md` and `docs/nothing.md`.\n\n## Folder tree\n\n```\nprover/src/\n  prove.rs   assembly\n  gone.rs    removed\n  prove.rs   see also lost.rs\n```\n";
    let missing = missing_names(text, &paths);
    assert_eq!(
        missing,
        [
            "line 1: docs/nothing.md",
            "line 8: tree entry prover/src/gone.rs",
            "line 9: lost.rs under prover/src/",
        ]
    );
}
