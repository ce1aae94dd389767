-- Embeddings at half precision (pgvector's `halfvec`): two bytes a dimension instead of
-- four, in the rows and in the HNSW graphs. A memory's embedding was 1.5 kB of a row of
-- about two kilobytes; the rows and the vector indexes are what a search reads, so halving
-- them halves the pages a semantic list touches and the share of a tenant's memories that
-- fits in the shared buffers (docs/benchmarks.md, "Embeddings at half precision"). The model's
-- vectors are unit vectors of 384 components of about 0.05 each; half precision keeps 11
-- bits of each, which moves a cosine by about 1e-4: below the distance between any two
-- candidates a ranking tells apart (the same measurement). Queries are still computed and
-- sent at full precision and cast in the statement.
--
-- The column's type changes in place (each table is rewritten once); the vector indexes are
-- built again for the new type under their old names.
DROP INDEX episodes_embedding, facts_embedding, rules_embedding, orchestrator_memories_embedding;

ALTER TABLE episodes ALTER COLUMN embedding TYPE halfvec(384) USING embedding::halfvec(384);
ALTER TABLE facts ALTER COLUMN embedding TYPE halfvec(384) USING embedding::halfvec(384);
ALTER TABLE rules ALTER COLUMN embedding TYPE halfvec(384) USING embedding::halfvec(384);
ALTER TABLE orchestrator_memories ALTER COLUMN embedding TYPE halfvec(384) USING embedding::halfvec(384);

CREATE INDEX episodes_embedding ON episodes USING hnsw (embedding halfvec_cosine_ops);
CREATE INDEX facts_embedding ON facts USING hnsw (embedding halfvec_cosine_ops);
CREATE INDEX rules_embedding ON rules USING hnsw (embedding halfvec_cosine_ops);
CREATE INDEX orchestrator_memories_embedding ON orchestrator_memories USING hnsw (embedding halfvec_cosine_ops);
