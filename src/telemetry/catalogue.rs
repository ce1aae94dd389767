//! Every metric family the service exports, in one list: its type, what it means (the
//! `# HELP` line), the buckets of a histogram, and the series that exist from the start at
//! 0, so that an alert on a counter sees data before the first event. A test reads the
//! source tree and fails when a family is recorded that this list does not describe.

/// How a family is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    /// A histogram of durations, in seconds.
    Seconds,
    /// A histogram of long durations (a model's answer), in seconds.
    LongSeconds,
    /// A histogram of counts (texts per batch, episodes per statement).
    Sizes,
    /// A histogram of shares and scores between 0 and 1.
    Ratios,
}

/// One family.
pub struct Family {
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    /// Label sets whose series are created at 0 when the service starts.
    pub zero: &'static [&'static [(&'static str, &'static str)]],
}

const fn family(name: &'static str, kind: Kind, help: &'static str) -> Family {
    Family {
        name,
        kind,
        help,
        zero: &[],
    }
}

/// Buckets of duration histograms: from 0.5 ms to 10 s. The SLOs are 250 and 350 ms, the
/// targets 20-50 ms, and the store path is single-digit milliseconds.
pub const SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Buckets of long duration histograms: from 0.5 s to 10 minutes. A small model on a CPU
/// answers about one episode in seconds, a long one in a minute.
pub const LONG_SECONDS: &[f64] = &[0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 600.0];

/// Buckets of count histograms: 0, then powers of two up to 256.
pub const SIZES: &[f64] = &[0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

/// Buckets of ratio histograms (confidence, diversity): tenths, with the expiry and fading
/// thresholds of confidence (0.05, 0.2) as bounds.
pub const RATIOS: &[f64] = &[0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0];

/// `butler_memory_requests_total` and its duration: one series per tool and class, the
/// tools' `ok` series created at start (see [`super::describe_metrics`]).
pub const REQUESTS_TOTAL: &str = "butler_memory_requests_total";

pub const FAMILIES: &[Family] = &[
    family(
        REQUESTS_TOTAL,
        Kind::Counter,
        "Tool calls by tool and outcome class (ok, invalid_input, forbidden, not_found, conflict, overloaded, unavailable, integrity, internal).",
    ),
    family(
        "butler_memory_request_duration_seconds",
        Kind::Seconds,
        "Time to answer a tool call, by tool and outcome class.",
    ),
    Family {
        zero: &[&[("tool", "search")], &[("tool", "context")]],
        ..family(
            "butler_memory_degraded_reads_total",
            Kind::Counter,
            "Reads answered from full text alone because the query embedding did not come in time.",
        )
    },
    Family {
        zero: &[&[("reason", "shard_queue")], &[("reason", "in_flight")]],
        ..family(
            "butler_memory_writes_refused_total",
            Kind::Counter,
            "Episodes refused as overloaded before reaching a shard, by the bound they met.",
        )
    },
    family(
        "butler_memory_writes_in_flight",
        Kind::Gauge,
        "Episodes admitted and not yet answered.",
    ),
    family(
        "butler_memory_group_commit_episodes",
        Kind::Sizes,
        "Episodes a shard hands to the commit queue in one group.",
    ),
    family(
        "butler_memory_episode_statement_episodes",
        Kind::Sizes,
        "Episodes written by one combined statement.",
    ),
    family(
        "butler_memory_episode_statement_requests",
        Kind::Sizes,
        "Requests answered by one combined statement.",
    ),
    family(
        "butler_memory_episode_statement_seconds",
        Kind::Seconds,
        "Time one combined episode statement takes in the database.",
    ),
    family(
        "butler_memory_episode_commit_wait_seconds",
        Kind::Seconds,
        "Time an episode waits in the commit queue before its statement starts.",
    ),
    family(
        "butler_memory_shards",
        Kind::Gauge,
        "Live shard actors, one per tenant and butler.",
    ),
    family(
        "butler_memory_actor_failures_total",
        Kind::Counter,
        "Actors that failed and were restarted by their supervisor, by kind.",
    ),
    Family {
        zero: &[
            &[("outcome", "ok")],
            &[("outcome", "failed")],
            &[("outcome", "skipped")],
        ],
        ..family(
            "butler_memory_sweeps_total",
            Kind::Counter,
            "Lifecycle sweeps by outcome: ok and failed per shard, skipped when a scheduled run could not start.",
        )
    },
    family(
        "butler_memory_sweep_duration_seconds",
        Kind::Seconds,
        "Time one shard's sweep took, by kind.",
    ),
    family(
        "butler_memory_sweep_changes_total",
        Kind::Counter,
        "Records a sweep changed, by sweep kind and change (fading, expired, promoted, inverted, ...).",
    ),
    family(
        "butler_memory_consolidation_backlog",
        Kind::Gauge,
        "Episodes waiting for consolidation.",
    ),
    family(
        "butler_memory_extraction_seconds",
        Kind::LongSeconds,
        "Time a language model took to answer about one episode (consolidation's local or llm extractor).",
    ),
    family(
        "butler_memory_extraction_rejected_total",
        Kind::Counter,
        "Items a model answered that failed a check and were dropped, by reason (ungrounded_subject, empty, trivial, not_a_rule).",
    ),
    family(
        "butler_memory_local_model_ready",
        Kind::Gauge,
        "1 while consolidation's local model answers, else 0 (stopped, starting, restarting, unavailable).",
    ),
    Family {
        name: "butler_memory_local_model_restarts_total",
        kind: Kind::Counter,
        help: "Restarts of consolidation's local model after it died or stopped answering.",
        zero: &[&[]],
    },
    family(
        "butler_memory_consolidation_backlog_age_seconds",
        Kind::Gauge,
        "Age of the oldest episode waiting for consolidation.",
    ),
    family(
        "butler_memory_embedding_backlog",
        Kind::Gauge,
        "Rows waiting for an embedding (counted when /metrics is scraped).",
    ),
    family(
        "butler_memory_embedding_backlog_age_seconds",
        Kind::Gauge,
        "Age of the oldest row waiting for an embedding (counted when /metrics is scraped).",
    ),
    Family {
        zero: &[
            &[("outcome", "processed")],
            &[("outcome", "rejected")],
            &[("outcome", "deferred")],
        ],
        ..family(
            "butler_memory_ingest_files_total",
            Kind::Counter,
            "Files of the orchestrators' ingest folders, by outcome: processed, rejected, or deferred (the store could not take them; they wait for the next pass).",
        )
    },
    family(
        "butler_memory_indexed_total",
        Kind::Counter,
        "Rows the indexer embedded, by memory type.",
    ),
    family(
        "butler_memory_redactions_total",
        Kind::Counter,
        "Spans redacted before persistence (masked, hashed or dropped), by detector; never the spans.",
    ),
    Family {
        zero: &[&[]],
        ..family(
            "butler_memory_redaction_refusals_total",
            Kind::Counter,
            "Writes refused because a redaction detector with the refuse action fired.",
        )
    },
    Family {
        zero: &[
            &[("type", "episode")],
            &[("type", "fact")],
            &[("type", "rule")],
        ],
        ..family(
            "butler_memory_purged_total",
            Kind::Counter,
            "Records erased for good by memory_purge, by type.",
        )
    },
    family(
        "butler_memory_read_results",
        Kind::Sizes,
        "Results per search and records per context block, by tool: a hit-rate proxy.",
    ),
    Family {
        zero: &[&[("tool", "search")], &[("tool", "context")]],
        ..family(
            "butler_memory_empty_reads_total",
            Kind::Counter,
            "Searches that found nothing and context blocks with no record, by tool.",
        )
    },
    family(
        "butler_memory_result_confidence",
        Kind::Ratios,
        "Effective confidence of each fact and rule a search returned.",
    ),
    family(
        "butler_memory_result_diversity",
        Kind::Ratios,
        "Top-k diversity of each search: distinct sources (an episode's session, a fact's subject, a rule) over results.",
    ),
    Family {
        zero: &[&[("path", "store_fact")], &[("path", "consolidation")]],
        ..family(
            "butler_memory_supersessions_total",
            Kind::Counter,
            "Facts superseded by a newer fact with the same subject and predicate, by path.",
        )
    },
    Family {
        zero: &[&[("path", "feedback")], &[("path", "sweep")]],
        ..family(
            "butler_memory_rule_inversions_total",
            Kind::Counter,
            "Rules turned into anti-patterns, by path (harmful feedback, the decay sweep).",
        )
    },
    family(
        "butler_memory_db_statement_seconds",
        Kind::Seconds,
        "Time of each SQL statement family (db.* spans: the statements of one store function), by family.",
    ),
    family(
        "butler_memory_db_relation_bytes",
        Kind::Gauge,
        "Size on disk of each table and index of the service, read at scrape: index bloat shows as bytes growing faster than live rows.",
    ),
    family(
        "butler_memory_db_rows",
        Kind::Gauge,
        "Live and dead rows of each table (PostgreSQL's statistics), read at scrape: dead rows are what vacuum has yet to reclaim.",
    ),
    family(
        "butler_memory_embeddings_stale",
        Kind::Gauge,
        "Rows still holding another model's embedding after a model change, as counted at start and re-embedded since (0 when none).",
    ),
    Family {
        zero: &[
            &[("type", "episode")],
            &[("type", "fact")],
            &[("type", "rule")],
        ],
        ..family(
            "butler_memory_reembedded_total",
            Kind::Counter,
            "Rows re-embedded with the running model after a model change, by memory type.",
        )
    },
    Family {
        zero: &[
            &[("type", "episode")],
            &[("type", "fact")],
            &[("type", "rule")],
        ],
        ..family(
            "butler_memory_sketches_backfilled_total",
            Kind::Counter,
            "Token sketches stored for rows embedded while the second stage was off, once it is on, by memory type.",
        )
    },
    Family {
        zero: &[&[]],
        ..family(
            "butler_memory_indexer_yields_total",
            Kind::Counter,
            "Times the indexer paused for a write burst.",
        )
    },
    Family {
        zero: &[&[]],
        ..family(
            "butler_memory_embedder_texts_total",
            Kind::Counter,
            "Texts the embedder pool embedded.",
        )
    },
    Family {
        zero: &[&[]],
        ..family(
            "butler_memory_embedder_refused_total",
            Kind::Counter,
            "Embedding requests refused because the embedder queue was full.",
        )
    },
    family(
        "butler_memory_embedder_queue_depth",
        Kind::Gauge,
        "Texts waiting for the embedder pool.",
    ),
    family(
        "butler_memory_embedder_batch_size",
        Kind::Sizes,
        "Texts per inference batch.",
    ),
    family(
        "butler_memory_embedder_batch_seconds",
        Kind::Seconds,
        "Time one inference batch takes.",
    ),
    family(
        "butler_memory_rerank_seconds",
        Kind::Seconds,
        "Time a search's second stage took (retrieval.rerank), when it answered.",
    ),
    Family {
        zero: &[&[("source", "stored")], &[("source", "model")]],
        ..family(
            "butler_memory_rerank_passages_total",
            Kind::Counter,
            "Candidates the second stage set out to measure, by where their tokens come from: the sketch stored with them, or the model reading their text (embedded while it was off).",
        )
    },
    Family {
        zero: &[&[("source", "query")], &[("source", "model")]],
        ..family(
            "butler_memory_rerank_questions_total",
            Kind::Counter,
            "Questions the second stage measured candidates against, by where their tokens come from: the model run that embedded the query, or a model run of their own (a keyword search, or a query embedded while the second stage was off).",
        )
    },
    Family {
        zero: &[
            &[("reason", "unanswered")],
            &[("reason", "unsketched")],
            &[("reason", "unembedded")],
        ],
        ..family(
            "butler_memory_rerank_skipped_total",
            Kind::Counter,
            "Second stages skipped, the first stage's order standing: the model did not answer in time or failed (unanswered), or more candidates lacked a sketch than retrieval.rerank.max_model_reads, embedded without one (unsketched) or not embedded yet (unembedded: the indexer behind the writes).",
        )
    },
    Family {
        zero: &[&[("waiting", "read")], &[("waiting", "none")]],
        ..family(
            "butler_memory_keyword_counts_total",
            Kind::Counter,
            "Words whose document frequency the keyword search counted, by who waited for the count: a read whose words had no count it could use (never counted, or counted more than twice the trust window ago), or nobody (a recount behind the reads of a count they still used).",
        )
    },
    family(
        "butler_memory_query_cache_total",
        Kind::Counter,
        "Query embedding cache lookups, by outcome (hit, miss).",
    ),
    family(
        "butler_memory_result_cache_total",
        Kind::Counter,
        "Read result cache lookups, by outcome (hit, miss).",
    ),
    family(
        "butler_memory_result_cache_bytes",
        Kind::Gauge,
        "Bytes the read result cache's answers hold (records, texts, metadata).",
    ),
    family(
        "butler_memory_result_cache_entries",
        Kind::Gauge,
        "Answers the read result cache holds.",
    ),
    family(
        "butler_memory_db_pool_connections",
        Kind::Gauge,
        "Database connections open, by pool (reads, retrieval, writes, locks, health) and state (idle, in_use).",
    ),
    family(
        "butler_memory_db_pool_max_connections",
        Kind::Gauge,
        "Database connections each pool may open, by pool.",
    ),
    family(
        "butler_memory_http_connections",
        Kind::Gauge,
        "HTTP connections open.",
    ),
    Family {
        zero: &[&[("reason", "total")], &[("reason", "per_peer")]],
        ..family(
            "butler_memory_http_connections_refused_total",
            Kind::Counter,
            "HTTP connections closed as accepted, by the cap they met.",
        )
    },
    family(
        "butler_memory_reads_by_target_total",
        Kind::Counter,
        "Reads sent to a database while read replicas are configured, by target (primary, or the replica's host:port).",
    ),
    Family {
        zero: &[&[("outcome", "caught_up")], &[("outcome", "timed_out")]],
        ..family(
            "butler_memory_replica_waits_total",
            Kind::Counter,
            "Reads that waited for a replica to replay their tenant's last commit, by outcome (timed_out: served by the primary).",
        )
    },
    family(
        "butler_memory_replica_lag_seconds",
        Kind::Gauge,
        "How long ago the primary had written WAL a read replica has not replayed yet, by replica.",
    ),
    family(
        "butler_memory_replica_in_rotation",
        Kind::Gauge,
        "1 while a read replica serves reads, 0 while it is out of rotation (down, lagging, not a replica of this primary).",
    ),
    family(
        "butler_memory_build_info",
        Kind::Gauge,
        "Always 1; the labels say which build runs (version).",
    ),
];

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use super::*;

    /// Every `counter!`, `gauge!` and `histogram!` with a literal `butler_memory_*` name in
    /// the source, with its kind.
    fn recorded() -> BTreeMap<String, &'static str> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut found = BTreeMap::new();
        let mut dirs = vec![root.join("src"), root.join("actors/src")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                if path.extension().is_none_or(|e| e != "rs") || path.ends_with("catalogue.rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                for kind in ["counter", "gauge", "histogram"] {
                    let call = format!("{kind}!(");
                    for (at, _) in text.match_indices(&call) {
                        let rest = text[at + call.len()..].trim_start();
                        if let Some(name) = rest
                            .strip_prefix('"')
                            .and_then(|r| r.split_once('"'))
                            .map(|(name, _)| name)
                            .filter(|name| name.starts_with("butler_memory_"))
                        {
                            found.insert(name.to_owned(), kind);
                        }
                    }
                }
            }
        }
        found
    }

    #[test]
    fn every_recorded_family_is_described_with_its_kind() {
        let recorded = recorded();
        assert!(
            recorded.len() > 20,
            "the scan found too little: {recorded:?}"
        );
        for (name, kind) in &recorded {
            let family = FAMILIES
                .iter()
                .find(|f| f.name == name)
                .unwrap_or_else(|| panic!("{name} is recorded but not in the catalogue"));
            let described = match family.kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
                Kind::Seconds | Kind::LongSeconds | Kind::Sizes | Kind::Ratios => "histogram",
            };
            assert_eq!(described, *kind, "{name}");
            if matches!(family.kind, Kind::Seconds | Kind::LongSeconds) {
                assert!(
                    name.ends_with("_seconds"),
                    "{name}: durations are named in seconds"
                );
            }
        }
        for family in FAMILIES {
            assert!(
                recorded.contains_key(family.name),
                "{} is described but never recorded",
                family.name
            );
            assert!(!family.help.is_empty());
            let counter = family.kind == Kind::Counter;
            assert_eq!(counter, family.name.ends_with("_total"), "{}", family.name);
        }
    }
}
