-- The second stage's token sketches move out of the memory rows into tables of their own
-- (docs/benchmarks.md, "Token sketches apart"). In the row, a sketch of a kilobyte or more
-- pushed the row past PostgreSQL's toast threshold, and the toaster moved the embedding out
-- of line first: every reference bump and keyword scan then paid for a row of another shape
-- than with the second stage off. Apart, the rows are the same whether it is on or off, and
-- a search reads the sketches of its candidate set by primary key.
--
-- Derived data, like the embedding: never exported, and held exactly as long as the
-- embedding it was made with. A sketch is the text's as the model `embedding_version_id` read
-- it, written in the statement that stores the embedding (store/embedding_backlog.rs); a row
-- whose embedding is cleared (its text changed, or a fact sealed in place: a sketch of the
-- text would leak it) loses its sketch in the same statement, and deleted rows take theirs
-- (the triggers below); a retired month's sketches are deleted with it
-- (store/episode_partitions.rs).
CREATE TABLE episode_sketches (
    tenant_id            TEXT NOT NULL,
    id                   UUID NOT NULL,
    embedding_version_id SMALLINT NOT NULL REFERENCES embedding_versions (id),
    sketch               BYTEA NOT NULL,
    PRIMARY KEY (tenant_id, id)
);
CREATE TABLE fact_sketches (LIKE episode_sketches INCLUDING ALL);
CREATE TABLE rule_sketches (LIKE episode_sketches INCLUDING ALL);
ALTER TABLE fact_sketches
    ADD FOREIGN KEY (embedding_version_id) REFERENCES embedding_versions (id);
ALTER TABLE rule_sketches
    ADD FOREIGN KEY (embedding_version_id) REFERENCES embedding_versions (id);

-- Signs of random projections do not compress: stored out of line as they are, never tried.
-- No plan reads their values: ANALYZE skips them.
ALTER TABLE episode_sketches ALTER COLUMN sketch SET STORAGE EXTERNAL, ALTER COLUMN sketch SET STATISTICS 0;
ALTER TABLE fact_sketches ALTER COLUMN sketch SET STORAGE EXTERNAL, ALTER COLUMN sketch SET STATISTICS 0;
ALTER TABLE rule_sketches ALTER COLUMN sketch SET STORAGE EXTERNAL, ALTER COLUMN sketch SET STATISTICS 0;

INSERT INTO episode_sketches
SELECT tenant_id, id, embedding_version_id, token_sketch FROM episodes
WHERE token_sketch IS NOT NULL AND embedding_version_id IS NOT NULL;
INSERT INTO fact_sketches
SELECT tenant_id, id, embedding_version_id, token_sketch FROM facts
WHERE token_sketch IS NOT NULL AND embedding_version_id IS NOT NULL;
INSERT INTO rule_sketches
SELECT tenant_id, id, embedding_version_id, token_sketch FROM rules
WHERE token_sketch IS NOT NULL AND embedding_version_id IS NOT NULL;

ALTER TABLE episodes DROP COLUMN token_sketch;
ALTER TABLE facts DROP COLUMN token_sketch;
ALTER TABLE rules DROP COLUMN token_sketch;

-- Deleted rows take their sketches: once per statement, over the rows it deleted (a purge,
-- the cleanup's batches), whichever partition of episodes they were in.
CREATE FUNCTION drop_deleted_sketches() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'episodes' THEN
        DELETE FROM episode_sketches s USING deleted d
        WHERE s.tenant_id = d.tenant_id AND s.id = d.id;
    ELSIF TG_TABLE_NAME = 'facts' THEN
        DELETE FROM fact_sketches s USING deleted d
        WHERE s.tenant_id = d.tenant_id AND s.id = d.id;
    ELSE
        DELETE FROM rule_sketches s USING deleted d
        WHERE s.tenant_id = d.tenant_id AND s.id = d.id;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER episodes_drop_sketches AFTER DELETE ON episodes
    REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION drop_deleted_sketches();
CREATE TRIGGER facts_drop_sketches AFTER DELETE ON facts
    REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION drop_deleted_sketches();
CREATE TRIGGER rules_drop_sketches AFTER DELETE ON rules
    REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION drop_deleted_sketches();

-- An embedding cleared takes its sketch: only statements that set the embedding's model fire
-- this (the reads' reference bumps never do).
CREATE FUNCTION drop_cleared_sketch() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME LIKE 'episodes%' THEN
        DELETE FROM episode_sketches WHERE tenant_id = NEW.tenant_id AND id = NEW.id;
    ELSIF TG_TABLE_NAME = 'facts' THEN
        DELETE FROM fact_sketches WHERE tenant_id = NEW.tenant_id AND id = NEW.id;
    ELSE
        DELETE FROM rule_sketches WHERE tenant_id = NEW.tenant_id AND id = NEW.id;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER episodes_clear_sketch AFTER UPDATE OF embedding_version_id ON episodes
    FOR EACH ROW WHEN (NEW.embedding_version_id IS NULL) EXECUTE FUNCTION drop_cleared_sketch();
CREATE TRIGGER facts_clear_sketch AFTER UPDATE OF embedding_version_id ON facts
    FOR EACH ROW WHEN (NEW.embedding_version_id IS NULL) EXECUTE FUNCTION drop_cleared_sketch();
CREATE TRIGGER rules_clear_sketch AFTER UPDATE OF embedding_version_id ON rules
    FOR EACH ROW WHEN (NEW.embedding_version_id IS NULL) EXECUTE FUNCTION drop_cleared_sketch();
