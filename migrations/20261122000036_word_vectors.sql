-- A tenant's vocabulary (docs/benchmarks.md, "Query words widened by the model's word
-- vectors"): each word its memories hold, as the full-text index stems it (`lexeme`), with
-- one word it stands for (`word`, as first written) and that word's vector, embedded alone
-- by the model of `embedding_version_id`. The indexer adds the words of the rows it embeds;
-- a search reads its own words' vectors here (no model run) and widens its keyword query
-- with the nearest words of the same tenant ("instrument" brings "violin").
-- Derived data, like an embedding: never exported. It names words of memories, so a purge
-- takes the words of what it erases, and a purge of a butler or a tenant takes them all.
CREATE TABLE word_vectors (
    tenant_id            TEXT NOT NULL,
    lexeme               TEXT NOT NULL,
    word                 TEXT NOT NULL,
    embedding_version_id SMALLINT NOT NULL REFERENCES embedding_versions (id),
    embedding            halfvec(384) NOT NULL,
    PRIMARY KEY (tenant_id, lexeme)
);
-- The nearest words of a tenant: filtered by tenant, which pgvector's iterative index scans
-- keep scanning for (store.rs sets them on every connection).
CREATE INDEX word_vectors_embedding ON word_vectors USING hnsw (embedding halfvec_cosine_ops);
-- Plans never join on the vectors or the words: nothing to sample there.
ALTER TABLE word_vectors ALTER COLUMN embedding SET STATISTICS 0;
ALTER TABLE word_vectors ALTER COLUMN word SET STATISTICS 0;
