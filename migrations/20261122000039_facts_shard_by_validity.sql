-- A fact window found by index (docs/benchmarks.md, "A narrow window found by its index").
-- A read in a time window selects the facts true at some moment of it, among them
-- `valid_from <= the window's end`; no index served that, so a window before most of a
-- tenant's facts began (an `as_of` a year back in a store that grew since, or a time a
-- query states before a new tenant's first fact) read every fact of the tenant to find a
-- few. The shard index (migration 8: sweeps, listings and purges look a shard's facts up by
-- its two columns) now also holds `valid_from`, which is set when a fact is written and
-- never changed: a window's end is read from it for each of the tenant's shards (PostgreSQL
-- 18 skips from one shard to the next), and a fact write still maintains one index, not two.
DROP INDEX facts_shard;
CREATE INDEX facts_shard ON facts (tenant_id, (COALESCE(source_butler, '_tenant')), valid_from);
