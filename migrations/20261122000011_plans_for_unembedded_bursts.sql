-- Plans that stay proportional to their answer while a write burst runs ahead of the
-- embedder (measured with the load generator, docs/benchmarks.md).
--
-- Semantic search over one shard: while most of its episodes still wait for an embedding,
-- the planner (rightly) expects few embedded rows, and without this index it walked every
-- row of the shard to find them: 4 ms at 2,000 episodes a shard, 18 ms at 15,000, growing
-- with the shard. With it, the few embedded rows are read directly; once most rows are
-- embedded the HNSW index is the cheaper plan again.
CREATE INDEX episodes_shard_embedded ON episodes (tenant_id, butler) WHERE embedding IS NOT NULL;

-- An embedding and its model are set and cleared together. Stated, so that the indexer's
-- UPDATE can check "still unembedded" on embedding_version_id, which no index covers: a
-- check on `embedding IS NULL` let the planner answer a batch of 32 ids by scanning the
-- whole backlog through episodes_unembedded (a hash join over 100,000 rows) instead of 32
-- primary-key lookups.
ALTER TABLE episodes ADD CONSTRAINT episodes_embedding_versioned
    CHECK ((embedding IS NULL) = (embedding_version_id IS NULL));
ALTER TABLE facts ADD CONSTRAINT facts_embedding_versioned
    CHECK ((embedding IS NULL) = (embedding_version_id IS NULL));
ALTER TABLE rules ADD CONSTRAINT rules_embedding_versioned
    CHECK ((embedding IS NULL) = (embedding_version_id IS NULL));
