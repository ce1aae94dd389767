-- Whether every row a model embedded has had its words learnt (migration 36): a row here
-- says so for its model. The indexer writes it when its walk through the tables is done
-- (begun at a start with `retrieval.widening` on and no row here: a store embedded before
-- the vocabulary existed, or while widening was off), and a start with widening off deletes
-- it, as that instance embeds rows without learning their words.
CREATE TABLE vocabulary_complete (
    embedding_version_id SMALLINT PRIMARY KEY REFERENCES embedding_versions (id),
    completed_at         TIMESTAMPTZ NOT NULL DEFAULT now()
);
