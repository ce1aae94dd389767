-- When an episode happened, when that is not when it was stored: a butler importing a
-- conversation of last spring stores it today, and "what did we talk about in March" must
-- find it by March. NULL (every episode stored before, and every one stored without the
-- time) means it happened as it was stored: `created_at` stays the record time (its expiry,
-- its partition, the audit stream's order), and time-aware reads take
-- `COALESCE(occurred_at, created_at)`. Nothing is stored as happening after it was stored.
ALTER TABLE episodes ADD COLUMN occurred_at timestamptz;
ALTER TABLE episodes ADD CONSTRAINT episodes_occurred_by_stored
    CHECK (occurred_at IS NULL OR occurred_at <= created_at);
-- Read only inside COALESCE, whose selectivity no column statistics inform; the burst's
-- frequent analyses sample nothing of it (migrations 12 and 14; partitions made later copy
-- the parent's target).
ALTER TABLE episodes ALTER COLUMN occurred_at SET STATISTICS 0;
