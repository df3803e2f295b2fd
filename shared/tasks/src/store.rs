//! The task store, in one of three durabilities. `durable` and `buffered` keep tasks in one SQL
//! table for every agent and tenant, written by one group-commit writer so that many concurrent
//! tasks cost one transaction, not one each: a durable save returns once committed, a buffered
//! one once queued (the writer commits what it gathered every flush interval). `memory` keeps
//! them in the process alone (see [`crate::memory`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use foldhash::fast::RandomState;
use mesh_protocol::a2a::v1::{ListTasksRequest, ListTasksResponse, StreamResponse, Task};
use mesh_storage::{AnyPool, Backend, Database, Row, settle};
use mesh_telemetry::HandleCache;
use metrics::{Counter, Gauge, Histogram};
use sqlx::AnyConnection;
use sqlx::Connection as _;
use sqlx::migrate::Migrator;
use sqlx::pool::PoolConnection;
use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use crate::error::TaskError;
use crate::fanout::{Fanout, Remote};
use crate::list::ListQuery;
use crate::memory::MemoryTasks;
use crate::model::{normalize_timestamp, now_timestamp, state_name, terminal_states};
use crate::push::PushLimits;

/// The tasks' own migration history, kept apart from other components' (the registry's) so that
/// they can share one PostgreSQL database without each taking the other's migrations for
/// missing ones.
const MIGRATIONS_TABLE: &str = "_mesh_tasks_migrations";
/// Most writes committed in one transaction; more wait for the next one.
const WRITE_BATCH_MAX: usize = 512;
/// Writes queued before writers wait (back-pressure instead of unbounded memory). It also bounds
/// what a buffered store can lose to a crash: at most this many acknowledged writes are queued.
const WRITE_QUEUE_MAX: usize = 8_192;
/// How long a buffered store's writer gathers writes before committing them, by default.
pub const TASK_FLUSH_INTERVAL_MS_DEFAULT: u64 = 100;

fn migrator() -> Migrator {
    let mut migrator = sqlx::migrate!("./migrations");
    migrator.dangerous_set_table_name(MIGRATIONS_TABLE);
    migrator
}

/// One row to upsert. The task is written as JSON by the writer, and only when the row is the
/// newest of its task in the batch: a turn's states queued together (working, an artifact, done)
/// cost one serialization, not one each.
#[derive(Debug)]
struct Write {
    tenant: String,
    task: Arc<Task>,
    state: &'static str,
    updated_at: String,
    /// Its place in the order of this store's writes, to tell it from later writes of the task.
    sequence: u64,
    /// Told the outcome once committed; `None` for writes nobody waits on.
    done: Option<oneshot::Sender<Result<(), String>>>,
}

/// What the writer takes from its queue, in order.
#[derive(Debug)]
enum Queued {
    Write(Write),
    /// Told the outcome once every write queued before it is committed.
    Flush(oneshot::Sender<Result<(), String>>),
}

/// Tasks of one agent: in SQLite or PostgreSQL (durable or buffered), or in memory.
#[derive(Debug, Clone)]
pub struct TaskStore {
    pub(crate) agent: Arc<str>,
    /// The write metrics' handles, kept rather than registered on every write.
    metrics: Arc<WriteMetrics>,
    /// This process's name among the replicas sharing the table: the owner of the rows it writes.
    pub(crate) replica: String,
    pub(crate) tasks: Tasks,
    /// Task events shared with the other replicas (PostgreSQL only).
    pub(crate) fanout: Option<Arc<Fanout>>,
    /// The bounds of the push notification outbox (see [`crate::push`]).
    pub(crate) push_limits: PushLimits,
}

/// The task states a store counts writes in, with room to spare.
const TASK_STATES_MAX: usize = 16;

/// A store's write metrics (their `service` label is the store's agent).
#[derive(Debug)]
struct WriteMetrics {
    /// `mesh_task_writes_total{service, state}` by state.
    writes: HandleCache<&'static str, Counter>,
    /// `mesh_task_store_write_duration_seconds{service}`.
    duration: OnceLock<Histogram>,
    /// `mesh_task_store_queue_depth{service}`.
    queue_depth: OnceLock<Gauge>,
}

impl Default for WriteMetrics {
    fn default() -> Self {
        Self { writes: HandleCache::new(TASK_STATES_MAX), duration: OnceLock::new(), queue_depth: OnceLock::new() }
    }
}

/// Where the tasks live.
#[derive(Debug, Clone)]
pub(crate) enum Tasks {
    Sql(SqlTasks),
    Memory(Arc<MemoryTasks>),
}

/// Tasks in a SQL table, and the writer's queue.
#[derive(Debug, Clone)]
pub(crate) struct SqlTasks {
    pub(crate) pool: AnyPool,
    pub(crate) backend: Backend,
    writes: mpsc::Sender<Queued>,
    pending: Arc<PendingWrites>,
    /// Shared with the writer: see [`TaskStore::writes_held`].
    held: Arc<AtomicUsize>,
    /// Buffered: a save returns once queued, not committed.
    buffered: bool,
}

/// The newest queued but not yet committed state of each task, so that a read right after a
/// background save sees it (read-your-writes) rather than the state before.
/// Hashed with foldhash, seeded per map, as the memory store's map is: each request queues up to
/// three writes and settles them, and std's SipHash cost several times as much.
#[derive(Debug, Default)]
struct PendingWrites {
    next_sequence: AtomicU64,
    tasks: Mutex<HashMap<(String, String), PendingTask, RandomState>>,
}

#[derive(Debug)]
struct PendingTask {
    sequence: u64,
    updated_at: String,
    /// Shared with the queued write.
    task: Arc<Task>,
}

impl PendingWrites {
    fn tasks(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), PendingTask, RandomState>> {
        // The map stays consistent whatever panicked while holding it: every change is one insert
        // or remove.
        self.tasks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Numbers a write and remembers its task, unless a newer state of the task is queued already
    /// (as the table keeps the newer one: see [`commit`]).
    fn queue(&self, tenant: &str, task: &Arc<Task>, updated_at: &str) -> u64 {
        let sequence = self.next_sequence.fetch_add(1, Ordering::Relaxed);
        let pending = PendingTask { sequence, updated_at: updated_at.to_owned(), task: task.clone() };
        let mut tasks = self.tasks();
        let key = (tenant.to_owned(), task.id.clone());
        if tasks.get(&key).is_none_or(|queued| queued.updated_at.as_str() <= updated_at) {
            tasks.insert(key, pending);
        }
        sequence
    }

    /// The queued state's time and task.
    fn get(&self, tenant: &str, id: &str) -> Option<(String, Arc<Task>)> {
        let tasks = self.tasks();
        tasks.get(&(tenant.to_owned(), id.to_owned())).map(|pending| (pending.updated_at.clone(), pending.task.clone()))
    }

    /// Forgets the batch's writes, unless a later write of the same task is still queued.
    fn settled(&self, batch: &[Write]) {
        let mut tasks = self.tasks();
        for write in batch {
            let key = (write.tenant.clone(), write.task.id.clone());
            if tasks.get(&key).is_some_and(|pending| pending.sequence == write.sequence) {
                tasks.remove(&key);
            }
        }
    }
}

impl TaskStore {
    /// Opens (and migrates) the durable store at `database_url` for the agent named `agent`, and
    /// starts its writer, which lives as long as the store has clones: [`Self::save`] returns
    /// once the task is committed.
    pub async fn open(database_url: &str, agent: &str) -> Result<Self, TaskError> {
        Self::open_sql(database_url, agent, None).await
    }

    /// [`Self::open`], buffered: [`Self::save`] returns once the write is queued, and the writer
    /// gathers what is queued for up to `flush_interval` after the first write it takes, then
    /// commits it all in one transaction (sooner when a batch fills or [`Self::flush`] asks).
    /// A write is thus committed within `flush_interval` of being queued, plus the commit under
    /// way when it was and its own; a crash loses at most the writes of that span (and never
    /// more than the queue holds, since savers wait once it is full).
    pub async fn open_buffered(database_url: &str, agent: &str, flush_interval: Duration) -> Result<Self, TaskError> {
        Self::open_sql(database_url, agent, Some(flush_interval)).await
    }

    async fn open_sql(database_url: &str, agent: &str, flush_interval: Option<Duration>) -> Result<Self, TaskError> {
        let database = Database::connect(database_url, &migrator()).await?;
        let replica = uuid::Uuid::new_v4().to_string();
        let fanout = match database.backend() {
            Backend::Postgres => Some(Arc::new(Fanout::start(database_url, agent, &replica)?)),
            Backend::Sqlite => None,
        };
        let (writes, queue) = mpsc::channel(WRITE_QUEUE_MAX);
        let pending = Arc::new(PendingWrites::default());
        let held = Arc::new(AtomicUsize::new(0));
        let pool = database.pool().clone();
        let keeps_connection = pool.options().get_max_connections() > 1;
        let writer = Writer {
            pool: pool.clone(),
            connection: None,
            keeps_connection,
            agent: agent.to_owned(),
            replica: replica.clone(),
            pending: pending.clone(),
            held: held.clone(),
        };
        tokio::spawn(writer.run(queue, flush_interval));
        let sql =
            SqlTasks { pool, backend: database.backend(), writes, pending, held, buffered: flush_interval.is_some() };
        let tasks = Tasks::Sql(sql);
        Ok(Self {
            agent: agent.into(),
            metrics: Arc::default(),
            replica,
            tasks,
            fanout,
            push_limits: PushLimits::default(),
        })
    }

    /// A store keeping the agent's tasks in this process's memory alone, at most `tasks_max` of
    /// them: no database, nothing survives the process, and nothing is
    /// shared with replicas.
    pub fn in_memory(agent: &str, tasks_max: usize) -> Self {
        Self {
            agent: agent.into(),
            metrics: Arc::default(),
            replica: uuid::Uuid::new_v4().to_string(),
            tasks: Tasks::Memory(Arc::new(MemoryTasks::new(tasks_max))),
            fanout: None,
            push_limits: PushLimits::default(),
        }
    }

    /// How many writes a buffered store's writer has taken from its queue and holds, uncommitted,
    /// while it waits out its flush interval for more; 0 while it is not waiting, and always for
    /// a durable store or one in memory. Observable so that a caller (the tests) can tell a writer
    /// that holds its writes for the interval from one that has not got round to committing yet.
    pub fn writes_held(&self) -> usize {
        self.sql().map_or(0, |sql| sql.held.load(Ordering::Acquire))
    }

    /// The SQL side of the store; `None` in memory.
    pub(crate) fn sql(&self) -> Option<&SqlTasks> {
        match &self.tasks {
            Tasks::Sql(sql) => Some(sql),
            Tasks::Memory(_) => None,
        }
    }

    /// Saves the task and returns once it is as safe as the store's durability makes it:
    /// committed (durable), queued for the next commit (buffered), or kept (memory).
    pub async fn save(&self, tenant: &str, task: Task) -> Result<(), TaskError> {
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
            match &self.tasks {
                Tasks::Memory(memory) => self.keep(memory, tenant, task),
                Tasks::Sql(sql) if sql.buffered => self.enqueue(sql, tenant, task, None).await,
                Tasks::Sql(sql) => {
                    let (done, committed) = oneshot::channel();
                    self.enqueue(sql, tenant, task, Some(done)).await?;
                    committed.await.map_err(|_| writer_stopped())?.map_err(TaskError::Storage)
                }
            }
        }
        .instrument(span)
        .await;
        let duration = self.metrics.duration.get_or_init(|| {
            metrics::histogram!("mesh_task_store_write_duration_seconds", mesh_telemetry::SERVICE_LABEL => self.agent.clone())
        });
        duration.record(started.elapsed().as_secs_f64());
        saved
    }

    /// Stores `task` as a new task, unless its tenant holds a task of that id already (stored, or
    /// queued to be); says whether it did. The table's key decides, so processes sharing one
    /// database (replicas) never both create one id. Committed before it returns.
    pub async fn create(&self, tenant: &str, task: &Task) -> Result<bool, TaskError> {
        let sql = match &self.tasks {
            Tasks::Memory(memory) => return memory.create(tenant, task, updated_at(task)),
            Tasks::Sql(sql) => sql,
        };
        if sql.pending.get(tenant, &task.id).is_some() {
            return Ok(false);
        }
        let body = serde_json::to_string(task).map_err(|e| TaskError::Storage(e.to_string()))?;
        let created = sqlx::query(
            "INSERT INTO a2a_tasks (agent, tenant, id, context_id, state, updated_at, body, owner) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (agent, tenant, id) DO NOTHING",
        )
        .bind(&*self.agent)
        .bind(tenant)
        .bind(&task.id)
        .bind(&task.context_id)
        .bind(state_name(task.status.state))
        .bind(updated_at(task))
        .bind(&body)
        .bind(&self.replica)
        .execute(&sql.pool)
        .await?
        .rows_affected();
        Ok(created == 1)
    }

    /// Refuses a new task the store could not keep: in memory, when it is full of unfinished
    /// tasks (the oldest finished one makes room otherwise); a SQL store always has room.
    pub fn check_room(&self) -> Result<(), TaskError> {
        match &self.tasks {
            Tasks::Memory(memory) => memory.check_room(),
            Tasks::Sql(_) => Ok(()),
        }
    }

    /// In memory, how many tasks are kept and the most that may be; `None` for a SQL store.
    pub fn memory_occupancy(&self) -> Option<(usize, usize)> {
        match &self.tasks {
            Tasks::Memory(memory) => Some(memory.occupancy()),
            Tasks::Sql(_) => None,
        }
    }

    /// Returns once every write queued before the call is committed (a graceful stop calls it
    /// so that a buffered store loses nothing); at once in memory.
    pub async fn flush(&self) -> Result<(), TaskError> {
        let Some(sql) = self.sql() else { return Ok(()) };
        let (done, flushed) = oneshot::channel();
        sql.writes.send(Queued::Flush(done)).await.map_err(|_| writer_stopped())?;
        flushed.await.map_err(|_| writer_stopped())?.map_err(TaskError::Storage)
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

    /// Answers whether the database answers a trivial query, for `/health` (a store in memory
    /// has no database and always answers).
    pub async fn ping(&self) -> Result<(), TaskError> {
        if let Some(sql) = self.sql() {
            sqlx::query("SELECT 1").execute(&sql.pool).await?;
        }
        Ok(())
    }

    /// Saves the task without waiting for the commit: for intermediate states and records, whose
    /// loss in a crash only means the stored task shows an earlier state (or is missing).
    /// [`Self::get`] sees it at once. Whatever order saves of one task reach the writer in, a
    /// state older than the stored one (by its status timestamp) never replaces it.
    pub async fn save_in_background(&self, tenant: &str, task: Task) -> Result<(), TaskError> {
        match &self.tasks {
            Tasks::Memory(memory) => self.keep(memory, tenant, task),
            Tasks::Sql(sql) => self.enqueue(sql, tenant, task, None).await,
        }
    }

    fn keep(&self, memory: &MemoryTasks, tenant: &str, task: Task) -> Result<(), TaskError> {
        self.count_write(&task);
        let updated_at = updated_at(&task);
        memory.save(tenant, task, updated_at)
    }

    fn count_write(&self, task: &Task) {
        let counter = self.metrics.writes.get(state_name(task.status.state), |state| {
            metrics::counter!("mesh_task_writes_total", mesh_telemetry::SERVICE_LABEL => self.agent.clone(), "state" => *state)
        });
        counter.increment(1);
    }

    async fn enqueue(
        &self,
        sql: &SqlTasks,
        tenant: &str,
        task: Task,
        done: Option<oneshot::Sender<Result<(), String>>>,
    ) -> Result<(), TaskError> {
        let updated_at = updated_at(&task);
        let state = state_name(task.status.state);
        let task = Arc::new(task);
        // A place in the queue first: a caller that gives up while waiting for one leaves nothing
        // behind that was never written.
        let permit = sql.writes.reserve().await.map_err(|_| writer_stopped())?;
        let sequence = sql.pending.queue(tenant, &task, &updated_at);
        self.count_write(&task);
        permit.send(Queued::Write(Write { tenant: tenant.to_owned(), task, state, updated_at, sequence, done }));
        let depth = self.metrics.queue_depth.get_or_init(
            || metrics::gauge!("mesh_task_store_queue_depth", mesh_telemetry::SERVICE_LABEL => self.agent.clone()),
        );
        depth.set((sql.writes.max_capacity() - sql.writes.capacity()) as f64);
        Ok(())
    }

    /// The stored task, whole: the newest of its committed and its queued states.
    pub async fn get(&self, tenant: &str, id: &str) -> Result<Option<Task>, TaskError> {
        let sql = match &self.tasks {
            Tasks::Memory(memory) => return Ok(memory.get(tenant, id)),
            Tasks::Sql(sql) => sql,
        };
        // The queued state first, then the table: the writer forgets a queued state only once it
        // is committed, so read in this order one of the two always holds it (in the other order,
        // a commit landing between the two reads hid the task from both).
        let queued = sql.pending.get(tenant, id);
        let row = sqlx::query("SELECT body, updated_at FROM a2a_tasks WHERE agent = $1 AND tenant = $2 AND id = $3")
            .bind(&*self.agent)
            .bind(tenant)
            .bind(id)
            .fetch_optional(&sql.pool)
            .await?;
        let committed = match row {
            Some(row) => Some((row.try_get::<String, _>("updated_at")?, decode(&row)?)),
            None => None,
        };
        match (queued, committed) {
            (Some((queued_at, task)), Some((committed_at, _))) if queued_at >= committed_at => {
                Ok(Some((*task).clone()))
            }
            (Some((_, task)), None) => Ok(Some((*task).clone())),
            (_, committed) => Ok(committed.map(|(_, task)| task)),
        }
    }

    /// A page of tasks, most recently updated first, filtered as the request asks. In a buffered
    /// store, tasks queued and not yet committed are listed once committed (`GetTask` sees them
    /// at once).
    pub async fn list(&self, tenant: &str, request: &ListTasksRequest) -> Result<ListTasksResponse, TaskError> {
        let query = ListQuery::parse(request)?;
        let sql = match &self.tasks {
            Tasks::Memory(memory) => return Ok(memory.list(tenant, &query)),
            Tasks::Sql(sql) => sql,
        };
        let mut filters = String::from("agent = $1 AND tenant = $2");
        let mut binds = vec![self.agent.to_string(), tenant.to_owned()];
        if let Some(context_id) = &query.context_id {
            bind(&mut filters, &mut binds, " AND context_id = ?", context_id.clone());
        }
        if let Some(state) = query.state {
            bind(&mut filters, &mut binds, " AND state = ?", state_name(state).to_owned());
        }
        if let Some(since) = &query.updated_since {
            bind(&mut filters, &mut binds, " AND updated_at >= ?", since.clone());
        }
        let count_sql = format!("SELECT COUNT(*) AS n FROM a2a_tasks WHERE {filters}");
        let count_binds = binds.len();
        let mut page_filters = filters;
        if let Some((updated_at, id)) = &query.after {
            bind(&mut page_filters, &mut binds, " AND (updated_at < ?", updated_at.clone());
            bind(&mut page_filters, &mut binds, " OR (updated_at = ?", updated_at.clone());
            bind(&mut page_filters, &mut binds, " AND id < ?))", id.clone());
        }
        let page_sql = format!(
            "SELECT body, updated_at FROM a2a_tasks WHERE {page_filters} ORDER BY updated_at DESC, id DESC LIMIT {}",
            query.page_size + 1
        );
        // Audited: the SQL is built from fixed clauses only; every value is a bind parameter.
        let mut count = sqlx::query(sqlx::AssertSqlSafe(count_sql));
        for value in &binds[..count_binds] {
            count = count.bind(value);
        }
        let total: i64 = count.fetch_one(&sql.pool).await?.try_get("n")?;
        let mut page = sqlx::query(sqlx::AssertSqlSafe(page_sql));
        for value in &binds {
            page = page.bind(value);
        }
        let rows = page
            .fetch_all(&sql.pool)
            .await?
            .iter()
            .map(|row| Ok((row.try_get::<String, _>("updated_at")?, decode(row)?)))
            .collect::<Result<Vec<_>, TaskError>>()?;
        Ok(query.page(usize::try_from(total).unwrap_or(usize::MAX), rows))
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

/// The instant a task's state is stored under: its status time, else now.
fn updated_at(task: &Task) -> String {
    task.status.timestamp.as_deref().and_then(normalize_timestamp).unwrap_or_else(now_timestamp)
}

fn writer_stopped() -> TaskError {
    TaskError::Storage("the task writer stopped".into())
}

/// The writer of one SQL store: takes what is queued (up to a batch), commits it in one
/// transaction, tells the waiting savers, repeats. Under load, batches grow by themselves; alone,
/// a write of a durable store commits at once. A buffered store's writer also waits up to its
/// flush interval after the first write it takes, gathering more for the same transaction.
struct Writer {
    pool: AnyPool,
    /// The writer's own connection, taken from the pool once and kept: its page cache then holds
    /// the pages the writes touch. A connection taken anew for each commit comes with a cache
    /// that the other connections' commits made stale, so SQLite reads those pages back from the
    /// file first. Given back after a failed commit, in case the connection broke, and after
    /// every commit when the pool has one connection only (an in-memory SQLite database), which
    /// the store's reads need too.
    connection: Option<PoolConnection<sqlx::Any>>,
    keeps_connection: bool,
    agent: String,
    replica: String,
    pending: Arc<PendingWrites>,
    /// The writes held while gathering (see [`TaskStore::writes_held`]).
    held: Arc<AtomicUsize>,
}

impl Writer {
    async fn run(mut self, mut queue: mpsc::Receiver<Queued>, flush_interval: Option<Duration>) {
        let mut taken = Vec::with_capacity(WRITE_BATCH_MAX);
        let mut batch = Vec::with_capacity(WRITE_BATCH_MAX);
        let mut flushes = Vec::new();
        while queue.recv_many(&mut taken, WRITE_BATCH_MAX).await > 0 {
            if let Some(interval) = flush_interval {
                gather(&mut queue, &mut taken, interval, &self.held).await;
                self.held.store(0, Ordering::Release);
            }
            for queued in taken.drain(..) {
                match queued {
                    Queued::Write(write) => batch.push(write),
                    Queued::Flush(done) => flushes.push(done),
                }
            }
            let result = if batch.is_empty() { Ok(()) } else { self.commit_batch(&mut batch).await };
            // Every write before a flush request was in this batch or an earlier one.
            for done in flushes.drain(..) {
                let _ = done.send(result.clone());
            }
        }
    }

    async fn commit_batch(&mut self, batch: &mut Vec<Write>) -> Result<(), String> {
        let result = self.commit_on_own_connection(batch).await.map_err(|e| e.to_string());
        if let Err(error) = &result {
            tracing::error!(%error, writes = batch.len(), "could not save tasks");
        }
        self.pending.settled(batch);
        for write in batch.drain(..) {
            if let Some(done) = write.done {
                // The saver may have gone (its client hung up); the write stands regardless.
                let _ = done.send(result.clone());
            }
        }
        result
    }

    async fn commit_on_own_connection(&mut self, batch: &[Write]) -> Result<(), sqlx::Error> {
        // The pool's SQLite connections checkpoint their log every
        // `mesh_storage::SQLITE_WAL_CHECKPOINT_PAGES` pages, so commits rarely stall on one.
        let mut connection = match self.connection.take() {
            Some(connection) => connection,
            None => self.pool.acquire().await?,
        };
        let committed = commit(&mut connection, &self.agent, &self.replica, batch).await;
        if committed.is_ok() && self.keeps_connection {
            self.connection = Some(connection);
        }
        committed
    }
}

/// Takes more of the queue into `taken` until `interval` has passed, a batch is full, a flush is
/// asked for or the queue closes; `held` says how many writes it holds while it waits.
async fn gather(queue: &mut mpsc::Receiver<Queued>, taken: &mut Vec<Queued>, interval: Duration, held: &AtomicUsize) {
    let deadline = tokio::time::Instant::now() + interval;
    let mut checked = 0;
    while taken.len() < WRITE_BATCH_MAX {
        if taken[checked..].iter().any(|queued| matches!(queued, Queued::Flush(_))) {
            return;
        }
        checked = taken.len();
        // Writes only: a flush request among them returned above.
        held.store(taken.len(), Ordering::Release);
        tokio::select! {
            received = queue.recv_many(taken, WRITE_BATCH_MAX - taken.len()) => if received == 0 { return },
            () = tokio::time::sleep_until(deadline) => return,
        }
    }
}

/// Rows per `INSERT` statement: one statement per chunk instead of one per row, since every
/// statement is a round trip to the database (for SQLite, to its worker thread). 8 parameters
/// per row stay far below either database's limit on parameters.
const ROWS_PER_STATEMENT_MAX: usize = 128;
/// Columns written per row.
const COLUMNS_PER_ROW: usize = 8;

async fn commit(
    connection: &mut AnyConnection,
    agent: &str,
    replica: &str,
    batch: &[Write],
) -> Result<(), sqlx::Error> {
    // Only the newest write of a task in the batch matters (by status time, then queue order):
    // the others would be overwritten anyway, and one statement may not upsert a row twice.
    let mut last: HashMap<(&str, &str), usize, RandomState> =
        HashMap::with_capacity_and_hasher(batch.len(), RandomState::default());
    for (i, write) in batch.iter().enumerate() {
        let newest = last.entry((write.tenant.as_str(), write.task.id.as_str())).or_insert(i);
        if batch[*newest].updated_at <= write.updated_at {
            *newest = i;
        }
    }
    let rows: Vec<&Write> = batch
        .iter()
        .enumerate()
        .filter(|(i, w)| last.get(&(w.tenant.as_str(), w.task.id.as_str())) == Some(i))
        .map(|(_, w)| w)
        .collect();
    if rows.len() <= ROWS_PER_STATEMENT_MAX {
        // One statement is atomic by itself: no BEGIN and COMMIT, each a round trip of its own.
        return upsert(connection, agent, replica, &rows).await;
    }
    let mut transaction = connection.begin().await?;
    let written = async {
        for chunk in rows.chunks(ROWS_PER_STATEMENT_MAX) {
            upsert(&mut *transaction, agent, replica, chunk).await?;
        }
        Ok(())
    }
    .await;
    settle(transaction, written, |_| true).await
}

/// Upserts `rows` in one statement.
async fn upsert<'c>(
    executor: impl sqlx::Executor<'c, Database = sqlx::Any>,
    agent: &str,
    replica: &str,
    rows: &[&Write],
) -> Result<(), sqlx::Error> {
    let terminal = terminal_states();
    let placeholders: Vec<String> = (0..rows.len())
        .map(|row| {
            let first = row * COLUMNS_PER_ROW;
            let numbered: Vec<String> = (1..=COLUMNS_PER_ROW).map(|column| format!("${}", first + column)).collect();
            format!("({})", numbered.join(", "))
        })
        .collect();
    let terminal_placeholders: Vec<String> =
        (1..=terminal.len()).map(|n| format!("${}", rows.len() * COLUMNS_PER_ROW + n)).collect();
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
    let bodies = rows
        .iter()
        .map(|write| serde_json::to_string(&*write.task))
        .collect::<Result<Vec<String>, _>>()
        .map_err(|error| sqlx::Error::Encode(Box::new(error)))?;
    // Audited: the SQL is built from numbered placeholders only; every value is bound.
    let mut statement = sqlx::query(sqlx::AssertSqlSafe(sql));
    for (write, body) in rows.iter().zip(bodies) {
        statement = statement
            .bind(agent)
            .bind(&write.tenant)
            .bind(&write.task.id)
            .bind(&write.task.context_id)
            .bind(write.state)
            .bind(&write.updated_at)
            .bind(body)
            .bind(replica);
    }
    for state in &terminal {
        statement = statement.bind(state);
    }
    statement.execute(executor).await?;
    Ok(())
}
