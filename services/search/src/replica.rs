//! The documents of one replica: its own index, and, when the agent is configured with a document
//! log, the log every replica builds its index from.
//!
//! Every change of the index goes through here, one at a time. With a log, a write is appended to
//! the log and committed there before it is acknowledged, then applied to this replica's index
//! before the answer (read-your-writes on the replica that took it); every replica tails the log
//! and applies what others appended within its sync interval. Without a log the index is changed
//! directly, as a single agent does.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::task::AbortOnDropHandle;

use crate::corpus::Document;
use crate::error::SearchError;
use crate::index::{Change, IngestReport, Prepared, SearchIndex, deletions_outside};
use crate::log::{DocumentLog, LogHead, READ_ENTRIES_MAX};
use crate::on_blocking_thread;

/// How the replica follows the log, for `/health`.
#[derive(Debug, Default)]
struct SyncStatus {
    /// The log's newest sequence when last read.
    log_sequence: u64,
    /// Tombstones up to this sequence were compacted away, when last read.
    tombstones_through: u64,
    last_synced: Option<Instant>,
    /// Why the last sync failed; `None` once one succeeds.
    error: Option<String>,
    last_compaction: Option<Instant>,
}

/// What a write did, and the log entry that holds it (a replica whose applied sequence reached it
/// has it too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub report: IngestReport,
    pub sequence: Option<u64>,
}

#[derive(Debug)]
pub struct Replica {
    index: Arc<SearchIndex>,
    log: Option<DocumentLog>,
    /// One change at a time: two ingests at once would each compute vectors on every core, both
    /// slower than one after the other, and their memory would add up; and log entries must be
    /// applied in order.
    writing: tokio::sync::Mutex<()>,
    status: Mutex<SyncStatus>,
}

impl Replica {
    pub fn new(index: Arc<SearchIndex>, log: Option<DocumentLog>) -> Self {
        Self { index, log, writing: tokio::sync::Mutex::new(()), status: Mutex::new(SyncStatus::default()) }
    }

    pub fn index(&self) -> &Arc<SearchIndex> {
        &self.index
    }

    /// With a log: seeds it with the initial corpus when no replica did yet (the documents of this
    /// index when it has some, an index that predates the log; else `initial`, read only then),
    /// then applies the log. Without one: ingests `initial` into an empty index.
    pub async fn seed(
        &self,
        initial: impl FnOnce() -> Result<Vec<Document>, SearchError> + Send + 'static,
    ) -> Result<(), SearchError> {
        let _writing = self.writing.lock().await;
        let Some(log) = &self.log else {
            if self.index.is_empty() {
                let index = self.index.clone();
                on_blocking_thread(move || {
                    let documents = initial()?;
                    tracing::info!(documents = documents.len(), "ingesting the initial corpus into an empty index");
                    index.upsert(None, documents, &|_| {})
                })
                .await?;
            }
            return Ok(());
        };
        if !log.is_seeded().await? {
            let index = self.index.clone();
            let (prepared, changes) = on_blocking_thread(move || {
                if !index.is_empty() {
                    tracing::info!(documents = index.len(), "seeding the document log from this index");
                    return Ok((Prepared::default(), index.changes()));
                }
                let documents = initial()?;
                tracing::info!(documents = documents.len(), "seeding the document log with the initial corpus");
                let upserts =
                    documents.into_iter().map(|document| Change::Upsert { tenant: None, document, vector: None });
                let prepared = index.prepare(upserts.collect(), &|_| {})?;
                let changes = prepared.changes();
                Ok((prepared, changes))
            })
            .await?;
            match log.seed(&changes).await? {
                Some(last) => self.apply_appended(prepared, changes.len(), last).await?,
                None => tracing::info!("another replica seeded the document log first"),
            }
        }
        self.catch_up_locked(log).await
    }

    /// Adds or replaces `documents` of `tenant` (`None`: the shared corpus).
    pub async fn ingest(&self, tenant: Option<String>, documents: Vec<Document>) -> Result<Written, SearchError> {
        let changes =
            documents.into_iter().map(|document| Change::Upsert { tenant: tenant.clone(), document, vector: None });
        self.change(changes.collect()).await
    }

    /// Deletes document `id` of `tenant`; a report of 0 deleted when there is none.
    pub async fn delete(&self, tenant: Option<String>, id: String) -> Result<Written, SearchError> {
        self.change(vec![Change::Delete { tenant, id }]).await
    }

    async fn change(&self, changes: Vec<Change>) -> Result<Written, SearchError> {
        let _writing = self.writing.lock().await;
        if let Some(log) = &self.log {
            // What others wrote first, so that what is unchanged, replaced or missing is judged
            // against the log, not against a replica a sync interval behind.
            self.catch_up_locked(log).await?;
        }
        let index = self.index.clone();
        let prepared = on_blocking_thread(move || index.prepare(changes, &|_| {})).await?;
        let Some(log) = &self.log else {
            let index = self.index.clone();
            let report = on_blocking_thread(move || index.write(prepared, None)).await?;
            return Ok(Written { report, sequence: None });
        };
        if prepared.is_empty() {
            return Ok(Written { report: prepared.report(&self.index), sequence: None });
        }
        let report = prepared.report(&self.index);
        let changes = prepared.changes();
        // Committed in the log from here: the write is durable whatever happens to this replica.
        let last = log.append(&changes).await?;
        self.apply_appended(prepared, changes.len(), last).await?;
        Ok(Written { report, sequence: Some(last) })
    }

    /// Applies `appended` entries this replica just appended, the last at `last`: straight from
    /// `prepared` when they follow what the index holds, else by reading the log (another replica
    /// appended in between, and its entries come first).
    async fn apply_appended(&self, prepared: Prepared, appended: usize, last: u64) -> Result<(), SearchError> {
        let Some(log) = &self.log else { return Ok(()) };
        if last.checked_sub(appended as u64) == Some(self.index.applied_sequence()) {
            let index = self.index.clone();
            on_blocking_thread(move || index.write(prepared, Some(last))).await?;
            let head = LogHead { last_sequence: last, tombstones_through: 0 };
            self.record(Ok(head));
            return Ok(());
        }
        self.catch_up_locked(log).await
    }

    /// Applies what the log holds past this replica's index.
    pub async fn catch_up(&self) -> Result<(), SearchError> {
        let Some(log) = &self.log else { return Ok(()) };
        let _writing = self.writing.lock().await;
        self.catch_up_locked(log).await
    }

    async fn catch_up_locked(&self, log: &DocumentLog) -> Result<(), SearchError> {
        let result = self.follow(log).await;
        self.record(result.as_ref().copied().map_err(ToString::to_string));
        result.map(|_| ())
    }

    /// Applies the log's entries past the index, a page per commit; returns the log's head.
    async fn follow(&self, log: &DocumentLog) -> Result<LogHead, SearchError> {
        let started_at = self.index.applied_sequence();
        let had_documents = !self.index.is_empty();
        loop {
            let entries = log.read_after(self.index.applied_sequence()).await?;
            let Some(last) = entries.last().map(|entry| entry.sequence) else { break };
            let full = entries.len() as i64 >= READ_ENTRIES_MAX;
            let index = self.index.clone();
            let changes = entries.into_iter().map(|entry| entry.change).collect();
            on_blocking_thread(move || index.apply(changes, last)).await?;
            if !full {
                break;
            }
        }
        // Read after the entries: tombstones compacted away meanwhile show here.
        let head = log.head().await?;
        // Deletions this index never applied may be gone from the log (compacted), and an index
        // that predates the log may hold documents the log never had: either way the index keeps
        // only what the log holds.
        if started_at < head.tombstones_through || (started_at == 0 && had_documents) {
            let live = log.live_keys().await?;
            let deletions = deletions_outside(self.index.keys(), &live);
            if !deletions.is_empty() {
                tracing::info!(documents = deletions.len(), "dropping documents the document log no longer holds");
                let (index, applied) = (self.index.clone(), self.index.applied_sequence());
                on_blocking_thread(move || index.apply(deletions, applied)).await?;
            }
        }
        Ok(head)
    }

    fn record(&self, outcome: Result<LogHead, String>) {
        let mut status = self.status.lock().unwrap_or_else(|e| e.into_inner());
        match outcome {
            Ok(head) => {
                status.log_sequence = status.log_sequence.max(head.last_sequence);
                status.tombstones_through = status.tombstones_through.max(head.tombstones_through);
                status.last_synced = Some(Instant::now());
                status.error = None;
            }
            Err(error) => status.error = Some(error),
        }
    }

    /// Follows the log every `interval`, and drops tombstones older than `tombstone_retention`
    /// every `compaction_interval`, until the handle is dropped (with the agent's routes).
    pub fn follow_log(
        self: &Arc<Self>,
        interval: Duration,
        tombstone_retention: Duration,
        compaction_interval: Duration,
    ) -> Option<AbortOnDropHandle<()>> {
        let log = self.log.clone()?;
        let replica = Arc::downgrade(self);
        Some(AbortOnDropHandle::new(tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(replica) = replica.upgrade() else { return };
                if let Err(error) = replica.catch_up().await {
                    tracing::warn!(%error, "cannot follow the document log; retrying at the next interval");
                }
                let due = replica
                    .status
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .last_compaction
                    .is_none_or(|last| last.elapsed() >= compaction_interval);
                if due {
                    match log.compact(tombstone_retention).await {
                        Ok(0) => {}
                        Ok(dropped) => tracing::info!(dropped, "compacted the document log's old tombstones"),
                        Err(error) => tracing::warn!(%error, "cannot compact the document log"),
                    }
                    replica.status.lock().unwrap_or_else(|e| e.into_inner()).last_compaction = Some(Instant::now());
                }
            }
        })))
    }

    /// The `/health` component: how far this replica is behind the log (`None` without a log).
    pub fn log_report(&self) -> Option<Value> {
        self.log.as_ref()?;
        let status = self.status.lock().unwrap_or_else(|e| e.into_inner());
        let applied = self.index.applied_sequence();
        let mut report = json!({
            "status": if status.error.is_some() { "degraded" } else { "ok" },
            "applied_sequence": applied,
            "log_sequence": status.log_sequence,
            "lag": status.log_sequence.saturating_sub(applied),
            "tombstones_through": status.tombstones_through,
            "synced_ms_ago": status.last_synced.map(|at| u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX)),
        });
        if let Some(error) = &status.error {
            report["reason"] = json!(format!("cannot follow the document log: {error}"));
        }
        Some(report)
    }
}
