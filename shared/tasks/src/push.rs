//! Push notifications' durable side: the webhooks clients set on their tasks (A2A push
//! notification configs) and the outbox of notifications not yet delivered, beside the tasks and
//! in the same durability (SQL tables `a2a_push_configs` and `a2a_push_outbox`, or this process's
//! memory). Delivery itself (HTTP, retries, circuits) is the agent kit's: it claims due
//! notifications here, and reports each as delivered, to be retried, or undelivered.
//!
//! Each notification carries the sequence number its config gave it (1, 2, ...): a client seeing
//! a number twice drops the repeat, since delivery is at least once. Notifications of one config
//! are handed out in sequence order, one at a time, so a webhook sees them in order.
//!
//! Tenants share the outbox fairly ([`PushLimits`]): each holds at most its share of the waiting
//! notifications, and claims go round robin across tenants, each with at most its share of the
//! deliveries in flight, so one tenant's dead or hanging webhooks delay no other tenant's. A
//! notification that never reaches its webhook (refused when queued, or given up) is recorded on
//! its config, read back by the task's owner ([`TaskStore::undelivered_push`]), and counted in
//! `mesh_push_notifications_refused_total{service, tenant, reason}`. A refused notification still
//! takes its sequence number, so the webhook also sees the gap.

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
/// Notifications waiting for delivery in one agent's outbox by default, at most: past it, new
/// notifications are refused rather than let dead webhooks grow the outbox without end.
pub const PUSH_OUTBOX_ROWS_MAX_DEFAULT: usize = 100_000;
/// Notifications of one tenant waiting for delivery by default, at most: a tenant's share of the
/// outbox, so that ten tenants, not one, are needed to fill it.
pub const PUSH_OUTBOX_TENANT_ROWS_MAX_DEFAULT: usize = 10_000;

/// How many notifications may wait for delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushLimits {
    /// In the agent's whole outbox.
    pub outbox_rows_max: usize,
    /// Of one tenant.
    pub outbox_tenant_rows_max: usize,
}

impl Default for PushLimits {
    fn default() -> Self {
        Self {
            outbox_rows_max: PUSH_OUTBOX_ROWS_MAX_DEFAULT,
            outbox_tenant_rows_max: PUSH_OUTBOX_TENANT_ROWS_MAX_DEFAULT,
        }
    }
}

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

/// Why a notification never reached its webhook: the `reason` label of the metric and of the
/// task's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undelivered {
    /// Refused when queued: its tenant's share of the outbox was full.
    TenantOutboxFull,
    /// Refused when queued: the agent's outbox was full.
    OutboxFull,
    /// The outbound address policy refused the webhook's address when delivering.
    AddressRefused,
    /// The webhook's destination kept failing: its circuit was open at the last attempt.
    CircuitOpen,
    /// Every attempt failed.
    AttemptsExhausted,
    /// No request could be made of the config (a URL the HTTP stack does not take).
    InvalidWebhook,
}

impl Undelivered {
    pub fn label(self) -> &'static str {
        match self {
            Self::TenantOutboxFull => "tenant_outbox_full",
            Self::OutboxFull => "outbox_full",
            Self::AddressRefused => "address_refused",
            Self::CircuitOpen => "circuit_open",
            Self::AttemptsExhausted => "attempts_exhausted",
            Self::InvalidWebhook => "invalid_webhook",
        }
    }
}

/// What became of a delivery attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushOutcome {
    /// Delivered: the notification leaves the outbox.
    Done,
    /// Failed: try again after this long.
    RetryIn(Duration),
    /// Given up: the notification leaves the outbox, recorded on its config as undelivered.
    Undelivered { reason: Undelivered, message: String },
}

/// A config's notifications that never reached its webhook, as the owner of its task reads them
/// (in the task's metadata): how many, and the last one's reason, message, sequence number and
/// time.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UndeliveredPush {
    pub config_id: String,
    pub count: u64,
    /// [`Undelivered::label`].
    pub reason: String,
    pub message: String,
    pub sequence: i64,
    pub at: String,
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

/// Why notifications of `tenant` may not be queued, with `queued` of the agent's and
/// `tenant_queued` of the tenant's waiting already; `None` when they may.
fn refusal(limits: &PushLimits, tenant: &str, queued: usize, tenant_queued: usize) -> Option<(Undelivered, String)> {
    if tenant_queued >= limits.outbox_tenant_rows_max {
        let message = format!(
            "tenant {tenant:?} has {tenant_queued} push notifications waiting for delivery, its share of the \
             agent's outbox; this one was not queued"
        );
        return Some((Undelivered::TenantOutboxFull, message));
    }
    // Other tenants' counts are not told: only that the agent is full.
    (queued >= limits.outbox_rows_max).then(|| {
        let message = "the agent's outbox is full of push notifications waiting for delivery; this one was not queued";
        (Undelivered::OutboxFull, message.to_owned())
    })
}

/// Counts `count` undelivered notifications of the tenant, for the operators (the owner reads
/// them on its task).
fn count_undelivered(agent: &str, tenant: &str, reason: Undelivered, count: u64) {
    metrics::counter!("mesh_push_notifications_refused_total", mesh_telemetry::SERVICE_LABEL => agent.to_owned(),
        "tenant" => tenant.to_owned(), "reason" => reason.label())
    .increment(count);
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, TaskError> {
    serde_json::to_string(value).map_err(|e| TaskError::Storage(e.to_string()))
}

fn from_json<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, TaskError> {
    serde_json::from_str(text)
        .map_err(|e| TaskError::Storage(format!("a stored push notification does not parse: {e}")))
}

/// One notification in the outbox table, by its key.
#[derive(Debug, Clone, Copy)]
struct OutboxRow<'a> {
    tenant: &'a str,
    task_id: &'a str,
    config_id: &'a str,
    sequence: i64,
}

/// A count read from SQL, as a `usize`.
fn count_of(row: &sqlx::any::AnyRow, column: &str) -> Result<usize, TaskError> {
    Ok(usize::try_from(row.try_get::<i64, _>(column)?).unwrap_or(0))
}

/// One tenant's due heads (the oldest due first, with their due times), and how many of its
/// notifications are in delivery already.
struct TenantHeads<T> {
    in_delivery: usize,
    heads: Vec<(String, T)>,
}

/// The heads to claim, round robin across `tenants` (given in tenant order): a tenant's k-th due
/// head takes turn `in_delivery + k`, turns past `per_tenant_max` wait, and the first `max`
/// turns are taken, each turn's heads the oldest due first. The store's tables and its memory
/// both choose so.
fn take_turns<T>(tenants: Vec<TenantHeads<T>>, per_tenant_max: usize, max: usize) -> Vec<T> {
    let mut turns = Vec::new();
    for (tenant, queue) in tenants.into_iter().enumerate() {
        for (place, (due_at, head)) in queue.heads.into_iter().enumerate() {
            let turn = queue.in_delivery + place + 1;
            if turn > per_tenant_max {
                break;
            }
            turns.push((turn, due_at, tenant, head));
        }
    }
    turns.sort_by(|a, b| (a.0, &a.1, a.2).cmp(&(b.0, &b.1, b.2)));
    turns.into_iter().take(max).map(|(_, _, _, head)| head).collect()
}

impl TaskStore {
    /// The store with these bounds on its outbox (the defaults otherwise).
    pub fn with_push_limits(mut self, limits: PushLimits) -> Self {
        self.push_limits = limits;
        self
    }

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

    /// The task's configs whose notifications did not all reach their webhook, in the order of
    /// their ids (none for most tasks).
    pub async fn undelivered_push(&self, tenant: &str, task_id: &str) -> Result<Vec<UndeliveredPush>, TaskError> {
        let sql = match &self.tasks {
            Tasks::Memory(memory) => return Ok(memory.push.undelivered(tenant, task_id)),
            Tasks::Sql(sql) => sql,
        };
        sqlx::query(
            "SELECT id, undelivered_count, undelivered_reason, undelivered_message, undelivered_sequence, undelivered_at \
             FROM a2a_push_configs WHERE agent = $1 AND tenant = $2 AND task_id = $3 AND undelivered_count > 0 ORDER BY id",
        )
        .bind(&*self.agent)
        .bind(tenant)
        .bind(task_id)
        .fetch_all(&sql.pool)
        .await?
        .iter()
        .map(|row| {
            Ok(UndeliveredPush {
                config_id: row.try_get("id")?,
                count: u64::try_from(row.try_get::<i64, _>("undelivered_count")?).unwrap_or(0),
                reason: row.try_get("undelivered_reason")?,
                message: row.try_get("undelivered_message")?,
                sequence: row.try_get("undelivered_sequence")?,
                at: row.try_get("undelivered_at")?,
            })
        })
        .collect()
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
    /// when the task has no config). When the agent's outbox, or the tenant's share of it, is
    /// full ([`PushLimits`]), none is queued: each config records them as undelivered (their
    /// sequence numbers taken all the same) and they are counted, then none is returned.
    pub async fn enqueue_push(
        &self,
        tenant: &str,
        task_id: &str,
        events: &[StreamResponse],
    ) -> Result<usize, TaskError> {
        let sql = match &self.tasks {
            Tasks::Memory(memory) => {
                let (queued, refused) = memory.push.enqueue(&self.push_limits, tenant, task_id, events);
                if let Some((reason, count)) = refused {
                    self.note_refused(tenant, task_id, reason, count);
                }
                return Ok(queued);
            }
            Tasks::Sql(sql) => sql,
        };
        let bodies = events.iter().map(to_json).collect::<Result<Vec<_>, _>>()?;
        // Read before the transaction, which then only writes (see `put_push_config`): the bounds
        // may be passed by the notifications queued at the same moment, never by more.
        let row = sqlx::query(
            "SELECT (SELECT COUNT(*) FROM a2a_push_outbox WHERE agent = $1) AS n, \
             (SELECT COUNT(*) FROM a2a_push_outbox WHERE agent = $1 AND tenant = $2) AS tenant_n",
        )
        .bind(&*self.agent)
        .bind(tenant)
        .fetch_one(&sql.pool)
        .await?;
        let (queued, tenant_queued) = (count_of(&row, "n")?, count_of(&row, "tenant_n")?);
        if let Some((reason, message)) = refusal(&self.push_limits, tenant, queued, tenant_queued) {
            let taken = i64::try_from(events.len()).unwrap_or(i64::MAX);
            // Every config of the task skips the refused notifications' sequence numbers.
            let configs = sqlx::query(
                "UPDATE a2a_push_configs SET last_sequence = last_sequence + $4, \
                 undelivered_count = undelivered_count + $4, undelivered_reason = $5, undelivered_message = $6, \
                 undelivered_sequence = last_sequence + $4, undelivered_at = $7 \
                 WHERE agent = $1 AND tenant = $2 AND task_id = $3",
            )
            .bind(&*self.agent)
            .bind(tenant)
            .bind(task_id)
            .bind(taken)
            .bind(reason.label())
            .bind(&message)
            .bind(now_timestamp())
            .execute(&sql.pool)
            .await?
            .rows_affected();
            self.note_refused(tenant, task_id, reason, configs.saturating_mul(events.len() as u64));
            return Ok(0);
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

    /// Counts notifications refused when queued. Logged at debug only: the tenant that floods
    /// its share would otherwise flood the log too; the metric and the task's record tell.
    fn note_refused(&self, tenant: &str, task_id: &str, reason: Undelivered, count: u64) {
        if count == 0 {
            return;
        }
        tracing::debug!(tenant, task = %task_id, reason = reason.label(), count, "push notifications refused");
        count_undelivered(&self.agent, tenant, reason, count);
    }

    /// Claims up to `max` due notifications for delivery, each for `claim_for` (after which, not
    /// reported, it is due again: the process delivering it died). Only the oldest waiting
    /// notification of a config is ever handed out, so its webhook gets them in order. Tenants
    /// take turns (round robin, the oldest due first within a tenant), and a tenant with
    /// `per_tenant_max` notifications in delivery (claims not expired, by any process sharing
    /// the store) gets no more until one ends.
    pub async fn claim_push(
        &self,
        max: usize,
        per_tenant_max: usize,
        claim_for: Duration,
    ) -> Result<Vec<PendingPush>, TaskError> {
        let sql = match &self.tasks {
            Tasks::Memory(memory) => return Ok(memory.push.claim(max, per_tenant_max, &timestamp_after(claim_for))),
            Tasks::Sql(sql) => sql,
        };
        let now = now_timestamp();
        let until = timestamp_after(claim_for);
        // The tenants with notifications waiting, one index probe each (a loose index scan: the
        // table holds many rows per tenant).
        let tenants: Vec<String> = sqlx::query(
            "WITH RECURSIVE t(tenant) AS (SELECT MIN(tenant) FROM a2a_push_outbox WHERE agent = $1 \
             UNION ALL SELECT (SELECT MIN(o.tenant) FROM a2a_push_outbox o WHERE o.agent = $1 AND o.tenant > t.tenant) \
             FROM t WHERE t.tenant IS NOT NULL) SELECT tenant FROM t WHERE tenant IS NOT NULL ORDER BY tenant",
        )
        .bind(&*self.agent)
        .fetch_all(&sql.pool)
        .await?
        .iter()
        .map(|row| row.try_get("tenant"))
        .collect::<Result<_, _>>()?;
        let mut busy: HashMap<String, usize> = HashMap::new();
        let in_delivery = sqlx::query("SELECT tenant FROM a2a_push_outbox WHERE agent = $1 AND claimed_until >= $2")
            .bind(&*self.agent)
            .bind(&now)
            .fetch_all(&sql.pool)
            .await?;
        for row in &in_delivery {
            *busy.entry(row.try_get("tenant")?).or_default() += 1;
        }
        // Each tenant's oldest due heads, as many as it has room for: read through the index by
        // tenant and due time, so a tenant's backlog costs no other tenant's claim a scan.
        let mut queues = Vec::with_capacity(tenants.len());
        for tenant in tenants {
            let in_delivery = busy.get(&tenant).copied().unwrap_or(0);
            let room = per_tenant_max.saturating_sub(in_delivery).min(max);
            if room == 0 {
                continue;
            }
            let heads = sqlx::query(
                "SELECT o.tenant, o.task_id, o.config_id, o.sequence, o.attempts, o.body, o.due_at, c.body AS config \
                 FROM a2a_push_outbox o JOIN a2a_push_configs c ON c.agent = o.agent AND c.tenant = o.tenant \
                 AND c.task_id = o.task_id AND c.id = o.config_id \
                 WHERE o.agent = $1 AND o.tenant = $2 AND o.due_at <= $3 AND o.claimed_until < $3 \
                 AND NOT EXISTS (SELECT 1 FROM a2a_push_outbox p WHERE p.agent = o.agent AND p.tenant = o.tenant \
                 AND p.task_id = o.task_id AND p.config_id = o.config_id AND p.sequence < o.sequence) \
                 ORDER BY o.due_at LIMIT $4",
            )
            .bind(&*self.agent)
            .bind(&tenant)
            .bind(&now)
            .bind(i64::try_from(room).unwrap_or(i64::MAX))
            .fetch_all(&sql.pool)
            .await?;
            let heads =
                heads.into_iter().map(|row| Ok((row.try_get("due_at")?, row))).collect::<Result<_, TaskError>>()?;
            queues.push(TenantHeads { in_delivery, heads });
        }
        let rows = take_turns(queues, per_tenant_max, max);
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
                    let key = OutboxRow { tenant: &tenant, task_id: &task_id, config_id: &config_id, sequence };
                    self.settle_sql(sql, key, PushOutcome::Done).await?;
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
        if let PushOutcome::Undelivered { reason, .. } = &outcome {
            count_undelivered(&self.agent, &push.tenant, *reason, 1);
        }
        match &self.tasks {
            Tasks::Memory(memory) => {
                memory.push.settle(push, outcome);
                Ok(())
            }
            Tasks::Sql(sql) => {
                let key = OutboxRow {
                    tenant: &push.tenant,
                    task_id: &push.task_id,
                    config_id: push.config_id(),
                    sequence: push.sequence,
                };
                self.settle_sql(sql, key, outcome).await
            }
        }
    }

    async fn settle_sql(&self, sql: &SqlTasks, row: OutboxRow<'_>, outcome: PushOutcome) -> Result<(), TaskError> {
        let key = "agent = $1 AND tenant = $2 AND task_id = $3 AND config_id = $4 AND sequence = $5";
        let bind_key = |statement: String| {
            // Audited: the SQL is one of the fixed statements below; every value is bound.
            sqlx::query(sqlx::AssertSqlSafe(statement))
                .bind(&*self.agent)
                .bind(row.tenant)
                .bind(row.task_id)
                .bind(row.config_id)
                .bind(row.sequence)
        };
        match outcome {
            PushOutcome::Done => {
                bind_key(format!("DELETE FROM a2a_push_outbox WHERE {key}")).execute(&sql.pool).await?;
            }
            PushOutcome::RetryIn(delay) => {
                let statement = format!(
                    "UPDATE a2a_push_outbox SET attempts = attempts + 1, due_at = $6, claimed_until = '' WHERE {key}"
                );
                bind_key(statement).bind(timestamp_after(delay)).execute(&sql.pool).await?;
            }
            PushOutcome::Undelivered { reason, message } => {
                // The notification leaves and its config records it, together.
                let mut transaction = sql.pool.begin().await?;
                let written = async {
                    let recorded = "UPDATE a2a_push_configs SET undelivered_count = undelivered_count + 1, \
                        undelivered_reason = $6, undelivered_message = $7, undelivered_sequence = $5, undelivered_at = $8 \
                        WHERE agent = $1 AND tenant = $2 AND task_id = $3 AND id = $4";
                    bind_key(recorded.to_owned())
                        .bind(reason.label())
                        .bind(&message)
                        .bind(now_timestamp())
                        .execute(&mut *transaction)
                        .await?;
                    bind_key(format!("DELETE FROM a2a_push_outbox WHERE {key}")).execute(&mut *transaction).await?;
                    Ok::<_, TaskError>(())
                }
                .await;
                settle(transaction, written, |_| true).await?;
            }
        }
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
/// A config's key: the tenant's task, the config's id.
type ConfigKey = (String, String, String);

/// The configs and outbox of a store in memory (durability `memory`): the same rules as the
/// tables, gone with the process.
#[derive(Debug, Default)]
pub(crate) struct MemoryPush {
    state: Mutex<PushState>,
}

#[derive(Debug, Default)]
struct PushState {
    /// Each task's configs, by id.
    configs: HashMap<TaskKey, BTreeMap<String, ConfigState>>,
    /// When each task's first config was stored: a task's webhooks are stored before its first
    /// state is, so a young config without a task is not an orphan (as `created_at` in SQL).
    created: HashMap<TaskKey, String>,
    /// Each config's waiting notifications, by sequence number: its head is the first.
    outbox: BTreeMap<ConfigKey, BTreeMap<i64, Waiting>>,
    /// How many notifications wait, per tenant, for the outbox's bounds.
    waiting: HashMap<String, usize>,
}

#[derive(Debug)]
struct ConfigState {
    config: TaskPushNotificationConfig,
    /// The sequence number the config gave last.
    last_sequence: i64,
    undelivered: Option<UndeliveredPush>,
}

impl ConfigState {
    /// Records `count` more notifications, the last numbered `sequence`, that never reached the
    /// webhook.
    fn record_undelivered(&mut self, reason: Undelivered, message: &str, count: u64, sequence: i64) {
        let before = self.undelivered.as_ref().map_or(0, |record| record.count);
        self.undelivered = Some(UndeliveredPush {
            config_id: self.config.id.clone().unwrap_or_default(),
            count: before.saturating_add(count),
            reason: reason.label().to_owned(),
            message: message.to_owned(),
            sequence,
            at: now_timestamp(),
        });
    }
}

#[derive(Debug)]
struct Waiting {
    attempts: u32,
    due_at: String,
    claimed_until: String,
    event: StreamResponse,
}

/// Takes `count` notifications of `tenant` off the counts.
fn forget_waiting(waiting: &mut HashMap<String, usize>, tenant: &str, count: usize) {
    if let Some(left) = waiting.get_mut(tenant) {
        *left = left.saturating_sub(count);
        if *left == 0 {
            waiting.remove(tenant);
        }
    }
}

impl MemoryPush {
    fn state(&self) -> MutexGuard<'_, PushState> {
        // Every change keeps the maps consistent with each other before it can panic.
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
        match configs.get_mut(&id) {
            Some(existing) => existing.config = stored.clone(),
            None => {
                configs.insert(id, ConfigState { config: stored.clone(), last_sequence: 0, undelivered: None });
            }
        }
        Ok(stored)
    }

    fn configs(&self, tenant: &str, task_id: &str) -> Vec<TaskPushNotificationConfig> {
        let state = self.state();
        let configs = state.configs.get(&(tenant.to_owned(), task_id.to_owned()));
        configs.map(|configs| configs.values().map(|c| c.config.clone()).collect()).unwrap_or_default()
    }

    fn undelivered(&self, tenant: &str, task_id: &str) -> Vec<UndeliveredPush> {
        let state = self.state();
        let configs = state.configs.get(&(tenant.to_owned(), task_id.to_owned()));
        configs.map(|configs| configs.values().filter_map(|c| c.undelivered.clone()).collect()).unwrap_or_default()
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
        let PushState { outbox, waiting, .. } = &mut *state;
        if let Some(queue) = outbox.remove(&(tenant.to_owned(), task_id.to_owned(), id.to_owned())) {
            forget_waiting(waiting, tenant, queue.len());
        }
    }

    /// Queues the events for each config of the task, or refuses them all past `limits`; how
    /// many were queued, and why and how many were refused.
    fn enqueue(
        &self,
        limits: &PushLimits,
        tenant: &str,
        task_id: &str,
        events: &[StreamResponse],
    ) -> (usize, Option<(Undelivered, u64)>) {
        let mut state = self.state();
        let PushState { configs, outbox, waiting, .. } = &mut *state;
        let Some(configs) = configs.get_mut(&(tenant.to_owned(), task_id.to_owned())) else { return (0, None) };
        let queued = waiting.values().sum();
        let tenant_queued = waiting.get(tenant).copied().unwrap_or(0);
        let taken = i64::try_from(events.len()).unwrap_or(i64::MAX);
        if let Some((reason, message)) = refusal(limits, tenant, queued, tenant_queued) {
            for config in configs.values_mut() {
                config.last_sequence = config.last_sequence.saturating_add(taken);
                config.record_undelivered(reason, &message, events.len() as u64, config.last_sequence);
            }
            return (0, Some((reason, (events.len() * configs.len()) as u64)));
        }
        let now = now_timestamp();
        for event in events {
            for (id, config) in configs.iter_mut() {
                config.last_sequence += 1;
                let waiting =
                    Waiting { attempts: 0, due_at: now.clone(), claimed_until: String::new(), event: event.clone() };
                let key = (tenant.to_owned(), task_id.to_owned(), id.clone());
                outbox.entry(key).or_default().insert(config.last_sequence, waiting);
            }
        }
        let count = events.len() * configs.len();
        *waiting.entry(tenant.to_owned()).or_default() += count;
        (count, None)
    }

    fn claim(&self, max: usize, per_tenant_max: usize, until: &str) -> Vec<PendingPush> {
        let now = now_timestamp();
        let mut state = self.state();
        let PushState { configs, outbox, .. } = &mut *state;
        // Each config's head is in delivery (claimed), due, or neither.
        let mut busy: HashMap<&str, usize> = HashMap::new();
        let mut due: BTreeMap<&str, Vec<(String, ConfigKey)>> = BTreeMap::new();
        for (key, queue) in outbox.iter() {
            let Some(head) = queue.values().next() else { continue };
            if head.claimed_until.as_str() >= now.as_str() {
                *busy.entry(&key.0).or_default() += 1;
            } else if head.due_at <= now {
                due.entry(&key.0).or_default().push((head.due_at.clone(), key.clone()));
            }
        }
        let queues = due
            .into_iter()
            .map(|(tenant, mut heads)| {
                heads.sort_unstable();
                TenantHeads { in_delivery: busy.get(tenant).copied().unwrap_or(0), heads }
            })
            .collect();
        let chosen = take_turns(queues, per_tenant_max, max);
        let mut claimed = Vec::with_capacity(chosen.len());
        for key in chosen {
            let (tenant, task_id, config_id) = &key;
            let Some(config) = configs.get(&(tenant.clone(), task_id.clone())).and_then(|c| c.get(config_id)) else {
                continue;
            };
            let Some((sequence, head)) = outbox.get_mut(&key).and_then(|queue| queue.iter_mut().next()) else {
                continue;
            };
            head.claimed_until = until.to_owned();
            claimed.push(PendingPush {
                tenant: tenant.clone(),
                task_id: task_id.clone(),
                config: config.config.clone(),
                sequence: *sequence,
                attempts: head.attempts,
                event: head.event.clone(),
            });
        }
        claimed
    }

    fn settle(&self, push: &PendingPush, outcome: PushOutcome) {
        let key = (push.tenant.clone(), push.task_id.clone(), push.config_id().to_owned());
        let mut state = self.state();
        let PushState { configs, outbox, waiting, .. } = &mut *state;
        let Some(queue) = outbox.get_mut(&key) else { return };
        match outcome {
            PushOutcome::RetryIn(delay) => {
                if let Some(waiting) = queue.get_mut(&push.sequence) {
                    waiting.attempts = waiting.attempts.saturating_add(1);
                    waiting.due_at = timestamp_after(delay);
                    waiting.claimed_until = String::new();
                }
                return;
            }
            PushOutcome::Done => {}
            PushOutcome::Undelivered { reason, message } => {
                let config = configs.get_mut(&(key.0.clone(), key.1.clone())).and_then(|c| c.get_mut(&key.2));
                if let Some(config) = config {
                    config.record_undelivered(reason, &message, 1, push.sequence);
                }
            }
        }
        if queue.remove(&push.sequence).is_some() {
            forget_waiting(waiting, &push.tenant, 1);
        }
        if queue.is_empty() {
            outbox.remove(&key);
        }
    }

    /// Drops the configs (and notifications) of tasks that are not `kept`, unless stored at or
    /// after `cutoff`.
    fn retain_tasks(&self, cutoff: &str, kept: impl Fn(&str, &str) -> bool) {
        let mut state = self.state();
        let PushState { configs, created, outbox, waiting } = &mut *state;
        configs.retain(|key, _| kept(&key.0, &key.1) || created.get(key).is_some_and(|at| at.as_str() >= cutoff));
        created.retain(|key, _| configs.contains_key(key));
        outbox.retain(|(tenant, task_id, _), queue| {
            let keep = configs.contains_key(&(tenant.clone(), task_id.clone()));
            if !keep {
                forget_waiting(waiting, tenant, queue.len());
            }
            keep
        });
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
        let state = push.state();
        let rows = state.outbox.iter().flat_map(|((tenant, task, config), queue)| {
            queue.keys().map(|sequence| (tenant.clone(), task.clone(), config.clone(), *sequence))
        });
        rows.collect()
    }

    fn enqueue(push: &MemoryPush, tenant: &str, task: &str, events: &[StreamResponse]) -> usize {
        push.enqueue(&PushLimits::default(), tenant, task, events).0
    }

    #[test]
    fn every_event_is_queued_once_per_config_of_its_task() {
        let push = MemoryPush::default();
        for id in ["a", "b", "c"] {
            push.put("", "t", config(id)).unwrap();
        }
        push.put("", "other", config("a")).unwrap();
        let events = [status(TaskState::Working), status(TaskState::Completed)];
        assert_eq!(enqueue(&push, "", "t", &events), 6);
        assert_eq!(queued(&push).len(), 6);
        assert_eq!(enqueue(&push, "", "no-configs", &events), 0);
    }

    #[test]
    fn a_claim_takes_at_most_what_is_asked_and_only_each_configs_oldest() {
        let push = MemoryPush::default();
        push.put("", "t", config("a")).unwrap();
        push.put("", "t", config("b")).unwrap();
        enqueue(&push, "", "t", &[status(TaskState::Working), status(TaskState::Completed)]);
        let first = push.claim(1, 8, LATER);
        assert_eq!(first.len(), 1);
        let rest = push.claim(10, 8, LATER);
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
        enqueue(&push, "", "t", &[status(TaskState::Working)]);
        push.retain_tasks(&before, |_, _| false);
        assert_eq!(push.configs("", "t").len(), 1, "young: kept");
        assert_eq!(push.claim(8, 8, "9999").len(), 1, "its notification too");
        push.retain_tasks("9999", |_, _| false);
        assert!(push.configs("", "t").is_empty(), "old and taskless: an orphan");
        assert!(push.claim(8, 8, "9999").is_empty());
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
            enqueue(&push, tenant, task, &[status(TaskState::Completed)]);
        }
        push.delete("", "t", "a");
        let left: Vec<(String, String, String)> =
            queued(&push).into_iter().map(|(tenant, task, config, _)| (tenant, task, config)).collect();
        let expected =
            [("", "t", "b"), ("", "u", "a"), ("x", "t", "a")].map(|(a, b, c)| (a.into(), b.into(), c.into()));
        assert_eq!(left, expected);
        assert_eq!(push.configs("", "t").len(), 1);
        assert_eq!(push.state().waiting.get(""), Some(&2), "the counts follow the deletes");
    }

    #[test]
    fn the_counts_of_waiting_notifications_follow_every_change() {
        let push = MemoryPush::default();
        push.put("a", "t", config("x")).unwrap();
        push.put("b", "u", config("y")).unwrap();
        enqueue(&push, "a", "t", &[status(TaskState::Working), status(TaskState::Completed)]);
        enqueue(&push, "b", "u", &[status(TaskState::Completed)]);
        let counts = |push: &MemoryPush| {
            let state = push.state();
            (state.waiting.get("a").copied(), state.waiting.get("b").copied())
        };
        assert_eq!(counts(&push), (Some(2), Some(1)));
        let claimed = push.claim(8, 8, LATER);
        for pending in &claimed {
            let outcome = match pending.tenant.as_str() {
                "a" => PushOutcome::Done,
                _ => PushOutcome::Undelivered { reason: Undelivered::AttemptsExhausted, message: "gone".into() },
            };
            push.settle(pending, outcome);
        }
        assert_eq!(counts(&push), (Some(1), None));
        assert_eq!(push.undelivered("b", "u")[0].count, 1);
        push.retain_tasks("9999", |_, _| false);
        assert_eq!(counts(&push), (None, None));
    }
}
