-- Replicas sharing one database share the health polling (issue #16). Each agent's health and the
-- time of its last check are kept with its registration, so every replica serves the same view.
ALTER TABLE agents ADD COLUMN health TEXT NOT NULL DEFAULT 'unknown';
ALTER TABLE agents ADD COLUMN last_health_check TEXT;
-- When the agent is next due for a check, in Unix milliseconds: a replica takes a check by moving
-- it one interval on in a conditional UPDATE, so one replica checks each agent per interval, and
-- a replica that dies after taking checks delays them by one interval at most.
ALTER TABLE agents ADD COLUMN next_check_at_ms BIGINT NOT NULL DEFAULT 0;

-- One counter, moved on by every change another replica must see (a registration that changes
-- something, a removal, a new health); replicas read it every `sync_interval_ms` and reload the
-- registrations when it moved.
CREATE TABLE IF NOT EXISTS registry_version (
    id BIGINT PRIMARY KEY,
    version BIGINT NOT NULL
);
INSERT INTO registry_version (id, version) VALUES (1, 0);
