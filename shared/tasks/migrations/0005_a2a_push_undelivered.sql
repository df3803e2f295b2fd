-- What became of a push notification config's notifications that never reached its webhook
-- (refused when queued because the outbox or the tenant's share of it was full, or given up at
-- delivery): how many, and the last one's reason, message, sequence number and time (RFC 3339,
-- as created_at). The task's owner reads them in the task's metadata (`GetTask`).
ALTER TABLE a2a_push_configs ADD COLUMN undelivered_count BIGINT NOT NULL DEFAULT 0;
ALTER TABLE a2a_push_configs ADD COLUMN undelivered_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE a2a_push_configs ADD COLUMN undelivered_message TEXT NOT NULL DEFAULT '';
ALTER TABLE a2a_push_configs ADD COLUMN undelivered_sequence BIGINT NOT NULL DEFAULT 0;
ALTER TABLE a2a_push_configs ADD COLUMN undelivered_at TEXT NOT NULL DEFAULT '';
