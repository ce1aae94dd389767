-- The audit stream of reads (memory_butler.md §10, elevated access): one row per call an
-- auditor key makes, written before the call runs, so an investigation that read a tenant
-- always left a record of who read what and why. Append-only, like memory_events.
CREATE TABLE audit_reads (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id  TEXT NOT NULL,
    auditor    TEXT NOT NULL,
    reason     TEXT NOT NULL CHECK (reason <> ''),
    tool       TEXT NOT NULL,
    arguments  JSONB NOT NULL DEFAULT '{}',
    request_id TEXT,
    read_at    TIMESTAMPTZ NOT NULL
);

CREATE INDEX audit_reads_tenant ON audit_reads (tenant_id, id);

CREATE FUNCTION audit_reads_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_reads is append-only: % is refused', TG_OP
        USING ERRCODE = 'raise_exception';
END;
$$;

CREATE TRIGGER audit_reads_no_update_or_delete
    BEFORE UPDATE OR DELETE ON audit_reads
    FOR EACH ROW EXECUTE FUNCTION audit_reads_refuse_change();

CREATE TRIGGER audit_reads_no_truncate
    BEFORE TRUNCATE ON audit_reads
    FOR EACH STATEMENT EXECUTE FUNCTION audit_reads_refuse_change();
