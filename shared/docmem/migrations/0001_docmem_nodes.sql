-- Docmem nodes of every conversation in one table (a table per conversation would not scale).
-- A conversation is a root (parent_id NULL, root_id = id) and its children in `position` order.
-- Timestamps are RFC 3339 UTC with microseconds, fixed width, so text order is time order.
CREATE TABLE IF NOT EXISTS docmem_nodes (
    id TEXT PRIMARY KEY,
    root_id TEXT NOT NULL,
    parent_id TEXT,
    position BIGINT NOT NULL,
    context_type TEXT NOT NULL,
    context_name TEXT NOT NULL,
    context_value TEXT NOT NULL,
    content TEXT NOT NULL,
    version BIGINT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
-- Siblings have distinct positions: two appends racing for one place cannot both win.
CREATE UNIQUE INDEX IF NOT EXISTS docmem_nodes_sibling_order ON docmem_nodes (root_id, parent_id, position);
-- Lists of roots, newest first, and retention by age.
CREATE INDEX IF NOT EXISTS docmem_nodes_roots ON docmem_nodes (parent_id, updated_at);
-- Conversations an agent took part in (`GET /conversations?agent=`).
CREATE INDEX IF NOT EXISTS docmem_nodes_by_context ON docmem_nodes (context_value, root_id);
