-- Full-text indexes first, then the vector indexes (HNSW, cosine; DECISIONS.md #2): HNSW
-- needs no training and works on an empty table.
CREATE INDEX episodes_search ON episodes USING GIN (search_vector);
CREATE INDEX facts_search ON facts USING GIN (search_vector);
CREATE INDEX rules_search ON rules USING GIN (search_vector);

CREATE INDEX episodes_embedding ON episodes USING hnsw (embedding vector_cosine_ops);
CREATE INDEX facts_embedding ON facts USING hnsw (embedding vector_cosine_ops);
CREATE INDEX rules_embedding ON rules USING hnsw (embedding vector_cosine_ops);
