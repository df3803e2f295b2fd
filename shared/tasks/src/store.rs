//! The durable task store: one table for every agent and tenant, written by one group-commit
//! writer so that many concurrent tasks cost one transaction, not one each.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use mesh_protocol::a2a::v1::{ListTasksRequest, ListTasksResponse, StreamResponse, Task};
use mesh_storage::{AnyPool, Backend, Database, Row};
use sqlx::migrate::Migrator;
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use crate::error::TaskError;
use crate::fanout::{Fanout, Remote};
use crate::model::{normalize_timestamp, now_timestamp, state_name, terminal_states, trim_history};

/// The tasks' own migration history, kept apart from other components' (the registry's) so that
/// they can share one PostgreSQL database without each taking the other's migrations for
/// missing ones.
const MIGRATIONS_TABLE: &str = "_mesh_tasks_migrations";
/// Most writes committed in one transaction; more wait for the next one.
const WRITE_BATCH_MAX: usize = 512;
/// Writes queued before writers wait (back-pressure instead of unbounded memory).
const WRITE_QUEUE_MAX: usize = 8_192;
/// `ListTasks` page size when the request names none, and the largest it may name (spec §3.1.4).
pub const LIST_PAGE_SIZE_DEFAULT: usize = 50;
pub const LIST_PAGE_SIZE_MAX: usize = 100;

fn migrator() -> Migrator {
    let mut migrator = sqlx::migrate!("./migrations");
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    migrator
}

/// One row to upsert, serialized by the caller so the writer only runs SQL.
#[derive(Debug)]
struct Write {
    tenant: String,
    id: String,
    context_id: String,
    state: String,
    updated_at: String,
    body: String,
    /// Its place in the order of this store's writes, to tell it from later writes of the task.
    sequence: u64,
    /// Told the outcome once committed; `None` for writes nobody waits on.
    done: Option<oneshot::Sender<Result<(), String>>>,
}

/// Tasks of one agent, durable in SQLite or PostgreSQL.
#[derive(Debug, Clone)]
pub struct TaskStore {
    pub(crate) agent: String,
    /// This process's name among the replicas sharing the table: the owner of the rows it writes.
    pub(crate) replica: String,
    pub(crate) pool: AnyPool,
    pub(crate) backend: Backend,
    writes: mpsc::Sender<Write>,
    pending: Arc<PendingWrites>,
    /// Task events shared with the other replicas (PostgreSQL only).
    pub(crate) fanout: Option<Arc<Fanout>>,
}

/// The newest queued but not yet committed body of each task, so that a read right after a
/// background save sees it (read-your-writes) rather than the state before.
#[derive(Debug, Default)]
struct PendingWrites {
    next_sequence: AtomicU64,
    bodies: Mutex<HashMap<(String, String), PendingBody>>,
}

#[derive(Debug)]
struct PendingBody {
    sequence: u64,
    updated_at: String,
    body: String,
}

impl PendingWrites {
    fn bodies(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), PendingBody>> {
        // The map stays consistent whatever panicked while holding it: every change is one insert
        // or remove.
        self.bodies.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Numbers a write and remembers its body, unless a newer state of the task is queued already
    /// (as the table keeps the newer one: see [`commit`]).
    fn queue(&self, tenant: &str, id: &str, updated_at: &str, body: &str) -> u64 {
        let sequence = self.next_sequence.fetch_add(1, Ordering::Relaxed);
        let pending = PendingBody { sequence, updated_at: updated_at.to_owned(), body: body.to_owned() };
        let mut bodies = self.bodies();
        let key = (tenant.to_owned(), id.to_owned());
        if bodies.get(&key).is_none_or(|queued| queued.updated_at.as_str() <= updated_at) {
            bodies.insert(key, pending);
        }
        sequence
    }

    /// The queued state's time and body.
    fn get(&self, tenant: &str, id: &str) -> Option<(String, String)> {
        let bodies = self.bodies();
        bodies
            .get(&(tenant.to_owned(), id.to_owned()))
            .map(|pending| (pending.updated_at.clone(), pending.body.clone()))
    }

    /// Forgets the batch's writes, unless a later write of the same task is still queued.
    fn settled(&self, batch: &[Write]) {
        let mut bodies = self.bodies();
        for write in batch {
            let key = (write.tenant.clone(), write.id.clone());
            if bodies.get(&key).is_some_and(|pending| pending.sequence == write.sequence) {
                bodies.remove(&key);
            }
        }
    }
}

impl TaskStore {
    /// Opens (and migrates) the store at `database_url` for the agent named `agent`, and starts its
    /// writer, which lives as long as the store has clones.
    pub async fn open(database_url: &str, agent: &str) -> Result<Self, TaskError> {
        let database = Database::connect(database_url, &migrator()).await?;
        let replica = uuid::Uuid::new_v4().to_string();
        let fanout = match database.backend() {
            Backend::Postgres => Some(Arc::new(Fanout::start(database_url, agent, &replica)?)),
            Backend::Sqlite => None,
        };
        let (writes, queue) = mpsc::channel(WRITE_QUEUE_MAX);
        let pending = Arc::new(PendingWrites::default());
        let pool = database.pool().clone();
        tokio::spawn(write_batches(pool.clone(), agent.to_owned(), replica.clone(), queue, pending.clone()));
        Ok(Self { agent: agent.to_owned(), replica, pool, backend: database.backend(), writes, pending, fanout })
    }

    /// Saves the task and returns once it is committed.
    pub async fn save(&self, tenant: &str, task: &Task) -> Result<(), TaskError> {
        let span = if mesh_telemetry::recording() {
            tracing::info_span!(
                "task_store.write",
                otel.name = "task_store.write",
                a2a.task_id = %task.id,
                a2a.context_id = %task.context_id,
                a2a.task_state = state_name(task.status.state),
                mesh.tenant = tenant,
            )
        } else {
            tracing::Span::none()
        };
        let started = std::time::Instant::now();
        let saved = async {
            let (done, committed) = oneshot::channel();
            self.enqueue(tenant, task, Some(done)).await?;
            committed
                .await
                .map_err(|_| TaskError::Storage("the task writer stopped".into()))?
                .map_err(TaskError::Storage)
        }
        .instrument(span)
        .await;
        metrics::histogram!("mesh_task_store_write_duration_seconds", mesh_telemetry::SERVICE_LABEL => self.agent.clone())
            .record(started.elapsed().as_secs_f64());
        saved
    }

    /// Stores `task` as a new task, unless its tenant holds a task of that id already (stored, or
    /// queued to be); says whether it did. The table's key decides, so processes sharing one
    /// database (replicas) never both create one id. Committed before it returns.
    pub async fn create(&self, tenant: &str, task: &Task) -> Result<bool, TaskError> {
        if self.pending.get(tenant, &task.id).is_some() {
            return Ok(false);
        }
        let body = serde_json::to_string(task).map_err(|e| TaskError::Storage(e.to_string()))?;
        let updated_at = task.status.timestamp.as_deref().and_then(normalize_timestamp).unwrap_or_else(now_timestamp);
        let created = sqlx::query(
            "INSERT INTO a2a_tasks (agent, tenant, id, context_id, state, updated_at, body, owner) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (agent, tenant, id) DO NOTHING",
        )
        .bind(&self.agent)
        .bind(tenant)
        .bind(&task.id)
        .bind(&task.context_id)
        .bind(state_name(task.status.state))
        .bind(&updated_at)
        .bind(&body)
        .bind(&self.replica)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(created == 1)
    }

    /// The agent whose tasks these are.
    pub fn agent(&self) -> &str {
        &self.agent
    }

    /// Whether task events travel between the replicas sharing this store (PostgreSQL).
    pub fn shares_events(&self) -> bool {
        self.fanout.is_some()
    }

    /// Tells the other replicas of an event of the task (nothing on SQLite). Waits only for room
    /// in the publisher's queue; the event is sent after what was published before it.
    pub async fn publish(&self, tenant: &str, id: &str, event: &StreamResponse) {
        if let Some(fanout) = &self.fanout {
            fanout.publish(tenant, id, event).await;
        }
    }

    /// The other replicas' task events from now on, until the receiver is dropped; `None` on
    /// SQLite, where no other process shares the store.
    pub fn listen(&self) -> Option<mpsc::Receiver<Remote>> {
        self.fanout.as_ref().map(|fanout| fanout.listen())
    }

    /// Answers whether the database answers a trivial query, for `/health`.
    pub async fn ping(&self) -> Result<(), TaskError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Saves the task without waiting for the commit: for intermediate states and records, whose
    /// loss in a crash only means the stored task shows an earlier state (or is missing).
    /// [`Self::get`] sees it at once. Whatever order saves of one task reach the writer in, a
    /// state older than the stored one (by its status timestamp) never replaces it.
    pub async fn save_in_background(&self, tenant: &str, task: &Task) -> Result<(), TaskError> {
        self.enqueue(tenant, task, None).await
    }

    async fn enqueue(
        &self,
        tenant: &str,
        task: &Task,
        done: Option<oneshot::Sender<Result<(), String>>>,
    ) -> Result<(), TaskError> {
        let body = serde_json::to_string(task).map_err(|e| TaskError::Storage(e.to_string()))?;
        let updated_at = task.status.timestamp.as_deref().and_then(normalize_timestamp).unwrap_or_else(now_timestamp);
        // A place in the queue first: a caller that gives up while waiting for one leaves nothing
        // behind that was never written.
        let permit = self.writes.reserve().await.map_err(|_| TaskError::Storage("the task writer stopped".into()))?;
        let sequence = self.pending.queue(tenant, &task.id, &updated_at, &body);
        let state = state_name(task.status.state);
        metrics::counter!("mesh_task_writes_total", mesh_telemetry::SERVICE_LABEL => self.agent.clone(), "state" => state.clone())
            .increment(1);
        permit.send(Write {
            tenant: tenant.to_owned(),
            id: task.id.clone(),
            context_id: task.context_id.clone(),
            state,
            updated_at,
            sequence,
            body,
            done,
        });
        metrics::gauge!("mesh_task_store_queue_depth", mesh_telemetry::SERVICE_LABEL => self.agent.clone())
            .set((self.writes.max_capacity() - self.writes.capacity()) as f64);
        Ok(())
    }

    /// The stored task, whole: the newest of its committed and its queued states.
    pub async fn get(&self, tenant: &str, id: &str) -> Result<Option<Task>, TaskError> {
        let row = sqlx::query("SELECT body, updated_at FROM a2a_tasks WHERE agent = $1 AND tenant = $2 AND id = $3")
            .bind(&self.agent)
            .bind(tenant)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        let committed = match row {
            Some(row) => Some((row.try_get::<String, _>("updated_at")?, decode(&row)?)),
            None => None,
        };
        match (self.pending.get(tenant, id), committed) {
            (Some((queued_at, body)), Some((committed_at, _))) if queued_at >= committed_at => parse(&body).map(Some),
            (Some((_, body)), None) => parse(&body).map(Some),
            (_, committed) => Ok(committed.map(|(_, task)| task)),
        }
    }

    /// A page of tasks, most recently updated first, filtered as the request asks.
    pub async fn list(&self, tenant: &str, request: &ListTasksRequest) -> Result<ListTasksResponse, TaskError> {
        let page_size = page_size(request.page_size)?;
        let history_length = history_length(request.history_length)?;
        let mut filters = String::from("agent = $1 AND tenant = $2");
        let mut binds = vec![self.agent.clone(), tenant.to_owned()];
        if let Some(context_id) = &request.context_id {
            bind(&mut filters, &mut binds, " AND context_id = ?", context_id.clone());
        }
        if let Some(state) = request.status {
            bind(&mut filters, &mut binds, " AND state = ?", state_name(state));
        }
        if let Some(after) = &request.status_timestamp_after {
            let after = normalize_timestamp(after).ok_or_else(|| {
                TaskError::InvalidParams(format!("statusTimestampAfter {after:?} is not an RFC 3339 timestamp"))
            })?;
            bind(&mut filters, &mut binds, " AND updated_at >= ?", after);
        }
        let count_sql = format!("SELECT COUNT(*) AS n FROM a2a_tasks WHERE {filters}");
        let count_binds = binds.len();
        let mut page_filters = filters;
        if let Some(token) = request.page_token.as_deref().filter(|t| !t.is_empty()) {
            let (updated_at, id) = PageCursor::decode(token)?;
            bind(&mut page_filters, &mut binds, " AND (updated_at < ?", updated_at.clone());
            bind(&mut page_filters, &mut binds, " OR (updated_at = ?", updated_at);
            bind(&mut page_filters, &mut binds, " AND id < ?))", id);
        }
        let page_sql = format!(
            "SELECT body, updated_at, id FROM a2a_tasks WHERE {page_filters} ORDER BY updated_at DESC, id DESC LIMIT {}",
            page_size + 1
        );
        // Audited: the SQL is built from fixed clauses only; every value is a bind parameter.
        let mut count = sqlx::query(sqlx::AssertSqlSafe(count_sql));
        for value in &binds[..count_binds] {
            count = count.bind(value);
        }
        let total: i64 = count.fetch_one(&self.pool).await?.try_get("n")?;
        let mut page = sqlx::query(sqlx::AssertSqlSafe(page_sql));
        for value in &binds {
            page = page.bind(value);
        }
        let rows = page.fetch_all(&self.pool).await?;
        let next_page_token = match rows.get(page_size) {
            Some(_) => {
                let last = &rows[page_size - 1];
                PageCursor::encode(&last.try_get::<String, _>("updated_at")?, &last.try_get::<String, _>("id")?)
            }
            None => String::new(),
        };
        let include_artifacts = request.include_artifacts.unwrap_or(false);
        let mut tasks = Vec::with_capacity(rows.len().min(page_size));
        for row in rows.iter().take(page_size) {
            let mut task = decode(row)?;
            trim_history(&mut task, history_length);
            if !include_artifacts {
                task.artifacts.clear();
            }
            tasks.push(task);
        }
        Ok(ListTasksResponse {
            page_size: i32::try_from(page_size).unwrap_or(i32::MAX),
            tasks,
            next_page_token,
            total_size: i32::try_from(total).unwrap_or(i32::MAX),
        })
    }
}

/// Appends a filter clause, its `?` numbered as the next bind parameter.
fn bind(filters: &mut String, binds: &mut Vec<String>, clause: &str, value: String) {
    binds.push(value);
    filters.push_str(&clause.replace('?', &format!("${}", binds.len())));
}

fn decode(row: &sqlx::any::AnyRow) -> Result<Task, TaskError> {
    parse(&row.try_get::<String, _>("body")?)
}

pub(crate) fn parse(body: &str) -> Result<Task, TaskError> {
    serde_json::from_str(body).map_err(|e| TaskError::Storage(format!("a stored task does not parse: {e}")))
}

/// The page size a `ListTasks` request asks for, checked.
fn page_size(requested: Option<i32>) -> Result<usize, TaskError> {
    match requested {
        None => Ok(LIST_PAGE_SIZE_DEFAULT),
        Some(size) => usize::try_from(size).ok().filter(|s| (1..=LIST_PAGE_SIZE_MAX).contains(s)).ok_or_else(|| {
            TaskError::InvalidParams(format!("pageSize must be between 1 and {LIST_PAGE_SIZE_MAX}, not {size}"))
        }),
    }
}

/// A request's `historyLength`, checked: absent means all, negative is an error.
pub fn history_length(requested: Option<i32>) -> Result<Option<usize>, TaskError> {
    requested
        .map(|n| {
            usize::try_from(n)
                .map_err(|_| TaskError::InvalidParams(format!("historyLength must not be negative, not {n}")))
        })
        .transpose()
}

/// Where the next page starts: after the last task of this one in (updated_at, id) order. Sent
/// hex-encoded so clients treat it as opaque.
struct PageCursor;

impl PageCursor {
    fn encode(updated_at: &str, id: &str) -> String {
        format!("{updated_at}\n{id}").bytes().map(|b| format!("{b:02x}")).collect()
    }

    fn decode(token: &str) -> Result<(String, String), TaskError> {
        let invalid = || TaskError::InvalidParams(format!("pageToken {token:?} is not one this server issued"));
        let bytes = (0..token.len())
            .step_by(2)
            .map(|i| token.get(i..i + 2).and_then(|pair| u8::from_str_radix(pair, 16).ok()))
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(invalid)?;
        let text = String::from_utf8(bytes).map_err(|_| invalid())?;
        let (updated_at, id) = text.split_once('\n').ok_or_else(invalid)?;
        Ok((updated_at.to_owned(), id.to_owned()))
    }
}

/// The writer: takes what is queued (up to a batch), commits it in one transaction, tells the
/// waiting savers, repeats. Under load, batches grow by themselves; alone, a write commits at once.
async fn write_batches(
    pool: AnyPool,
    agent: String,
    replica: String,
    mut queue: mpsc::Receiver<Write>,
    pending: Arc<PendingWrites>,
) {
    let mut batch = Vec::with_capacity(WRITE_BATCH_MAX);
    while queue.recv_many(&mut batch, WRITE_BATCH_MAX).await > 0 {
        let result = commit(&pool, &agent, &replica, &batch).await.map_err(|e| e.to_string());
        if let Err(error) = &result {
            tracing::error!(%error, writes = batch.len(), "could not save tasks");
        }
        pending.settled(&batch);
        for write in batch.drain(..) {
            if let Some(done) = write.done {
                // The saver may have gone (its client hung up); the write stands regardless.
                let _ = done.send(result.clone());
            }
        }
    }
}

/// Rows per `INSERT` statement: one statement per chunk instead of one per row, since every
/// statement is a round trip to the database (for SQLite, to its worker thread). 8 parameters
/// per row stay far below either database's limit on parameters.
const ROWS_PER_STATEMENT_MAX: usize = 128;
/// Columns written per row.
const COLUMNS_PER_ROW: usize = 8;

async fn commit(pool: &AnyPool, agent: &str, replica: &str, batch: &[Write]) -> Result<(), sqlx::Error> {
    // Only the newest write of a task in the batch matters (by status time, then queue order):
    // the others would be overwritten anyway, and one statement may not upsert a row twice.
    let mut last: HashMap<(&str, &str), usize> = HashMap::new();
    for (i, write) in batch.iter().enumerate() {
        let newest = last.entry((write.tenant.as_str(), write.id.as_str())).or_insert(i);
        if batch[*newest].updated_at <= write.updated_at {
            *newest = i;
        }
    }
    let rows: Vec<&Write> = batch
        .iter()
        .enumerate()
        .filter(|(i, w)| last.get(&(w.tenant.as_str(), w.id.as_str())) == Some(i))
        .map(|(_, w)| w)
        .collect();
    let terminal = terminal_states();
    let mut transaction = pool.begin().await?;
    for chunk in rows.chunks(ROWS_PER_STATEMENT_MAX) {
        let placeholders: Vec<String> = (0..chunk.len())
            .map(|row| {
                let first = row * COLUMNS_PER_ROW;
                let numbered: Vec<String> =
                    (1..=COLUMNS_PER_ROW).map(|column| format!("${}", first + column)).collect();
                format!("({})", numbered.join(", "))
            })
            .collect();
        let terminal_placeholders: Vec<String> =
            (1..=terminal.len()).map(|n| format!("${}", chunk.len() * COLUMNS_PER_ROW + n)).collect();
        // A finished task stays finished: a late save of another state (a replica's turn that
        // ended after another replica canceled the task) never overwrites it.
        let sql = format!(
            "INSERT INTO a2a_tasks (agent, tenant, id, context_id, state, updated_at, body, owner) VALUES {} \
             ON CONFLICT (agent, tenant, id) DO UPDATE SET context_id = excluded.context_id, \
             state = excluded.state, updated_at = excluded.updated_at, body = excluded.body, owner = excluded.owner \
             WHERE excluded.updated_at >= a2a_tasks.updated_at AND a2a_tasks.state NOT IN ({})",
            placeholders.join(", "),
            terminal_placeholders.join(", ")
        );
        // Audited: the SQL is built from numbered placeholders only; every value is bound.
        let mut statement = sqlx::query(sqlx::AssertSqlSafe(sql));
        for write in chunk {
            statement = statement
                .bind(agent)
                .bind(&write.tenant)
                .bind(&write.id)
                .bind(&write.context_id)
                .bind(&write.state)
                .bind(&write.updated_at)
                .bind(&write.body)
                .bind(replica);
        }
        for state in &terminal {
            statement = statement.bind(state);
        }
        statement.execute(&mut *transaction).await?;
    }
    transaction.commit().await
}
