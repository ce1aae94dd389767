//! Reading single records by id, always inside the caller's tenant.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::episode::Episode;
use crate::domain::fact::Fact;
use crate::domain::memory_type::MemoryType;
use crate::domain::record::{Links, MemoryRecord};
use crate::domain::rule::Rule;
use crate::error::MemoryResult;

use super::columns::{episode_columns, fact_columns, rule_columns};
use super::{Store, links};

impl Store {
    /// One record of the tenant, with its time-dependent fields computed at `now`.
    #[tracing::instrument(target = "otel", name = "db.get_record", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn record(
        &self,
        tenant_id: &str,
        memory_type: MemoryType,
        id: Uuid,
        now: DateTime<Utc>,
    ) -> MemoryResult<Option<MemoryRecord>> {
        let pool = self.pool();
        Ok(match memory_type {
            MemoryType::Episode => sqlx::query_as::<_, Episode>(concat!(
                "SELECT ",
                episode_columns!(),
                " FROM episodes WHERE tenant_id = $1 AND id = $2"
            ))
            .bind(tenant_id)
            .bind(id)
            .fetch_optional(pool)
            .await?
            .map(MemoryRecord::Episode),
            MemoryType::Fact => sqlx::query_as::<_, Fact>(concat!(
                "SELECT ",
                fact_columns!(),
                " FROM facts WHERE tenant_id = $1 AND id = $2"
            ))
            .bind(tenant_id)
            .bind(id)
            .fetch_optional(pool)
            .await?
            .map(|f| MemoryRecord::Fact(f.at(now))),
            MemoryType::Rule => sqlx::query_as::<_, Rule>(concat!(
                "SELECT ",
                rule_columns!(),
                " FROM rules WHERE tenant_id = $1 AND id = $2"
            ))
            .bind(tenant_id)
            .bind(id)
            .fetch_optional(pool)
            .await?
            .map(|r| MemoryRecord::Rule(r.at(now))),
        })
    }

    /// The links out of and into one record of the tenant.
    #[tracing::instrument(target = "otel", name = "db.record_links", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn links(
        &self,
        tenant_id: &str,
        memory_type: MemoryType,
        id: Uuid,
    ) -> MemoryResult<Links> {
        let mut conn = self.pool().acquire().await?;
        links::of(&mut conn, tenant_id, (memory_type, id)).await
    }

    /// Whether a record with this id exists in some other tenant. Only asked after a miss,
    /// so that cross-tenant probing can be logged.
    #[tracing::instrument(target = "otel", name = "db.exists_elsewhere", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn exists_elsewhere(
        &self,
        tenant_id: &str,
        memory_type: MemoryType,
        id: Uuid,
    ) -> MemoryResult<bool> {
        let sql = format!(
            "SELECT EXISTS (SELECT 1 FROM {} WHERE id = $1 AND tenant_id <> $2)",
            memory_type.table()
        );
        Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .bind(tenant_id)
            .fetch_one(self.pool())
            .await?)
    }
}
