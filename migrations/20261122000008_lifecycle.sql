-- Lifecycle: forgetting remembers the state it reverses, sweeps walk one shard's rows in id
-- order, and the audit stream can be filtered by scope and butler.

-- What a retracted fact or rule was before, so memory_restore can put it back exactly.
ALTER TABLE facts ADD COLUMN retracted_from TEXT
    CHECK (retracted_from IN ('active', 'fading', 'superseded', 'expired'));
ALTER TABLE facts ADD CONSTRAINT facts_retracted_from
    CHECK ((validity = 'retracted') = (retracted_from IS NOT NULL));
ALTER TABLE rules ADD COLUMN retracted_from TEXT
    CHECK (retracted_from IN ('active', 'fading', 'expired'));
ALTER TABLE rules ADD CONSTRAINT rules_retracted_from
    CHECK ((validity = 'retracted') = (retracted_from IS NOT NULL));

-- A shard owns the facts and rules of its butler; rows written without one belong to the
-- tenant shard `_tenant` (DECISIONS.md #13; butler names cannot start with `_`). Sweeps page
-- through a shard's live rows by id.
DROP INDEX facts_shard;
DROP INDEX rules_shard;
CREATE INDEX facts_shard_live ON facts (tenant_id, (COALESCE(source_butler, '_tenant')), id)
    WHERE validity IN ('active', 'fading');
CREATE INDEX rules_shard_live ON rules (tenant_id, (COALESCE(source_butler, '_tenant')), id)
    WHERE validity IN ('active', 'fading');
CREATE INDEX facts_shard ON facts (tenant_id, (COALESCE(source_butler, '_tenant')));
CREATE INDEX rules_shard ON rules (tenant_id, (COALESCE(source_butler, '_tenant')));
CREATE INDEX episodes_shard_expiry ON episodes (tenant_id, butler, expires_at);

-- The audit stream, filterable by the entity's scope (facts, rules) and owning butler.
ALTER TABLE memory_events ADD COLUMN scope TEXT;
ALTER TABLE memory_events ADD COLUMN butler TEXT;
