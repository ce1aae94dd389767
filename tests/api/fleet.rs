//! Several service instances on one database (issue 21), as far as built: lifecycle work
//! runs once across them, the writes of one shard commit in one order whichever instance
//! received them, no cached read misses another instance's write, each row is embedded
//! once, and a killed instance loses no acknowledged write.

use crate::helpers::TestApp;

mod caches;
mod crash;
mod dashboard_sessions;
mod distribution;
mod indexing;
mod keyword_counts;
mod lifecycle;
mod replicas;
mod shard_order;

/// The one number `sql` answers, asked of `app`'s database.
async fn count(app: &TestApp, sql: &str) -> i64 {
    let mut conn = app.sql().await;
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .fetch_one(&mut conn)
        .await
        .unwrap()
}
