-- Keyword statistics kept once for the fleet (issue 21, docs/scaling.md): BM25's collection
-- statistics (a tenant's memory count and mean length per type) and its words' document
-- frequencies are counts that cost scans and that every instance needs. Each instance keeps
-- its own cache of them (read_path/corpus_cache.rs); on a shared database it also writes
-- each count here, and reads here before counting: a count another instance made recently
-- enough is taken rather than made again.
--
-- Unlogged: they are a cache, rebuilt by the next count; no WAL is written for them, and
-- after a crash they start empty. (Replicas do not have them: they are read and written on
-- the primary, as the counts' freshness is.)
CREATE UNLOGGED TABLE corpus_counts (
    tenant_id   TEXT NOT NULL,
    memory_type TEXT NOT NULL CHECK (memory_type IN ('episode', 'fact', 'rule')),
    documents   DOUBLE PRECISION NOT NULL CHECK (documents >= 0),
    mean_length DOUBLE PRECISION NOT NULL CHECK (mean_length >= 0),
    counted_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, memory_type)
);

CREATE UNLOGGED TABLE word_counts (
    tenant_id   TEXT NOT NULL,
    memory_type TEXT NOT NULL CHECK (memory_type IN ('episode', 'fact', 'rule')),
    word        TEXT NOT NULL,
    -- How many of the tenant's memories of the type hold the word ...
    df          DOUBLE PRECISION NOT NULL CHECK (df >= 0),
    -- ... out of how many, when it was counted.
    documents   DOUBLE PRECISION NOT NULL CHECK (documents >= 0),
    counted_at  TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, memory_type, word)
);
CREATE INDEX word_counts_age ON word_counts (counted_at);
