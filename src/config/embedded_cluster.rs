//! The embedded cluster's settings that PostgreSQL would accept but the service would then
//! run badly with: too few connection slots for its pools, autovacuum workers without a
//! slot, asynchronous I/O left one handle a process. Each is refused at start by name.

use butler_memory_actors::EmbeddedPostgresConfig;

/// Every problem of the embedded cluster's settings, for pools of at most `pools`
/// connections.
pub(super) fn problems(embedded: &EmbeddedPostgresConfig, pools: u32) -> Vec<String> {
    [
        slots_problem(embedded, pools),
        autovacuum_problem(embedded),
        io_problem(embedded),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Connections of the embedded cluster kept for what runs beside the service: a command
/// (`export`, `purge`, `rotate-keys` open pools of their own) and an operator's `psql`.
const BESIDE_THE_SERVICE: u32 = 10;

/// Whether the embedded cluster's `max_connections` leaves the service's pools at their
/// largest (`pools`) and what runs beside it room. (Three of the slots are kept for
/// superusers; the service connects as one, so they count for it.)
fn slots_problem(embedded: &EmbeddedPostgresConfig, pools: u32) -> Option<String> {
    let slots = numeric_setting(embedded, "max_connections")?;
    (pools + BESIDE_THE_SERVICE > slots).then(|| {
        format!(
            "embedded_postgres.settings.max_connections: {slots} leaves too few connections: \
             the service's pools open up to {pools} (database.max_connections, \
             retrieval.connections, database.write_connections, one for health checks, four \
             for locks) and {BESIDE_THE_SERVICE} are kept for commands beside it; raise it to \
             at least {} or make the pools smaller",
            pools + BESIDE_THE_SERVICE
        )
    })
}

/// Whether the embedded cluster has a slot for each autovacuum worker it may run: past its
/// slots PostgreSQL runs fewer workers than configured and says so only in its log.
fn autovacuum_problem(embedded: &EmbeddedPostgresConfig) -> Option<String> {
    let slots = numeric_setting(embedded, "autovacuum_worker_slots")?;
    // PostgreSQL's default when the setting is not given.
    let workers = numeric_setting(embedded, "autovacuum_max_workers").unwrap_or(3);
    (workers > slots).then(|| {
        format!(
            "embedded_postgres.settings.autovacuum_max_workers: {workers} workers need as many \
             slots; raise embedded_postgres.settings.autovacuum_worker_slots ({slots}) to at \
             least {workers}"
        )
    })
}

/// Whether the embedded cluster would run asynchronous I/O one operation at a time: the
/// default `io_max_concurrency` of 1 fits only `io_method = sync`, where nothing is in flight
/// past its call; with `worker` or `io_uring` it would silently serialise every read.
fn io_problem(embedded: &EmbeddedPostgresConfig) -> Option<String> {
    // PostgreSQL's default when the setting is not given.
    let method = embedded
        .settings
        .get("io_method")
        .map_or("worker", String::as_str);
    (method != "sync" && numeric_setting(embedded, "io_max_concurrency") == Some(1)).then(|| {
        format!(
            "embedded_postgres.settings.io_max_concurrency: 1 handle a process fits io_method \
             = sync only; with io_method = {method} set it to -1 (PostgreSQL's choice) or more"
        )
    })
}

/// An embedded cluster's setting given as a plain number; none when it is absent or has a
/// unit or form the checks above do not read (PostgreSQL then judges it itself).
fn numeric_setting(embedded: &EmbeddedPostgresConfig, name: &str) -> Option<u32> {
    embedded.settings.get(name)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    /// The embedded cluster must have room for the service's pools at their largest and
    /// for a command beside it; an external database's slots are its operator's.
    #[test]
    fn the_embedded_cluster_has_room_for_the_pools() {
        assert!(Config::from_toml("").is_ok(), "the defaults fit");
        let err = Config::from_toml("[database]\nmax_connections = 24")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("embedded_postgres.settings.max_connections: 40")
                && err.contains("at least 46"),
            "{err}"
        );
        assert!(
            Config::from_toml(
                "[database]\nmax_connections = 24\n\
                 [embedded_postgres.settings]\nmax_connections = 46"
            )
            .is_ok()
        );
        assert!(
            Config::from_toml(
                "database_url = 'postgres://u@h/db'\n[database]\nmax_connections = 24"
            )
            .is_ok()
        );
    }

    /// Autovacuum workers beyond the embedded cluster's slots are refused by name, not left
    /// to a warning in PostgreSQL's log.
    #[test]
    fn the_embedded_cluster_has_a_slot_for_each_autovacuum_worker() {
        let err = Config::from_toml("[embedded_postgres.settings]\nautovacuum_max_workers = '5'")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("autovacuum_max_workers: 5")
                && err.contains("autovacuum_worker_slots (3) to at least 5"),
            "{err}"
        );
        assert!(
            Config::from_toml(
                "[embedded_postgres.settings]\n\
                 autovacuum_max_workers = '5'\nautovacuum_worker_slots = '5'"
            )
            .is_ok()
        );
    }

    /// The default single I/O handle a process is refused beside asynchronous I/O, by name.
    #[test]
    fn asynchronous_io_is_not_left_one_handle_a_process() {
        assert!(
            Config::from_toml("").is_ok(),
            "the defaults: sync I/O, one handle"
        );
        for method in ["worker", "io_uring"] {
            let err = Config::from_toml(&format!(
                "[embedded_postgres.settings]\nio_method = '{method}'"
            ))
            .unwrap_err()
            .to_string();
            assert!(
                err.contains("io_max_concurrency")
                    && err.contains(&format!("io_method = {method}")),
                "{err}"
            );
            assert!(
                Config::from_toml(&format!(
                    "[embedded_postgres.settings]\nio_method = '{method}'\nio_max_concurrency = '-1'"
                ))
                .is_ok()
            );
        }
    }
}
