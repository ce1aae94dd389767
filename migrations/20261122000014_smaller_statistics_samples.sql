-- ANALYZE samples 300 rows per unit of the largest statistics target among a table's
-- columns: 30,000 rows at the default of 100. Episodes and events are analysed every few
-- seconds while a burst runs, and each analysis also makes every connection re-plan its
-- statements on the table. Their plans need little from the statistics: how many rows a
-- tenant, butler or session has, and how recent they are, which a few thousand rows tell
-- as well as thirty thousand. Measured with the load generator (40 s at 2,000 episodes/s,
-- docs/benchmarks.md): analysis took 7.3 CPU-seconds at the default, 1.9 at the targets
-- below (20 for episodes, 10 for events).
--
-- Every column without a target of its own gets one (migration 12 set 0 on the columns
-- no plan uses). attstattarget is NULL for "default" from PostgreSQL 17 on, -1 before.
DO $$
DECLARE
    target record;
BEGIN
    FOR target IN
        SELECT c.relname AS table_name, a.attname AS column_name,
               CASE c.relname WHEN 'episodes' THEN 20 ELSE 10 END AS statistics
        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
        WHERE c.relname IN ('episodes', 'memory_events')
          AND c.relnamespace = current_schema()::regnamespace
          AND a.attnum > 0 AND NOT a.attisdropped
          AND (a.attstattarget IS NULL OR a.attstattarget < 0)
    LOOP
        EXECUTE format('ALTER TABLE %I ALTER COLUMN %I SET STATISTICS %s',
                       target.table_name, target.column_name, target.statistics);
    END LOOP;
END
$$;
