-- A window's episodes found by index (docs/benchmarks.md, "A narrow window found by its
-- index"). A read in a time window selects episodes by when they happened,
-- `COALESCE(occurred_at, created_at)`, which no index serves and no statistics inform. Its
-- lower bound also bounds `created_at` (nothing is stored before it happens), but nothing
-- bounded a window from above: for a window in the past ("on 15 June", `until`, `as_of`)
-- every episode stored since its start was a candidate, and the planner, knowing no better,
-- scanned the tenant's episodes or walked the vector index through all of them to find a
-- day's few. The search now adds what the window implies (store/search/window.rs): stored in
-- the window, or said to have happened in it. The first the `(tenant_id, butler, created_at)`
-- index serves; the second this one, which holds only the episodes stored with a time of
-- their own (imports, an outbox's late sends): an episode stored live has its predicate
-- tested and adds no entry.
CREATE INDEX episodes_shard_occurred ON episodes (tenant_id, butler, occurred_at)
    WHERE occurred_at IS NOT NULL;
