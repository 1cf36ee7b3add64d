//! YAML helpers shared by the inventory and playbook readers: an ordered map
//! that refuses duplicate keys, and one read/parse error that says
//! file:line:column and what form was expected.

use serde::de::{self, Deserialize, DeserializeOwned, Deserializer, MapAccess, Visitor};
use std::fmt;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

/// A YAML mapping kept in file order (host order is rollout order; group
/// order breaks precedence ties). Duplicate keys are an error.
#[derive(Debug, Clone, PartialEq)]
pub struct OrderedMap<V>(pub Vec<(String, V)>);

impl<V> Default for OrderedMap<V> {
    fn default() -> Self {
        OrderedMap(Vec::new())
    }
}

impl<V> OrderedMap<V> {
    pub fn get(&self, key: &str) -> Option<&V> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &V)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for OrderedMap<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V_<V>(PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for V_<V> {
            type Value = OrderedMap<V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                // `hosts:` with nothing after it is an empty mapping.
                Ok(OrderedMap::default())
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out: Vec<(String, V)> = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    if out.iter().any(|(k, _)| *k == key) {
                        return Err(de::Error::custom(format!("duplicate key `{key}`")));
                    }
                    let value = map.next_value::<V>()?;
                    out.push((key, value));
                }
                Ok(OrderedMap(out))
            }
        }
        d.deserialize_map(V_(PhantomData))
    }
}

/// Where a YAML error is and what it says, without the library's own
/// " at line N column M" suffix (we print the location up front).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlProblem {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl YamlProblem {
    pub fn from_error(err: &serde_yaml::Error) -> YamlProblem {
        let (line, column) = err
            .location()
            .map_or((1, 1), |l| (l.line().max(1), l.column().max(1)));
        let mut message = err.to_string();
        if let Some(at) = message.rfind(" at line ") {
            message.truncate(at);
        }
        YamlProblem {
            line,
            column,
            message,
        }
    }

    /// The YAML scanner's words for a tab in indentation ("found character
    /// that cannot start any token") say nothing a user can act on; name the
    /// tab when the offending line is indented with one.
    pub fn explain_tabs(mut self, text: &str) -> YamlProblem {
        let indented_with_tab = text
            .lines()
            .nth(self.line.saturating_sub(1))
            .is_some_and(|l| {
                l.chars()
                    .take_while(|c| c.is_whitespace())
                    .any(|c| c == '\t')
            });
        if indented_with_tab && self.message.contains("cannot start any token") {
            self.message =
                "tab characters are not allowed in YAML indentation; indent with spaces".to_owned();
        }
        self
    }
}

/// `file:line:column: message` followed by the expected form, indented.
pub fn format_problem(file: &Path, p: &YamlProblem, expected: &str) -> String {
    let mut s = format!(
        "{}:{}:{}: {}\nexpected form:",
        file.display(),
        p.line,
        p.column,
        p.message
    );
    for line in expected.lines() {
        s.push_str("\n    ");
        s.push_str(line);
    }
    s
}

/// A YAML input file that could not be read or parsed. Each reader passes
/// its own kind and expected form, so the messages stay specific to it.
#[derive(Debug, thiserror::Error)]
pub enum YamlFileError {
    #[error("cannot read {kind} {}: {source}", path.display())]
    Read {
        /// What the file is (`inventory`, `playbook`).
        kind: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}", format_problem(path, problem, expected))]
    Syntax {
        path: PathBuf,
        problem: YamlProblem,
        /// The form shown under the message, so the fix is at hand.
        expected: &'static str,
    },
}

/// Reads a whole input file; `kind` names it in the error.
pub fn read_text(kind: &'static str, path: &Path) -> Result<String, YamlFileError> {
    std::fs::read_to_string(path).map_err(|source| YamlFileError::Read {
        kind,
        path: path.to_owned(),
        source,
    })
}

/// Deserialises `text`; `path` is only used in messages, `expected` is shown
/// under a parse error.
pub fn parse<T: DeserializeOwned>(
    path: &Path,
    text: &str,
    expected: &'static str,
) -> Result<T, YamlFileError> {
    serde_yaml::from_str(text).map_err(|e| YamlFileError::Syntax {
        path: path.to_owned(),
        problem: YamlProblem::from_error(&e).explain_tabs(text),
        expected,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tab_in_indentation_is_named_as_such() {
        let text = "vars:\n\tuser: ops\n";
        let err = parse::<serde_yaml::Value>(Path::new("inv.yaml"), text, "").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("inv.yaml:2:")
                && msg.contains("tab characters are not allowed in YAML indentation"),
            "{msg}"
        );
    }

    #[test]
    fn a_missing_file_names_its_kind_and_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent.yaml");
        let e = read_text("playbook", &path).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("cannot read playbook {}: ", path.display())),
            "{e}"
        );
    }
}
