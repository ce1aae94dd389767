-- Encrypted high-risk facts (docs/privacy.md). A fact whose predicate or scope the
-- configuration names as high-risk keeps its content and metadata only as `sealed`:
-- AES-256-GCM under its tenant's data key of version `key_version`, itself stored wrapped by
-- the master key (never in the clear, and the master key never here). Such a row says
-- `[encrypted]` as its content and `{}` as its metadata, has no embedding (a vector leaks the
-- text) and is found by full text on its subject and predicate only.

CREATE TABLE data_keys (
    tenant_id     TEXT NOT NULL,
    version       INTEGER NOT NULL CHECK (version > 0),
    -- nonce || AES-256-GCM(master key, data key) || tag, bound to (tenant, version).
    wrapped       BYTEA NOT NULL,
    -- Which master key wrapped it (an HMAC of the key, never the key).
    master_key_id TEXT NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    rewrapped_at  TIMESTAMPTZ,
    PRIMARY KEY (tenant_id, version)
);

ALTER TABLE facts ADD COLUMN key_version INTEGER;
ALTER TABLE facts ADD COLUMN sealed BYTEA;
ALTER TABLE facts ADD CONSTRAINT facts_sealed_whole
    CHECK ((key_version IS NULL) = (sealed IS NULL));
ALTER TABLE facts ADD CONSTRAINT facts_sealed_hidden
    CHECK (sealed IS NULL OR (content = '[encrypted]' AND metadata = '{}'::jsonb AND embedding IS NULL));

-- A sealed fact's full text is its subject and predicate (what finds it); its placeholder
-- content and empty metadata add nothing. A predicate's dots separate words, as its
-- underscores do (`health.condition` is found by "health condition").
DROP INDEX facts_search;
ALTER TABLE facts DROP COLUMN search_vector;
ALTER TABLE facts ADD COLUMN search_vector tsvector GENERATED ALWAYS AS (
    CASE WHEN sealed IS NULL THEN
        setweight(to_tsvector('english'::regconfig, content), 'A')
        || setweight(to_tsvector('english'::regconfig, subject || ' ' || translate(predicate, '_.', '  ')), 'B')
        || setweight(jsonb_to_tsvector('english'::regconfig, metadata, '["string"]'), 'C')
    ELSE
        setweight(to_tsvector('english'::regconfig, subject || ' ' || translate(predicate, '_.', '  ')), 'B')
    END
) STORED;
CREATE INDEX facts_search ON facts USING GIN (search_vector);
ALTER INDEX facts_search SET (gin_pending_list_limit = 128);

-- Rotation finds what an older data key still seals.
CREATE INDEX facts_key_version ON facts (tenant_id, key_version) WHERE key_version IS NOT NULL;
