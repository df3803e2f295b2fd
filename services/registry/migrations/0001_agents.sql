-- Registered agents. Kept portable between SQLite and PostgreSQL: TEXT everywhere, timestamps as
-- RFC 3339 text, the capability list as a JSON array (lookups are served from memory).
CREATE TABLE IF NOT EXISTS agents (
    name TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    capabilities TEXT NOT NULL,
    health_endpoint TEXT NOT NULL,
    process_endpoint TEXT NOT NULL,
    agent_card_url TEXT NOT NULL,
    registered_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
