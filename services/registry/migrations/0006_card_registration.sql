-- Standard A2A agents register by their card alone (issue #36). `path` is the agent's name in URL
-- paths (`/agents/{path}/` at the gateway), unique; NULL for rows from before, which read as the
-- path form of their name. `health_probe` says what the poller fetches at `health_endpoint`:
-- `health` (a health endpoint) or `card` (the agent card, for agents without one). `interfaces`
-- is the card's interface list as a JSON array of {protocol_binding, protocol_version, url}.
ALTER TABLE agents ADD COLUMN path TEXT;
ALTER TABLE agents ADD COLUMN health_probe TEXT NOT NULL DEFAULT 'health';
ALTER TABLE agents ADD COLUMN interfaces TEXT NOT NULL DEFAULT '[]';

CREATE UNIQUE INDEX IF NOT EXISTS idx_agents_path ON agents (path);
