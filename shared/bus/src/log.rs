//! The embedded log: Kafka's semantics (per-topic offsets, per-group committed offsets, replay
//! from the beginning) on one table of the mesh's own database, so `up` needs no broker.
//!
//! Every topic has one partition, [`LOG_PARTITION`]. A group here has no members to split it
//! between: each consumer of a group reads the whole topic from the group's offset, so one
//! instance of an agent consumes its topic. Several instances sharing the conversations is what
//! the Kafka backend's partitions are for.
//!
//! Consumers in the process of the producer wake at once on a new record (a `Notify` per
//! database and topic); consumers in other processes sharing the database notice new records
//! within [`CROSS_PROCESS_POLL_MS`], the only polling left.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::Duration;

use mesh_storage::{AnyPool, Database, Row, settle};
use sqlx::migrate::Migrator;
use tokio::sync::Notify;

use crate::{
    BusConsumer, BusError, BusRecord, BusReplay, CONSUMER_BATCH_MAX, ConversationBus, Delivered, DoneOffsets, Position,
    bounded,
};

/// The one partition of every topic of the embedded log.
pub const LOG_PARTITION: i32 = 0;
/// The log's own migration history, apart from other components sharing the database.
const MIGRATIONS_TABLE: &str = "_mesh_bus_migrations";
/// How soon a consumer sees a record produced by another process on the same database.
pub const CROSS_PROCESS_POLL_MS: u64 = 50;
/// Records one replay read fetches.
const REPLAY_PAGE_RECORDS: i64 = 5_000;
/// Rows of one INSERT statement (5 parameters each: under SQLite's and PostgreSQL's limits).
const INSERT_ROWS_MAX: usize = 1_000;
/// Retention is enforced every this many records produced to a topic.
const RETENTION_CHECK_EVERY_RECORDS: i64 = 1_000;

fn migrator() -> Migrator {
    let mut migrator = sqlx::migrate!("./migrations");
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    migrator
}

/// Wake-ups by database and topic, held by the consumers: an entry lives as long as a consumer
/// of its topic does, so topics consumed once (a UI socket's, long closed) leave nothing behind.
type Wakeups = HashMap<(String, String), Weak<Notify>>;

fn wakeups() -> MutexGuard<'static, Wakeups> {
    static WAKEUPS: OnceLock<Mutex<Wakeups>> = OnceLock::new();
    // Each change is one insert or sweep: the map is consistent whatever panicked.
    WAKEUPS.get_or_init(Default::default).lock().unwrap_or_else(PoisonError::into_inner)
}

/// The wake-up of this process's consumers of `topic`, for a new consumer; the entries no
/// consumer holds any more are swept as it is made.
fn subscribe(database: &str, topic: &str) -> Arc<Notify> {
    let mut wakeups = wakeups();
    let key = (database.to_owned(), topic.to_owned());
    if let Some(shared) = wakeups.get(&key).and_then(Weak::upgrade) {
        return shared;
    }
    wakeups.retain(|_, held| held.strong_count() > 0);
    let wakeup = Arc::new(Notify::new());
    wakeups.insert(key, Arc::downgrade(&wakeup));
    wakeup
}

/// Wakes this process's consumers of `topic`, if it has any.
fn wake(database: &str, topic: &str) {
    let wakeup = wakeups().get(&(database.to_owned(), topic.to_owned())).and_then(Weak::upgrade);
    if let Some(wakeup) = wakeup {
        wakeup.notify_waiters();
    }
}

/// The embedded log backend; clones share one pool.
#[derive(Debug, Clone)]
pub struct LogBus {
    pool: AnyPool,
    database: Database,
    /// Identifies the database for in-process wake-ups.
    url: Arc<str>,
    /// Records kept per topic; older ones are deleted (Kafka's `retention`). `None` keeps all.
    retention_records: Option<i64>,
}

impl LogBus {
    /// Opens (and migrates) the log in the database at `database_url`.
    pub async fn open(database_url: &str, retention_records: Option<u64>) -> Result<Self, BusError> {
        let database = Database::connect(database_url, &migrator()).await?;
        Ok(Self {
            pool: database.pool().clone(),
            database,
            url: Arc::from(database_url),
            retention_records: retention_records.map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
        })
    }

    async fn committed(&self, topic: &str, group: &str) -> Result<i64, BusError> {
        let row = sqlx::query("SELECT next_offset FROM bus_group_offsets WHERE topic = $1 AND group_id = $2")
            .bind(topic)
            .bind(group)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.try_get::<i64, _>(0)).transpose()?.unwrap_or(0))
    }

    async fn read(&self, topic: &str, from: i64, until: i64, limit: i64) -> Result<Vec<Delivered>, BusError> {
        let rows = sqlx::query(
            "SELECT record_offset, body FROM bus_records WHERE topic = $1 AND record_offset >= $2 \
             AND record_offset < $3 ORDER BY record_offset LIMIT $4",
        )
        .bind(topic)
        .bind(from)
        .bind(until)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let body: String = row.try_get(1)?;
                Ok(Delivered {
                    topic: topic.to_owned(),
                    partition: LOG_PARTITION,
                    offset: row.try_get(0)?,
                    record: BusRecord::from_json(body.as_bytes())?,
                })
            })
            .collect()
    }

    /// Enforces the retention after `count` records were appended from offset `first` on, once
    /// every [`RETENTION_CHECK_EVERY_RECORDS`].
    async fn prune(&self, topic: &str, first: i64, count: i64) -> Result<(), BusError> {
        let newest = first + count - 1;
        let crossed = newest / RETENTION_CHECK_EVERY_RECORDS != (first - 1).max(0) / RETENTION_CHECK_EVERY_RECORDS;
        if let Some(kept) = self.retention_records.filter(|_| crossed) {
            let _turn = self.database.write_turn().await;
            let deleted = sqlx::query("DELETE FROM bus_records WHERE topic = $1 AND record_offset <= $2")
                .bind(topic)
                .bind(newest - kept)
                .execute(&self.pool)
                .await?
                .rows_affected();
            tracing::debug!(topic, deleted, "embedded log retention");
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl ConversationBus for LogBus {
    async fn ensure_topic(&self, topic: &str) -> Result<(), BusError> {
        bounded("creating a topic", async {
            sqlx::query(
                "INSERT INTO bus_topics (topic, next_offset, created_at) VALUES ($1, 0, $2) ON CONFLICT (topic) DO NOTHING",
            )
            .bind(topic)
            .bind(mesh_docmem::now_timestamp())
            .execute(&self.pool)
            .await?;
            Ok(())
        })
        .await
    }

    async fn topic_exists(&self, topic: &str) -> Result<bool, BusError> {
        bounded("reading a topic", async {
            let row =
                sqlx::query("SELECT 1 FROM bus_topics WHERE topic = $1").bind(topic).fetch_optional(&self.pool).await?;
            Ok(row.is_some())
        })
        .await
    }

    async fn produce(&self, topic: &str, record: &BusRecord) -> Result<Position, BusError> {
        let positions = self.produce_many(topic, std::slice::from_ref(record)).await?;
        Ok(positions[0])
    }

    async fn produce_many(&self, topic: &str, records: &[BusRecord]) -> Result<Vec<Position>, BusError> {
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let bodies = records.iter().map(BusRecord::to_json).collect::<Result<Vec<_>, _>>()?;
        let count = records.len() as i64;
        let first = bounded("producing records", async {
            let _turn = self.database.write_turn().await;
            let mut transaction = self.pool.begin().await?;
            // An unknown topic is found after the UPDATE took the write lock: the transaction is
            // settled before the turn passes on (see `settle`).
            let written = async {
                // The row lock on the topic serializes producers, so offsets are dense and in commit order.
                let row = sqlx::query(
                    "UPDATE bus_topics SET next_offset = next_offset + $1 WHERE topic = $2 RETURNING next_offset",
                )
                .bind(count)
                .bind(topic)
                .fetch_optional(&mut *transaction)
                .await?
                .ok_or_else(|| BusError::UnknownTopic(topic.to_owned()))?;
                let first = row.try_get::<i64, _>(0)? - count;
                let now = mesh_docmem::now_timestamp();
                for (chunk_index, chunk) in records.chunks(INSERT_ROWS_MAX).enumerate() {
                    let placeholders: Vec<String> = (0..chunk.len())
                        .map(|i| {
                            let p = i * 5;
                            format!("(${}, ${}, ${}, ${}, ${})", p + 1, p + 2, p + 3, p + 4, p + 5)
                        })
                        .collect();
                    let sql = format!(
                        "INSERT INTO bus_records (topic, record_offset, conversation_id, body, appended_at) VALUES {}",
                        placeholders.join(", ")
                    );
                    // Only placeholders are formatted into the statement, never values.
                    let mut insert = sqlx::query(sqlx::AssertSqlSafe(sql));
                    for (i, record) in chunk.iter().enumerate() {
                        let index = chunk_index * INSERT_ROWS_MAX + i;
                        insert = insert
                            .bind(topic)
                            .bind(first + index as i64)
                            .bind(&record.conversation_id)
                            .bind(&bodies[index])
                            .bind(&now);
                    }
                    insert.execute(&mut *transaction).await?;
                }
                Ok::<_, BusError>(first)
            }
            .await;
            settle(transaction, written, |_| true).await
        })
        .await?;
        wake(&self.url, topic);
        let positions = (first..first + count).map(|offset| Position { partition: LOG_PARTITION, offset }).collect();
        self.prune(topic, first, count).await?;
        Ok(positions)
    }

    async fn consumer(&self, topic: &str, group: &str) -> Result<Box<dyn BusConsumer>, BusError> {
        let next_offset = bounded("reading a committed offset", self.committed(topic, group)).await?;
        Ok(Box::new(LogConsumer {
            bus: self.clone(),
            topic: topic.to_owned(),
            group: group.to_owned(),
            next_offset,
            wakeup: subscribe(&self.url, topic),
        }))
    }

    async fn replay(&self, topic: &str) -> Result<Box<dyn BusReplay>, BusError> {
        let end = bounded("reading a topic's end", async {
            let row = sqlx::query("SELECT next_offset FROM bus_topics WHERE topic = $1")
                .bind(topic)
                .fetch_optional(&self.pool)
                .await?
                .ok_or_else(|| BusError::UnknownTopic(topic.to_owned()))?;
            Ok(row.try_get::<i64, _>(0)?)
        })
        .await?;
        Ok(Box::new(LogReplay { bus: self.clone(), topic: topic.to_owned(), next_offset: 0, end }))
    }

    fn backend(&self) -> &'static str {
        "embedded-log"
    }
}

#[derive(Debug)]
struct LogConsumer {
    bus: LogBus,
    topic: String,
    group: String,
    next_offset: i64,
    wakeup: Arc<Notify>,
}

#[async_trait::async_trait]
impl BusConsumer for LogConsumer {
    async fn next_batch(&mut self) -> Result<Vec<Delivered>, BusError> {
        loop {
            // Registered before reading, so a record produced between the read and the wait
            // still wakes this consumer.
            let notified = self.wakeup.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let batch = bounded(
                "reading records",
                self.bus.read(&self.topic, self.next_offset, i64::MAX, CONSUMER_BATCH_MAX as i64),
            )
            .await?;
            if let Some(last) = batch.last() {
                self.next_offset = last.offset + 1;
                return Ok(batch);
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep(Duration::from_millis(CROSS_PROCESS_POLL_MS)) => {}
            }
        }
    }

    async fn commit(&mut self, done: &DoneOffsets) -> Result<(), BusError> {
        let Some((_, offset)) = done.iter().find(|(partition, _)| *partition == LOG_PARTITION) else { return Ok(()) };
        bounded("committing an offset", async {
            let _turn = self.bus.database.write_turn().await;
            sqlx::query(
                "INSERT INTO bus_group_offsets (topic, group_id, next_offset, updated_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (topic, group_id) DO UPDATE SET next_offset = excluded.next_offset, updated_at = excluded.updated_at",
            )
            .bind(&self.topic)
            .bind(&self.group)
            .bind(offset + 1)
            .bind(mesh_docmem::now_timestamp())
            .execute(&self.bus.pool)
            .await?;
            Ok(())
        })
        .await
    }

    fn assignment_generation(&self) -> u64 {
        // Never rebalanced: every consumer of a group reads the one partition.
        0
    }
}

#[derive(Debug)]
struct LogReplay {
    bus: LogBus,
    topic: String,
    next_offset: i64,
    end: i64,
}

#[async_trait::async_trait]
impl BusReplay for LogReplay {
    async fn next_batch(&mut self) -> Result<Option<Vec<Delivered>>, BusError> {
        if self.next_offset >= self.end {
            return Ok(None);
        }
        let batch =
            bounded("replaying records", self.bus.read(&self.topic, self.next_offset, self.end, REPLAY_PAGE_RECORDS))
                .await?;
        // Records below the retention cut are gone: the replay resumes at whatever follows.
        self.next_offset = batch.last().map_or(self.end, |last| last.offset + 1);
        Ok((!batch.is_empty()).then_some(batch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_topics_wake_up_lives_as_long_as_its_consumers() {
        let database = "sqlite://wake-ups-of-this-test";
        let key = |topic: &str| (database.to_owned(), topic.to_owned());
        let first = subscribe(database, "gone");
        let second = subscribe(database, "gone");
        assert!(Arc::ptr_eq(&first, &second), "the consumers of one topic share one wake-up");
        drop((first, second));
        wake(database, "never consumed");
        let _kept = subscribe(database, "kept");
        let wakeups = wakeups();
        assert!(!wakeups.contains_key(&key("gone")), "a topic nobody consumes any more is swept");
        assert!(!wakeups.contains_key(&key("never consumed")), "waking a topic nobody consumes adds nothing");
        assert!(wakeups.contains_key(&key("kept")));
    }
}
