//! Reading single records by id, always inside the caller's tenant.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::episode::Episode;
use crate::domain::fact::Fact;
use crate::domain::feedback::StoredApplication;
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

impl Store {
    /// The versions of a fact (its supersession chain both ways), oldest first.
    pub async fn fact_versions(
        &self,
        tenant_id: &str,
        id: Uuid,
        now: DateTime<Utc>,
    ) -> MemoryResult<Vec<Fact>> {
        let mut conn = self.pool().acquire().await?;
        let ids = super::facts::supersession_chains(&mut conn, tenant_id, &[id]).await?;
        let facts: Vec<Fact> = sqlx::query_as(concat!(
            "SELECT ",
            fact_columns!(),
            " FROM facts WHERE tenant_id = $1 AND id = ANY ($2) ORDER BY created_at, id"
        ))
        .bind(tenant_id)
        .bind(&ids)
        .fetch_all(&mut *conn)
        .await?;
        Ok(facts.into_iter().map(|f| f.at(now)).collect())
    }

    /// The facts and rules whose source is the episode, oldest first.
    pub async fn derived_from(
        &self,
        tenant_id: &str,
        episode_id: Uuid,
        now: DateTime<Utc>,
    ) -> MemoryResult<Vec<MemoryRecord>> {
        let facts: Vec<Fact> = sqlx::query_as(concat!(
            "SELECT ",
            fact_columns!(),
            " FROM facts WHERE tenant_id = $1 AND source_episode_id = $2 ORDER BY created_at, id"
        ))
        .bind(tenant_id)
        .bind(episode_id)
        .fetch_all(self.pool())
        .await?;
        let rules: Vec<Rule> = sqlx::query_as(concat!(
            "SELECT ",
            rule_columns!(),
            " FROM rules WHERE tenant_id = $1 AND source_episode_id = $2 ORDER BY created_at, id"
        ))
        .bind(tenant_id)
        .bind(episode_id)
        .fetch_all(self.pool())
        .await?;
        Ok(facts
            .into_iter()
            .map(|f| MemoryRecord::Fact(f.at(now)))
            .chain(rules.into_iter().map(|r| MemoryRecord::Rule(r.at(now))))
            .collect())
    }

    /// A rule's applications, newest first, after the cursor (an application id), and how
    /// many it has in all.
    pub async fn rule_applications(
        &self,
        tenant_id: &str,
        rule_id: Uuid,
        before: Option<Uuid>,
        limit: i64,
    ) -> MemoryResult<(Vec<StoredApplication>, i64)> {
        let total: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM rule_applications WHERE tenant_id = $1 AND rule_id = $2",
        )
        .bind(tenant_id)
        .bind(rule_id)
        .fetch_one(self.pool())
        .await?;
        let items = sqlx::query_as(
            "SELECT id, rule_id, outcome, reason, butler, actor, request_id, created_at
             FROM rule_applications
             WHERE tenant_id = $1 AND rule_id = $2 AND ($3::uuid IS NULL OR id < $3)
             ORDER BY id DESC LIMIT $4",
        )
        .bind(tenant_id)
        .bind(rule_id)
        .bind(before)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        Ok((items, total))
    }
}
