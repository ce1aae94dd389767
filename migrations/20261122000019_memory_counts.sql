-- Read projections for memory_stats and the dashboard (issue 20): what the counts need,
-- kept current by the writers instead of counted from the hot tables on every read.
--
-- memory_counts holds signed deltas: every INSERT, UPDATE and DELETE statement on episodes,
-- facts and rules appends, from its transition tables, one row per (tenant, part, dimension,
-- value) it changed, with the net change (a statement-level trigger: one grouped INSERT per
-- statement, however many rows it wrote). New episodes are the exception: the group commit's
-- own statement counts them (store/episodes.rs), keeping the trigger off the hottest path. A read sums the
-- rows of its tenant; the scheduler folds each tenant's deltas into one row per key every
-- tick (Store::compact_counts), so a read sums a few hundred rows whatever the tenant holds.
-- `part` is a fact's or rule's scope, an episode's butler: the stats' filters.
--
-- memory_days counts episodes per day stored (UTC), butler and consolidation status, the same
-- way (the dashboard's episodes-per-day chart; forgotten episodes are not counted).
--
-- What depends on the time of the read, not on any write (the effective-confidence bands of
-- live facts and rules), is recounted per tenant into memory_bands when a read finds it older
-- than retrieval.stats_bands_max_age_secs (Store::recount_bands); expired episodes and the
-- oldest pending episode come from their partial indexes.
CREATE TABLE memory_counts (
    tenant_id TEXT NOT NULL,
    kind      TEXT NOT NULL CHECK (kind IN ('episode', 'fact', 'rule')),
    part      TEXT NOT NULL,
    dim       TEXT NOT NULL,
    key       TEXT NOT NULL,
    n         BIGINT NOT NULL,
    -- A folded row (one per key) rather than a statement's delta.
    compacted BOOLEAN NOT NULL DEFAULT false
);
CREATE INDEX memory_counts_tenant ON memory_counts (tenant_id, kind, part);
CREATE INDEX memory_counts_deltas ON memory_counts (tenant_id) WHERE NOT compacted;

CREATE TABLE memory_days (
    tenant_id TEXT NOT NULL,
    butler    TEXT NOT NULL,
    day       DATE NOT NULL,
    status    TEXT NOT NULL,
    n         BIGINT NOT NULL,
    compacted BOOLEAN NOT NULL DEFAULT false
);
CREATE INDEX memory_days_tenant ON memory_days (tenant_id, day);
CREATE INDEX memory_days_deltas ON memory_days (tenant_id) WHERE NOT compacted;

-- The facts list filtered by subject (any case), newest first.
CREATE INDEX facts_subject_listing ON facts (tenant_id, lower(subject), id);

CREATE TABLE memory_bands (
    tenant_id  TEXT NOT NULL,
    kind       TEXT NOT NULL CHECK (kind IN ('fact', 'rule')),
    part       TEXT NOT NULL,
    band       TEXT NOT NULL,
    n          BIGINT NOT NULL,
    counted_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX memory_bands_tenant ON memory_bands (tenant_id, kind, part);

-- The keys a row is counted under, per type. `live` rows (active, fading) also count by
-- permanence, maturity and effectiveness band, as memory_stats always has.
CREATE FUNCTION episode_count_keys(status TEXT, forgotten BOOLEAN, version SMALLINT)
RETURNS TABLE (dim TEXT, key TEXT) LANGUAGE sql IMMUTABLE AS $$
    SELECT 'total', ''
    UNION ALL SELECT 'consolidation_status', status
    UNION ALL SELECT 'embedding_version', coalesce(version::text, 'pending')
    UNION ALL SELECT 'flag', 'forgotten' WHERE forgotten
    UNION ALL SELECT 'flag', 'unembedded' WHERE version IS NULL
$$;

CREATE FUNCTION fact_count_keys(validity TEXT, permanence TEXT, version SMALLINT)
RETURNS TABLE (dim TEXT, key TEXT) LANGUAGE sql IMMUTABLE AS $$
    SELECT 'total', ''
    UNION ALL SELECT 'validity', validity
    UNION ALL SELECT 'embedding_version', coalesce(version::text, 'pending')
    UNION ALL SELECT 'permanence', permanence WHERE validity IN ('active', 'fading')
$$;

CREATE FUNCTION rule_count_keys(validity TEXT, maturity TEXT, version SMALLINT,
                                applied INTEGER, effectiveness DOUBLE PRECISION)
RETURNS TABLE (dim TEXT, key TEXT) LANGUAGE sql IMMUTABLE AS $$
    SELECT 'total', ''
    UNION ALL SELECT 'validity', validity
    UNION ALL SELECT 'embedding_version', coalesce(version::text, 'pending')
    UNION ALL SELECT 'maturity', maturity WHERE validity IN ('active', 'fading')
    UNION ALL SELECT 'effectiveness',
                     CASE WHEN applied = 0 THEN 'unrated' WHEN effectiveness < 0.3 THEN 'below_0.3'
                          WHEN effectiveness < 0.6 THEN '0.3_to_0.6' WHEN effectiveness < 0.8 THEN '0.6_to_0.8'
                          ELSE '0.8_and_above' END
              WHERE validity IN ('active', 'fading')
$$;

-- One function per table; each branch reads the transition tables its event has. Rows are
-- grouped by what they are counted under before their keys are expanded: a statement of many
-- similar rows (a group commit of new episodes) expands its keys once, not once per row.
-- Episodes are inserted in one place, the shard's group commit (store/episodes.rs), which
-- counts them in its own statement: a trigger there would lengthen every commit. Their
-- updates and deletes are counted here.
CREATE FUNCTION count_episode_changes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO memory_counts (tenant_id, kind, part, dim, key, n)
        SELECT g.tenant_id, 'episode', g.butler, k.dim, k.key, -sum(g.n)
        FROM (SELECT tenant_id, butler, consolidation_status, forgotten_at IS NOT NULL AS forgotten,
                     embedding_version_id, count(*) AS n
              FROM old_rows GROUP BY 1, 2, 3, 4, 5) g,
             episode_count_keys(g.consolidation_status, g.forgotten, g.embedding_version_id) k
        GROUP BY 1, 2, 3, 4, 5;
        INSERT INTO memory_days (tenant_id, butler, day, status, n)
        SELECT tenant_id, butler, (created_at AT TIME ZONE 'UTC')::date, consolidation_status, -count(*)
        FROM old_rows WHERE forgotten_at IS NULL
        GROUP BY 1, 2, 3, 4;
    ELSE
        INSERT INTO memory_counts (tenant_id, kind, part, dim, key, n)
        SELECT g.tenant_id, 'episode', g.butler, k.dim, k.key, sum(g.n)
        FROM (SELECT tenant_id, butler, consolidation_status, forgotten, embedding_version_id, sum(sign) AS n
              FROM (SELECT 1 AS sign, tenant_id, butler, consolidation_status, forgotten_at IS NOT NULL AS forgotten,
                           embedding_version_id FROM new_rows
                    UNION ALL
                    SELECT -1, tenant_id, butler, consolidation_status, forgotten_at IS NOT NULL,
                           embedding_version_id FROM old_rows) r
              GROUP BY 1, 2, 3, 4, 5 HAVING sum(sign) <> 0) g,
             episode_count_keys(g.consolidation_status, g.forgotten, g.embedding_version_id) k
        GROUP BY 1, 2, 3, 4, 5
        HAVING sum(g.n) <> 0;
        INSERT INTO memory_days (tenant_id, butler, day, status, n)
        SELECT tenant_id, butler, (created_at AT TIME ZONE 'UTC')::date, consolidation_status, sum(sign)
        FROM (SELECT 1 AS sign, tenant_id, butler, created_at, consolidation_status FROM new_rows WHERE forgotten_at IS NULL
              UNION ALL
              SELECT -1, tenant_id, butler, created_at, consolidation_status FROM old_rows WHERE forgotten_at IS NULL) r
        GROUP BY 1, 2, 3, 4
        HAVING sum(sign) <> 0;
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION count_fact_changes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO memory_counts (tenant_id, kind, part, dim, key, n)
        SELECT g.tenant_id, 'fact', g.scope, k.dim, k.key, sum(g.n)
        FROM (SELECT tenant_id, scope, validity, permanence, embedding_version_id, count(*) AS n
              FROM new_rows GROUP BY 1, 2, 3, 4, 5) g,
             fact_count_keys(g.validity, g.permanence, g.embedding_version_id) k
        GROUP BY 1, 2, 3, 4, 5;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO memory_counts (tenant_id, kind, part, dim, key, n)
        SELECT g.tenant_id, 'fact', g.scope, k.dim, k.key, -sum(g.n)
        FROM (SELECT tenant_id, scope, validity, permanence, embedding_version_id, count(*) AS n
              FROM old_rows GROUP BY 1, 2, 3, 4, 5) g,
             fact_count_keys(g.validity, g.permanence, g.embedding_version_id) k
        GROUP BY 1, 2, 3, 4, 5;
    ELSE
        INSERT INTO memory_counts (tenant_id, kind, part, dim, key, n)
        SELECT g.tenant_id, 'fact', g.scope, k.dim, k.key, sum(g.n)
        FROM (SELECT tenant_id, scope, validity, permanence, embedding_version_id, sum(sign) AS n
              FROM (SELECT 1 AS sign, tenant_id, scope, validity, permanence, embedding_version_id FROM new_rows
                    UNION ALL
                    SELECT -1, tenant_id, scope, validity, permanence, embedding_version_id FROM old_rows) r
              GROUP BY 1, 2, 3, 4, 5 HAVING sum(sign) <> 0) g,
             fact_count_keys(g.validity, g.permanence, g.embedding_version_id) k
        GROUP BY 1, 2, 3, 4, 5
        HAVING sum(g.n) <> 0;
    END IF;
    RETURN NULL;
END $$;

CREATE FUNCTION count_rule_changes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO memory_counts (tenant_id, kind, part, dim, key, n)
        SELECT g.tenant_id, 'rule', g.scope, k.dim, k.key, sum(g.n)
        FROM (SELECT tenant_id, scope, validity, maturity, embedding_version_id, applied_count,
                     effectiveness_score, count(*) AS n
              FROM new_rows GROUP BY 1, 2, 3, 4, 5, 6, 7) g,
             rule_count_keys(g.validity, g.maturity, g.embedding_version_id, g.applied_count, g.effectiveness_score) k
        GROUP BY 1, 2, 3, 4, 5;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO memory_counts (tenant_id, kind, part, dim, key, n)
        SELECT g.tenant_id, 'rule', g.scope, k.dim, k.key, -sum(g.n)
        FROM (SELECT tenant_id, scope, validity, maturity, embedding_version_id, applied_count,
                     effectiveness_score, count(*) AS n
              FROM old_rows GROUP BY 1, 2, 3, 4, 5, 6, 7) g,
             rule_count_keys(g.validity, g.maturity, g.embedding_version_id, g.applied_count, g.effectiveness_score) k
        GROUP BY 1, 2, 3, 4, 5;
    ELSE
        INSERT INTO memory_counts (tenant_id, kind, part, dim, key, n)
        SELECT g.tenant_id, 'rule', g.scope, k.dim, k.key, sum(g.n)
        FROM (SELECT tenant_id, scope, validity, maturity, embedding_version_id, applied_count,
                     effectiveness_score, sum(sign) AS n
              FROM (SELECT 1 AS sign, tenant_id, scope, validity, maturity, embedding_version_id, applied_count,
                           effectiveness_score FROM new_rows
                    UNION ALL
                    SELECT -1, tenant_id, scope, validity, maturity, embedding_version_id, applied_count,
                           effectiveness_score FROM old_rows) r
              GROUP BY 1, 2, 3, 4, 5, 6, 7 HAVING sum(sign) <> 0) g,
             rule_count_keys(g.validity, g.maturity, g.embedding_version_id, g.applied_count, g.effectiveness_score) k
        GROUP BY 1, 2, 3, 4, 5
        HAVING sum(g.n) <> 0;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER episodes_counted_update AFTER UPDATE ON episodes
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION count_episode_changes();
CREATE TRIGGER episodes_counted_delete AFTER DELETE ON episodes
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION count_episode_changes();
CREATE TRIGGER facts_counted_insert AFTER INSERT ON facts
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION count_fact_changes();
CREATE TRIGGER facts_counted_update AFTER UPDATE ON facts
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION count_fact_changes();
CREATE TRIGGER facts_counted_delete AFTER DELETE ON facts
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION count_fact_changes();
CREATE TRIGGER rules_counted_insert AFTER INSERT ON rules
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION count_rule_changes();
CREATE TRIGGER rules_counted_update AFTER UPDATE ON rules
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION count_rule_changes();
CREATE TRIGGER rules_counted_delete AFTER DELETE ON rules
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION count_rule_changes();

-- What the tables already hold.
INSERT INTO memory_counts (tenant_id, kind, part, dim, key, n, compacted)
SELECT r.tenant_id, 'episode', r.butler, k.dim, k.key, count(*), true
FROM episodes r, episode_count_keys(r.consolidation_status, r.forgotten_at IS NOT NULL, r.embedding_version_id) k
GROUP BY 1, 2, 3, 4, 5;
INSERT INTO memory_counts (tenant_id, kind, part, dim, key, n, compacted)
SELECT r.tenant_id, 'fact', r.scope, k.dim, k.key, count(*), true
FROM facts r, fact_count_keys(r.validity, r.permanence, r.embedding_version_id) k
GROUP BY 1, 2, 3, 4, 5;
INSERT INTO memory_counts (tenant_id, kind, part, dim, key, n, compacted)
SELECT r.tenant_id, 'rule', r.scope, k.dim, k.key, count(*), true
FROM rules r, rule_count_keys(r.validity, r.maturity, r.embedding_version_id, r.applied_count, r.effectiveness_score) k
GROUP BY 1, 2, 3, 4, 5;
INSERT INTO memory_days (tenant_id, butler, day, status, n, compacted)
SELECT tenant_id, butler, (created_at AT TIME ZONE 'UTC')::date, consolidation_status, count(*), true
FROM episodes WHERE forgotten_at IS NULL
GROUP BY 1, 2, 3, 4;
