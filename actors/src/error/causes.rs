//! An error with what caused it, as one line for a person: the message, then each cause down
//! the `source()` chain that the message does not already say.

/// `error` and what caused it, down the chain. Many errors put their cause in their own
/// message and also return it as their source (thiserror's `"…: {0}"` beside `#[source]`), so a
/// cause whose text is already there is left out: the line says each thing once. Others say
/// only what failed and leave why to their sources (reqwest: "error sending request", then
/// a refused connection or an unknown certificate authority), which this adds.
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::with_causes;

    #[derive(Debug, thiserror::Error)]
    #[error("reading the key: {0}")]
    struct SaysItsCause(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("sending failed")]
    struct LeavesItsCause(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("starting: {0}")]
    struct Outer(#[source] LeavesItsCause);

    fn refused() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused")
    }

    #[test]
    fn a_cause_in_the_message_is_said_once() {
        let error = SaysItsCause(std::io::Error::other("no such file"));
        assert_eq!(with_causes(&error), "reading the key: no such file");
    }

    #[test]
    fn a_cause_left_to_the_chain_is_added_at_every_depth() {
        assert_eq!(
            with_causes(&LeavesItsCause(refused())),
            "sending failed: connection refused"
        );
        // The outer message says the middle one, not the middle one's cause.
        assert_eq!(
            with_causes(&Outer(LeavesItsCause(refused()))),
            "starting: sending failed: connection refused"
        );
    }
}
