-- Orchestrator keys sign in to the dashboard to see their memory graph (issue 23): a
-- session may be an orchestrator's.
ALTER TABLE dashboard_sessions DROP CONSTRAINT dashboard_sessions_caller_role_check;
ALTER TABLE dashboard_sessions ADD CONSTRAINT dashboard_sessions_caller_role_check
    CHECK (caller_role IN ('butler', 'admin', 'operator', 'auditor', 'orchestrator'));
