-- Purge (memory_butler.md §10): erasure that keeps the audit honest. A purge deletes a
-- record's rows; its past events stay in the append-only stream, in order, with every value
-- that could hold what was written replaced by a marker. This is the one UPDATE the stream
-- accepts, and only the exact rewrite below: the trigger still refuses every other UPDATE,
-- every DELETE and TRUNCATE.

-- The payload with what could be content erased. Kept: the keys the service itself writes
-- with values from closed sets, ids, numbers it computes and times (`*_at`); descended into:
-- `before`, `after` and `links`. Every other value (content, subject, predicate, tags,
-- metadata, reasons, session ids, errors, and anything not named here) becomes '[purged]',
-- so a key added later is erased until it is named here.
CREATE FUNCTION memory_purge_mask(payload jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    masked jsonb := '{}';
    k text;
    v jsonb;
BEGIN
    FOR k, v IN SELECT * FROM jsonb_each(payload) LOOP
        IF k IN ('before', 'after') AND jsonb_typeof(v) = 'object' THEN
            masked := masked || jsonb_build_object(k, memory_purge_mask(v));
        ELSIF k = 'links' AND jsonb_typeof(v) = 'array' THEN
            masked := masked || jsonb_build_object(k, (
                SELECT COALESCE(jsonb_agg(
                           CASE WHEN jsonb_typeof(e) = 'object' THEN memory_purge_mask(e)
                                ELSE '"[purged]"'::jsonb END ORDER BY n), '[]'::jsonb)
                FROM jsonb_array_elements(v) WITH ORDINALITY AS a (e, n)));
        ELSIF k = 'redacted'
           OR jsonb_typeof(v) IN ('null', 'boolean')
           OR (jsonb_typeof(v) IN ('string', 'number') AND (k LIKE '%\_at' OR k IN (
                'id', 'type', 'tenant_id', 'butler', 'scope', 'source_butler', 'validity',
                'maturity', 'permanence', 'consolidation_status', 'retracted_from',
                'embedding_model', 'outcome', 'relation', 'source_type', 'source_id',
                'target_type', 'target_id', 'source_episode_id', 'supersedes_id',
                'superseded_by', 'fact_id', 'rule_id', 'consolidation_job_id', 'extracted_by',
                'importance', 'confidence', 'effective_confidence', 'decay_rate',
                'effectiveness_score', 'applied_count', 'success_count', 'harmful_count',
                'reference_count', 'consolidation_attempts', 'confirmations'))) THEN
            masked := masked || jsonb_build_object(k, v);
        ELSE
            masked := masked || jsonb_build_object(k, '[purged]');
        END IF;
    END LOOP;
    RETURN masked;
END;
$$;

-- Still append-only, with one exception: inside memory_events_purge, an UPDATE that changes
-- nothing but the payload, and changes it into exactly its mask.
CREATE OR REPLACE FUNCTION memory_events_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE'
       AND current_setting('butler_memory.purging', true) = 'on'
       AND to_jsonb(NEW) - 'payload' = to_jsonb(OLD) - 'payload'
       AND NEW.payload = memory_purge_mask(OLD.payload) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'memory_events is append-only: % is refused', TG_OP
        USING ERRCODE = 'raise_exception', HINT = 'append a new event instead';
END;
$$;

-- Rewrites the past events of purged entities (not the `*_purged` events that record the
-- purge) to their masks, answering how many it rewrote.
CREATE FUNCTION memory_events_purge(p_tenant text, p_entity_ids uuid[]) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    rewritten bigint;
BEGIN
    PERFORM set_config('butler_memory.purging', 'on', true);
    UPDATE memory_events SET payload = memory_purge_mask(payload)
    WHERE tenant_id = p_tenant
      AND entity_id = ANY (p_entity_ids)
      AND event_type NOT LIKE '%\_purged'
      AND payload <> memory_purge_mask(payload);
    GET DIAGNOSTICS rewritten = ROW_COUNT;
    PERFORM set_config('butler_memory.purging', 'off', true);
    RETURN rewritten;
END;
$$;
