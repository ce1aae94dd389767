-- Write bursts (measured with the load generator, docs/benchmarks.md).
--
-- A GIN index queues new entries in a pending list and merges them into the index when the
-- list outgrows gin_pending_list_limit (4 MB by default). The merge runs inside whichever
-- insert crossed the limit: during a burst that was one episode write in a few hundred
-- taking 200-300 ms, and every search scans the unmerged list on top. Short lists are
-- merged often and cheaply.
ALTER INDEX episodes_search SET (gin_pending_list_limit = 128);
ALTER INDEX facts_search SET (gin_pending_list_limit = 128);
ALTER INDEX rules_search SET (gin_pending_list_limit = 128);

-- Episodes and events grow by insertion only, fast during bursts. Vacuum them after 5% new
-- rows rather than 20% (it also merges the GIN pending list and marks pages all-visible),
-- and refresh planner statistics after 5% change rather than 10%: a table that doubled
-- since it was last analysed gets plans made for the smaller one.
ALTER TABLE episodes SET (
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.05
);
ALTER TABLE memory_events SET (
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.05
);
