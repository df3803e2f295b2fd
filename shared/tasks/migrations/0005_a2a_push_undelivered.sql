-- Push notifications shared fairly between tenants (issue #34).
--
-- What became of a push notification config's notifications that never reached its webhook
-- (refused when queued because the outbox or the tenant's share of it was full, or given up at
-- delivery): how many, and the last one's reason, message, sequence number and time (RFC 3339,
-- as created_at). The task's owner reads them in the task's metadata (`GetTask`).
ALTER TABLE a2a_push_configs ADD COLUMN undelivered_count BIGINT NOT NULL DEFAULT 0;
ALTER TABLE a2a_push_configs ADD COLUMN undelivered_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE a2a_push_configs ADD COLUMN undelivered_message TEXT NOT NULL DEFAULT '';
ALTER TABLE a2a_push_configs ADD COLUMN undelivered_sequence BIGINT NOT NULL DEFAULT 0;
ALTER TABLE a2a_push_configs ADD COLUMN undelivered_at TEXT NOT NULL DEFAULT '';
-- Claims go round robin across tenants: each tenant's oldest due notifications are read through
-- this index, so one tenant's backlog is no scan for the others; and each tenant's notifications
-- in delivery (claimed, the claim not expired) are counted through the second.
CREATE INDEX IF NOT EXISTS a2a_push_outbox_by_tenant_due ON a2a_push_outbox (agent, tenant, due_at);
CREATE INDEX IF NOT EXISTS a2a_push_outbox_by_claim ON a2a_push_outbox (agent, claimed_until);
