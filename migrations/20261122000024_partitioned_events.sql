-- The audit stream partitioned by month (issue 21, docs/scaling.md): `memory_events` becomes
-- a table partitioned by range of `occurred_at`, one partition per calendar month (UTC),
-- created ahead by the service (`events.partition_months_ahead`), and a default partition
-- for events outside them (an imported bundle's old events, a clock far off). Old months can
-- then be dropped whole under an explicit retention policy (`events.retain_months`, default
-- 0: keep everything) instead of never, and queries that name a time range read only its
-- months.
--
-- A partitioned table's unique keys must hold its partition key: the primary key becomes
-- (tenant_id, id, occurred_at). Ids still come from one sequence, so an id is still unique.
-- Everything else is as before: the append-only triggers (with the purge's one exception),
-- the shard numbering trigger, the statistics targets, the autovacuum settings (set on each
-- partition: a partitioned table has no storage of its own).
--
-- Existing events are copied with their ids, in one transaction; the identity sequence
-- continues from the last id.

ALTER TABLE memory_events RENAME TO memory_events_unpartitioned;
ALTER TABLE memory_events_unpartitioned RENAME CONSTRAINT memory_events_pkey TO memory_events_unpartitioned_pkey;
ALTER INDEX memory_events_entity RENAME TO memory_events_unpartitioned_entity;

CREATE TABLE memory_events (
    id            BIGINT GENERATED ALWAYS AS IDENTITY,
    tenant_id     TEXT NOT NULL,
    event_type    TEXT NOT NULL CHECK (event_type <> ''),
    entity_type   TEXT NOT NULL CHECK (entity_type IN ('episode', 'fact', 'rule')),
    entity_id     UUID NOT NULL,
    occurred_at   TIMESTAMPTZ NOT NULL,
    actor         TEXT NOT NULL,
    request_id    TEXT,
    subrequest_id TEXT,
    segment_id    TEXT,
    payload       JSONB NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(payload) = 'object'),
    scope         TEXT,
    butler        TEXT,
    -- Every event written since migration 21 has its shard's number (the trigger below
    -- gives one to an event that comes without); older ones have none.
    shard_seq     BIGINT CHECK (shard_seq > 0),
    PRIMARY KEY (tenant_id, id, occurred_at)
) PARTITION BY RANGE (occurred_at);

CREATE INDEX memory_events_entity ON memory_events (tenant_id, entity_type, entity_id, id);

-- Creates the partition of the month holding `at` (UTC) unless it exists; answers its
-- name, or NULL when the default partition already holds events of that month (they
-- stay there, still found: a partition cannot be made over rows it would take).
CREATE FUNCTION memory_events_month(at timestamptz) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    -- Month arithmetic on UTC wall times: on a timestamptz it would follow the session's
    -- time zone across daylight saving changes.
    first timestamptz := date_trunc('month', at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    next  timestamptz := (date_trunc('month', at AT TIME ZONE 'UTC') + interval '1 month')
                         AT TIME ZONE 'UTC';
    name  text := 'memory_events_' || to_char(first AT TIME ZONE 'UTC', 'YYYY_MM');
    col   record;
BEGIN
    -- Instances keeping the partitions at the same moment take turns.
    PERFORM pg_advisory_xact_lock(hashtextextended('memory_events partitions', 0));
    IF to_regclass(name) IS NOT NULL THEN
        RETURN name;
    END IF;
    IF to_regclass('memory_events_default') IS NOT NULL AND EXISTS (
        SELECT 1 FROM memory_events_default
        WHERE occurred_at >= first AND occurred_at < next) THEN
        RETURN NULL;
    END IF;
    EXECUTE format(
        'CREATE TABLE %I PARTITION OF memory_events FOR VALUES FROM (%L) TO (%L)
         WITH (autovacuum_vacuum_insert_scale_factor = 0.05,
               autovacuum_analyze_scale_factor = 0.05)',
        name, first, next);
    -- A partition is analysed on its own: with the parent's statistics targets.
    FOR col IN
        SELECT attname, attstattarget FROM pg_attribute
        WHERE attrelid = 'memory_events'::regclass AND attnum > 0 AND NOT attisdropped
          AND attstattarget >= 0
    LOOP
        EXECUTE format('ALTER TABLE %I ALTER COLUMN %I SET STATISTICS %s',
                       name, col.attname, col.attstattarget);
    END LOOP;
    -- Statement triggers stay on the parent: a partition refuses TRUNCATE on its own.
    EXECUTE format('CREATE TRIGGER memory_events_no_truncate BEFORE TRUNCATE ON %I
                    FOR EACH STATEMENT EXECUTE FUNCTION memory_events_refuse_change()', name);
    RETURN name;
END;
$$;

CREATE TABLE memory_events_default PARTITION OF memory_events DEFAULT
    WITH (autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05);
CREATE TRIGGER memory_events_no_truncate BEFORE TRUNCATE ON memory_events_default
    FOR EACH STATEMENT EXECUTE FUNCTION memory_events_refuse_change();

-- A partition for every month that holds events, and for this month and the next.
SELECT memory_events_month(month)
FROM (SELECT DISTINCT date_trunc('month', occurred_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS month
      FROM memory_events_unpartitioned
      UNION SELECT now() UNION SELECT now() + interval '1 month') AS months;

-- The statistics targets of migrations 12 and 14 (set on every partition made so far; the
-- function above copies them to later ones).
ALTER TABLE memory_events ALTER COLUMN payload SET STATISTICS 0;
ALTER TABLE memory_events ALTER COLUMN shard_seq SET STATISTICS 0;
DO $$
DECLARE
    col text;
BEGIN
    FOREACH col IN ARRAY ARRAY['id', 'tenant_id', 'event_type', 'entity_type', 'entity_id',
                               'occurred_at', 'actor', 'request_id', 'subrequest_id',
                               'segment_id', 'scope', 'butler']
    LOOP
        EXECUTE format('ALTER TABLE memory_events ALTER COLUMN %I SET STATISTICS 10', col);
    END LOOP;
END
$$;

INSERT INTO memory_events OVERRIDING SYSTEM VALUE
SELECT id, tenant_id, event_type, entity_type, entity_id, occurred_at, actor, request_id,
       subrequest_id, segment_id, payload, scope, butler, shard_seq
FROM memory_events_unpartitioned;

SELECT setval(pg_get_serial_sequence('memory_events', 'id'),
              COALESCE((SELECT max(id) FROM memory_events), 0) + 1, false);

-- The old table goes, with its triggers (which refuse changes to rows, not a DROP) and its
-- sequence, whose name the new one takes.
DROP TABLE memory_events_unpartitioned;
DO $$
BEGIN
    EXECUTE format('ALTER SEQUENCE %s RENAME TO memory_events_id_seq',
                   pg_get_serial_sequence('memory_events', 'id'));
END
$$;

CREATE TRIGGER memory_events_no_update_or_delete
    BEFORE UPDATE OR DELETE ON memory_events
    FOR EACH ROW EXECUTE FUNCTION memory_events_refuse_change();
CREATE TRIGGER memory_events_no_truncate
    BEFORE TRUNCATE ON memory_events
    FOR EACH STATEMENT EXECUTE FUNCTION memory_events_refuse_change();
CREATE TRIGGER memory_events_shard_seq
    BEFORE INSERT ON memory_events
    FOR EACH ROW WHEN (NEW.shard_seq IS NULL)
    EXECUTE FUNCTION memory_events_shard_seq();
