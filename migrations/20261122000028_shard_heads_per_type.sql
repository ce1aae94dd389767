-- Other instances' writes invalidate per memory type, as one's own do (issue 21).
--
-- An instance learns that another wrote to a tenant from the tenant's shard heads
-- (migration 21): their sum moves with every write. It could not tell which memory types a
-- write changed, so any move invalidated every cached answer and keyword statistic of the
-- tenant, while an instance alone invalidates per type (an episode write leaves the facts'
-- and rules' statistics valid). With writes mixed into reads that made the shared mode cost
-- 30 % more CPU per call than one instance alone (docs/benchmarks.md).
--
-- Each head now also counts, per memory type, the transactions that changed memories of
-- that type: every transaction that appends an event for an entity of a type bumps the
-- type's count once (the audit stream records every mutation with its entity's type, so a
-- write that changes a type appends an event of that type). Instances compare the counts
-- per type. A head whose number moved while none of its type counts did (a writer that does
-- not know the counts yet, during a rolling upgrade) still invalidates every type.
ALTER TABLE shard_heads
    ADD COLUMN episode_writes BIGINT NOT NULL DEFAULT 0 CHECK (episode_writes >= 0),
    ADD COLUMN fact_writes    BIGINT NOT NULL DEFAULT 0 CHECK (fact_writes >= 0),
    ADD COLUMN rule_writes    BIGINT NOT NULL DEFAULT 0 CHECK (rule_writes >= 0);

-- As migration 21's, and: a transaction's first event of each type bumps that type's count.
-- The numbers taken and the types counted are remembered in the transaction-local setting,
-- 'md5(tenant/butler)=seq;' and 'md5(tenant/butler):type;' entries.
CREATE OR REPLACE FUNCTION memory_events_shard_seq() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    shard text := coalesce(NEW.butler, '_tenant');
    taken text := coalesce(current_setting('butler_memory.shard_seqs', true), '');
    shard_mark text := md5(NEW.tenant_id || '/' || shard);
    mark text := shard_mark || '=';
    type_mark text := shard_mark || ':' || NEW.entity_type || ';';
    at int := strpos(taken, mark);
    episode int := (NEW.entity_type = 'episode')::int;
    fact int := (NEW.entity_type = 'fact')::int;
    rule int := (NEW.entity_type = 'rule')::int;
BEGIN
    IF at > 0 THEN
        NEW.shard_seq := split_part(substr(taken, at + length(mark)), ';', 1)::bigint;
        IF strpos(taken, type_mark) = 0 THEN
            -- The head's row is this transaction's already (locked by its number).
            UPDATE shard_heads
            SET episode_writes = episode_writes + episode,
                fact_writes = fact_writes + fact,
                rule_writes = rule_writes + rule
            WHERE tenant_id = NEW.tenant_id AND butler = shard;
            PERFORM set_config('butler_memory.shard_seqs', taken || type_mark, true);
        END IF;
    ELSE
        INSERT INTO shard_heads AS h (tenant_id, butler, seq, episode_writes, fact_writes, rule_writes)
        VALUES (NEW.tenant_id, shard, 1, episode, fact, rule)
        ON CONFLICT (tenant_id, butler) DO UPDATE
            SET seq = h.seq + 1,
                episode_writes = h.episode_writes + episode,
                fact_writes = h.fact_writes + fact,
                rule_writes = h.rule_writes + rule
        RETURNING h.seq INTO NEW.shard_seq;
        PERFORM set_config('butler_memory.shard_seqs',
                           taken || mark || NEW.shard_seq || ';' || type_mark, true);
        -- The id was drawn before the lock was ours: draw it again, so that every event of
        -- the shard's next number, committed after this one, has a greater id.
        NEW.id := nextval(pg_get_serial_sequence('memory_events', 'id'));
    END IF;
    RETURN NEW;
END;
$$;
