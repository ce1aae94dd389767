-- Full text covers the string values of `metadata` too (weight C, below the content):
-- callers keep searchable context there (dates, places, people, channels), and a question
-- that names it should find the memory. The generated columns are rebuilt, then their GIN
-- indexes.
DROP INDEX episodes_search;
ALTER TABLE episodes DROP COLUMN search_vector;
ALTER TABLE episodes ADD COLUMN search_vector tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('english'::regconfig, content), 'A')
    || setweight(jsonb_to_tsvector('english'::regconfig, metadata, '["string"]'), 'C')
) STORED;
CREATE INDEX episodes_search ON episodes USING GIN (search_vector);

DROP INDEX facts_search;
ALTER TABLE facts DROP COLUMN search_vector;
ALTER TABLE facts ADD COLUMN search_vector tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('english'::regconfig, content), 'A')
    || setweight(to_tsvector('english'::regconfig, subject || ' ' || replace(predicate, '_', ' ')), 'B')
    || setweight(jsonb_to_tsvector('english'::regconfig, metadata, '["string"]'), 'C')
) STORED;
CREATE INDEX facts_search ON facts USING GIN (search_vector);

DROP INDEX rules_search;
ALTER TABLE rules DROP COLUMN search_vector;
ALTER TABLE rules ADD COLUMN search_vector tsvector GENERATED ALWAYS AS (
    setweight(to_tsvector('english'::regconfig, content), 'A')
    || setweight(jsonb_to_tsvector('english'::regconfig, metadata, '["string"]'), 'C')
) STORED;
CREATE INDEX rules_search ON rules USING GIN (search_vector);
