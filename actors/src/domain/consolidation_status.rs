//! Where an episode is in consolidation: `pending -> consolidated | failed | dead_letter`
//! (memory_butler.md §5.1 and §7.2, DECISIONS.md #6), and where a failed attempt sends it:
//! each episode ends in exactly one of the three terminal states.

super::string_enum! {
    /// Consolidation state of an episode.
    ConsolidationStatus {
        Pending => "pending",
        Consolidated => "consolidated",
        Failed => "failed",
        DeadLetter => "dead_letter",
    }
}

impl ConsolidationStatus {
    fn parse_alias(_: &str) -> Option<Self> {
        None
    }
}

/// Why an extraction attempt failed, which decides where its episodes go next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptFailure {
    /// The extractor could not be reached or asked to come back later (a timeout, the
    /// network, HTTP 408, 429 or 5xx): retried with backoff, dead-lettered when the
    /// attempts run out, for an admin to requeue once the extractor is back.
    Transient,
    /// The extractor answered, but not with a valid extraction of this input (not JSON,
    /// not the schema, facts that break the limits): retried, since a model is not always
    /// consistent, and `failed` when the attempts run out: the extractor was there, and
    /// this input is what it cannot process.
    InvalidAnswer,
    /// The extractor refused the input itself (an HTTP 4xx but 408 and 429): `failed` at
    /// once, as retrying the same input would be refused again.
    Refused,
}

impl AttemptFailure {
    /// Where an episode goes after its `attempt`-th failed attempt (counting from 1), with
    /// `max_attempts` allowed.
    pub fn next_status(self, attempt: u32, max_attempts: u32) -> ConsolidationStatus {
        let exhausted = attempt >= max_attempts;
        match self {
            AttemptFailure::Refused => ConsolidationStatus::Failed,
            AttemptFailure::InvalidAnswer if exhausted => ConsolidationStatus::Failed,
            AttemptFailure::Transient if exhausted => ConsolidationStatus::DeadLetter,
            AttemptFailure::InvalidAnswer | AttemptFailure::Transient => {
                ConsolidationStatus::Pending
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failure_ends_in_one_terminal_state() {
        use AttemptFailure::*;
        use ConsolidationStatus::*;
        assert_eq!(Transient.next_status(1, 3), Pending);
        assert_eq!(Transient.next_status(3, 3), DeadLetter);
        assert_eq!(InvalidAnswer.next_status(2, 3), Pending);
        assert_eq!(InvalidAnswer.next_status(3, 3), Failed);
        assert_eq!(Refused.next_status(1, 3), Failed);
    }
}
