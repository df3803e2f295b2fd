-- Replicas of one agent share the task table. Each task row names the replica (process) that
-- last wrote it, and each replica renews a lease here while it lives, so that a replica starting
-- (or sweeping) fails only the running tasks of replicas whose lease expired, never those another
-- live replica still runs. Rows written before this migration have no owner: nothing runs them.
ALTER TABLE a2a_tasks ADD COLUMN owner TEXT;
CREATE TABLE IF NOT EXISTS a2a_task_replicas (
    agent TEXT NOT NULL,
    replica TEXT NOT NULL,
    -- RFC 3339 UTC with microseconds, as a2a_tasks.updated_at.
    renewed_at TEXT NOT NULL,
    PRIMARY KEY (agent, replica)
);
