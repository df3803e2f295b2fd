//! Keeping the task table bounded and truthful: finished tasks are deleted once older than a
//! time to live, by a periodic job; tasks a crash left running are failed, with the reason, when
//! the agent starts again.

use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use mesh_protocol::a2a::v1::{Message, Role, StreamResponse, TaskState, TaskStatus, TaskStatusUpdateEvent};
use mesh_storage::Row;
use tokio::task::JoinHandle;

use crate::error::TaskError;
use crate::model::{apply, now_timestamp, state_name, terminal_states};
use crate::store::{TaskStore, Tasks};

/// Finished tasks are kept this long after their last change by default (7 days).
pub const FINISHED_TASK_TTL_MS_DEFAULT: u64 = 7 * 24 * 3_600_000;
/// Time between two purges of finished tasks by default.
pub const TASK_PURGE_INTERVAL_MS_DEFAULT: u64 = 3_600_000;
/// Rows deleted per statement: a purge of millions of rows never holds one huge transaction
/// (which would block the writer and, on SQLite, every reader of the file).
const PURGE_BATCH_ROWS: i64 = 10_000;
/// Unfinished tasks read per round at startup.
const INTERRUPTED_BATCH_ROWS: i64 = 500;

/// The retention of one agent's finished tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub finished_task_ttl: Duration,
    pub purge_interval: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            finished_task_ttl: Duration::from_millis(FINISHED_TASK_TTL_MS_DEFAULT),
            purge_interval: Duration::from_millis(TASK_PURGE_INTERVAL_MS_DEFAULT),
        }
    }
}

/// The instant `age` ago, as stored timestamps are written (`"0"`, before any, when out of range).
pub(crate) fn timestamp_before(age: Duration) -> String {
    let age = chrono::Duration::from_std(age).unwrap_or(chrono::Duration::MAX);
    Utc::now()
        .checked_sub_signed(age)
        .map_or_else(|| "0".to_owned(), |t| t.to_rfc3339_opts(SecondsFormat::Micros, true))
}

/// The instant `delay` from now, as stored timestamps are written (the far future when out of
/// range).
pub(crate) fn timestamp_after(delay: Duration) -> String {
    let delay = chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::MAX);
    Utc::now()
        .checked_add_signed(delay)
        .map_or_else(|| "9".to_owned(), |t| t.to_rfc3339_opts(SecondsFormat::Micros, true))
}

impl TaskStore {
    /// Deletes this agent's finished tasks last changed more than `ttl` ago, every tenant's,
    /// with their push notification configs and pending notifications; returns how many tasks.
    /// Unfinished tasks are never deleted, however old.
    pub async fn purge_finished(&self, ttl: Duration) -> Result<u64, TaskError> {
        let cutoff = timestamp_before(ttl);
        let purged = self.purge_finished_tasks(&cutoff).await?;
        self.purge_orphan_push(&cutoff).await?;
        Ok(purged)
    }

    async fn purge_finished_tasks(&self, cutoff: &str) -> Result<u64, TaskError> {
        let pool = match &self.tasks {
            Tasks::Memory(memory) => return Ok(memory.purge_finished(cutoff)),
            Tasks::Sql(sql) => &sql.pool,
        };
        let [completed, failed, canceled, rejected] = terminal_states();
        let mut purged = 0;
        loop {
            let deleted = sqlx::query(
                "DELETE FROM a2a_tasks WHERE agent = $1 AND (tenant, id) IN (SELECT tenant, id FROM a2a_tasks \
                 WHERE agent = $1 AND state IN ($2, $3, $4, $5) AND updated_at < $6 LIMIT $7)",
            )
            .bind(&*self.agent)
            .bind(completed)
            .bind(failed)
            .bind(canceled)
            .bind(rejected)
            .bind(cutoff)
            .bind(PURGE_BATCH_ROWS)
            .execute(pool)
            .await?
            .rows_affected();
            purged += deleted;
            if deleted < PURGE_BATCH_ROWS as u64 {
                return Ok(purged);
            }
            // Let the writer and readers in between batches.
            tokio::task::yield_now().await;
        }
    }

    /// Purges finished tasks older than the retention's time to live now and then every
    /// interval, until the returned job is aborted.
    pub fn spawn_purger(&self, retention: Retention) -> JoinHandle<()> {
        let store = self.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(retention.purge_interval.max(Duration::from_millis(1)));
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                match store.purge_finished(retention.finished_task_ttl).await {
                    Ok(0) => {}
                    Ok(purged) => tracing::info!(agent = %store.agent, purged, "purged finished tasks"),
                    Err(error) => tracing::warn!(agent = %store.agent, %error, "could not purge finished tasks"),
                }
            }
        })
    }

    /// Fails every task of this agent still stored as submitted or working by a process that
    /// holds no lease renewed within `lease_ttl` (see [`crate::Lease`]): nothing runs them any more
    /// (the process that did crashed or was killed), and a client polling one would otherwise
    /// wait forever. Tasks of live replicas, and tasks waiting for the user, are left as they are.
    /// Returns how many were failed. On SQLite no process holds a lease: every such task is failed.
    /// In memory no task outlives its process: there is none.
    pub async fn fail_interrupted(&self, reason: &str, lease_ttl: Duration) -> Result<u64, TaskError> {
        let Some(sql) = self.sql() else { return Ok(0) };
        let running = [TaskState::Submitted, TaskState::Working].map(state_name);
        let lease_cutoff = timestamp_before(lease_ttl);
        let mut failed = 0;
        loop {
            // Rows of a replica with a lease renewed since the cutoff are another live process's.
            let rows = sqlx::query(
                "SELECT tenant, owner, body FROM a2a_tasks t WHERE agent = $1 AND state IN ($2, $3) \
                 AND NOT EXISTS (SELECT 1 FROM a2a_task_replicas r WHERE r.agent = t.agent \
                 AND r.replica = t.owner AND r.renewed_at >= $4) ORDER BY updated_at LIMIT $5",
            )
            .bind(&*self.agent)
            .bind(running[0])
            .bind(running[1])
            .bind(&lease_cutoff)
            .bind(INTERRUPTED_BATCH_ROWS)
            .fetch_all(&sql.pool)
            .await?;
            if rows.is_empty() {
                return Ok(failed);
            }
            let mut saves = Vec::with_capacity(rows.len());
            for row in &rows {
                let tenant: String = row.try_get("tenant")?;
                let mut task = crate::store::parse(&row.try_get::<String, _>("body")?)?;
                let mut message = Message::text(Role::Agent, format!("{}-interrupted", task.id), reason);
                message.task_id = Some(task.id.clone());
                message.context_id = Some(task.context_id.clone());
                let update = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                    task_id: task.id.clone(),
                    context_id: task.context_id.clone(),
                    status: TaskStatus {
                        state: TaskState::Failed,
                        message: Some(message),
                        timestamp: Some(now_timestamp()),
                    },
                    metadata: None,
                });
                apply(&mut task, &update);
                let owner: Option<String> = row.try_get("owner")?;
                saves.push(async move {
                    let id = task.id.clone();
                    self.save(&tenant, task).await?;
                    // Its webhooks hear of the end too (queued before the agent serves again).
                    if let Err(error) = self.enqueue_push(&tenant, &id, std::slice::from_ref(&update)).await {
                        tracing::error!(task = %id, %error, "could not queue the push notification of a failed task");
                    }
                    // Subscribers following the task on any replica learn of its end now.
                    if let (Some(fanout), Some(owner)) = (&self.fanout, owner) {
                        fanout.publish_for(&owner, &tenant, &id, &update).await;
                    }
                    Ok::<_, TaskError>(())
                });
            }
            // Saved concurrently, so the writer commits them in one transaction.
            for saved in futures::future::join_all(saves).await {
                saved?;
            }
            failed += rows.len() as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finished_tasks_are_kept_a_week_by_default_as_documented() {
        assert_eq!(Duration::from_millis(FINISHED_TASK_TTL_MS_DEFAULT), Duration::from_secs(7 * 24 * 60 * 60));
    }
}
