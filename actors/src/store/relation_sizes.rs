//! The service's tables and indexes as PostgreSQL sees them: their size on disk and the live
//! and dead rows of each table, for the metrics an operator watches for bloat (memory_butler.md
//! §9.2, "index bloat"). Read from the catalog and the statistics views: no scan.

use crate::error::MemoryResult;

use super::Store;

/// One table or index of the service's schema.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RelationSize {
    pub relation: String,
    /// `table` or `index`.
    pub kind: String,
    pub bytes: i64,
}

/// A table's live and dead rows, as PostgreSQL's statistics estimate them.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TableRows {
    pub table: String,
    pub live: i64,
    pub dead: i64,
}

impl Store {
    /// Every table and index of the current schema, with its size. A partitioned table or
    /// index (episodes, the audit stream, theirs) is one relation whose size is its
    /// partitions' together; the partitions themselves are not listed, so the series stay
    /// as many whatever the months.
    pub async fn relation_sizes(&self) -> MemoryResult<Vec<RelationSize>> {
        Ok(sqlx::query_as(
            "SELECT c.relname::text AS relation,
                    CASE WHEN c.relkind IN ('i', 'I') THEN 'index' ELSE 'table' END AS kind,
                    CASE WHEN c.relkind IN ('p', 'I') THEN
                             (SELECT coalesce(sum(pg_relation_size(t.relid)), 0)::bigint
                              FROM pg_partition_tree(c.oid) t WHERE t.isleaf)
                         ELSE pg_relation_size(c.oid) END AS bytes
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'i', 'p', 'I')
               AND NOT c.relispartition
             ORDER BY 1",
        )
        .fetch_all(self.pool())
        .await?)
    }

    /// Every table of the current schema, with its live and dead rows (a partitioned
    /// table's partitions counted together, under its name).
    pub async fn table_rows(&self) -> MemoryResult<Vec<TableRows>> {
        Ok(sqlx::query_as(
            "SELECT coalesce(pg_partition_root(relid), relid)::regclass::text AS \"table\",
                    sum(n_live_tup)::bigint AS live, sum(n_dead_tup)::bigint AS dead
             FROM pg_stat_user_tables WHERE schemaname = current_schema()
             GROUP BY 1 ORDER BY 1",
        )
        .fetch_all(self.pool())
        .await?)
    }
}
