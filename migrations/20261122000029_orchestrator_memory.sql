-- The orchestrator memory (orchestrator_memory_subsystem.md, issue 23): typed memory nodes
-- linked by typed edges, each with its provenance, per orchestrator. DECISIONS.md #1: the
-- spec's per-orchestrator SQLite store is per-orchestrator isolation in this database, and an
-- orchestrator is a tenant (`tenant_id` is its `orchestratorId`). The spec's logical tables
-- map as follows: `memories` -> `orchestrator_memories`; `memory_edges` ->
-- `orchestrator_edges`; `memory_sources` -> `orchestrator_sources`; `memory_embeddings` ->
-- the nodes' `embedding` column and its HNSW index; `memory_fts` -> their `search_vector` and
-- its GIN index.
--
-- Every closed set and bound of the spec is a CHECK, so the database refuses what the types
-- refuse. Edges join nodes of one orchestrator only (their foreign keys carry `tenant_id`).

-- Each distinct provenance once: nodes captured from the same place point at one row.
CREATE TABLE orchestrator_sources (
    tenant_id        TEXT NOT NULL,
    id               UUID NOT NULL,
    source_type      TEXT NOT NULL CHECK (source_type IN
                         ('workflow_output', 'channel_transcript', 'ingest_file', 'diagnostics', 'manual')),
    -- Absolute and canonical: starts at the root, no `.` or `..` part, no empty part, no
    -- trailing separator (the service canonicalises before it stores).
    source_path      TEXT CHECK (source_path IS NULL OR source_path = '/' OR (
                         source_path LIKE '/%' AND source_path NOT LIKE '%/' AND source_path NOT LIKE '%//%'
                         AND source_path NOT LIKE '%/./%' AND source_path NOT LIKE '%/../%'
                         AND source_path NOT LIKE '%/.' AND source_path NOT LIKE '%/..')),
    conversation_id  TEXT CHECK (conversation_id <> ''),
    workflow_run_id  TEXT CHECK (workflow_run_id <> ''),
    step_id          TEXT CHECK (step_id <> ''),
    captured_by      TEXT NOT NULL CHECK (captured_by IN ('extractor', 'user', 'system')),
    -- sha256 of every field: the same provenance is one row.
    fingerprint      BYTEA NOT NULL CHECK (length(fingerprint) = 32),
    created_at       TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, fingerprint),
    CHECK (source_type <> 'ingest_file' OR source_path IS NOT NULL)
);

CREATE TABLE orchestrator_memories (
    tenant_id            TEXT NOT NULL,
    id                   UUID NOT NULL,
    node_type            TEXT NOT NULL CHECK (node_type IN
                             ('Fact', 'Preference', 'Decision', 'Identity', 'Event', 'Observation', 'Goal', 'Todo')),
    importance           SMALLINT NOT NULL CHECK (importance BETWEEN 0 AND 100),
    content              TEXT NOT NULL CHECK (content <> '' AND content = btrim(content)),
    summary              TEXT NOT NULL CHECK (summary <> '' AND char_length(summary) <= 280),
    confidence           DOUBLE PRECISION NOT NULL CHECK (confidence >= 0 AND confidence <= 1),
    source_id            UUID NOT NULL,
    status               TEXT NOT NULL CHECK (status IN ('active', 'superseded', 'retracted')),
    -- sha256 of type and content: the same typed content is one node, however often captured.
    fingerprint          BYTEA NOT NULL CHECK (length(fingerprint) = 32),
    embedding            vector(384),
    embedding_version_id SMALLINT REFERENCES embedding_versions (id),
    search_vector        tsvector GENERATED ALWAYS AS (
                             setweight(to_tsvector('english'::regconfig, summary), 'B')
                             || setweight(to_tsvector('english'::regconfig, content), 'A')) STORED,
    created_at           TIMESTAMPTZ NOT NULL,
    updated_at           TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, id),
    UNIQUE (tenant_id, fingerprint),
    FOREIGN KEY (tenant_id, source_id) REFERENCES orchestrator_sources (tenant_id, id),
    CHECK (updated_at >= created_at)
);

CREATE INDEX orchestrator_memories_live ON orchestrator_memories (tenant_id, node_type, updated_at DESC)
    WHERE status = 'active';
CREATE INDEX orchestrator_memories_search ON orchestrator_memories USING GIN (search_vector);
CREATE INDEX orchestrator_memories_embedding ON orchestrator_memories USING hnsw (embedding vector_cosine_ops);
CREATE INDEX orchestrator_memories_unembedded ON orchestrator_memories (tenant_id, created_at, id)
    WHERE embedding IS NULL;

CREATE TABLE orchestrator_edges (
    tenant_id   TEXT NOT NULL,
    id          UUID NOT NULL,
    from_id     UUID NOT NULL,
    to_id       UUID NOT NULL,
    edge_type   TEXT NOT NULL CHECK (edge_type IN ('RelatedTo', 'Updates', 'Contradicts', 'CausedBy', 'PartOf')),
    weight      DOUBLE PRECISION NOT NULL CHECK (weight >= 0 AND weight <= 1),
    reason      TEXT CHECK (reason <> ''),
    created_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, id),
    -- One edge of a type between two nodes: adding it again finds it.
    UNIQUE (tenant_id, from_id, to_id, edge_type),
    FOREIGN KEY (tenant_id, from_id) REFERENCES orchestrator_memories (tenant_id, id),
    FOREIGN KEY (tenant_id, to_id) REFERENCES orchestrator_memories (tenant_id, id),
    CHECK (from_id <> to_id)
);

-- Edges into a node (a node's edges out are found by the unique key).
CREATE INDEX orchestrator_edges_inbound ON orchestrator_edges (tenant_id, to_id);

-- Node and edge writes append to the audit stream like every other mutation. (The check on
-- the entity type was made unnamed in migration 24, beside the old table's: found by its
-- definition.)
DO $$
DECLARE
    name text;
BEGIN
    SELECT conname INTO STRICT name FROM pg_constraint
    WHERE conrelid = 'memory_events'::regclass AND contype = 'c'
      AND pg_get_constraintdef(oid) LIKE '%entity_type%';
    EXECUTE format('ALTER TABLE memory_events DROP CONSTRAINT %I', name);
END
$$;
ALTER TABLE memory_events ADD CONSTRAINT memory_events_entity_type_check
    CHECK (entity_type IN ('episode', 'fact', 'rule', 'orchestrator_memory', 'orchestrator_edge'));
