//! Push notifications' durable side: the webhooks clients set on their tasks (A2A push
//! notification configs) and the outbox of notifications not yet delivered, beside the tasks and
//! in the same durability (SQL tables `a2a_push_configs` and `a2a_push_outbox`, or this process's
//! memory). Delivery itself (HTTP, retries) is the agent kit's: it claims due notifications here,
//! and reports each as delivered or failed.
//!
//! Each notification carries the sequence number its config gave it (1, 2, ...): a client seeing
//! a number twice drops the repeat, since delivery is at least once. Notifications of one config
//! are handed out in sequence order, one at a time, so a webhook sees them in order.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use mesh_protocol::a2a::v1::{StreamResponse, TaskPushNotificationConfig};
use mesh_storage::{Row, settle};

use crate::error::TaskError;
use crate::model::now_timestamp;
use crate::retention::timestamp_after;
use crate::store::{SqlTasks, TaskStore, Tasks};

/// Webhooks one task may have at once: each costs a delivery per event of the task.
pub const PUSH_CONFIGS_PER_TASK_MAX: usize = 10;
/// Notifications waiting for delivery in one agent's outbox, at most: past it, new notifications
/// are refused (and logged) rather than let dead webhooks grow the outbox without end.
pub const PUSH_OUTBOX_ROWS_MAX: usize = 100_000;

/// A notification claimed for delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingPush {
    pub tenant: String,
    pub task_id: String,
    /// The webhook, as its config says now.
    pub config: TaskPushNotificationConfig,
    /// Its place among its config's notifications, from 1.
    pub sequence: i64,
    /// Delivery attempts made before this one.
    pub attempts: u32,
    pub event: StreamResponse,
}

impl PendingPush {
    /// The config's id (the store fills it in every stored config).
    pub fn config_id(&self) -> &str {
        self.config.id.as_deref().unwrap_or_default()
    }
}

/// What became of a delivery attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushOutcome {
    /// Delivered, or given up: the notification leaves the outbox.
    Done,
    /// Failed: try again after this long.
    RetryIn(Duration),
}

/// A config as stored: its id and task filled in, no tenant (the key holds it).
fn stored_config(task_id: &str, config: &TaskPushNotificationConfig) -> TaskPushNotificationConfig {
    let mut stored = config.clone();
    stored.tenant = None;
    stored.task_id = Some(task_id.to_owned());
    // As the official SDK does: a config named by nobody is the task's one default webhook.
    stored.id = Some(config.id.clone().filter(|id| !id.is_empty()).unwrap_or_else(|| task_id.to_owned()));
    stored
}

fn too_many_configs() -> TaskError {
    TaskError::InvalidParams(format!(
        "a task has at most {PUSH_CONFIGS_PER_TASK_MAX} push notification configs; delete one first"
    ))
}

fn outbox_full() -> TaskError {
    TaskError::Busy(format!("{PUSH_OUTBOX_ROWS_MAX} push notifications wait for delivery already"))
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, TaskError> {
    serde_json::to_string(value).map_err(|e| TaskError::Storage(e.to_string()))
}

fn from_json<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, TaskError> {
    serde_json::from_str(text)
        .map_err(|e| TaskError::Storage(format!("a stored push notification does not parse: {e}")))
}

impl TaskStore {
    /// Stores the webhook `config` of the tenant's task `task_id` (its id, when it has none, is the
    /// task's id; a config of the same id is replaced) and returns it as stored. Whether the task
    /// exists is the caller's to check: a config given with `SendMessage` comes before its task.
    pub async fn put_push_config(
        &self,
        tenant: &str,
        task_id: &str,
        config: &TaskPushNotificationConfig,
    ) -> Result<TaskPushNotificationConfig, TaskError> {
        let stored = stored_config(task_id, config);
        let id = stored.id.clone().unwrap_or_default();
        let sql = match &self.tasks {
            Tasks::Memory(memory) => return memory.push.put(tenant, task_id, stored),
            Tasks::Sql(sql) => sql,
        };
        // The write comes first, so that the transaction holds SQLite's write lock from its first
        // statement: one that read first could not upgrade after another commit (WAL).
        let mut transaction = sql.pool.begin().await?;
        let written = async {
            sqlx::query(
                "INSERT INTO a2a_push_configs (agent, tenant, task_id, id, created_at, body, last_sequence) \
                 VALUES ($1, $2, $3, $4, $5, $6, 0) ON CONFLICT (agent, tenant, task_id, id) DO UPDATE SET body = excluded.body",
            )
            .bind(&*self.agent)
            .bind(tenant)
            .bind(task_id)
            .bind(&id)
            .bind(now_timestamp())
            .bind(to_json(&stored)?)
            .execute(&mut *transaction)
            .await?;
            let configs: i64 =
                sqlx::query("SELECT COUNT(*) AS n FROM a2a_push_configs WHERE agent = $1 AND tenant = $2 AND task_id = $3")
                    .bind(&*self.agent)
                    .bind(tenant)
                    .bind(task_id)
                    .fetch_one(&mut *transaction)
                    .await?
                    .try_get("n")?;
            if configs > PUSH_CONFIGS_PER_TASK_MAX as i64 {
                    return Err(too_many_configs());
            }
            Ok::<_, TaskError>(())
        }
        .await;
        settle(transaction, written, |_| true).await?;
        Ok(stored)
    }

    /// The task's webhook configs, in the order of their ids.
    pub async fn push_configs(
        &self,
        tenant: &str,
        task_id: &str,
    ) -> Result<Vec<TaskPushNotificationConfig>, TaskError> {
        let sql = match &self.tasks {
            Tasks::Memory(memory) => return Ok(memory.push.configs(tenant, task_id)),
            Tasks::Sql(sql) => sql,
        };
        sqlx::query("SELECT body FROM a2a_push_configs WHERE agent = $1 AND tenant = $2 AND task_id = $3 ORDER BY id")
            .bind(&*self.agent)
            .bind(tenant)
            .bind(task_id)
            .fetch_all(&sql.pool)
            .await?
            .iter()
            .map(|row| from_json(&row.try_get::<String, _>("body")?))
            .collect()
    }

    /// Whether the task has any webhook config: the engine asks once per task it loads.
    pub async fn has_push_configs(&self, tenant: &str, task_id: &str) -> Result<bool, TaskError> {
        Ok(!self.push_configs(tenant, task_id).await?.is_empty())
    }

    /// Deletes the task's config `id` and the notifications still waiting for it; deleting one
    /// that is not there does nothing (the spec makes the delete idempotent).
    pub async fn delete_push_config(&self, tenant: &str, task_id: &str, id: &str) -> Result<(), TaskError> {
        let sql = match &self.tasks {
            Tasks::Memory(memory) => {
                memory.push.delete(tenant, task_id, id);
                return Ok(());
            }
            Tasks::Sql(sql) => sql,
        };
        let mut transaction = sql.pool.begin().await?;
        let written = async {
            for table_and_column in [("a2a_push_outbox", "config_id"), ("a2a_push_configs", "id")] {
                let (table, column) = table_and_column;
                // Audited: table and column names are the fixed pairs above; values are bound.
                let statement =
                    format!("DELETE FROM {table} WHERE agent = $1 AND tenant = $2 AND task_id = $3 AND {column} = $4");
                sqlx::query(sqlx::AssertSqlSafe(statement))
                    .bind(&*self.agent)
                    .bind(tenant)
                    .bind(task_id)
                    .bind(id)
                    .execute(&mut *transaction)
                    .await?;
            }
            Ok::<_, TaskError>(())
        }
        .await;
        settle(transaction, written, |_| true).await?;
        Ok(())
    }

    /// Queues `events` of the task for each of its webhooks, each taking its config's next
    /// sequence number, in one transaction; returns how many notifications were queued (none
    /// when the task has no config). Refused when the outbox holds [`PUSH_OUTBOX_ROWS_MAX`].
    pub async fn enqueue_push(
        &self,
        tenant: &str,
        task_id: &str,
        events: &[StreamResponse],
    ) -> Result<usize, TaskError> {
        let sql = match &self.tasks {
            Tasks::Memory(memory) => return memory.push.enqueue(tenant, task_id, events),
            Tasks::Sql(sql) => sql,
        };
        let bodies = events.iter().map(to_json).collect::<Result<Vec<_>, _>>()?;
        // Read before the transaction, which then only writes (see `put_push_config`): the bound
        // may be passed by the notifications queued at the same moment, never by more.
        let queued: i64 = sqlx::query("SELECT COUNT(*) AS n FROM a2a_push_outbox WHERE agent = $1")
            .bind(&*self.agent)
            .fetch_one(&sql.pool)
            .await?
            .try_get("n")?;
        if queued >= PUSH_OUTBOX_ROWS_MAX as i64 {
            return Err(outbox_full());
        }
        let mut transaction = sql.pool.begin().await?;
        let written = async {
            let now = now_timestamp();
            let mut inserted = 0;
            for body in &bodies {
                sqlx::query(
                    "UPDATE a2a_push_configs SET last_sequence = last_sequence + 1 \
                     WHERE agent = $1 AND tenant = $2 AND task_id = $3",
                )
                .bind(&*self.agent)
                .bind(tenant)
                .bind(task_id)
                .execute(&mut *transaction)
                .await?;
                inserted += sqlx::query(
                    "INSERT INTO a2a_push_outbox (agent, tenant, task_id, config_id, sequence, attempts, due_at, claimed_until, body) \
                     SELECT agent, tenant, task_id, id, last_sequence, 0, $4, '', $5 FROM a2a_push_configs \
                     WHERE agent = $1 AND tenant = $2 AND task_id = $3",
                )
                .bind(&*self.agent)
                .bind(tenant)
                .bind(task_id)
                .bind(&now)
                .bind(body)
                .execute(&mut *transaction)
                .await?
                .rows_affected();
            }
            Ok::<_, TaskError>(inserted)
        }
        .await;
        let inserted = settle(transaction, written, |_| true).await?;
        Ok(usize::try_from(inserted).unwrap_or(usize::MAX))
    }

    /// Claims up to `max` due notifications for delivery, each for `claim_for` (after which, not
    /// reported, it is due again: the process delivering it died). Only the oldest waiting
    /// notification of a config is ever handed out, so its webhook gets them in order.
    pub async fn claim_push(&self, max: usize, claim_for: Duration) -> Result<Vec<PendingPush>, TaskError> {
        let sql = match &self.tasks {
            Tasks::Memory(memory) => return Ok(memory.push.claim(max, &timestamp_after(claim_for))),
            Tasks::Sql(sql) => sql,
        };
        let now = now_timestamp();
        let until = timestamp_after(claim_for);
        let rows = sqlx::query(
            "SELECT o.tenant, o.task_id, o.config_id, o.sequence, o.attempts, o.body, c.body AS config \
             FROM a2a_push_outbox o JOIN a2a_push_configs c ON c.agent = o.agent AND c.tenant = o.tenant \
             AND c.task_id = o.task_id AND c.id = o.config_id \
             WHERE o.agent = $1 AND o.due_at <= $2 AND o.claimed_until < $2 AND NOT EXISTS (SELECT 1 FROM a2a_push_outbox p \
             WHERE p.agent = o.agent AND p.tenant = o.tenant AND p.task_id = o.task_id AND p.config_id = o.config_id \
             AND p.sequence < o.sequence) ORDER BY o.due_at LIMIT $3",
        )
        .bind(&*self.agent)
        .bind(&now)
        .bind(i64::try_from(max).unwrap_or(i64::MAX))
        .fetch_all(&sql.pool)
        .await?;
        let mut claimed = Vec::with_capacity(rows.len());
        for row in &rows {
            let (tenant, task_id, config_id): (String, String, String) =
                (row.try_get("tenant")?, row.try_get("task_id")?, row.try_get("config_id")?);
            let sequence: i64 = row.try_get("sequence")?;
            // Another process (a replica) may have claimed it since the read: the update decides.
            let taken = sqlx::query(
                "UPDATE a2a_push_outbox SET claimed_until = $1 WHERE agent = $2 AND tenant = $3 AND task_id = $4 \
                 AND config_id = $5 AND sequence = $6 AND claimed_until < $7",
            )
            .bind(&until)
            .bind(&*self.agent)
            .bind(&tenant)
            .bind(&task_id)
            .bind(&config_id)
            .bind(sequence)
            .bind(&now)
            .execute(&sql.pool)
            .await?
            .rows_affected();
            if taken == 0 {
                continue;
            }
            let event = match from_json(&row.try_get::<String, _>("body")?) {
                Ok(event) => event,
                Err(error) => {
                    tracing::error!(task = %task_id, %error, "dropping a push notification that does not parse");
                    self.settle_sql(sql, &tenant, &task_id, &config_id, sequence, PushOutcome::Done).await?;
                    continue;
                }
            };
            claimed.push(PendingPush {
                config: from_json(&row.try_get::<String, _>("config")?)?,
                attempts: u32::try_from(row.try_get::<i64, _>("attempts")?).unwrap_or(u32::MAX),
                tenant,
                task_id,
                sequence,
                event,
            });
        }
        Ok(claimed)
    }

    /// Records what became of a claimed notification's delivery attempt.
    pub async fn settle_push(&self, push: &PendingPush, outcome: PushOutcome) -> Result<(), TaskError> {
        match &self.tasks {
            Tasks::Memory(memory) => {
                memory.push.settle(push, outcome);
                Ok(())
            }
            Tasks::Sql(sql) => {
                self.settle_sql(sql, &push.tenant, &push.task_id, push.config_id(), push.sequence, outcome).await
            }
        }
    }

    async fn settle_sql(
        &self,
        sql: &SqlTasks,
        tenant: &str,
        task_id: &str,
        config_id: &str,
        sequence: i64,
        outcome: PushOutcome,
    ) -> Result<(), TaskError> {
        let key = "agent = $1 AND tenant = $2 AND task_id = $3 AND config_id = $4 AND sequence = $5";
        let statement = match outcome {
            PushOutcome::Done => format!("DELETE FROM a2a_push_outbox WHERE {key}"),
            PushOutcome::RetryIn(_) => format!(
                "UPDATE a2a_push_outbox SET attempts = attempts + 1, due_at = $6, claimed_until = '' WHERE {key}"
            ),
        };
        // Audited: the SQL is one of the two fixed statements above; every value is bound.
        let mut query = sqlx::query(sqlx::AssertSqlSafe(statement))
            .bind(&*self.agent)
            .bind(tenant)
            .bind(task_id)
            .bind(config_id)
            .bind(sequence);
        if let PushOutcome::RetryIn(delay) = outcome {
            query = query.bind(timestamp_after(delay));
        }
        query.execute(&sql.pool).await?;
        Ok(())
    }

    /// Deletes the configs of tasks no longer stored (retention deleted them) that were created
    /// before `cutoff` (a config given with `SendMessage` is stored before its task is), and the
    /// notifications left without a config.
    pub(crate) async fn purge_orphan_push(&self, cutoff: &str) -> Result<(), TaskError> {
        let sql = match &self.tasks {
            Tasks::Memory(memory) => {
                memory.push.retain_tasks(cutoff, |tenant, task_id| memory.get(tenant, task_id).is_some());
                return Ok(());
            }
            Tasks::Sql(sql) => sql,
        };
        sqlx::query(
            "DELETE FROM a2a_push_configs WHERE agent = $1 AND created_at < $2 AND NOT EXISTS (SELECT 1 FROM a2a_tasks t \
             WHERE t.agent = a2a_push_configs.agent AND t.tenant = a2a_push_configs.tenant AND t.id = a2a_push_configs.task_id)",
        )
        .bind(&*self.agent)
        .bind(cutoff)
        .execute(&sql.pool)
        .await?;
        sqlx::query(
            "DELETE FROM a2a_push_outbox WHERE agent = $1 AND NOT EXISTS (SELECT 1 FROM a2a_push_configs c \
             WHERE c.agent = a2a_push_outbox.agent AND c.tenant = a2a_push_outbox.tenant \
             AND c.task_id = a2a_push_outbox.task_id AND c.id = a2a_push_outbox.config_id)",
        )
        .bind(&*self.agent)
        .execute(&sql.pool)
        .await?;
        Ok(())
    }
}

/// A tenant's task id.
type TaskKey = (String, String);
/// A notification's place: the task, the config's id, the sequence number.
type OutboxKey = (String, String, String, i64);

/// The configs and outbox of a store in memory (durability `memory`): the same rules as the
/// tables, gone with the process.
#[derive(Debug, Default)]
pub(crate) struct MemoryPush {
    state: Mutex<PushState>,
}

#[derive(Debug, Default)]
struct PushState {
    /// Each task's configs, by id, with the last sequence number each gave.
    configs: HashMap<TaskKey, BTreeMap<String, (TaskPushNotificationConfig, i64)>>,
    /// When each task's first config was stored: a task's webhooks are stored before its first
    /// state is, so a young config without a task is not an orphan (as `created_at` in SQL).
    created: HashMap<TaskKey, String>,
    /// In key order, so a config's notifications come in sequence order.
    outbox: BTreeMap<OutboxKey, Waiting>,
}

#[derive(Debug)]
struct Waiting {
    attempts: u32,
    due_at: String,
    claimed_until: String,
    event: StreamResponse,
}

impl MemoryPush {
    fn state(&self) -> MutexGuard<'_, PushState> {
        // Every change is a single insert or remove: the maps stay consistent across a panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn put(
        &self,
        tenant: &str,
        task_id: &str,
        stored: TaskPushNotificationConfig,
    ) -> Result<TaskPushNotificationConfig, TaskError> {
        let id = stored.id.clone().unwrap_or_default();
        let mut state = self.state();
        let key = (tenant.to_owned(), task_id.to_owned());
        state.created.entry(key.clone()).or_insert_with(now_timestamp);
        let configs = state.configs.entry(key).or_default();
        if !configs.contains_key(&id) && configs.len() >= PUSH_CONFIGS_PER_TASK_MAX {
            return Err(too_many_configs());
        }
        let last_sequence = configs.get(&id).map_or(0, |(_, last)| *last);
        configs.insert(id, (stored.clone(), last_sequence));
        Ok(stored)
    }

    fn configs(&self, tenant: &str, task_id: &str) -> Vec<TaskPushNotificationConfig> {
        let state = self.state();
        let configs = state.configs.get(&(tenant.to_owned(), task_id.to_owned()));
        configs.map(|configs| configs.values().map(|(config, _)| config.clone()).collect()).unwrap_or_default()
    }

    fn delete(&self, tenant: &str, task_id: &str, id: &str) {
        let mut state = self.state();
        let key = (tenant.to_owned(), task_id.to_owned());
        if let Some(configs) = state.configs.get_mut(&key) {
            configs.remove(id);
            if configs.is_empty() {
                state.configs.remove(&key);
            }
        }
        state.outbox.retain(|(t, task, config, _), _| !(t == tenant && task == task_id && config == id));
    }

    fn enqueue(&self, tenant: &str, task_id: &str, events: &[StreamResponse]) -> Result<usize, TaskError> {
        let mut state = self.state();
        if state.outbox.len() >= PUSH_OUTBOX_ROWS_MAX {
            return Err(outbox_full());
        }
        let PushState { configs, outbox, .. } = &mut *state;
        let Some(configs) = configs.get_mut(&(tenant.to_owned(), task_id.to_owned())) else { return Ok(0) };
        let now = now_timestamp();
        for event in events {
            for (id, (_, last_sequence)) in configs.iter_mut() {
                *last_sequence += 1;
                let key = (tenant.to_owned(), task_id.to_owned(), id.clone(), *last_sequence);
                let waiting =
                    Waiting { attempts: 0, due_at: now.clone(), claimed_until: String::new(), event: event.clone() };
                outbox.insert(key, waiting);
            }
        }
        Ok(events.len() * configs.len())
    }

    fn claim(&self, max: usize, until: &str) -> Vec<PendingPush> {
        let now = now_timestamp();
        let mut state = self.state();
        let PushState { configs, outbox, .. } = &mut *state;
        let mut claimed = Vec::new();
        let mut previous: Option<(&str, &str, &str)> = None;
        for ((tenant, task_id, config_id, sequence), waiting) in outbox.iter_mut() {
            let head = previous != Some((tenant.as_str(), task_id.as_str(), config_id.as_str()));
            previous = Some((tenant, task_id, config_id));
            // Only the oldest notification of a config, and only when due and not claimed.
            if !head || waiting.due_at > now || waiting.claimed_until >= now {
                continue;
            }
            let Some((config, _)) =
                configs.get(&(tenant.clone(), task_id.clone())).and_then(|configs| configs.get(config_id))
            else {
                continue;
            };
            waiting.claimed_until = until.to_owned();
            claimed.push(PendingPush {
                tenant: tenant.clone(),
                task_id: task_id.clone(),
                config: config.clone(),
                sequence: *sequence,
                attempts: waiting.attempts,
                event: waiting.event.clone(),
            });
            if claimed.len() >= max {
                break;
            }
        }
        claimed
    }

    fn settle(&self, push: &PendingPush, outcome: PushOutcome) {
        let key = (push.tenant.clone(), push.task_id.clone(), push.config_id().to_owned(), push.sequence);
        let mut state = self.state();
        match outcome {
            PushOutcome::Done => {
                state.outbox.remove(&key);
            }
            PushOutcome::RetryIn(delay) => {
                if let Some(waiting) = state.outbox.get_mut(&key) {
                    waiting.attempts = waiting.attempts.saturating_add(1);
                    waiting.due_at = timestamp_after(delay);
                    waiting.claimed_until = String::new();
                }
            }
        }
    }

    /// Drops the configs (and notifications) of tasks that are not `kept`, unless stored at or
    /// after `cutoff`.
    fn retain_tasks(&self, cutoff: &str, kept: impl Fn(&str, &str) -> bool) {
        let mut state = self.state();
        let PushState { configs, created, outbox } = &mut *state;
        configs.retain(|key, _| kept(&key.0, &key.1) || created.get(key).is_some_and(|at| at.as_str() >= cutoff));
        created.retain(|key, _| configs.contains_key(key));
        outbox.retain(|(tenant, task_id, _, _), _| configs.contains_key(&(tenant.clone(), task_id.clone())));
    }
}

#[cfg(test)]
mod tests {
    use mesh_protocol::a2a::v1::{TaskState, TaskStatus, TaskStatusUpdateEvent};

    use super::*;

    fn config(id: &str) -> TaskPushNotificationConfig {
        TaskPushNotificationConfig {
            tenant: None,
            id: Some(id.into()),
            task_id: None,
            url: format!("http://hook.test/{id}"),
            token: None,
            authentication: None,
        }
    }

    fn status(state: TaskState) -> StreamResponse {
        StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: "t".into(),
            context_id: "c".into(),
            status: TaskStatus { state, message: None, timestamp: None },
            metadata: None,
        })
    }

    /// Claimed until long after the test.
    const LATER: &str = "9999-01-01T00:00:00.000000Z";

    fn queued(push: &MemoryPush) -> Vec<(String, String, String, i64)> {
        push.state().outbox.keys().cloned().collect()
    }

    #[test]
    fn every_event_is_queued_once_per_config_of_its_task() {
        let push = MemoryPush::default();
        for id in ["a", "b", "c"] {
            push.put("", "t", config(id)).unwrap();
        }
        push.put("", "other", config("a")).unwrap();
        let events = [status(TaskState::Working), status(TaskState::Completed)];
        assert_eq!(push.enqueue("", "t", &events).unwrap(), 6);
        assert_eq!(queued(&push).len(), 6);
        assert_eq!(push.enqueue("", "no-configs", &events).unwrap(), 0);
    }

    #[test]
    fn a_claim_takes_at_most_what_is_asked_and_only_each_configs_oldest() {
        let push = MemoryPush::default();
        push.put("", "t", config("a")).unwrap();
        push.put("", "t", config("b")).unwrap();
        push.enqueue("", "t", &[status(TaskState::Working), status(TaskState::Completed)]).unwrap();
        let first = push.claim(1, LATER);
        assert_eq!(first.len(), 1);
        let rest = push.claim(10, LATER);
        assert_eq!(rest.len(), 1, "the other config's oldest; the later ones wait behind their heads");
        assert_ne!(first[0].config_id(), rest[0].config_id());
        assert!([first[0].sequence, rest[0].sequence].iter().all(|sequence| *sequence == 1));
    }

    #[test]
    fn a_config_whose_task_is_not_stored_yet_outlives_a_purge_until_it_is_old() {
        // A new task's webhooks are stored before its first state: a purge between the two
        // must not take them (it did, and the task's notifications were never sent).
        let push = MemoryPush::default();
        let before = now_timestamp();
        push.put("", "t", config("a")).unwrap();
        push.enqueue("", "t", &[status(TaskState::Working)]).unwrap();
        push.retain_tasks(&before, |_, _| false);
        assert_eq!(push.configs("", "t").len(), 1, "young: kept");
        assert_eq!(push.claim(8, "9999").len(), 1, "its notification too");
        push.retain_tasks("9999", |_, _| false);
        assert!(push.configs("", "t").is_empty(), "old and taskless: an orphan");
        assert!(push.claim(8, "9999").is_empty());
        push.put("", "u", config("a")).unwrap();
        push.retain_tasks("9999", |_, task| task == "u");
        assert_eq!(push.configs("", "u").len(), 1, "a stored task keeps its configs, however old");
    }

    #[test]
    fn deleting_a_config_drops_only_its_own_notifications() {
        let push = MemoryPush::default();
        push.put("", "t", config("a")).unwrap();
        push.put("", "t", config("b")).unwrap();
        push.put("", "u", config("a")).unwrap();
        push.put("x", "t", config("a")).unwrap();
        for (tenant, task) in [("", "t"), ("", "u"), ("x", "t")] {
            push.enqueue(tenant, task, &[status(TaskState::Completed)]).unwrap();
        }
        push.delete("", "t", "a");
        let left: Vec<(String, String, String)> =
            queued(&push).into_iter().map(|(tenant, task, config, _)| (tenant, task, config)).collect();
        let expected =
            [("", "t", "b"), ("", "u", "a"), ("x", "t", "a")].map(|(a, b, c)| (a.into(), b.into(), c.into()));
        assert_eq!(left, expected);
        assert_eq!(push.configs("", "t").len(), 1);
    }
}
