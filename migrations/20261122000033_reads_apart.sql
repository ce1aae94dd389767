-- Reads are tallied apart from the records they read (docs/benchmarks.md, "Reads tallied
-- apart"). Every search bumps `reference_count` and `last_referenced_at` of what it returns;
-- written into the records, each bump rewrote a row of about two kilobytes (its embedding is
-- stored inline), and a quarter of those rewrites found no room in their page and inserted a
-- new entry into every index of the table, the HNSW graph included: the largest statement a
-- search left behind. A tally here is a narrow row, updated in place.
--
-- A record's `last_referenced_at` is still written into the record when a read finds it
-- older than `shards.reference_date_resolution_secs` (an hour): recency scores candidates
-- by it, and decays over days. That write folds the record's tally into it and deletes the
-- tally. Between two such writes the reads count here, and every record read adds its tally
-- (store/columns.rs), so a record shows its exact count and the time of its last read.
--
-- The columns are named apart from the records' `tenant_id` and `id` so that a record's
-- column list can find its tally by its own unqualified columns.
CREATE TABLE memory_reads (
    memory_tenant_id TEXT NOT NULL,
    memory_id        UUID NOT NULL,
    reads            INTEGER NOT NULL,
    last_read_at     TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (memory_tenant_id, memory_id)
) WITH (fillfactor = 70);

-- Deleted records take their tallies: once per statement, over the rows it deleted (a purge,
-- the cleanup's batches), whichever partition of episodes they were in. A retired month's
-- tallies are deleted with it (store/episode_partitions.rs: TRUNCATE fires no trigger).
-- A flush that read a record just before a purge of it committed can still write its tally
-- after: a count and a time under an id no record has, which nothing reads.
CREATE FUNCTION drop_deleted_reads() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM memory_reads r USING deleted d
    WHERE r.memory_tenant_id = d.tenant_id AND r.memory_id = d.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER episodes_drop_reads AFTER DELETE ON episodes
    REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION drop_deleted_reads();
CREATE TRIGGER facts_drop_reads AFTER DELETE ON facts
    REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION drop_deleted_reads();
CREATE TRIGGER rules_drop_reads AFTER DELETE ON rules
    REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION drop_deleted_reads();
