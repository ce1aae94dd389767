-- Reads bump reference_count and last_referenced_at, which no index covers: with room left
-- in each page those updates stay heap-only (HOT) and touch no index, instead of inserting
-- a new entry into every index of the table, the HNSW graph included.
ALTER TABLE episodes SET (fillfactor = 85);
ALTER TABLE facts SET (fillfactor = 85);
ALTER TABLE rules SET (fillfactor = 85);
