-- Dashboard sessions in the database (issue 21): with several instances behind a load
-- balancer, a browser signed in on one is signed in on all, and signing out on one ends the
-- session everywhere. A row holds the SHA-256 of the session token (the browser's cookie
-- holds the token; the database never does) and who signed in (the key's tenant, role,
-- butler and name; the key itself is never stored). The CSRF token of a session is derived
-- from its token, so it is not stored either.
--
-- Not a tenant table for distribution: sessions are found by their token, before the
-- tenant is known, and stay with the coordinator of a distributed database.
CREATE TABLE dashboard_sessions (
    token_sha256 BYTEA PRIMARY KEY CHECK (length(token_sha256) = 32),
    caller_tenant TEXT NOT NULL,
    caller_role  TEXT NOT NULL CHECK (caller_role IN ('butler', 'admin', 'operator', 'auditor')),
    caller_butler TEXT,
    key_name     TEXT NOT NULL,
    started_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_seen_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX dashboard_sessions_idle ON dashboard_sessions (last_seen_at);
