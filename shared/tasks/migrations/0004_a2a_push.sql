-- Push notifications (A2A `CreateTaskPushNotificationConfig`): the webhooks clients set on their
-- tasks, and the outbox of notifications not yet delivered to them. Both are keyed like the task
-- they belong to, and leave with it (retention deletes a finished task's configs, and a config's
-- deliveries leave with the config).
CREATE TABLE IF NOT EXISTS a2a_push_configs (
    agent TEXT NOT NULL,
    tenant TEXT NOT NULL,
    task_id TEXT NOT NULL,
    id TEXT NOT NULL,
    -- RFC 3339 UTC with microseconds, as a2a_tasks.updated_at.
    created_at TEXT NOT NULL,
    -- The config as the client gave it (URL, token, authentication), JSON.
    body TEXT NOT NULL,
    -- The sequence number of the last notification queued for this config: each notification
    -- takes the next, so a client can tell a repeated delivery from a new one.
    last_sequence BIGINT NOT NULL,
    PRIMARY KEY (agent, tenant, task_id, id)
);
-- A notification is written here, in its own transaction, before the task state it reports is
-- saved, and deleted once the webhook acknowledged it (or delivery gave up): a process killed
-- with notifications pending leaves them here, and the next process of the agent delivers them.
CREATE TABLE IF NOT EXISTS a2a_push_outbox (
    agent TEXT NOT NULL,
    tenant TEXT NOT NULL,
    task_id TEXT NOT NULL,
    config_id TEXT NOT NULL,
    sequence BIGINT NOT NULL,
    -- Delivery attempts made so far.
    attempts BIGINT NOT NULL,
    -- Not to be tried before this instant (the retry's backoff), RFC 3339 as above.
    due_at TEXT NOT NULL,
    -- A process delivering it holds it until this instant (its delivery timeout and a margin);
    -- '' when nobody does. A process that dies mid-delivery leaves a claim that simply expires.
    claimed_until TEXT NOT NULL,
    -- The A2A StreamResponse to POST, JSON.
    body TEXT NOT NULL,
    PRIMARY KEY (agent, tenant, task_id, config_id, sequence)
);
CREATE INDEX IF NOT EXISTS a2a_push_outbox_by_due ON a2a_push_outbox (agent, due_at);
