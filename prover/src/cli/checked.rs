//! Command-line values checked by clap itself, so that a bad one exits with
//! the usage code (2) like any other bad argument, and refused without
//! echoing it: clap's own validation error repeats the value, which for a
//! pasted blob is kilobytes on one line.

use clap::builder::TypedValueParser;
use clap::error::ErrorKind;

/// A string argument accepted when its check passes; the refusal names the
/// argument and the cause only.
#[derive(Clone, Copy)]
pub struct Checked(pub fn(&str) -> Result<(), String>);

impl TypedValueParser for Checked {
    type Value = String;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        let name = arg
            .map(|a| a.to_string())
            .unwrap_or_else(|| "a value".into());
        let refuse =
            |kind, why: String| clap::Error::raw(kind, format!("{name}: {why}\n")).with_cmd(cmd);
        let s = value
            .to_str()
            .ok_or_else(|| refuse(ErrorKind::InvalidUtf8, "not UTF-8".into()))?;
        (self.0)(s)
            .map(|()| s.to_owned())
            .map_err(|why| refuse(ErrorKind::ValueValidation, why))
    }
}

/// 64 hex digits (a prover id, a randomness).
pub fn hex32(s: &str) -> Result<(), String> {
    prover::filecoin::c1::parse_hex32("the value", s).map(|_| ())
}

/// A job id as `submit` prints it.
pub fn job_id(s: &str) -> Result<(), String> {
    prover::daemon::client::check_job_id(s).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cmd {
        #[arg(long, value_parser = Checked(hex32))]
        randomness: String,
    }

    #[test]
    fn a_refused_value_is_a_usage_error_that_does_not_echo_it() {
        let long = "z".repeat(49_000);
        let err = Cmd::try_parse_from(["x", "--randomness", &long]).expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::ValueValidation);
        let text = err.to_string();
        assert!(text.contains("--randomness") && text.len() < 400, "{text}");
        let ok = Cmd::try_parse_from(["x", "--randomness", &"07".repeat(32)]).expect("hex");
        assert_eq!(ok.randomness, "07".repeat(32));
    }
}
