-- Ready for a database distributed by tenant (issue 21, docs/scaling.md): every primary key
-- and unique index of a tenant table leads with tenant_id, and every foreign key between
-- tenant tables carries it, so that each tenant's rows (and the constraints among them) can
-- live on one node of a distributed PostgreSQL (Citus-style, tenant_id the distribution
-- column) without a schema change. Tests assert it from the catalog and from the SQL.
--
-- Ids stay unique on their own (UUIDv7 and identity values); the keys now say so per
-- tenant. Every statement that finds a row by id names its tenant too, and so uses the new
-- keys as it used the old ones.

-- Foreign keys go first: they depend on the keys they reference.
ALTER TABLE facts DROP CONSTRAINT facts_supersedes_id_fkey;
ALTER TABLE rule_applications DROP CONSTRAINT rule_applications_rule_id_fkey;
ALTER TABLE consolidation_items DROP CONSTRAINT consolidation_items_job_id_fkey;

ALTER TABLE episodes DROP CONSTRAINT episodes_pkey, ADD PRIMARY KEY (tenant_id, id);
ALTER TABLE facts DROP CONSTRAINT facts_pkey, ADD PRIMARY KEY (tenant_id, id);
ALTER TABLE rules DROP CONSTRAINT rules_pkey, ADD PRIMARY KEY (tenant_id, id);
ALTER TABLE rule_applications DROP CONSTRAINT rule_applications_pkey, ADD PRIMARY KEY (tenant_id, id);
ALTER TABLE consolidation_jobs DROP CONSTRAINT consolidation_jobs_pkey, ADD PRIMARY KEY (tenant_id, id);
ALTER TABLE lifecycle_runs DROP CONSTRAINT lifecycle_runs_pkey, ADD PRIMARY KEY (tenant_id, id);
ALTER TABLE audit_reads DROP CONSTRAINT audit_reads_pkey, ADD PRIMARY KEY (tenant_id, id);

ALTER TABLE facts ADD CONSTRAINT facts_supersedes_fkey
    FOREIGN KEY (tenant_id, supersedes_id) REFERENCES facts (tenant_id, id);
ALTER TABLE rule_applications ADD CONSTRAINT rule_applications_rule_fkey
    FOREIGN KEY (tenant_id, rule_id) REFERENCES rules (tenant_id, id);
ALTER TABLE consolidation_items ADD CONSTRAINT consolidation_items_job_fkey
    FOREIGN KEY (tenant_id, job_id) REFERENCES consolidation_jobs (tenant_id, id);
