-- pgvector provides the vector type and the HNSW index used for semantic retrieval.
CREATE EXTENSION IF NOT EXISTS vector;
