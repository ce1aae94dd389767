-- Episodes partitioned by month (issue 21, docs/scaling.md): `episodes` becomes a table
-- partitioned by range of `id`, one partition per calendar month (UTC) of the time a UUIDv7
-- id begins with, which is the episode's `created_at` (the service stamps ids with it). The
-- primary key `(tenant_id, id)` already holds the partition key, so it and every lookup by
-- id stay as they are. Ids that are not time-ordered (an imported bundle's remapped ids, a
-- time far off) go to a default partition. The service makes each month's partition ahead
-- (`lifecycle.episode_partitions_ahead`), and episode cleanup empties and drops a past month
-- whose episodes have all expired as one operation instead of deleting them row by row
-- (`store/episode_partitions.rs`).
--
-- The idempotency key, unique per (tenant, butler, key), cannot be a unique index of a
-- partitioned table without the partition key: it moves to `episode_keys`, written by the
-- group commit's statement before the episode it admits (the same ON CONFLICT DO NOTHING
-- as before, on that table). A key lives as long as its episode: deleting an episode
-- deletes its key (a statement trigger), as dropping the unique index's row did.
--
-- Everything else is as before: columns, checks, indexes, the counting triggers, storage
-- and statistics settings (set on each partition: a partitioned table has no storage).
-- Existing episodes are copied in one transaction; indexes are built after the copy.

ALTER TABLE episodes RENAME TO episodes_unpartitioned;
ALTER TABLE episodes_unpartitioned RENAME CONSTRAINT episodes_pkey TO episodes_unpartitioned_pkey;
DROP INDEX episodes_embedding, episodes_idempotency, episodes_search, episodes_session_order,
           episodes_shard_embedded, episodes_shard_expiry, episodes_shard_recent,
           episodes_unconsolidated, episodes_unembedded;

CREATE TABLE episodes (
    id                          UUID NOT NULL,
    tenant_id                   TEXT NOT NULL,
    butler                      TEXT NOT NULL,
    session_id                  TEXT,
    content                     TEXT NOT NULL CHECK (content <> ''),
    embedding                   vector(384),
    embedding_version_id        SMALLINT REFERENCES embedding_versions (id),
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
    search_vector               tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english'::regconfig, content), 'A')
        || setweight(jsonb_to_tsvector('english'::regconfig, metadata, '["string"]'), 'C')) STORED,
    CONSTRAINT episodes_check CHECK (expires_at > created_at),
    CONSTRAINT episodes_embedding_versioned CHECK ((embedding IS NULL) = (embedding_version_id IS NULL)),
    PRIMARY KEY (tenant_id, id)
) PARTITION BY RANGE (id);

-- The smallest UUIDv7 of the millisecond `at` (UTC): a month's partition holds the ids from
-- its first instant's floor to the next month's.
CREATE FUNCTION episodes_id_floor(at timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT (lpad(to_hex(greatest(0, floor(extract(epoch FROM at) * 1000))::bigint), 12, '0')
            || repeat('0', 20))::uuid
$$;

-- Creates the partition of the month holding `at` (UTC) unless it exists; answers its name,
-- or NULL when the default partition already holds episodes of that month (they stay
-- there, still found: a partition cannot be made over rows it would take).
CREATE FUNCTION episodes_month(at timestamptz) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    -- Month arithmetic on UTC wall times (see memory_events_month).
    first timestamptz := date_trunc('month', at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    next  timestamptz := (date_trunc('month', at AT TIME ZONE 'UTC') + interval '1 month')
                         AT TIME ZONE 'UTC';
    name  text := 'episodes_' || to_char(first AT TIME ZONE 'UTC', 'YYYY_MM');
    col   record;
BEGIN
    -- Instances keeping the partitions at the same moment take turns.
    PERFORM pg_advisory_xact_lock(hashtextextended('episodes partitions', 0));
    IF to_regclass(name) IS NOT NULL THEN
        RETURN name;
    END IF;
    IF to_regclass('episodes_default') IS NOT NULL AND EXISTS (
        SELECT 1 FROM episodes_default
        WHERE id >= episodes_id_floor(first) AND id < episodes_id_floor(next)) THEN
        RETURN NULL;
    END IF;
    -- The storage settings of migrations 7 and 10: room for reference bumps on the page,
    -- vacuum and analyse after 5 % new rows.
    EXECUTE format(
        'CREATE TABLE %I PARTITION OF episodes
             FOR VALUES FROM (%L) TO (%L)
             WITH (fillfactor = 85, autovacuum_vacuum_insert_scale_factor = 0.05,
                   autovacuum_analyze_scale_factor = 0.05)',
        name, episodes_id_floor(first), episodes_id_floor(next));
    -- A partition is analysed on its own: with the parent's statistics targets.
    FOR col IN
        SELECT attname, attstattarget FROM pg_attribute
        WHERE attrelid = 'episodes'::regclass AND attnum > 0 AND NOT attisdropped
          AND attstattarget >= 0
    LOOP
        EXECUTE format('ALTER TABLE %I ALTER COLUMN %I SET STATISTICS %s',
                       name, col.attname, col.attstattarget);
    END LOOP;
    RETURN name;
END;
$$;

CREATE TABLE episodes_default PARTITION OF episodes DEFAULT
    WITH (fillfactor = 85, autovacuum_vacuum_insert_scale_factor = 0.05,
          autovacuum_analyze_scale_factor = 0.05);

-- The statistics targets of migrations 12 and 14, before any partition copies them.
DO $$
DECLARE
    col record;
BEGIN
    FOR col IN
        SELECT attname, attstattarget FROM pg_attribute
        WHERE attrelid = 'episodes_unpartitioned'::regclass AND attnum > 0
          AND NOT attisdropped AND attstattarget >= 0
    LOOP
        EXECUTE format('ALTER TABLE episodes ALTER COLUMN %I SET STATISTICS %s',
                       col.attname, col.attstattarget);
    END LOOP;
END
$$;
ALTER TABLE episodes_default ALTER COLUMN content SET STATISTICS 0;
ALTER TABLE episodes_default ALTER COLUMN metadata SET STATISTICS 0;
ALTER TABLE episodes_default ALTER COLUMN embedding SET STATISTICS 0;
ALTER TABLE episodes_default ALTER COLUMN search_vector SET STATISTICS 0;
ALTER TABLE episodes_default ALTER COLUMN last_consolidation_error SET STATISTICS 0;

-- A partition for every month whose ids the table holds, and for this month and the next.
-- An id that is not a UUIDv7 (version nibble other than 7) belongs to no month.
SELECT episodes_month(month)
FROM (SELECT DISTINCT date_trunc('month', to_timestamp(
                          ('x' || substr(replace(id::text, '-', ''), 1, 12))::bit(48)::bigint
                          / 1000.0) AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS month
      FROM episodes_unpartitioned WHERE substr(id::text, 15, 1) = '7'
      UNION SELECT now() UNION SELECT now() + interval '1 month') AS months
WHERE month BETWEEN timestamptz '2000-01-01' AND now() + interval '1 year';

INSERT INTO episodes
    (id, tenant_id, butler, session_id, content, embedding, embedding_version_id, importance,
     reference_count, consolidation_status, consolidation_attempts, last_consolidation_error,
     next_consolidation_retry_at, consolidation_job_id, idempotency_key, created_at,
     last_referenced_at, expires_at, forgotten_at, metadata, request_id)
SELECT id, tenant_id, butler, session_id, content, embedding, embedding_version_id, importance,
       reference_count, consolidation_status, consolidation_attempts, last_consolidation_error,
       next_consolidation_retry_at, consolidation_job_id, idempotency_key, created_at,
       last_referenced_at, expires_at, forgotten_at, metadata, request_id
FROM episodes_unpartitioned;

-- The idempotency keys, one row per key, pointing at the episode that holds it.
CREATE TABLE episode_keys (
    tenant_id       TEXT NOT NULL,
    butler          TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    episode_id      UUID NOT NULL,
    PRIMARY KEY (tenant_id, butler, idempotency_key)
);
INSERT INTO episode_keys (tenant_id, butler, idempotency_key, episode_id)
SELECT tenant_id, butler, idempotency_key, id FROM episodes_unpartitioned
WHERE idempotency_key IS NOT NULL;

DROP TABLE episodes_unpartitioned;

-- The constraints' names as they were (while the old table stood, new ones took a suffix).
DO $$
DECLARE
    c record;
BEGIN
    FOR c IN SELECT conname FROM pg_constraint
             WHERE conrelid = 'episodes'::regclass AND conname ~ '_[a-z]+1$'
    LOOP
        EXECUTE format('ALTER TABLE episodes RENAME CONSTRAINT %I TO %I',
                       c.conname, left(c.conname, -1));
    END LOOP;
END
$$;

-- The indexes of migrations 2, 3, 5, 6, 8, 10 and 11, built once the rows are in (on every
-- partition, and on each one made later).
CREATE INDEX episodes_shard_recent ON episodes (tenant_id, butler, created_at DESC, id);
CREATE INDEX episodes_unconsolidated ON episodes (tenant_id, butler, created_at, id)
    WHERE consolidation_status = 'pending';
CREATE INDEX episodes_unembedded ON episodes (created_at, id) WHERE embedding IS NULL;
CREATE INDEX episodes_embedding ON episodes USING hnsw (embedding vector_cosine_ops);
CREATE INDEX episodes_session_order ON episodes (tenant_id, butler, session_id, created_at, id)
    WHERE session_id IS NOT NULL;
CREATE INDEX episodes_search ON episodes USING GIN (search_vector)
    WITH (gin_pending_list_limit = 128);
CREATE INDEX episodes_shard_expiry ON episodes (tenant_id, butler, expires_at);
CREATE INDEX episodes_shard_embedded ON episodes (tenant_id, butler) WHERE embedding IS NOT NULL;

-- The counting triggers of migration 19.
CREATE TRIGGER episodes_counted_update AFTER UPDATE ON episodes
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_episode_changes();
CREATE TRIGGER episodes_counted_delete AFTER DELETE ON episodes
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_episode_changes();

-- A deleted episode frees its key.
CREATE FUNCTION episode_keys_release() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM episode_keys k USING old_rows o
    WHERE o.idempotency_key IS NOT NULL AND k.tenant_id = o.tenant_id
      AND k.butler = o.butler AND k.idempotency_key = o.idempotency_key AND k.episode_id = o.id;
    RETURN NULL;
END $$;
CREATE TRIGGER episodes_keys_released AFTER DELETE ON episodes
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION episode_keys_release();
