//! Where an episode is in consolidation: `pending -> consolidated | failed | dead_letter`
//! (memory_butler.md §5.1, DECISIONS.md #6).

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
