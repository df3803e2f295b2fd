//! The document log: the shared, durable source of documents that every replica of a search agent
//! builds its own index from (a table of the configured database: a SQLite file, or PostgreSQL
//! for replicas on several machines).
//!
//! Each entry is the newest state of one document: its body and vector, or a deletion (a
//! tombstone), numbered by a sequence that grows with every append. Appenders take the lock of
//! the log's head row to number their entries, so entries are committed in sequence order, and a
//! replica that has applied everything up to sequence `n` needs exactly the entries after `n`.
//! An append replaces the entry its document had, so the log holds one entry per document;
//! tombstones are dropped once older than the retention ([`DocumentLog::compact`]).

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use mesh_storage::{AnyPool, Database, Row, settle};
use sqlx::migrate::Migrator;

use crate::corpus::Document;
use crate::error::SearchError;
use crate::index::{Change, DocumentVector, document_key, vector_from_bytes, vector_to_bytes};

/// The log's own migration history, apart from other components sharing the database.
const MIGRATIONS_TABLE: &str = "_mesh_search_migrations";
/// Longest one statement (or one append's transaction) may take before the log counts as
/// unavailable; an append of a large batch writes many rows in one transaction.
const LOG_CALL_TIMEOUT_MS: u64 = 30_000;
/// Rows of one INSERT statement (8 parameters each: under SQLite's and PostgreSQL's limits).
const INSERT_ROWS_MAX: usize = 500;
/// Entries one read fetches: a replica applies them as one index commit.
pub const READ_ENTRIES_MAX: i64 = 500;

fn migrator() -> Migrator {
    let mut migrator = sqlx::migrate!("./migrations");
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    migrator
}

/// One entry of the log.
#[derive(Debug, Clone, PartialEq)]
pub struct LogEntry {
    pub sequence: u64,
    pub change: Change,
}

/// Where the log stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogHead {
    /// The newest entry's sequence (0: none).
    pub last_sequence: u64,
    /// Tombstones up to this sequence were compacted away.
    pub tombstones_through: u64,
}

/// The log of one corpus (one agent name) in a database.
#[derive(Debug, Clone)]
pub struct DocumentLog {
    database: Database,
    pool: AnyPool,
    corpus: String,
}

impl DocumentLog {
    /// Opens (and migrates) the log of `corpus` in the database at `url`.
    pub async fn open(url: &str, corpus: &str) -> Result<Self, SearchError> {
        let database = bounded(async { Ok(Database::connect(url, &migrator()).await?) }).await?;
        let log = Self { pool: database.pool().clone(), database, corpus: corpus.to_owned() };
        bounded(async {
            sqlx::query(
                "INSERT INTO search_document_log_heads (corpus, last_sequence, seeded, tombstones_through) \
                 VALUES ($1, 0, 0, 0) ON CONFLICT (corpus) DO NOTHING",
            )
            .bind(&log.corpus)
            .execute(&log.pool)
            .await?;
            Ok(())
        })
        .await?;
        Ok(log)
    }

    pub async fn head(&self) -> Result<LogHead, SearchError> {
        bounded(async {
            let row = sqlx::query(
                "SELECT last_sequence, tombstones_through FROM search_document_log_heads WHERE corpus = $1",
            )
            .bind(&self.corpus)
            .fetch_one(&self.pool)
            .await?;
            Ok(LogHead { last_sequence: sequence(row.try_get(0)?), tombstones_through: sequence(row.try_get(1)?) })
        })
        .await
    }

    /// Whether the initial corpus went in already.
    pub async fn is_seeded(&self) -> Result<bool, SearchError> {
        bounded(async {
            let row = sqlx::query("SELECT seeded FROM search_document_log_heads WHERE corpus = $1")
                .bind(&self.corpus)
                .fetch_one(&self.pool)
                .await?;
            Ok(row.try_get::<i64, _>(0)? != 0)
        })
        .await
    }

    /// Appends `changes` (a later change of a document wins) once committed; returns the sequence
    /// of the last entry (the head's when `changes` is empty).
    pub async fn append(&self, changes: &[Change]) -> Result<u64, SearchError> {
        self.append_if(changes, false).await.map(|appended| appended.unwrap_or_default())
    }

    /// Appends the initial corpus, unless it went in already (then `None`): whichever replica
    /// comes first seeds the log, once, the others find it seeded.
    pub async fn seed(&self, changes: &[Change]) -> Result<Option<u64>, SearchError> {
        self.append_if(changes, true).await
    }

    async fn append_if(&self, changes: &[Change], seeding: bool) -> Result<Option<u64>, SearchError> {
        let mut by_key: BTreeMap<String, &Change> = BTreeMap::new();
        for change in changes {
            by_key.insert(change.key(), change);
        }
        let rows: Vec<EntryRow> = by_key.values().map(|change| EntryRow::of(change)).collect::<Result<_, _>>()?;
        let count = i64::try_from(rows.len()).unwrap_or(i64::MAX);
        bounded(async {
            let _turn = self.database.write_turn().await;
            let mut transaction = self.pool.begin().await?;
            let written = async {
                // The head row's lock numbers the entries: appenders take turns, in commit order.
                let claim = if seeding {
                    "UPDATE search_document_log_heads SET last_sequence = last_sequence + $1, seeded = 1 \
                     WHERE corpus = $2 AND seeded = 0 RETURNING last_sequence"
                } else {
                    "UPDATE search_document_log_heads SET last_sequence = last_sequence + $1 \
                     WHERE corpus = $2 RETURNING last_sequence"
                };
                let Some(row) =
                    sqlx::query(claim).bind(count).bind(&self.corpus).fetch_optional(&mut *transaction).await?
                else {
                    return Ok(None);
                };
                let last: i64 = row.try_get(0)?;
                let first = last - count + 1;
                let now = now_ms();
                for (chunk_index, chunk) in rows.chunks(INSERT_ROWS_MAX).enumerate() {
                    let placeholders: Vec<String> = (0..chunk.len())
                        .map(|i| {
                            let p = i * 8;
                            format!(
                                "(${}, ${}, ${}, ${}, ${}, ${}, ${}, ${})",
                                p + 1,
                                p + 2,
                                p + 3,
                                p + 4,
                                p + 5,
                                p + 6,
                                p + 7,
                                p + 8
                            )
                        })
                        .collect();
                    // A document's new entry takes the place of its old one (one entry per document).
                    let sql = format!(
                        "INSERT INTO search_document_log \
                         (corpus, sequence, tenant, document_id, body, vector, model, appended_at_ms) VALUES {} \
                         ON CONFLICT (corpus, tenant, document_id) DO UPDATE SET sequence = excluded.sequence, \
                         body = excluded.body, vector = excluded.vector, model = excluded.model, \
                         appended_at_ms = excluded.appended_at_ms",
                        placeholders.join(", ")
                    );
                    // Only placeholders are formatted into the statement, never values.
                    let mut insert = sqlx::query(sqlx::AssertSqlSafe(sql));
                    for (i, row) in chunk.iter().enumerate() {
                        let offset = i64::try_from(chunk_index * INSERT_ROWS_MAX + i).unwrap_or(i64::MAX);
                        insert = insert
                            .bind(&self.corpus)
                            .bind(first + offset)
                            .bind(&row.tenant)
                            .bind(&row.document_id)
                            .bind(row.body.clone())
                            .bind(row.vector.clone())
                            .bind(row.model.clone())
                            .bind(now);
                    }
                    insert.execute(&mut *transaction).await?;
                }
                Ok::<_, SearchError>(Some(sequence(last)))
            }
            .await;
            settle(transaction, written, Option::is_some).await
        })
        .await
    }

    /// Up to [`READ_ENTRIES_MAX`] entries after sequence `after`, in order.
    pub async fn read_after(&self, after: u64) -> Result<Vec<LogEntry>, SearchError> {
        bounded(async {
            let rows = sqlx::query(
                "SELECT sequence, tenant, document_id, body, vector, model FROM search_document_log \
                 WHERE corpus = $1 AND sequence > $2 ORDER BY sequence LIMIT $3",
            )
            .bind(&self.corpus)
            .bind(i64::try_from(after).unwrap_or(i64::MAX))
            .bind(READ_ENTRIES_MAX)
            .fetch_all(&self.pool)
            .await?;
            rows.iter().map(entry).collect()
        })
        .await
    }

    /// Keys of the documents the log holds (not deleted).
    pub async fn live_keys(&self) -> Result<HashSet<String>, SearchError> {
        bounded(async {
            let rows = sqlx::query(
                "SELECT tenant, document_id FROM search_document_log WHERE corpus = $1 AND body IS NOT NULL",
            )
            .bind(&self.corpus)
            .fetch_all(&self.pool)
            .await?;
            rows.iter()
                .map(|row| {
                    let tenant: String = row.try_get(0)?;
                    let id: String = row.try_get(1)?;
                    Ok(document_key(Some(tenant.as_str()).filter(|t| !t.is_empty()), &id))
                })
                .collect()
        })
        .await
    }

    /// Drops the tombstones older than `retention`, recording the newest one dropped so that a
    /// replica which had not applied it knows to compare its documents with the log's; returns how
    /// many were dropped. Any replica may run it, at any time: it is idempotent.
    pub async fn compact(&self, retention: Duration) -> Result<u64, SearchError> {
        let cutoff = now_ms().saturating_sub(i64::try_from(retention.as_millis()).unwrap_or(i64::MAX));
        bounded(async {
            let _turn = self.database.write_turn().await;
            let mut transaction = self.pool.begin().await?;
            let written = async {
                let row = sqlx::query(
                    "SELECT MAX(sequence) FROM search_document_log \
                     WHERE corpus = $1 AND body IS NULL AND appended_at_ms < $2",
                )
                .bind(&self.corpus)
                .bind(cutoff)
                .fetch_one(&mut *transaction)
                .await?;
                let Some(through) = row.try_get::<Option<i64>, _>(0)? else {
                    return Ok(0);
                };
                sqlx::query(
                    "UPDATE search_document_log_heads SET tombstones_through = $1 \
                     WHERE corpus = $2 AND tombstones_through < $1",
                )
                .bind(through)
                .bind(&self.corpus)
                .execute(&mut *transaction)
                .await?;
                let dropped = sqlx::query(
                    "DELETE FROM search_document_log WHERE corpus = $1 AND body IS NULL AND sequence <= $2",
                )
                .bind(&self.corpus)
                .bind(through)
                .execute(&mut *transaction)
                .await?
                .rows_affected();
                Ok::<_, SearchError>(dropped)
            }
            .await;
            settle(transaction, written, |_| true).await
        })
        .await
    }
}

/// An entry as the log's row stores it.
struct EntryRow {
    tenant: String,
    document_id: String,
    body: Option<String>,
    vector: Option<String>,
    model: Option<String>,
}

impl EntryRow {
    fn of(change: &Change) -> Result<Self, SearchError> {
        let (body, vector) = match change {
            Change::Upsert { document, vector, .. } => {
                let body = serde_json::to_string(document)
                    .map_err(|e| SearchError::Log(format!("cannot write document {:?}: {e}", document.id)))?;
                (Some(body), vector.as_ref())
            }
            Change::Delete { .. } => (None, None),
        };
        Ok(Self {
            tenant: change.tenant().unwrap_or_default().to_owned(),
            document_id: change.id().to_owned(),
            body,
            vector: vector.map(|v| BASE64.encode(vector_to_bytes(&v.values))),
            model: vector.map(|v| v.model.clone()),
        })
    }
}

fn entry(row: &sqlx::any::AnyRow) -> Result<LogEntry, SearchError> {
    let tenant: String = row.try_get(1)?;
    let tenant = Some(tenant).filter(|tenant| !tenant.is_empty());
    let id: String = row.try_get(2)?;
    let body: Option<String> = row.try_get(3)?;
    let change = match body {
        None => Change::Delete { tenant, id },
        Some(body) => {
            let document: Document = serde_json::from_str(&body)
                .map_err(|e| SearchError::Log(format!("the log's document {id:?} is not a document: {e}")))?;
            let vector: Option<String> = row.try_get(4)?;
            let model: Option<String> = row.try_get(5)?;
            // An unreadable vector is computed again rather than failing the entry.
            let vector = vector
                .and_then(|v| BASE64.decode(v).ok())
                .zip(model)
                .map(|(bytes, model)| DocumentVector { values: vector_from_bytes(&bytes), model });
            Change::Upsert { tenant, document, vector }
        }
    };
    Ok(LogEntry { sequence: sequence(row.try_get(0)?), change })
}

/// A stored sequence (never negative) as the index keeps it.
fn sequence(stored: i64) -> u64 {
    u64::try_from(stored).unwrap_or_default()
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Runs one call on the log within [`LOG_CALL_TIMEOUT_MS`].
async fn bounded<T>(call: impl Future<Output = Result<T, SearchError>>) -> Result<T, SearchError> {
    tokio::time::timeout(Duration::from_millis(LOG_CALL_TIMEOUT_MS), call)
        .await
        .unwrap_or_else(|_| Err(SearchError::Log(format!("no answer within {LOG_CALL_TIMEOUT_MS} ms"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deletion(id: &str) -> Change {
        Change::Delete { tenant: None, id: id.to_owned() }
    }

    /// A seed that finds the log seeded has begun a write (the head's claim, inside its
    /// transaction) and writes nothing: it must end that transaction before the next writer's
    /// turn, or the next append finds SQLite locked. Every replica but the first seeds so.
    #[tokio::test]
    async fn a_seed_that_finds_the_log_seeded_leaves_it_writable_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut urls = vec![format!("sqlite://{}", dir.path().join("log.db").display())];
        urls.extend(mesh_test_support::postgres_url());
        for url in urls {
            let log = DocumentLog::open(&url, &uuid::Uuid::new_v4().to_string()).await.unwrap();
            assert_eq!(log.seed(&[deletion("d0")]).await.unwrap(), Some(1), "{url}");
            for round in 1..=200 {
                assert_eq!(log.seed(&[deletion("late")]).await.unwrap(), None, "{url}, round {round}");
                let appended = log.append(&[deletion(&format!("d{round}"))]).await;
                assert_eq!(appended.unwrap(), round + 1, "{url}, round {round}");
            }
            assert_eq!(log.head().await.unwrap().last_sequence, 201, "{url}");
        }
    }
}
