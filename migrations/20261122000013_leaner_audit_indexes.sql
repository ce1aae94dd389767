-- Every write appends events, so every index on memory_events is paid on every write:
-- B-tree inserts were a third of a write backend's time in a burst of batches
-- (perf, docs/benchmarks.md). Two of the four served no reader of their own:
--
-- - (tenant_id, request_id) had no query at all: request ids are kept in the stream for
--   trace correlation and returned with each event, not looked up by.
-- - (id) alone: every read of the stream is a tenant's (its cursor pages by id inside the
--   tenant, events of an entity are the tenant's), so the primary key is (tenant_id, id),
--   which serves those reads, and ids stay unique by their identity sequence.
DROP INDEX memory_events_request;
CREATE UNIQUE INDEX memory_events_tenant_id ON memory_events (tenant_id, id);
ALTER TABLE memory_events
    DROP CONSTRAINT memory_events_pkey,
    ADD CONSTRAINT memory_events_pkey PRIMARY KEY USING INDEX memory_events_tenant_id;
DROP INDEX memory_events_tenant_stream;
