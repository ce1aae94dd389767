//! The column lists that map rows onto the domain records, shared by SELECT and RETURNING
//! so every query produces the same shape.

/// A record's reference count with the reads tallied apart since it was last written
/// (migration 33, store/references.rs), by the record's own unqualified columns.
macro_rules! reference_count {
    () => {
        "reference_count + COALESCE((SELECT r.reads FROM memory_reads r \
         WHERE r.memory_tenant_id = tenant_id AND r.memory_id = id), 0) AS reference_count"
    };
}

/// A record's last reference: its own, or its tally's last read when later.
macro_rules! last_referenced_at {
    () => {
        "GREATEST(last_referenced_at, (SELECT r.last_read_at FROM memory_reads r \
         WHERE r.memory_tenant_id = tenant_id AND r.memory_id = id)) AS last_referenced_at"
    };
}

/// Columns of `domain::episode::Episode`.
macro_rules! episode_columns {
    () => {
        concat!(
            "id, tenant_id, butler, session_id, content, importance, ",
            $crate::store::columns::reference_count!(),
            ", consolidation_status, consolidated, consolidation_attempts, last_consolidation_error, \
             next_consolidation_retry_at, created_at, occurred_at, ",
            $crate::store::columns::last_referenced_at!(),
            ", expires_at, forgotten_at, metadata, (SELECT model FROM embedding_versions v WHERE v.id = embedding_version_id) AS embedding_model, \
             request_id, idempotency_key"
        )
    };
}

/// Columns of `domain::fact::Fact`.
macro_rules! fact_columns {
    () => {
        concat!(
            "id, tenant_id, subject, predicate, content, scope, validity, confidence, decay_rate, \
             permanence, importance, source_butler, source_episode_id, supersedes_id, ",
            $crate::store::columns::reference_count!(),
            ", created_at, last_confirmed_at, ",
            $crate::store::columns::last_referenced_at!(),
            ", retracted_at, retracted_from, tags, metadata, \
             (SELECT model FROM embedding_versions v WHERE v.id = embedding_version_id) AS embedding_model, \
             request_id, key_version, sealed, valid_from, valid_until"
        )
    };
}

/// Columns of `domain::rule::Rule`.
macro_rules! rule_columns {
    () => {
        concat!(
            "id, tenant_id, content, original_content, scope, maturity, validity, confidence, decay_rate, \
             permanence, importance, effectiveness_score, applied_count, success_count, harmful_count, \
             source_butler, source_episode_id, ",
            $crate::store::columns::reference_count!(),
            ", created_at, last_applied_at, last_evaluated_at, last_confirmed_at, ",
            $crate::store::columns::last_referenced_at!(),
            ", retracted_at, retracted_from, tags, metadata, \
             (SELECT model FROM embedding_versions v WHERE v.id = embedding_version_id) AS embedding_model, \
             request_id, disabled_at"
        )
    };
}

/// The effective confidence of memory_butler.md §6.2 in SQL, for the row alias `$t` (with
/// its dot, or empty) at the time parameter `$now`. The exponent is floored: PostgreSQL's
/// `exp` fails on underflow, and a memory decayed for centuries is simply ~0.
macro_rules! effective_confidence {
    ($t:literal, $now:literal) => {
        concat!(
            $t,
            "confidence * exp(GREATEST(-700.0, -",
            $t,
            "decay_rate * GREATEST(0, extract(epoch FROM (",
            $now,
            " - ",
            $t,
            "last_confirmed_at)) / 86400.0)))"
        )
    };
}

/// When an episode happened (migration 35): when it says it did (`occurred_at`), or else
/// when it was stored; `$p` is the table's alias with its dot (`"e."`), or `""`.
macro_rules! happened {
    ($p:literal) => {
        concat!("COALESCE(", $p, "occurred_at, ", $p, "created_at)")
    };
}

/// Bands of effective confidence, named by their bounds (dashboard colours: `>= 0.8`
/// green, `0.5-0.8` yellow, below red; `< 0.2` fades, `< 0.05` expires).
macro_rules! confidence_band_sql {
    () => {
        "CASE WHEN eff < 0.05 THEN 'below_0.05' WHEN eff < 0.2 THEN '0.05_to_0.2'
              WHEN eff < 0.5 THEN '0.2_to_0.5' WHEN eff < 0.8 THEN '0.5_to_0.8' ELSE '0.8_and_above' END"
    };
}

pub(crate) use {
    confidence_band_sql, effective_confidence, episode_columns, fact_columns, happened,
    last_referenced_at, reference_count, rule_columns,
};
