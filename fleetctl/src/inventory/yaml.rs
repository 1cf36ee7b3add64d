//! YAML helpers shared by the inventory and playbook readers: an ordered map
//! that refuses duplicate keys, the bounds every YAML input is held to
//! (size, nesting), and one read/parse error that says file:line:column and
//! what form was expected.

use crate::input::{self, InputError};
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

/// Largest YAML input read: the biggest real inventory is a few hundred
/// KiB; past this a file is a mistake or an attack on memory.
pub const MAX_YAML_BYTES: u64 = 16 << 20;

/// Deepest nesting of flow collections (`[` `{`) accepted. The YAML parser
/// recurses once per level, so a file of a million `[` would overflow the
/// stack; no inventory or playbook nests more than a handful.
pub const MAX_FLOW_DEPTH: usize = 64;

/// A YAML input file that could not be read or parsed. Each reader passes
/// its own kind and expected form, so the messages stay specific to it.
#[derive(Debug, thiserror::Error)]
pub enum YamlFileError {
    #[error(transparent)]
    Read(#[from] InputError),
    #[error("{}:{line}: flow collections (`[` `{{`) nested deeper than {max} levels", path.display())]
    TooDeep {
        path: PathBuf,
        line: usize,
        max: usize,
    },
    #[error("{}", format_problem(path, problem, expected))]
    Syntax {
        path: PathBuf,
        problem: YamlProblem,
        /// The form shown under the message, so the fix is at hand.
        expected: &'static str,
    },
}

/// Reads a whole input file (regular, at most [`MAX_YAML_BYTES`]); `kind`
/// names it in the error.
pub fn read_text(kind: &'static str, path: &Path) -> Result<String, YamlFileError> {
    Ok(input::read_text(kind, path, MAX_YAML_BYTES)?)
}

/// The line where flow collections first nest deeper than `max`, if they
/// do. Brackets in comments and in quoted scalars do not count. The scan
/// errs towards counting: a quote is taken as one only where a scalar can
/// start and only when it closes on its own line, so a quote the parser
/// would not see (inside a block scalar, `it's`) never hides a bracket the
/// parser would nest. A multi-line quoted scalar's brackets count.
fn flow_too_deep(text: &str, max: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (n, line) in text.lines().enumerate() {
        let chars: Vec<char> = line.chars().collect();
        let (mut i, mut scalar_start, mut after_blank) = (0, true, true);
        while i < chars.len() {
            let c = chars[i];
            let next_blank = chars.get(i + 1).is_none_or(|c| matches!(c, ' ' | '\t'));
            match c {
                '#' if after_blank => break,
                '\'' | '"' if scalar_start => {
                    if let Some(end) = closing_quote(&chars, i) {
                        i = end + 1;
                        scalar_start = false;
                        after_blank = false;
                        continue;
                    }
                }
                '[' | '{' => {
                    depth += 1;
                    if depth > max {
                        return Some(n + 1);
                    }
                }
                ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            }
            let blank = matches!(c, ' ' | '\t');
            scalar_start = match c {
                _ if blank => scalar_start,
                '[' | '{' | ',' => true,
                ':' => next_blank,
                '-' | '?' => scalar_start && next_blank,
                _ => false,
            };
            after_blank = blank;
            i += 1;
        }
    }
    None
}

/// Index of the quote closing the one at `open` on the same line: `''` is
/// an escaped quote in single quotes, `\` escapes in double quotes.
fn closing_quote(chars: &[char], open: usize) -> Option<usize> {
    let q = chars[open];
    let mut i = open + 1;
    while i < chars.len() {
        match chars[i] {
            '\\' if q == '"' => i += 1,
            '\'' if q == '\'' && chars.get(i + 1) == Some(&'\'') => i += 1,
            c if c == q => return Some(i),
            _ => {}
        }
        i += 1;
    }
    None
}

/// Deserialises `text`; `path` is only used in messages, `expected` is shown
/// under a parse error.
pub fn parse<T: DeserializeOwned>(
    path: &Path,
    text: &str,
    expected: &'static str,
) -> Result<T, YamlFileError> {
    if let Some(line) = flow_too_deep(text, MAX_FLOW_DEPTH) {
        return Err(YamlFileError::TooDeep {
            path: path.to_owned(),
            line,
            max: MAX_FLOW_DEPTH,
        });
    }
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
    fn flow_nesting_past_the_bound_is_refused_at_its_line_before_parsing() {
        let deep = format!("name: x\nsteps: {}{}\n", "[".repeat(65), "]".repeat(65));
        let e = parse::<serde_yaml::Value>(Path::new("pb.yaml"), &deep, "")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "pb.yaml:2: flow collections (`[` `{`) nested deeper than 64 levels"
        );
        // A million levels: refused, not a stack overflow.
        let huge = "{".repeat(1_000_000);
        assert!(matches!(
            parse::<serde_yaml::Value>(Path::new("i.yaml"), &huge, ""),
            Err(YamlFileError::TooDeep { line: 1, .. })
        ));
        let ok = format!("a: {}{}\n", "[".repeat(64), "]".repeat(64));
        parse::<serde_yaml::Value>(Path::new("ok.yaml"), &ok, "").unwrap();
        // Brackets in quotes and comments are text, not nesting.
        let quoted = format!(
            "a: \"{0}\"\nb: ['{0}', \"x\\\"{0}\"]\nc: it's # {0}\n# {0}\n",
            "[".repeat(100)
        );
        let v = parse::<serde_yaml::Value>(Path::new("q.yaml"), &quoted, "").unwrap();
        assert_eq!(v["c"], serde_yaml::Value::from("it's"));
        // A quote the parser does not see hides nothing: in a block scalar,
        // and one left open on its line.
        for hidden in ["a: |\n  '\nb: ", "a: x 'y ", "a: [b, 'c "] {
            let text = format!("{hidden}{}\n", "[".repeat(65));
            assert!(
                matches!(
                    parse::<serde_yaml::Value>(Path::new("h.yaml"), &text, ""),
                    Err(YamlFileError::TooDeep { .. })
                ),
                "{hidden}"
            );
        }
    }

    #[test]
    fn a_file_over_16_mib_is_refused_before_parsing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.yaml");
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(MAX_YAML_BYTES + 1).unwrap();
        let e = read_text("inventory", &path).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "inventory {}: 16777217 bytes, more than the 16777216 allowed",
                path.display()
            )
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
