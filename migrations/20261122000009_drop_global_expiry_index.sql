-- Episode cleanup works per shard through episodes_shard_expiry (tenant, butler, expires_at);
-- the global expiry index has no reader left and only costs every episode insert.
DROP INDEX episodes_expires;
