//! The one-line form of an error that both binaries print as their last
//! word on stderr (`error: …`).

use std::error::Error;

/// `err` and its causes as "outer: cause: root". Most error types here end
/// their own message with their source's (`…: {source}`), which a plain
/// walk of the chain would print twice; a cause whose text the line already
/// holds is left out, so every message appears once whichever style an
/// error type uses.
pub fn error_line(err: &(dyn Error + 'static)) -> String {
    let mut line = err.to_string();
    // Bounded: a chain is finite unless a source refers back to itself.
    for cause in std::iter::successors(err.source(), |&c| c.source()).take(64) {
        let text = cause.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt;

    #[derive(Debug)]
    struct E {
        msg: String,
        source: Option<Box<E>>,
    }

    impl fmt::Display for E {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(&self.msg)
        }
    }

    impl Error for E {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.source.as_deref().map(|e| e as &(dyn Error + 'static))
        }
    }

    fn e(msg: &str, source: Option<E>) -> E {
        E {
            msg: msg.into(),
            source: source.map(Box::new),
        }
    }

    #[test]
    fn causes_already_in_the_message_appear_once() {
        // thiserror's `…: {source}` style at every level.
        let root = e("file not found", None);
        let mid = e("reading params: file not found", Some(root));
        let top = e(
            "bench chain 2^20: reading params: file not found",
            Some(mid),
        );
        assert_eq!(
            error_line(&top),
            "bench chain 2^20: reading params: file not found"
        );
    }

    #[test]
    fn causes_not_in_the_message_are_appended_in_order() {
        let root = e("permission denied", None);
        let mid = e("opening /x", Some(root));
        let top = e("loading the config", Some(mid));
        assert_eq!(
            error_line(&top),
            "loading the config: opening /x: permission denied"
        );
    }

    #[test]
    fn mixed_styles_and_an_empty_cause() {
        let root = e("timed out", None);
        let empty = e("", Some(root));
        let mid = e("ssh h1: timed out", Some(empty));
        let top = e("rollout", Some(mid));
        assert_eq!(error_line(&top), "rollout: ssh h1: timed out");
    }
}
