-- ANALYZE gathers statistics only for columns a plan can use. Episodes and events are
-- analysed every few seconds during a write burst (migration 10), and the columns below
-- cost most of each run: sorting 30,000 sampled texts, vectors and JSON documents
-- (compare_scalars, ts_typanalyze), for estimates no query asks for. No statement filters
-- or joins on them by value: content and metadata are matched through search_vector, whose
-- query terms are parameters (generic plans use the default selectivity, and the keyword
-- queries choose their index by construction, see store/search.rs); embeddings are ordered
-- by distance, which has no statistics. Measured with the load generator (docs/benchmarks.md).
ALTER TABLE episodes ALTER COLUMN content SET STATISTICS 0;
ALTER TABLE episodes ALTER COLUMN metadata SET STATISTICS 0;
ALTER TABLE episodes ALTER COLUMN embedding SET STATISTICS 0;
ALTER TABLE episodes ALTER COLUMN search_vector SET STATISTICS 0;
ALTER TABLE episodes ALTER COLUMN last_consolidation_error SET STATISTICS 0;
ALTER TABLE memory_events ALTER COLUMN payload SET STATISTICS 0;
