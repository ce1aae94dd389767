-- The second stage's token sketches (docs/benchmarks.md, "A second stage"): the signs of
-- fixed projections of each token vector of the text a row is embedded from, written by the
-- indexer with the embedding while the second stage is on (one run of the model gives
-- both), read for a search's candidate set instead of running the model over their texts
-- again. Derived data, like the embedding: never exported, gone with its row. A row without
-- one (embedded before, or while the second stage was off) is read by the model.
ALTER TABLE episodes ADD COLUMN token_sketch bytea;
ALTER TABLE facts ADD COLUMN token_sketch bytea;
ALTER TABLE rules ADD COLUMN token_sketch bytea;

-- No plan reads them: ANALYZE skips them (migration 12), on the partitioned parent, which
-- the months made from now on copy (migration 26), and on every partition made already.
ALTER TABLE episodes ALTER COLUMN token_sketch SET STATISTICS 0;
ALTER TABLE facts ALTER COLUMN token_sketch SET STATISTICS 0;
ALTER TABLE rules ALTER COLUMN token_sketch SET STATISTICS 0;
DO $$
DECLARE
    part regclass;
BEGIN
    FOR part IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'episodes'::regclass
    LOOP
        EXECUTE format('ALTER TABLE %s ALTER COLUMN token_sketch SET STATISTICS 0', part);
    END LOOP;
END
$$;
