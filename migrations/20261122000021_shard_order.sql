-- Several service instances on one database (issue 21): the writes of one shard
-- (tenant_id, butler) commit in one total order, whichever instance received them, and the
-- audit stream shows it.
--
-- Every transaction that appends events for a shard takes the next number of the shard's
-- head (`shard_heads.seq`, bumped under the head row's lock, held until commit), and every
-- event it appends for that shard carries it as `shard_seq`. The next transaction of the
-- shard, on any instance, waits for the lock, so numbers follow commit order with no gaps
-- (a transaction that rolls back takes its number back with it). Within one number,
-- events are in id order; and ids are drawn under the lock, so within a shard id order is
-- the shard's order: the audit stream, read in id order, shows it. An event's shard is its record's butler (`butler`), or
-- `_tenant` for records written without one, as for the shard actors (DECISIONS.md #13).
--
-- A transaction takes a number once per shard, however many events it appends: the numbers
-- it took are remembered in a transaction-local setting. (Bumping the head once per event
-- would put a new version of the same row per event into one transaction, and a sweep's
-- thousands of events would each walk that chain.) The episode group commit takes its
-- numbers in its own statement, for all the shards of the batch in key order, and sets
-- `shard_seq` itself; the trigger leaves such rows alone.
--
-- The sum of a tenant's heads moves with every write of the tenant: instances compare it
-- to know that another instance wrote (their read caches are then stale).
--
-- Events appended before this migration have no number: one instance wrote them, in id
-- order.
CREATE TABLE shard_heads (
    tenant_id TEXT NOT NULL,
    butler    TEXT NOT NULL,
    seq       BIGINT NOT NULL CHECK (seq > 0),
    PRIMARY KEY (tenant_id, butler)
);
-- Updated by every write: leave room on each page for the new versions (HOT updates).
ALTER TABLE shard_heads SET (fillfactor = 50);

ALTER TABLE memory_events ADD COLUMN shard_seq BIGINT;
-- Events are analysed every few seconds in a burst: a small sample, as for every column of
-- the table (migration 14); no plan filters on it.
ALTER TABLE memory_events ALTER COLUMN shard_seq SET STATISTICS 0;
ALTER TABLE memory_events
    ADD CONSTRAINT memory_events_shard_seq CHECK (shard_seq IS NOT NULL AND shard_seq > 0) NOT VALID;

CREATE FUNCTION memory_events_shard_seq() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    shard text := coalesce(NEW.butler, '_tenant');
    -- Numbers taken by this transaction: 'md5(tenant/butler)=seq;' entries.
    taken text := coalesce(current_setting('butler_memory.shard_seqs', true), '');
    mark text := md5(NEW.tenant_id || '/' || shard) || '=';
    at int := strpos(taken, mark);
BEGIN
    IF at > 0 THEN
        NEW.shard_seq := split_part(substr(taken, at + length(mark)), ';', 1)::bigint;
    ELSE
        INSERT INTO shard_heads AS h (tenant_id, butler, seq)
        VALUES (NEW.tenant_id, shard, 1)
        ON CONFLICT (tenant_id, butler) DO UPDATE SET seq = h.seq + 1
        RETURNING h.seq INTO NEW.shard_seq;
        PERFORM set_config('butler_memory.shard_seqs', taken || mark || NEW.shard_seq || ';', true);
        -- The id was drawn before the lock was ours: draw it again, so that every event of
        -- the shard's next number, committed after this one, has a greater id.
        NEW.id := nextval(pg_get_serial_sequence('memory_events', 'id'));
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER memory_events_shard_seq
    BEFORE INSERT ON memory_events
    FOR EACH ROW WHEN (NEW.shard_seq IS NULL)
    EXECUTE FUNCTION memory_events_shard_seq();
