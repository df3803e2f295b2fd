-- The communication graph (seed 004): directed links between agents, and each link's message
-- history. Portable between SQLite and PostgreSQL: TEXT ids and RFC 3339 times, enabled as 0/1.
CREATE TABLE IF NOT EXISTS agent_links (
    id TEXT PRIMARY KEY,
    from_agent_id TEXT NOT NULL,
    to_agent_id TEXT NOT NULL,
    direction TEXT NOT NULL DEFAULT 'two_way',
    relationship TEXT NOT NULL DEFAULT 'peer',
    enabled BIGINT NOT NULL DEFAULT 1,
    source TEXT NOT NULL DEFAULT 'api',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    UNIQUE (from_agent_id, to_agent_id)
);

CREATE INDEX IF NOT EXISTS idx_agent_links_from ON agent_links (from_agent_id);
CREATE INDEX IF NOT EXISTS idx_agent_links_to ON agent_links (to_agent_id);

-- Messages sent over a link (its internal channel `link:{id}`). Bounded per link by the registry
-- (the oldest go first), and deleted with their link.
CREATE TABLE IF NOT EXISTS link_messages (
    seq BIGINT NOT NULL,
    id TEXT PRIMARY KEY,
    link_id TEXT NOT NULL,
    from_agent_id TEXT NOT NULL,
    to_agent_id TEXT NOT NULL,
    relationship TEXT NOT NULL,
    context_id TEXT NOT NULL,
    task_id TEXT,
    text TEXT NOT NULL,
    reply TEXT,
    status TEXT NOT NULL,
    sent_at TEXT NOT NULL
);

CREATE INDEX IF NOT EXISTS idx_link_messages_link ON link_messages (link_id, seq);
