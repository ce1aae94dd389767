-- Governance of rules by a tenant's admin (the dashboard's playbook): a disabled rule keeps
-- its state, evidence and history but never reaches retrieval until it is enabled again.
ALTER TABLE rules ADD COLUMN disabled_at TIMESTAMPTZ;
