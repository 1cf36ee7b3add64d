//! The one place where remote arguments become shell words: POSIX single-quote
//! escaping, so no byte of an argument is ever interpreted by the remote shell.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

/// Why an argument cannot be sent to a remote shell.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuoteError {
    /// Remote commands are built as text; a path that is not UTF-8 would be
    /// mangled on the way, so it is refused instead of guessed at.
    #[error("argument {lossy:?} is not valid UTF-8")]
    NotUtf8 { lossy: String },
    /// A NUL byte cannot be part of any argv entry.
    #[error("argument {arg:?} contains a NUL byte")]
    Nul { arg: String },
}

/// Quotes one argument for a POSIX shell.
///
/// Plain words made only of characters no shell treats specially are returned
/// unchanged (keeps logs readable); everything else is wrapped in single
/// quotes, where the shell interprets nothing, and each embedded `'` becomes
/// `'\''` (close, escaped quote, reopen).
pub fn quote(arg: &str) -> Result<String, QuoteError> {
    if arg.contains('\0') {
        return Err(QuoteError::Nul {
            arg: arg.replace('\0', "\\0"),
        });
    }
    let plain = !arg.is_empty()
        && arg.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'-' | b'_' | b'=' | b'/' | b',' | b'.' | b'+' | b':' | b'@' | b'%'
                )
        });
    if plain {
        return Ok(arg.to_owned());
    }
    let mut out = String::with_capacity(arg.len() + 2);
    out.push('\'');
    for c in arg.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    Ok(out)
}

/// Quotes a word of a command printed for the operator to copy (a resume
/// or rollback hint); one that cannot be quoted (a NUL) is shown escaped,
/// since a printed line must not fail.
pub fn quote_shown(arg: &str) -> String {
    quote(arg).unwrap_or_else(|_| format!("{arg:?}"))
}

/// Quotes an OS string (a local or remote path); non-UTF-8 is refused.
pub fn quote_os(arg: &OsStr) -> Result<String, QuoteError> {
    match arg.to_str() {
        Some(s) => quote(s),
        None => Err(QuoteError::NotUtf8 {
            lossy: String::from_utf8_lossy(arg.as_bytes()).into_owned(),
        }),
    }
}

/// Quotes every argument and joins them with spaces: one shell command line.
pub fn join(argv: &[&str]) -> Result<String, QuoteError> {
    let words = argv
        .iter()
        .map(|a| quote(a))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(words.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;
    use std::process::Command;

    /// Runs `printf '%s\n' <quoted>` through a real `sh` and returns what the
    /// shell saw as the argument: the only meaningful check of a quoting function.
    fn round_trip(arg: &str) -> String {
        let line = format!("printf '%s' {}", quote(arg).unwrap());
        let out = Command::new("sh").arg("-c").arg(&line).output().unwrap();
        assert!(out.status.success(), "sh failed on {line}");
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn plain_words_stay_readable() {
        assert_eq!(
            quote("/opt/prover/releases/ab12").unwrap(),
            "/opt/prover/releases/ab12"
        );
        assert_eq!(quote("--config=x.toml").unwrap(), "--config=x.toml");
    }

    #[test]
    fn hostile_arguments_survive_a_real_shell_unchanged() {
        for arg in [
            "a b",
            "it's",
            "'",
            "''",
            "$(touch /tmp/pwned)",
            "`id`",
            "$HOME",
            "line1\nline2",
            "tab\there",
            "semi; rm -rf /",
            "back\\slash",
            "*",
            "~",
            "!bang",
            "\"double\"",
            "ünïcödé",
            "-n",
        ] {
            assert_eq!(round_trip(arg), arg, "argument {arg:?}");
        }
    }

    #[test]
    fn empty_string_is_an_argument_not_nothing() {
        assert_eq!(quote("").unwrap(), "''");
        let line = format!("set -- {}; printf '%s' \"$#\"", join(&["", "x"]).unwrap());
        let out = Command::new("sh").arg("-c").arg(&line).output().unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), "2");
    }

    #[test]
    fn single_quote_escaping_is_posix() {
        assert_eq!(quote("it's").unwrap(), "'it'\\''s'");
    }

    #[test]
    fn non_utf8_and_nul_are_rejected() {
        let bad = OsString::from_vec(vec![b'a', 0xff, b'b']);
        assert!(matches!(quote_os(&bad), Err(QuoteError::NotUtf8 { .. })));
        assert!(matches!(quote("a\0b"), Err(QuoteError::Nul { .. })));
    }

    #[test]
    fn join_keeps_word_boundaries() {
        let line = format!(
            "set -- {}; printf '%s|' \"$@\"",
            join(&["a b", "c", "$(x)"]).unwrap()
        );
        let out = Command::new("sh").arg("-c").arg(&line).output().unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), "a b|c|$(x)|");
    }
}
