-- Several service instances on one database (issue 21): a scheduled sweep of a shard runs once
-- per scheduled time fleet-wide. The instance that inserts the claim of (shard, kind, scheduled
-- time) runs it and keeps its heartbeat fresh; the others skip it. A claim whose heartbeat
-- is older than lifecycle.lease_secs and that never finished (its instance died) is taken
-- over by the next instance that looks, within a scheduler tick.
CREATE TABLE lifecycle_claims (
    tenant_id    TEXT NOT NULL,
    butler       TEXT NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('decay_sweep', 'episode_cleanup', 'consolidation')),
    fire_at      TIMESTAMPTZ NOT NULL,
    instance_id  TEXT NOT NULL,
    claimed_at   TIMESTAMPTZ NOT NULL,
    heartbeat_at TIMESTAMPTZ NOT NULL,
    finished_at  TIMESTAMPTZ,
    -- How many instances held it (more than one: taken over from a dead one).
    holders      INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (tenant_id, butler, kind, fire_at)
);
CREATE INDEX lifecycle_claims_open ON lifecycle_claims (heartbeat_at) WHERE finished_at IS NULL;
