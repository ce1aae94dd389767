//! The catalogue of error codes: every code the service answers with, its class, and when it
//! is given. One table, in the manner of meilisearch's `Code`: the class (and through it the
//! HTTP status) follows from the code, so a call site names what went wrong and nothing
//! else, and `docs/tools.md` shows this table (a test keeps the two the same).

use super::ErrorClass;

/// Declares the codes: variant, wire name, class and a one-line "when" for the docs.
macro_rules! error_codes {
    ($($variant:ident => ($text:literal, $class:ident, $when:literal),)+) => {
        /// A stable, machine-readable error code within its class.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $(
                #[doc = $when]
                $variant,
            )+
        }

        impl ErrorCode {
            /// Every code, in catalogue order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),+];

            /// The code as it appears on the wire.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $text,)+
                }
            }

            /// The class the code belongs to: whose fault it is and whether to retry.
            pub fn class(self) -> ErrorClass {
                match self {
                    $(ErrorCode::$variant => ErrorClass::$class,)+
                }
            }

            /// When the code is given, for the documentation.
            pub fn when(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $when,)+
                }
            }
        }
    };
}

error_codes! {
    // invalid_input: the caller's request cannot be served as sent; never retried.
    InvalidArguments => ("invalid_arguments", InvalidInput, "the arguments do not match the tool's schema: a missing field, a wrong type, an unknown field"),
    UnknownValue => ("unknown_value", InvalidInput, "a value outside its closed set (a permanence, a validity, a type)"),
    EmptyContent => ("empty_content", InvalidInput, "a text that must say something is empty or only whitespace"),
    RedactionRefused => ("redaction_refused", InvalidInput, "the text holds what a redaction detector with the `refuse` action finds (the detector is named, the text is not stored)"),
    ContentTooLarge => ("content_too_large", InvalidInput, "a text is longer than its limit (`limits.max_content_bytes`, `limits.max_reason_bytes`)"),
    EmptyValue => ("empty_value", InvalidInput, "an identifier or name is empty"),
    ValueTooLong => ("value_too_long", InvalidInput, "an identifier or name is longer than its limit"),
    InvalidCharacters => ("invalid_characters", InvalidInput, "a text holds NUL or control characters"),
    InvalidName => ("invalid_name", InvalidInput, "a tenant, butler or scope name is not 1 to 64 of `A-Z a-z 0-9 _ - .`"),
    TooManyTags => ("too_many_tags", InvalidInput, "more tags than `limits.max_tags`"),
    InvalidTag => ("invalid_tag", InvalidInput, "a tag is empty or longer than its limit"),
    InvalidMetadata => ("invalid_metadata", InvalidInput, "`metadata` is not a JSON object"),
    MetadataTooLarge => ("metadata_too_large", InvalidInput, "`metadata` is larger than `limits.max_metadata_bytes`"),
    InvalidImportance => ("invalid_importance", InvalidInput, "`importance` outside 0 to 10 (an orchestrator memory's: an integer outside 0 to 100)"),
    InvalidConfidence => ("invalid_confidence", InvalidInput, "`confidence` outside (0, 1] (an orchestrator memory's: outside 0.0 to 1.0)"),
    InvalidWeight => ("invalid_weight", InvalidInput, "an orchestrator edge's `weight` outside 0.0 to 1.0"),
    InvalidSourcePath => ("invalid_source_path", InvalidInput, "an orchestrator memory's `sourcePath` is not absolute and canonical (no `.` or `..` part, no empty part, no trailing `/`), or an `ingest_file` source has none"),
    UnknownReference => ("unknown_reference", InvalidInput, "an orchestrator edge names a `ref` no memory of the call has, or a `ref` is repeated or looks like an id"),
    InvalidTransition => ("invalid_transition", InvalidInput, "a status an orchestrator memory cannot take from the one it has (retracted is final; only an active memory is superseded; none is made active again)"),
    InvalidTtl => ("invalid_ttl", InvalidInput, "`ttl_days` under one second or over 3650 days"),
    TooManyLinks => ("too_many_links", InvalidInput, "more links than `limits.max_links`"),
    SelfLink => ("self_link", InvalidInput, "a link from a memory to itself"),
    InvalidLimit => ("invalid_limit", InvalidInput, "`limit` outside 1 to `retrieval.max_limit` (search) or 1 to 1000 (activity stream, dead letters)"),
    InvalidMinConfidence => ("invalid_min_confidence", InvalidInput, "`min_confidence` outside 0 to 1"),
    EmptyTypes => ("empty_types", InvalidInput, "`types: []` in `memory_search`"),
    InvalidTokenBudget => ("invalid_token_budget", InvalidInput, "`token_budget` outside 1 to `retrieval.context.max_token_budget`"),
    InvalidBatch => ("invalid_batch", InvalidInput, "a batch with no item, or more than its limit (64 context requests, `writes.max_ingest_batch` episodes)"),
    NotConfirmable => ("not_confirmable", InvalidInput, "`memory_confirm` of an episode: only facts and rules have a confidence to confirm"),
    InvalidSince => ("invalid_since", InvalidInput, "`since` is neither a cursor from a previous page nor an RFC 3339 time"),
    InvalidTime => ("invalid_time", InvalidInput, "`as_of`, `since`, `until`, `valid_from` or `occurred_at` is neither an RFC 3339 time nor a date (YYYY-MM-DD), or `occurred_at` is after now"),
    InvalidTimeWindow => ("invalid_time_window", InvalidInput, "`as_of` together with `since` or `until`, or `since` after `until`"),
    EmptyKinds => ("empty_kinds", InvalidInput, "`kinds: []` in `memory_run_sweep`"),
    InvalidPurgeTarget => ("invalid_purge_target", InvalidInput, "`memory_purge` names no target or more than one (a record's `type` and `id`, a `subject`, a `butler`, the `tenant`), or a `tenant` other than the key's"),
    InvalidBundle => ("invalid_bundle", InvalidInput, "an import whose bundle is not one this build reads (its header, a line, or a row that does not fit the schema)"),
    NotACandidate => ("not_a_candidate", InvalidInput, "`memory_purge` by subject confirms an id its candidates did not list"),
    // forbidden: the key may not do this.
    Unauthenticated => ("unauthenticated", Forbidden, "no `Authorization: Bearer` key, or an unknown one (HTTP 401)"),
    OperatorKey => ("operator_key", Forbidden, "an operator key on a tool that reads or writes memory content"),
    AdminOnly => ("admin_only", Forbidden, "a key without admin rights on an admin tool"),
    AuditorReadsOnly => ("auditor_reads_only", Forbidden, "an auditor key on a tool that writes or administers"),
    AuditContextMissing => ("audit_context_missing", Forbidden, "an auditor key without the `X-Audit-Tenant` and `X-Audit-Reason` headers naming the tenant it reads and why (HTTP 403)"),
    OperatorOnly => ("operator_only", Forbidden, "a butler key on `/actors`"),
    OtherButler => ("other_butler", Forbidden, "a key bound to one butler acting as another"),
    OrchestratorKey => ("orchestrator_key", Forbidden, "an orchestrator key on a tool of the butlers' memory (orchestrator keys reach their orchestrator's memory graph only)"),
    NotAnOrchestrator => ("not_an_orchestrator", Forbidden, "a butler or operator key on an orchestrator memory tool"),
    CrossOrchestrator => ("cross_orchestrator", Forbidden, "an orchestrator memory call naming another orchestrator than the key's (refused and logged)"),
    ScopeForbidden => ("scope_forbidden", Forbidden, "a butler key naming a scope other than `global` or its own butler's"),
    CsrfRejected => ("csrf_rejected", Forbidden, "a dashboard form without its session's CSRF token, or sent from another origin"),
    // not_found: nothing the caller may see has that id.
    NotFound => ("not_found", NotFound, "no such record, or another tenant's"),
    // conflict: a concurrent write won; retry.
    UniqueViolation => ("unique_violation", Conflict, "a concurrent write took the same unique key"),
    LifecycleBusy => ("lifecycle_busy", Conflict, "`memory_run_sweep`: another instance ran the shard's lifecycle work for longer than the call waits (10 s); retry"),
    SerializationFailure => ("serialization_failure", Conflict, "the database aborted the transaction for a concurrent one (serialization, deadlock, lock timeout)"),
    // overloaded: refused at once to protect the service; retry after `retry_after_ms`.
    WritesInFlight => ("writes_in_flight", Overloaded, "the episodes accepted and not yet committed, with this call's, would exceed `writes.max_in_flight`"),
    ShardBusy => ("shard_busy", Overloaded, "the butler's shard (for a batch, the busiest of its shards) has `writes.max_queued_per_shard` messages waiting"),
    TooManySessions => ("too_many_sessions", Overloaded, "the dashboard has 10,000 browser sessions open; sign in again later"),
    EmbedderQueueFull => ("embedder_queue_full", Overloaded, "more texts wait for the embedder than `embedder.max_queue`"),
    // unavailable: a part of the service cannot answer now; retry.
    DatabaseUnavailable => ("database_unavailable", Unavailable, "the database did not answer, or not in time"),
    OrchestratorMemoryDisabled => ("orchestrator_memory_disabled", Unavailable, "the orchestrator memory is turned off (`memory.enabled = false`)"),
    ExtractorUnavailable => ("extractor_unavailable", Unavailable, "the model that reads dropped files (`memory.ingest.extractor = \"llm\"`) did not answer now; the file waits for the next pass"),
    Timeout => ("timeout", Unavailable, "an actor did not answer within its call timeout"),
    ActorDown => ("actor_down", Unavailable, "a singleton actor (the embedder pool, the indexer) is not running"),
    ActorRestarted => ("actor_restarted", Unavailable, "the actor stopped or restarted before answering; nothing was done"),
    ActorStopped => ("actor_stopped", Unavailable, "the actor is not running"),
    NoReader => ("no_reader", Unavailable, "no retrieval actor is running"),
    ShardFailing => ("shard_failing", Unavailable, "the shard failed more often than `shards.max_restarts` allows and is paused"),
    ShardStartFailed => ("shard_start_failed", Unavailable, "the shard could not be started"),
    ShuttingDown => ("shutting_down", Unavailable, "the service is shutting down"),
    SupervisorUnavailable => ("supervisor_unavailable", Unavailable, "the actor tree is not answering"),
    CommitAbandoned => ("commit_abandoned", Unavailable, "the statement holding the write ended without an answer: it may or may not be stored, retry with the same `idempotency_key`"),
    EmbedderFailed => ("embedder_failed", Unavailable, "the embedding model failed on the batch"),
    EmbedderStartFailed => ("embedder_start_failed", Unavailable, "the embedder pool could not be started again"),
    // integrity: the change would break an invariant; refused, nothing written.
    ConstraintViolation => ("constraint_violation", Integrity, "the database refused a state that breaks an invariant"),
    NotLive => ("not_live", Integrity, "`memory_confirm` or a mark on a fact or rule that is not `active` or `fading`"),
    NotARule => ("not_a_rule", Integrity, "a mark whose `rule_id` names a fact or an episode"),
    NotForgotten => ("not_forgotten", Integrity, "`memory_restore` of a memory that is not retracted (or has no tombstone)"),
    NoSuchTransition => ("no_such_transition", Integrity, "a rule decision its state does not allow: promoting a proven rule, demoting a candidate, moving an anti-pattern, disabling a disabled rule, enabling an enabled one"),
    NewerFact => ("newer_fact", Integrity, "`memory_restore` of a fact whose scope, subject and predicate a newer live fact holds"),
    SealedUnreadable => ("sealed_unreadable", Integrity, "an encrypted fact that cannot be opened: its data key was wrapped by a master key this service does not have, or the key or the ciphertext does not authenticate; nothing is returned in its place"),
    // internal: a bug.
    Internal => ("internal", Internal, "a bug: the service could not complete the request"),
}

impl ErrorCode {
    /// The HTTP status of an error with this code, for the HTTP endpoints.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::Unauthenticated => 401,
            other => other.class().http_status(),
        }
    }

    /// The catalogue as a Markdown table, as `docs/tools.md` shows it.
    pub fn markdown_table() -> String {
        let mut out = String::from("| code | class | HTTP | when |\n|---|---|---|---|\n");
        for code in ErrorCode::ALL {
            out.push_str(&format!(
                "| `{}` | `{}` | {} | {} |\n",
                code.as_str(),
                code.class(),
                code.http_status(),
                code.when()
            ));
        }
        out
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn codes_are_unique_snake_case_and_documented() {
        let mut seen = HashSet::new();
        for code in ErrorCode::ALL {
            let text = code.as_str();
            assert!(seen.insert(text), "{text} twice");
            assert!(
                text.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{text}"
            );
            assert!(code.when().len() > 10, "{text} needs a description");
        }
    }

    #[test]
    fn the_class_decides_the_status_but_for_a_missing_key() {
        assert_eq!(ErrorCode::InvalidLimit.http_status(), 400);
        assert_eq!(ErrorCode::AdminOnly.http_status(), 403);
        assert_eq!(ErrorCode::Unauthenticated.http_status(), 401);
        assert_eq!(ErrorCode::ShardBusy.http_status(), 429);
        assert_eq!(ErrorCode::Timeout.http_status(), 503);
    }

    /// The table in `docs/tools.md` is this catalogue; regenerate it from the failure
    /// message when a code is added.
    #[test]
    fn the_docs_show_the_catalogue() {
        let docs = include_str!("../../../docs/tools.md");
        let table = ErrorCode::markdown_table();
        assert!(
            docs.contains(&table),
            "docs/tools.md must contain the error code table exactly as:\n\n{table}"
        );
    }
}
