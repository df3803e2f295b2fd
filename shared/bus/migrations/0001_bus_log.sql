-- The embedded log: every agent's topic in one offset-ordered table (never a table per topic or
-- per conversation), the next offset of each topic, and each consumer group's committed offset.
CREATE TABLE IF NOT EXISTS bus_topics (
    topic TEXT PRIMARY KEY,
    next_offset BIGINT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS bus_records (
    topic TEXT NOT NULL,
    record_offset BIGINT NOT NULL,
    -- The record key, as Kafka's: what a partitioned topic would route by.
    conversation_id TEXT NOT NULL,
    body TEXT NOT NULL,
    appended_at TEXT NOT NULL,
    PRIMARY KEY (topic, record_offset)
);
CREATE TABLE IF NOT EXISTS bus_group_offsets (
    topic TEXT NOT NULL,
    group_id TEXT NOT NULL,
    -- The next offset the group reads, as Kafka commits it.
    next_offset BIGINT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (topic, group_id)
);
