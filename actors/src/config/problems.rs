//! What the engine's configuration cannot say in its types: ranges, one key against
//! another, a redaction policy or an encryption key that does not build. Each problem is a
//! `key: problem` line, all of them at once, so an operator fixes a file in one pass.

use super::{EngineConfig, ExtractorKind};
use crate::domain::episode::{MAX_TTL_DAYS, MIN_TTL_DAYS};
use crate::domain::scoring::ScoreWeights;
use crate::vault::{MIN_SECRET_CHARS, MasterKey};

/// Most turns on each side a found episode brings as its neighbours: each is a row every
/// search reads per found episode.
const MAX_NEIGHBOUR_REACH: u32 = 5;

impl EngineConfig {
    /// Every value that makes no sense beyond what its type says, as `key: problem` lines.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Err(why) = self.redaction.redactor() {
            out.push(if why.starts_with("redaction") {
                why
            } else {
                format!("redaction: {why}")
            });
        }
        // The master key itself may still come from a key file (the edge reads it later).
        if let Err(why) = self
            .encryption
            .vault_with_secrets(&["x".repeat(MIN_SECRET_CHARS)])
        {
            out.push(why);
        }
        for secret in std::iter::once(&self.encryption.master_key)
            .chain(&self.encryption.previous_master_keys)
            .filter(|s| !s.is_empty())
        {
            if let Err(why) = MasterKey::derive(secret) {
                out.push(format!("encryption: {why}"));
            }
        }
        let mut check = |ok: bool, key: &str, why: &str| {
            if !ok {
                out.push(format!("{key}: {why}"));
            }
        };
        let unit = |x: f64| (0.0..=1.0).contains(&x);
        check(
            (MIN_TTL_DAYS..=MAX_TTL_DAYS).contains(&self.episodes.default_ttl_days),
            "episodes.default_ttl_days",
            "must be at least one second (0.0000116) and at most 3650",
        );
        check(
            (0.0..=86_400.0).contains(&self.episodes.conversation_gap_secs),
            "episodes.conversation_gap_secs",
            "must be between 0 (off) and 86400 (a day)",
        );
        check(
            self.shards.reference_date_resolution_secs <= 86_400,
            "shards.reference_date_resolution_secs",
            "must be between 0 (every read writes its record) and 86400 (a day)",
        );
        let i = &self.indexer;
        check(
            i.walk_rows_per_sec.is_finite() && i.walk_rows_per_sec >= 0.0,
            "indexer.walk_rows_per_sec",
            "must be 0 (as fast as the model goes) or more",
        );
        let f = &self.facts;
        check(
            unit(f.retrieval_confidence_threshold),
            "facts.retrieval_confidence_threshold",
            "must be between 0 and 1",
        );
        check(
            unit(f.expiry_confidence_threshold)
                && f.expiry_confidence_threshold <= f.retrieval_confidence_threshold,
            "facts.expiry_confidence_threshold",
            "must be between 0 and facts.retrieval_confidence_threshold",
        );
        let r = &self.rules;
        for (key, p) in [
            ("rules.promote_to_established", &r.promote_to_established),
            ("rules.promote_to_proven", &r.promote_to_proven),
        ] {
            check(
                unit(p.min_effectiveness),
                key,
                "min_effectiveness must be between 0 and 1",
            );
            check(
                p.min_age_days >= 0.0,
                key,
                "min_age_days must not be negative",
            );
        }
        check(
            r.promote_to_proven.min_successes >= r.promote_to_established.min_successes,
            "rules.promote_to_proven.min_successes",
            "must be at least rules.promote_to_established.min_successes",
        );
        check(
            unit(r.harmful_to_antipattern.max_effectiveness),
            "rules.harmful_to_antipattern.max_effectiveness",
            "must be between 0 and 1",
        );
        let q = &self.retrieval;
        check(
            q.default_limit > 0 && q.default_limit <= q.max_limit,
            "retrieval.default_limit",
            "must be between 1 and retrieval.max_limit",
        );
        check(q.rrf_k > 0.0, "retrieval.rrf_k", "must be greater than 0");
        check(
            unit(q.semantic_weight),
            "retrieval.semantic_weight",
            "must be between 0 and 1",
        );
        check(
            unit(q.session_neighbour_weight),
            "retrieval.session_neighbour_weight",
            "must be between 0 and 1",
        );
        check(
            (1..=MAX_NEIGHBOUR_REACH).contains(&q.session_neighbour_reach),
            "retrieval.session_neighbour_reach",
            &format!("must be between 1 and {MAX_NEIGHBOUR_REACH}"),
        );
        check(
            unit(q.session_neighbour_decay),
            "retrieval.session_neighbour_decay",
            "must be between 0 and 1",
        );
        check(
            unit(q.stated_time_share),
            "retrieval.stated_time_share",
            "must be between 0 and 1",
        );
        check(
            q.recency_half_life_days > 0.0,
            "retrieval.recency_half_life_days",
            "must be greater than 0",
        );
        let usable_weights = |w: &ScoreWeights| {
            let weights = [w.relevance, w.importance, w.recency, w.confidence];
            weights.iter().all(|x| *x >= 0.0) && weights.iter().sum::<f64>() > 0.0
        };
        check(
            usable_weights(&q.score_weights),
            "retrieval.score_weights",
            "must be non-negative and not all zero",
        );
        let i = &q.intent_routing;
        for (key, route) in [
            ("retrieval.intent_routing.identity", &i.identity),
            ("retrieval.intent_routing.preference", &i.preference),
            ("retrieval.intent_routing.procedure", &i.procedure),
            ("retrieval.intent_routing.temporal", &i.temporal),
        ] {
            check(
                route.score_weights.as_ref().is_none_or(usable_weights),
                key,
                "score_weights must be non-negative and not all zero",
            );
            check(
                route.semantic_weight.is_none_or(unit),
                key,
                "semantic_weight must be between 0 and 1",
            );
            let t = route.type_weights;
            check(
                [t.fact, t.rule, t.episode].iter().all(|x| *x >= 0.0),
                key,
                "type_weights must be non-negative",
            );
        }
        let r = &q.rerank;
        check(
            r.candidates >= 2,
            "retrieval.rerank.candidates",
            "must be at least 2",
        );
        check(
            unit(r.weight),
            "retrieval.rerank.weight",
            "must be between 0 and 1",
        );
        check(
            r.timeout_ms > 0,
            "retrieval.rerank.timeout_ms",
            "must be greater than 0",
        );
        let w = &q.widening;
        check(
            w.min_likeness > 0.0 && w.min_likeness <= 1.0,
            "retrieval.widening.min_likeness",
            "must be above 0 and at most 1",
        );
        // Below the query's own words' 1, which is how a plan tells the two apart.
        check(
            (0.0..1.0).contains(&w.weight),
            "retrieval.widening.weight",
            "must be at least 0 and below 1",
        );
        let m = &q.maturity_weights;
        check(
            [m.candidate, m.established, m.proven]
                .iter()
                .all(|x| *x >= 0.0),
            "retrieval.maturity_weights",
            "must be non-negative",
        );
        let e = &self.embedder;
        check(
            e.max_queue >= e.max_batch.get(),
            "embedder.max_queue",
            "must be at least embedder.max_batch",
        );
        check(
            e.background_batch <= e.max_batch,
            "embedder.background_batch",
            "must be at most embedder.max_batch",
        );
        check(
            (1..=512).contains(&e.max_tokens),
            "embedder.max_tokens",
            "must be between 1 and 512 (the model's positions)",
        );
        check(
            e.max_batch_tokens >= e.max_tokens,
            "embedder.max_batch_tokens",
            "must be at least embedder.max_tokens",
        );
        let w = &self.writes;
        check(
            w.max_in_flight >= w.max_ingest_batch.get(),
            "writes.max_in_flight",
            "must be at least writes.max_ingest_batch",
        );
        let c = &self.consolidation;
        check(
            c.retry_base_secs >= 0.0 && c.retry_max_secs >= c.retry_base_secs,
            "consolidation.retry_max_secs",
            "must be at least consolidation.retry_base_secs (both not negative)",
        );
        let endpoint = !c.llm.base_url.trim().is_empty() && !c.llm.model.trim().is_empty();
        if c.extractor == ExtractorKind::Llm {
            check(
                endpoint,
                "consolidation.llm",
                "base_url and model are required for the llm extractor",
            );
        }
        check(
            c.local.nice <= 19,
            "consolidation.local.nice",
            "must be between 0 and 19",
        );
        check(
            c.local.timeout_ms > 0,
            "consolidation.local.timeout_ms",
            "must be at least 1",
        );
        check(
            self.lifecycle.dead_letter_retention_days >= 0.0,
            "lifecycle.dead_letter_retention_days",
            "must not be negative",
        );
        check(
            self.limits.max_content_bytes > 0,
            "limits.max_content_bytes",
            "must be at least 1",
        );
        out.extend(self.memory.problems(endpoint));
        out
    }
}
