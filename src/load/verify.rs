//! After the load, through the public API only: every acknowledged episode (or the
//! scenario's sample of them) read back with `memory_get`; the server's counters read from
//! `/metrics` before and after; the embedding backlog's drain timed from `/metrics`.

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use serde::Serialize;
use serde_json::json;

use super::endpoint::{Endpoint, INSTANCE_SEPARATOR};
use super::target::Shard;

/// Read-backs in flight at once.
const READERS: usize = 16;

/// What reading back found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReadBack {
    /// Episodes read back (the sample).
    pub checked: u64,
    /// Acknowledged, and not there.
    pub lost: u64,
    /// Could not be checked (the read failed otherwise than `not_found`, three times).
    pub unverified: u64,
}

/// Reads back every `1/sample`-th acknowledged episode (a deterministic share of the ids).
pub async fn read_back(
    endpoint: &Endpoint,
    shards: &[Shard],
    acknowledged: &[(usize, u128)],
    sample: f64,
) -> ReadBack {
    let wanted: Vec<&(usize, u128)> = acknowledged
        .iter()
        .filter(|(_, id)| sampled(*id, sample))
        .collect();
    let results: Vec<Result<bool, ()>> = futures::stream::iter(wanted)
        .map(|(shard, id)| async move {
            let shard = &shards[*shard];
            let args = json!({"type": "episode", "id": uuid::Uuid::from_u128(*id),
                              "butler": shard.butler});
            for _ in 0..3 {
                match endpoint
                    .call_value(&shard.key, "memory_get", args.clone())
                    .await
                {
                    Ok(_) => return Ok(true),
                    Err(class) if class == "not_found" => return Ok(false),
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
            Err(())
        })
        .buffer_unordered(READERS)
        .collect()
        .await;
    let mut out = ReadBack::default();
    for result in results {
        out.checked += 1;
        match result {
            Ok(true) => {}
            Ok(false) => out.lost += 1,
            Err(()) => out.unverified += 1,
        }
    }
    out
}

/// Whether `id` is in the sample: the same ids whatever the order they came in.
fn sampled(id: u128, sample: f64) -> bool {
    if sample >= 1.0 {
        return true;
    }
    let mixed = (id as u64) ^ ((id >> 64) as u64);
    (mixed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11) as f64 / (1u64 << 53) as f64 <= sample
}

/// Families that measure the one database, not the instance: every instance of a fleet
/// reports the same value, so the fleet's is one of them, not their sum.
const DATABASE_WIDE: &[&str] = &[
    "butler_memory_embedding_backlog",
    "butler_memory_consolidation_backlog",
];

/// The family `name` over a fleet's `/metrics` (`Endpoint::metrics`): the sum over its
/// instances, or for a family of the database the largest instance's figure.
pub fn family_value(text: &str, name: &str) -> Option<f64> {
    if !DATABASE_WIDE.contains(&name) {
        return family_sum(text, name);
    }
    text.split(INSTANCE_SEPARATOR)
        .filter_map(|instance| family_sum(instance, name))
        .reduce(f64::max)
}

/// The sum of every sample of the family `name` in a Prometheus text exposition (`None`
/// when it has none).
pub fn family_sum(text: &str, name: &str) -> Option<f64> {
    let mut sum = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        // `name{labels} value` or `name value`, not `name_suffix ...`.
        let value = if let Some(labelled) = rest.strip_prefix('{') {
            labelled.rsplit_once('}').map(|(_, v)| v)
        } else if rest.starts_with(' ') {
            Some(rest)
        } else {
            None
        };
        if let Some(v) = value.and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok()) {
            *sum.get_or_insert(0.0) += v;
        }
    }
    sum
}

/// The server's counters a load report shows, as deltas over the run.
pub const COUNTED: &[&str] = &[
    "butler_memory_requests_total",
    "butler_memory_writes_refused_total",
    "butler_memory_degraded_reads_total",
    "butler_memory_indexed_total",
    "butler_memory_supersessions_total",
];

/// The server's gauges a load report shows before and after the run.
pub const GAUGED: &[&str] = &[
    "process_resident_memory_bytes",
    "butler_memory_embedding_backlog",
    "butler_memory_consolidation_backlog",
    "butler_memory_shards",
];

/// How long the embedding backlog took to drain after the load, from `/metrics`.
#[derive(Debug, Clone, Serialize)]
pub struct Drain {
    /// Rows waiting to be embedded when the load ended.
    pub backlog_at_end: Option<f64>,
    /// Seconds until it was 0 (`None`: not within the timeout, or no such metric).
    pub drained_secs: Option<f64>,
}

/// Polls the embedding backlog until it is 0, for at most `timeout`.
pub async fn drain(endpoint: &Endpoint, timeout: Duration) -> Drain {
    let started = Instant::now();
    let mut at_end = None;
    loop {
        let backlog = endpoint
            .metrics()
            .await
            .and_then(|m| family_value(&m, "butler_memory_embedding_backlog"));
        if at_end.is_none() {
            at_end = backlog;
        }
        match backlog {
            Some(b) if b <= 0.0 => {
                return Drain {
                    backlog_at_end: at_end,
                    drained_secs: Some(started.elapsed().as_secs_f64()),
                };
            }
            None => {
                return Drain {
                    backlog_at_end: None,
                    drained_secs: None,
                };
            }
            Some(_) if started.elapsed() >= timeout => {
                return Drain {
                    backlog_at_end: at_end,
                    drained_secs: None,
                };
            }
            Some(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_summed_by_exact_name() {
        let text = "# HELP butler_memory_requests_total x\n\
                    butler_memory_requests_total{tool=\"a\",class=\"ok\"} 3\n\
                    butler_memory_requests_total{tool=\"b\",class=\"ok\"} 4.5\n\
                    butler_memory_requests_total_other 100\n\
                    butler_memory_embedding_backlog 7\n";
        assert_eq!(family_sum(text, "butler_memory_requests_total"), Some(7.5));
        assert_eq!(
            family_sum(text, "butler_memory_embedding_backlog"),
            Some(7.0)
        );
        assert_eq!(family_sum(text, "butler_memory_nothing"), None);
    }

    #[test]
    fn a_fleet_adds_its_counters_but_reports_the_database_once() {
        let one = "butler_memory_requests_total{tool=\"a\"} 3\nbutler_memory_embedding_backlog 7\n";
        let other =
            "butler_memory_requests_total{tool=\"a\"} 4\nbutler_memory_embedding_backlog 6\n";
        let fleet = format!("{one}\n{INSTANCE_SEPARATOR}\n{other}");
        assert_eq!(
            family_value(&fleet, "butler_memory_requests_total"),
            Some(7.0)
        );
        assert_eq!(
            family_value(&fleet, "butler_memory_embedding_backlog"),
            Some(7.0)
        );
        assert_eq!(
            family_value(one, "butler_memory_embedding_backlog"),
            Some(7.0)
        );
    }

    #[test]
    fn a_sample_takes_about_its_share() {
        let ids: Vec<u128> = (0..10_000)
            .map(|_| uuid::Uuid::now_v7().as_u128())
            .collect();
        let taken = ids.iter().filter(|id| sampled(**id, 0.1)).count();
        assert!((800..1200).contains(&taken), "{taken}");
        assert!(ids.iter().all(|id| sampled(*id, 1.0)));
    }
}
