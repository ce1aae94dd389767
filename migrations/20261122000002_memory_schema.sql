-- The target-state schema of memory_butler.md §5 and memory_project_plan.md, as read with
-- DECISIONS.md. Every table of memory data carries tenant_id. Closed value sets (validity,
-- maturity, permanence, consolidation status, relations, types) are CHECK-constrained so the
-- database itself refuses a state outside them.

-- Which model produced an embedding. A process-wide registry of models (not tenant data);
-- every embedded row points at one, so a model change can re-embed rows version by version.
CREATE TABLE embedding_versions (
    id            SMALLINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    model         TEXT NOT NULL,
    model_sha256  TEXT NOT NULL,
    dimensions    INT NOT NULL CHECK (dimensions > 0),
    pooling       TEXT NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (model, model_sha256)
);

CREATE TABLE episodes (
    id                          UUID PRIMARY KEY,
    tenant_id                   TEXT NOT NULL,
    butler                      TEXT NOT NULL,
    session_id                  TEXT,
    content                     TEXT NOT NULL CHECK (content <> ''),
    embedding                   vector(384),
    embedding_version_id        SMALLINT REFERENCES embedding_versions (id),
    search_vector               tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED,
    importance                  DOUBLE PRECISION NOT NULL DEFAULT 5 CHECK (importance >= 0 AND importance <= 10),
    reference_count             INT NOT NULL DEFAULT 0 CHECK (reference_count >= 0),
    consolidation_status        TEXT NOT NULL DEFAULT 'pending'
                                CHECK (consolidation_status IN ('pending', 'consolidated', 'failed', 'dead_letter')),
    -- Compatibility projection (memory_butler.md §5.1): never written directly.
    consolidated                BOOLEAN GENERATED ALWAYS AS (consolidation_status = 'consolidated') STORED,
    consolidation_attempts      INT NOT NULL DEFAULT 0 CHECK (consolidation_attempts >= 0),
    last_consolidation_error    TEXT,
    next_consolidation_retry_at TIMESTAMPTZ,
    consolidation_job_id        UUID,
    idempotency_key             TEXT,
    created_at                  TIMESTAMPTZ NOT NULL,
    last_referenced_at          TIMESTAMPTZ NOT NULL,
    expires_at                  TIMESTAMPTZ NOT NULL,
    -- Tombstone of memory_forget: excluded from retrieval, restorable.
    forgotten_at                TIMESTAMPTZ,
    metadata                    JSONB NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    request_id                  TEXT,
    CHECK (expires_at > created_at)
);

CREATE INDEX episodes_shard_recent ON episodes (tenant_id, butler, created_at DESC, id);
CREATE INDEX episodes_expires ON episodes (expires_at);
CREATE INDEX episodes_unconsolidated ON episodes (tenant_id, butler, created_at, id)
    WHERE consolidation_status = 'pending';
CREATE INDEX episodes_unembedded ON episodes (created_at, id) WHERE embedding IS NULL;
CREATE UNIQUE INDEX episodes_idempotency ON episodes (tenant_id, butler, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

CREATE TABLE facts (
    id                   UUID PRIMARY KEY,
    tenant_id            TEXT NOT NULL,
    subject              TEXT NOT NULL CHECK (subject <> ''),
    predicate            TEXT NOT NULL CHECK (predicate <> ''),
    content              TEXT NOT NULL CHECK (content <> ''),
    embedding            vector(384),
    embedding_version_id SMALLINT REFERENCES embedding_versions (id),
    search_vector        tsvector GENERATED ALWAYS AS (
                             setweight(to_tsvector('english'::regconfig, subject || ' ' || replace(predicate, '_', ' ')), 'B')
                             || setweight(to_tsvector('english'::regconfig, content), 'A')
                         ) STORED,
    importance           DOUBLE PRECISION NOT NULL DEFAULT 5 CHECK (importance >= 0 AND importance <= 10),
    confidence           DOUBLE PRECISION NOT NULL DEFAULT 1 CHECK (confidence > 0 AND confidence <= 1),
    decay_rate           DOUBLE PRECISION NOT NULL DEFAULT 0.008 CHECK (decay_rate >= 0),
    permanence           TEXT NOT NULL DEFAULT 'standard'
                         CHECK (permanence IN ('permanent', 'stable', 'standard', 'volatile', 'ephemeral')),
    scope                TEXT NOT NULL DEFAULT 'global' CHECK (scope <> ''),
    validity             TEXT NOT NULL DEFAULT 'active'
                         CHECK (validity IN ('active', 'fading', 'superseded', 'expired', 'retracted')),
    source_butler        TEXT,
    -- A plain id, no foreign key: provenance outlives the episode's row (DECISIONS.md #3).
    source_episode_id    UUID,
    supersedes_id        UUID REFERENCES facts (id),
    reference_count      INT NOT NULL DEFAULT 0 CHECK (reference_count >= 0),
    created_at           TIMESTAMPTZ NOT NULL,
    last_confirmed_at    TIMESTAMPTZ NOT NULL,
    last_referenced_at   TIMESTAMPTZ NOT NULL,
    retracted_at         TIMESTAMPTZ,
    tags                 JSONB NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(tags) = 'array'),
    metadata             JSONB NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    request_id           TEXT,
    CHECK ((validity = 'retracted') = (retracted_at IS NOT NULL))
);

-- One live fact per (tenant, scope, subject, predicate); fading is live (DECISIONS.md #4).
CREATE UNIQUE INDEX facts_one_live ON facts (tenant_id, scope, subject, predicate)
    WHERE validity IN ('active', 'fading');
CREATE INDEX facts_tenant_scope_live ON facts (tenant_id, scope)
    WHERE validity IN ('active', 'fading');
CREATE INDEX facts_shard ON facts (tenant_id, source_butler);
CREATE INDEX facts_supersedes ON facts (supersedes_id) WHERE supersedes_id IS NOT NULL;
CREATE INDEX facts_tags ON facts USING GIN (tags);
CREATE INDEX facts_unembedded ON facts (created_at, id) WHERE embedding IS NULL;

CREATE TABLE rules (
    id                   UUID PRIMARY KEY,
    tenant_id            TEXT NOT NULL,
    content              TEXT NOT NULL CHECK (content <> ''),
    original_content     TEXT,
    embedding            vector(384),
    embedding_version_id SMALLINT REFERENCES embedding_versions (id),
    search_vector        tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED,
    scope                TEXT NOT NULL DEFAULT 'global' CHECK (scope <> ''),
    maturity             TEXT NOT NULL DEFAULT 'candidate'
                         CHECK (maturity IN ('candidate', 'established', 'proven', 'anti_pattern')),
    -- Rules have a validity beside their maturity; they are never superseded (DECISIONS.md #5).
    validity             TEXT NOT NULL DEFAULT 'active'
                         CHECK (validity IN ('active', 'fading', 'expired', 'retracted')),
    importance           DOUBLE PRECISION NOT NULL DEFAULT 5 CHECK (importance >= 0 AND importance <= 10),
    confidence           DOUBLE PRECISION NOT NULL DEFAULT 0.5 CHECK (confidence > 0 AND confidence <= 1),
    decay_rate           DOUBLE PRECISION NOT NULL DEFAULT 0.008 CHECK (decay_rate >= 0),
    permanence           TEXT NOT NULL DEFAULT 'standard'
                         CHECK (permanence IN ('permanent', 'stable', 'standard', 'volatile', 'ephemeral')),
    effectiveness_score  DOUBLE PRECISION NOT NULL DEFAULT 0
                         CHECK (effectiveness_score >= 0 AND effectiveness_score <= 1),
    applied_count        INT NOT NULL DEFAULT 0 CHECK (applied_count >= 0),
    success_count        INT NOT NULL DEFAULT 0 CHECK (success_count >= 0),
    harmful_count        INT NOT NULL DEFAULT 0 CHECK (harmful_count >= 0),
    source_butler        TEXT,
    source_episode_id    UUID,
    reference_count      INT NOT NULL DEFAULT 0 CHECK (reference_count >= 0),
    created_at           TIMESTAMPTZ NOT NULL,
    last_applied_at      TIMESTAMPTZ,
    last_evaluated_at    TIMESTAMPTZ,
    last_confirmed_at    TIMESTAMPTZ NOT NULL,
    last_referenced_at   TIMESTAMPTZ NOT NULL,
    retracted_at         TIMESTAMPTZ,
    tags                 JSONB NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(tags) = 'array'),
    metadata             JSONB NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    request_id           TEXT,
    CHECK ((validity = 'retracted') = (retracted_at IS NOT NULL)),
    CHECK ((maturity = 'anti_pattern') <= (original_content IS NOT NULL))
);

CREATE INDEX rules_tenant_scope_live ON rules (tenant_id, scope, maturity)
    WHERE validity IN ('active', 'fading');
CREATE INDEX rules_shard ON rules (tenant_id, source_butler);
CREATE INDEX rules_unembedded ON rules (created_at, id) WHERE embedding IS NULL;

-- The provenance graph: append-oriented, queryable in both directions.
CREATE TABLE memory_links (
    tenant_id   TEXT NOT NULL,
    source_type TEXT NOT NULL CHECK (source_type IN ('episode', 'fact', 'rule')),
    source_id   UUID NOT NULL,
    target_type TEXT NOT NULL CHECK (target_type IN ('episode', 'fact', 'rule')),
    target_id   UUID NOT NULL,
    relation    TEXT NOT NULL
                CHECK (relation IN ('derived_from', 'supports', 'contradicts', 'supersedes', 'related_to')),
    created_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, source_type, source_id, target_type, target_id, relation),
    CHECK (NOT (source_type = target_type AND source_id = target_id))
);

CREATE INDEX memory_links_inbound ON memory_links (tenant_id, target_type, target_id);

-- The append-only audit stream: one row per mutation or lifecycle transition, written in
-- the transaction of the change. The id orders a tenant's stream for cursors.
CREATE TABLE memory_events (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id     TEXT NOT NULL,
    event_type    TEXT NOT NULL CHECK (event_type <> ''),
    entity_type   TEXT NOT NULL CHECK (entity_type IN ('episode', 'fact', 'rule')),
    entity_id     UUID NOT NULL,
    occurred_at   TIMESTAMPTZ NOT NULL,
    actor         TEXT NOT NULL,
    request_id    TEXT,
    subrequest_id TEXT,
    segment_id    TEXT,
    payload       JSONB NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(payload) = 'object')
);

CREATE INDEX memory_events_tenant_stream ON memory_events (tenant_id, id);
CREATE INDEX memory_events_entity ON memory_events (tenant_id, entity_type, entity_id, id);
CREATE INDEX memory_events_request ON memory_events (tenant_id, request_id) WHERE request_id IS NOT NULL;

-- Per-application evidence behind rule effectiveness and maturity (memory_butler.md §13).
CREATE TABLE rule_applications (
    id            UUID PRIMARY KEY,
    tenant_id     TEXT NOT NULL,
    rule_id       UUID NOT NULL REFERENCES rules (id),
    outcome       TEXT NOT NULL CHECK (outcome IN ('helpful', 'harmful')),
    reason        TEXT,
    butler        TEXT,
    actor         TEXT NOT NULL,
    request_id    TEXT,
    subrequest_id TEXT,
    segment_id    TEXT,
    created_at    TIMESTAMPTZ NOT NULL
);

CREATE INDEX rule_applications_rule ON rule_applications (tenant_id, rule_id, created_at);

-- Consolidation job tracking. A job is one bounded batch of one shard's episodes; its
-- idempotency key is derived from the batch, so re-running a batch finds the job again.
CREATE TABLE consolidation_jobs (
    id              UUID PRIMARY KEY,
    tenant_id       TEXT NOT NULL,
    butler          TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    status          TEXT NOT NULL CHECK (status IN ('running', 'succeeded', 'failed')),
    extractor       TEXT NOT NULL,
    episode_ids     UUID[] NOT NULL,
    attempt         INT NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    started_at      TIMESTAMPTZ NOT NULL,
    finished_at     TIMESTAMPTZ,
    error           TEXT,
    output          JSONB,
    UNIQUE (tenant_id, idempotency_key)
);

CREATE INDEX consolidation_jobs_shard ON consolidation_jobs (tenant_id, butler, started_at DESC);

-- One row per item a job extracted: the database refuses to persist the same item twice.
CREATE TABLE consolidation_items (
    tenant_id   TEXT NOT NULL,
    item_key    TEXT NOT NULL,
    job_id      UUID NOT NULL REFERENCES consolidation_jobs (id),
    entity_type TEXT NOT NULL CHECK (entity_type IN ('episode', 'fact', 'rule')),
    entity_id   UUID NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, item_key)
);

-- Runs of the per-shard lifecycle jobs (decay sweep, episode cleanup, consolidation), for
-- "last sweep time" in memory_stats and for operators.
CREATE TABLE lifecycle_runs (
    id          UUID PRIMARY KEY,
    tenant_id   TEXT NOT NULL,
    butler      TEXT NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('decay_sweep', 'episode_cleanup', 'consolidation')),
    started_at  TIMESTAMPTZ NOT NULL,
    finished_at TIMESTAMPTZ,
    result      JSONB NOT NULL DEFAULT '{}'
);

CREATE INDEX lifecycle_runs_shard ON lifecycle_runs (tenant_id, butler, kind, started_at DESC);
