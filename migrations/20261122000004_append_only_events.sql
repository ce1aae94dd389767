-- memory_events is append-only: the database itself refuses UPDATE, DELETE and TRUNCATE.
CREATE FUNCTION memory_events_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'memory_events is append-only: % is refused', TG_OP
        USING ERRCODE = 'raise_exception', HINT = 'append a new event instead';
END;
$$;

CREATE TRIGGER memory_events_no_update_or_delete
    BEFORE UPDATE OR DELETE ON memory_events
    FOR EACH ROW EXECUTE FUNCTION memory_events_refuse_change();

CREATE TRIGGER memory_events_no_truncate
    BEFORE TRUNCATE ON memory_events
    FOR EACH STATEMENT EXECUTE FUNCTION memory_events_refuse_change();
