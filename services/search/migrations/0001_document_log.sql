-- The search agents' document log: the shared, durable source every replica builds its own index
-- from. One log per agent name (`corpus`), so replicas of one agent share it and other agents on
-- the same database keep theirs apart.
CREATE TABLE IF NOT EXISTS search_document_log_heads (
    corpus TEXT PRIMARY KEY,
    -- The sequence of the newest entry (0: none yet). Appenders take this row's lock to number
    -- their entries, so sequences are committed in order and a reader never sees a gap close.
    last_sequence BIGINT NOT NULL,
    -- 1 once the initial corpus went in: it goes in once, whichever replica starts first.
    seeded BIGINT NOT NULL,
    -- Deletions (tombstones) up to this sequence were compacted away: a replica that applied less
    -- drops the documents the log no longer holds instead of waiting for tombstones that are gone.
    tombstones_through BIGINT NOT NULL
);
-- The newest entry of each document only: an entry replaces the one before it for its document,
-- so the log never outgrows the corpus plus its recent deletions.
CREATE TABLE IF NOT EXISTS search_document_log (
    corpus TEXT NOT NULL,
    sequence BIGINT NOT NULL,
    -- Empty for the shared corpus.
    tenant TEXT NOT NULL,
    document_id TEXT NOT NULL,
    -- The document as JSON (BEIR corpus line); NULL for a deletion.
    body TEXT,
    -- The document's vector (little-endian f32s, base64) and the model that made it.
    vector TEXT,
    model TEXT,
    appended_at_ms BIGINT NOT NULL,
    PRIMARY KEY (corpus, sequence)
);
CREATE UNIQUE INDEX IF NOT EXISTS search_document_log_by_document ON search_document_log (corpus, tenant, document_id);
