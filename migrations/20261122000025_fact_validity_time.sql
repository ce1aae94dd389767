-- Validity time beside record time (issue 24): when a fact became true (`valid_from`) and
-- when it stopped being true (`valid_until`, set when it is superseded). Time-aware reads
-- (`as_of`, `since`, `until`) select facts by these, so "what did the user prefer in March"
-- answers from the fact that was true then, superseded or not.
--
-- A fact without a stated start became true when it was recorded; a superseded fact stopped
-- being true when the fact that replaced it became true (its successor's start), or, when
-- no successor names it (consolidation superseding a fact of another key), when it was last
-- confirmed: the last time it was known to hold.
ALTER TABLE facts ADD COLUMN valid_from TIMESTAMPTZ, ADD COLUMN valid_until TIMESTAMPTZ;

-- One pass over the table (a successor's start is its record time: it states no other yet).
UPDATE facts f
SET valid_from = f.created_at,
    valid_until = CASE
        WHEN f.validity = 'superseded' OR (f.validity = 'retracted' AND f.retracted_from = 'superseded')
        THEN GREATEST(f.created_at, COALESCE(
                 (SELECT min(s.created_at) FROM facts s
                  WHERE s.tenant_id = f.tenant_id AND s.supersedes_id = f.id),
                 f.last_confirmed_at))
    END;

ALTER TABLE facts
    ALTER COLUMN valid_from SET NOT NULL,
    ADD CONSTRAINT facts_valid_interval CHECK (valid_until IS NULL OR valid_until >= valid_from);
