-- A2A tasks of every agent and tenant in one table: many agents may share one PostgreSQL
-- database, and a table per agent or tenant would not scale. The task itself is the JSON body;
-- the other columns are what lists filter and sort on.
CREATE TABLE IF NOT EXISTS a2a_tasks (
    agent TEXT NOT NULL,
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    context_id TEXT NOT NULL,
    state TEXT NOT NULL,
    -- RFC 3339 UTC with microseconds, fixed width, so text order is time order.
    updated_at TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (agent, tenant, id)
);
CREATE INDEX IF NOT EXISTS a2a_tasks_by_update ON a2a_tasks (agent, tenant, updated_at, id);
CREATE INDEX IF NOT EXISTS a2a_tasks_by_context ON a2a_tasks (agent, tenant, context_id);
