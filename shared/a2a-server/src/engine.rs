//! The task engine: runs an agent's [`TaskHandler`] for each message, keeps the tasks that are
//! still running (or waiting for input) in memory with their subscribers, and saves every change
//! to the [`TaskStore`]. Both protocol bindings, in both protocol versions, are thin layers over
//! the operations here.
//!
//! Nothing is shown before it is stored: a change of a task reaches its caller, its subscribers,
//! its webhooks and the other replicas only once the store took it (committed, in the default
//! durability `durable`). A change the store refuses is shown to nobody: the turn ends with the
//! store's error, which the caller and the subscribers receive in its place, and the task leaves
//! memory, recorded as failed when an earlier state of it is stored (see [`TaskEvents`]). Changes
//! nobody watches (the steps of a blocking `SendMessage` before its answer) are saved in the
//! background, and stored before anyone is shown them (`GetTask`, `SubscribeToTask`).
//!
//! Replicas sharing a PostgreSQL store share the events of their tasks too (see
//! [`mesh_tasks::Remote`]): a task running on another replica is followed here through a copy in
//! memory (loaded from the store, then moved on by the other replica's events), so that
//! `SubscribeToTask` streams it from any replica, and a cancellation made here stops the turn
//! that runs it there.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use foldhash::fast::RandomState;
use futures::FutureExt;
use mesh_client::CallScope;
use mesh_protocol::a2a::v1::{
    Artifact, CancelTaskRequest, GetTaskRequest, JsonObject, ListTasksRequest, ListTasksResponse, Message, Role,
    SendMessageRequest, StreamResponse, Task, TaskArtifactUpdateEvent, TaskState, TaskStatus, TaskStatusUpdateEvent,
};
use mesh_tasks::model::{
    accepts_messages, add_user_message, apply, apply_artifact, catch_up, new_id, now_timestamp, state_name,
    trim_history,
};
use mesh_tasks::{Remote, TaskError, TaskStore, history_length};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::push::PushDelivery;

/// Tasks kept in memory at once (running, or waiting for the user) by default.
pub const LIVE_TASKS_MAX_DEFAULT: usize = 10_000;
/// How long a live task may go without a change by default: a running turn is failed after it,
/// a task waiting for the user leaves memory (it stays stored and is reloaded when needed).
pub const LIVE_TASK_TTL_MS_DEFAULT: u64 = 3_600_000;
/// `SubscribeToTask` streams open on one task at once, by default.
pub const TASK_SUBSCRIBERS_MAX_DEFAULT: usize = 16;
/// Largest size of a task's artifacts (as JSON) by default; a task growing past it fails.
pub const TASK_ARTIFACT_BYTES_MAX_DEFAULT: usize = 4 * 1024 * 1024;
/// Longest time between two sweeps of expired live tasks.
const LIVE_TASK_SWEEP_MS_MAX: u64 = 60_000;

/// What bounds the engine's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskLimits {
    pub live_tasks_max: usize,
    pub live_task_ttl: Duration,
    pub subscribers_per_task_max: usize,
    pub artifact_bytes_max: usize,
}

impl Default for TaskLimits {
    fn default() -> Self {
        Self {
            live_tasks_max: LIVE_TASKS_MAX_DEFAULT,
            live_task_ttl: Duration::from_millis(LIVE_TASK_TTL_MS_DEFAULT),
            subscribers_per_task_max: TASK_SUBSCRIBERS_MAX_DEFAULT,
            artifact_bytes_max: TASK_ARTIFACT_BYTES_MAX_DEFAULT,
        }
    }
}

/// What an engine is built with: its bounds, and the delivery of push notifications (without it,
/// the push notification operations answer `PushNotificationNotSupported`).
#[derive(Debug, Clone, Default)]
pub struct EngineSettings {
    pub limits: TaskLimits,
    pub push: Option<PushDelivery>,
}

impl From<TaskLimits> for EngineSettings {
    fn from(limits: TaskLimits) -> Self {
        Self { limits, push: None }
    }
}

/// What an agent built on the task model implements: one turn of a task, started by a user
/// message, reported through `events` until the task is finished or waits for the user.
///
/// A turn that ends without a final state fails the task; a panic fails it too.
pub trait TaskHandler: Send + Sync + 'static {
    fn run(&self, turn: Turn, events: TaskEvents) -> impl Future<Output = ()> + Send;
}

/// One turn as a handler sees it.
#[derive(Debug, Clone)]
pub struct Turn {
    pub tenant: String,
    pub task_id: String,
    pub context_id: String,
    /// The new user message, with its task and context ids filled in.
    pub message: Message,
    /// The task as it was before this message, when the message continues one.
    pub previous: Option<Task>,
    /// The request's metadata.
    pub metadata: Option<JsonObject>,
    /// The call being served (its chain and deadline); calls made for it derive from this.
    pub call: CallScope,
    /// Cancelled when a client cancels the task (it is already `canceled`), or when the task
    /// ends otherwise (the store refused its state, its time to live ran out): stop working.
    pub cancellation: CancellationToken,
}

/// What a turn's caller is shown of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    /// Every event as it comes (a stream, or the task as soon as it exists): each once the state
    /// it leads to is stored.
    Events,
    /// The turn's answer alone (a blocking `SendMessage`): the steps before it, which nobody else
    /// watches, are saved in the background, and the answer waits for its own state.
    Answer,
}

/// One update of a task as its followers (a turn's caller, a task's subscribers) receive it: an
/// event once the state it leads to is stored, or the error that ends the updates when a state
/// could not be.
pub type TaskUpdate = Result<StreamResponse, TaskError>;

/// A task is known by its tenant and id: tenants never see each other's tasks.
type TaskKey = (String, String);

/// A task that may still change: running a turn, or waiting for the user.
#[derive(Debug)]
struct LiveTask {
    state: Mutex<LiveState>,
    /// Held while a change of the task is stored and then applied (every change here but those
    /// heard from other replicas), so that changes are stored in the order they are shown, and
    /// what is read under it is stored as it is read.
    changes: tokio::sync::Mutex<()>,
    cancellation: CancellationToken,
}

#[derive(Debug)]
struct LiveState {
    task: Task,
    /// `SubscribeToTask` streams, told every change after their first snapshot.
    subscribers: Vec<mpsc::UnboundedSender<TaskUpdate>>,
    /// A turn is running: another message must wait for it to end.
    running: bool,
    /// The task reached a terminal state: events after it are dropped.
    closed: bool,
    /// The number of the turn that owns the task; a later message starts the next one. An older
    /// turn's late events and its end are then no longer the task's.
    turn: u64,
    /// When the task last changed, for its time to live.
    touched: Instant,
    /// The task has push notification webhooks: its events are queued for them.
    push: bool,
    /// Some state of the task may be in the store: it was loaded from it, or a save of it
    /// returned (a background one may fail yet).
    stored: bool,
    /// `task` itself is in the store: false after a change saved in the background, or one not
    /// saved yet (the message that starts a turn).
    saved: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The state stays consistent across a panicking holder: every update is a plain assignment.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Debug)]
struct Core {
    store: TaskStore,
    /// Hashed with foldhash, seeded per map: a client chooses the task ids it names, and std's
    /// SipHash cost several times as much per lookup on every event.
    live: Mutex<HashMap<TaskKey, Arc<LiveTask>, RandomState>>,
    limits: TaskLimits,
    push: Option<PushDelivery>,
    /// Stops following the other replicas' events when the engine is gone.
    _following: Option<tokio_util::sync::DropGuard>,
}

impl LiveTask {
    /// A task new here: one just made (`stored` false), or one read from the store.
    fn new(task: Task, running: bool, stored: bool) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(LiveState {
                task,
                subscribers: Vec::new(),
                running,
                closed: false,
                turn: 0,
                touched: Instant::now(),
                push: false,
                stored,
                saved: stored,
            }),
            changes: tokio::sync::Mutex::new(()),
            cancellation: CancellationToken::new(),
        })
    }
}

impl Core {
    fn live(&self, key: &TaskKey) -> Option<Arc<LiveTask>> {
        lock(&self.live).get(key).cloned()
    }

    /// Forgets the live task under `key` if it is still `live` (not a later one under that key).
    fn forget(&self, key: &TaskKey, live: &Arc<LiveTask>) {
        let mut tasks = lock(&self.live);
        if tasks.get(key).is_some_and(|current| Arc::ptr_eq(current, live)) {
            tasks.remove(key);
        }
    }

    /// The task in memory, else as stored (waiting for input before a restart, or orphaned by
    /// one) and from then on kept in memory, so that every operation on it shares one state;
    /// refused with `finished` when it is stored as terminal.
    async fn live_or_stored(
        &self,
        key: &TaskKey,
        finished: fn(&Task) -> TaskError,
    ) -> Result<Arc<LiveTask>, TaskError> {
        if let Some(live) = self.live(key) {
            return Ok(live);
        }
        let stored = self.store.get(&key.0, &key.1).await?.ok_or_else(|| TaskError::NotFound(key.1.clone()))?;
        if stored.status.state.is_terminal() {
            return Err(finished(&stored));
        }
        let push = match &self.push {
            Some(_) => self.store.has_push_configs(&key.0, &key.1).await?,
            None => false,
        };
        let mut live = lock(&self.live);
        if !live.contains_key(key) {
            self.check_room(live.len())?;
        }
        Ok(live
            .entry(key.clone())
            .or_insert_with(|| {
                let task = LiveTask::new(stored, false, true);
                lock(&task.state).push = push;
                task
            })
            .clone())
    }

    /// Queues `events` of the task for its webhooks (see [`super::push`]); a failure is logged,
    /// never the task's.
    async fn notify_webhooks(&self, key: &TaskKey, events: &[StreamResponse]) {
        let Some(push) = &self.push else { return };
        match self.store.enqueue_push(&key.0, &key.1, events).await {
            Ok(0) => {}
            Ok(_) => push.wake(),
            Err(error) => tracing::error!(task = %key.1, %error, "could not queue push notifications"),
        }
    }

    /// Refuses one more live task when `live` are kept already.
    fn check_room(&self, live: usize) -> Result<(), TaskError> {
        if live >= self.limits.live_tasks_max {
            return Err(TaskError::Busy(format!(
                "the agent holds {} unfinished tasks, as many as it may; try again later",
                self.limits.live_tasks_max
            )));
        }
        Ok(())
    }

    /// Fails the running turns and forgets the waiting tasks that did not change within the
    /// time to live; the forgotten ones stay stored and are reloaded when a message comes.
    async fn sweep(&self) {
        let expired: Vec<(TaskKey, Arc<LiveTask>)> = lock(&self.live)
            .iter()
            .filter(|(_, live)| lock(&live.state).touched.elapsed() >= self.limits.live_task_ttl)
            .map(|(key, live)| (key.clone(), live.clone()))
            .collect();
        for (key, live) in expired {
            // A change under way is no idleness: the task is looked at again at the next sweep.
            let Ok(_change) = live.changes.try_lock() else { continue };
            let failed = {
                let mut state = lock(&live.state);
                if state.closed || !state.running {
                    // Waiting for the user: dropping the senders ends the subscribers' streams.
                    state.subscribers.clear();
                    None
                } else {
                    let reason = format!(
                        "the task did not change for {} ms, its time to live; it was stopped",
                        self.limits.live_task_ttl.as_millis()
                    );
                    let message = Message::text(Role::Agent, new_id(), reason);
                    let update = status_update(&state.task, TaskState::Failed, Some(message));
                    let mut task = state.task.clone();
                    apply(&mut task, &update);
                    Some((task, update))
                }
            };
            let Some((task, update)) = failed else {
                self.forget(&key, &live);
                continue;
            };
            tracing::warn!(task = %key.1, "a live task outlived its time to live; failed");
            // Stored before it is shown; the turn stops either way.
            let saved = self.save(&key.0, task.clone(), true).await;
            let (subscribers, push) = {
                let mut state = lock(&live.state);
                state.closed = true;
                state.running = false;
                if saved.is_ok() {
                    state.task = task;
                }
                (std::mem::take(&mut state.subscribers), state.push)
            };
            self.forget(&key, &live);
            live.cancellation.cancel();
            let shown = match saved {
                Ok(()) => {
                    if push {
                        self.notify_webhooks(&key, std::slice::from_ref(&update)).await;
                    }
                    self.store.publish(&key.0, &key.1, &update).await;
                    Ok(update)
                }
                Err(error) => {
                    tracing::error!(task = %key.1, %error, "could not save the expired task");
                    Err(error)
                }
            };
            for subscriber in subscribers {
                let _ = subscriber.send(shown.clone());
            }
        }
    }

    /// Stores the live task's state when only a background save (or none yet) holds it, so that
    /// it may be shown. The caller holds the task's `changes`, so what it reads next is what was
    /// stored.
    async fn store_unsaved(&self, tenant: &str, live: &LiveTask) -> Result<(), TaskError> {
        let unsaved = {
            let state = lock(&live.state);
            (!state.saved && !state.closed).then(|| state.task.clone())
        };
        if let Some(task) = unsaved {
            self.save(tenant, task, true).await?;
            let mut state = lock(&live.state);
            (state.stored, state.saved) = (true, true);
        }
        Ok(())
    }

    /// Saves the task: `durable`, as safely as the store's durability makes a save (committed,
    /// queued for the next flush, or kept in memory); otherwise in the background.
    async fn save(&self, tenant: &str, task: Task, durable: bool) -> Result<(), TaskError> {
        if durable { self.store.save(tenant, task).await } else { self.store.save_in_background(tenant, task).await }
    }

    /// Takes an event another replica published: the copy here, if any and not run here, moves
    /// on and tells its subscribers. A final state (the task canceled, finished or failed
    /// elsewhere) also ends the copy here, and stops the turn when it runs here.
    fn hear(&self, key: &TaskKey, event: StreamResponse) {
        let Some(live) = self.live(key) else { return };
        let mut state = lock(&live.state);
        if state.closed || (state.running && !ends_task(&event)) {
            // A turn here owns the task: only an end reached elsewhere (a cancellation) counts.
            return;
        }
        let known = match &event {
            StreamResponse::StatusUpdate(update) => update.status == state.task.status,
            StreamResponse::ArtifactUpdate(update) => !update.append && state.task.artifacts.contains(&update.artifact),
            _ => false,
        };
        if known {
            // Heard after the copy was read with it already (a subscriber joined, or the copy
            // caught up, between the write and its notification): told once, by the copy.
            return;
        }
        apply(&mut state.task, &event);
        self.pass_on(key, &live, state, event);
    }

    /// Tells the subscribers of `live`, whose state `state` has just taken `event`; when that
    /// state is final, ends the task here: its streams close and a turn running here is stopped.
    fn pass_on(
        &self,
        key: &TaskKey,
        live: &Arc<LiveTask>,
        mut state: MutexGuard<'_, LiveState>,
        event: StreamResponse,
    ) {
        state.touched = Instant::now();
        if !state.task.status.state.is_terminal() {
            state.subscribers.retain(|subscriber| subscriber.send(Ok(event.clone())).is_ok());
            return;
        }
        state.closed = true;
        state.running = false;
        let subscribers = std::mem::take(&mut state.subscribers);
        drop(state);
        live.cancellation.cancel();
        self.forget(key, live);
        for subscriber in subscribers {
            let _ = subscriber.send(Ok(event.clone()));
        }
    }

    /// Reads a task followed here but not run here from the store again, for what its events may
    /// not have told (the listener reconnected or had not yet connected, or the task moved on
    /// while a subscriber joined): the artifacts and status the copy missed are passed on
    /// ([`catch_up`]), and a final status ends the copy.
    async fn resync(&self, key: &TaskKey, live: &Arc<LiveTask>) {
        let stored = match self.store.get(&key.0, &key.1).await {
            Ok(Some(stored)) => stored,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(task = %key.1, %error, "could not read a followed task again");
                return;
            }
        };
        let mut state = lock(&live.state);
        if state.closed || state.running {
            return;
        }
        let mut events = catch_up(&state.task, &stored);
        let Some(last) = events.pop() else { return };
        state.task = stored;
        // Only the last event can end the task: the ones before it go to the subscribers as any.
        for event in events {
            state.subscribers.retain(|subscriber| subscriber.send(Ok(event.clone())).is_ok());
        }
        self.pass_on(key, live, state, last);
    }

    /// [`Self::resync`] for every task followed here by a subscriber and not run here.
    async fn resync_followed(&self) {
        let followed: Vec<(TaskKey, Arc<LiveTask>)> = lock(&self.live)
            .iter()
            .filter(|(_, live)| {
                let state = lock(&live.state);
                !state.running && !state.subscribers.is_empty()
            })
            .map(|(key, live)| (key.clone(), live.clone()))
            .collect();
        for (key, live) in followed {
            self.resync(&key, &live).await;
        }
    }
}

/// Takes the other replicas' task events until the engine is gone (`stop`).
async fn follow_others(core: Weak<Core>, mut heard: mpsc::Receiver<Remote>, stop: CancellationToken) {
    loop {
        let remote = tokio::select! {
            () = stop.cancelled() => return,
            remote = heard.recv() => remote,
        };
        let (Some(remote), Some(core)) = (remote, core.upgrade()) else { return };
        match remote {
            Remote::Event { tenant, id, event } => core.hear(&(tenant, id), *event),
            Remote::Resync => core.resync_followed().await,
        }
    }
}

/// What a turn's caller receives: the turn's events in order, first a [`StreamResponse::Task`]
/// (or a single [`StreamResponse::Message`] when the agent answers without a task); an error
/// ends them when the store refused a change.
pub type TurnEvents = mpsc::UnboundedReceiver<TaskUpdate>;

/// The engine of one agent. Cheap to clone.
#[derive(Debug)]
pub struct TaskEngine<H> {
    core: Arc<Core>,
    handler: Arc<H>,
}

impl<H> Clone for TaskEngine<H> {
    fn clone(&self) -> Self {
        Self { core: self.core.clone(), handler: self.handler.clone() }
    }
}

impl<H: TaskHandler> TaskEngine<H> {
    pub fn new(store: TaskStore, handler: Arc<H>) -> Self {
        Self::with_limits(store, handler, TaskLimits::default())
    }

    /// An engine bounded by `limits`, whose expired live tasks a background job sweeps for as
    /// long as the engine exists.
    pub fn with_limits(store: TaskStore, handler: Arc<H>, limits: TaskLimits) -> Self {
        Self::with_settings(store, handler, limits.into())
    }

    /// [`Self::with_limits`], with push notifications delivered by `settings.push` when given.
    pub fn with_settings(store: TaskStore, handler: Arc<H>, settings: EngineSettings) -> Self {
        let EngineSettings { limits, push } = settings;
        let heard = store.listen();
        let stop = CancellationToken::new();
        let following = heard.is_some().then(|| stop.clone().drop_guard());
        let core = Arc::new(Core { store, live: Mutex::new(HashMap::default()), limits, push, _following: following });
        if let Some(heard) = heard {
            tokio::spawn(follow_others(Arc::downgrade(&core), heard, stop));
        }
        let period =
            (limits.live_task_ttl / 4).clamp(Duration::from_millis(1), Duration::from_millis(LIVE_TASK_SWEEP_MS_MAX));
        tokio::spawn(sweep_while_alive(Arc::downgrade(&core), period));
        Self { core, handler }
    }

    pub fn store(&self) -> &TaskStore {
        &self.core.store
    }

    /// The delivery of push notifications; `None` when the agent offers none.
    pub(crate) fn push_delivery(&self) -> Option<&PushDelivery> {
        self.core.push.as_ref()
    }

    /// Notes that the task, if live here, has webhooks now: its next events are queued for them.
    pub(crate) fn note_webhooks(&self, tenant: &str, task_id: &str) {
        if let Some(live) = self.core.live(&(tenant.to_owned(), task_id.to_owned())) {
            lock(&live.state).push = true;
        }
    }

    /// Starts a turn for the request's message: a new task, or the next turn of the task it names;
    /// its caller is shown what `follow` says.
    pub async fn start(
        &self,
        tenant: &str,
        request: SendMessageRequest,
        call: CallScope,
        follow: Follow,
    ) -> Result<TurnEvents, TaskError> {
        let SendMessageRequest { mut message, metadata, configuration, .. } = request;
        check_user_message(&message)?;
        // As the official SDK does, a webhook given to an agent without push notifications is
        // ignored (the card says it has none); one given to an agent with them is checked first.
        let webhook = match (configuration.and_then(|c| c.task_push_notification_config), &self.core.push) {
            (Some(config), Some(push)) => {
                push.vet(&config).await?;
                Some(config)
            }
            _ => None,
        };
        // The conversation the call was admitted in (the link policy's answer rule read it) is
        // the one the message joins.
        if let Some(admitted) = call.context().context_id.as_deref() {
            match message.context_id.as_deref().filter(|c| !c.is_empty()) {
                Some(named) if named != admitted => {
                    return Err(TaskError::InvalidParams(format!(
                        "message contextId {named} differs from the call's context id {admitted}"
                    )));
                }
                Some(_) => {}
                None => message.context_id = Some(admitted.to_owned()),
            }
        }
        // The webhook config stored for a new task, removed again if the task never is.
        let mut new_webhook = None;
        let (live, previous) = match message.task_id.clone().filter(|id| !id.is_empty()) {
            Some(task_id) => {
                if let Some(config) = &webhook {
                    // Stored before the turn is claimed, so that a refused config leaves the task
                    // as it was; the task must be the tenant's.
                    let known = GetTaskRequest { tenant: None, id: task_id.clone(), history_length: Some(0) };
                    self.get(tenant, &known).await?;
                    self.core.store.put_push_config(tenant, &task_id, config).await?;
                }
                self.continue_task(tenant, &task_id, &mut message).await?
            }
            None => {
                let context_id = message.context_id.clone().filter(|c| !c.is_empty()).unwrap_or_else(new_id);
                let task = Task {
                    id: new_id(),
                    context_id,
                    status: TaskStatus { state: TaskState::Submitted, message: None, timestamp: Some(now_timestamp()) },
                    artifacts: Vec::new(),
                    history: Vec::new(),
                    metadata: None,
                };
                self.core.check_room(lock(&self.core.live).len())?;
                // A store in memory may be full of unfinished tasks: refused now, not after the
                // answer when the task could not be kept.
                self.core.store.check_room()?;
                if let Some(config) = &webhook {
                    // Stored before the turn runs, so that its first event finds it.
                    new_webhook = self.core.store.put_push_config(tenant, &task.id, config).await?.id;
                }
                let live = LiveTask::new(task, true, false);
                take_message(&mut lock(&live.state), &mut message);
                (live, None)
            }
        };
        let (task_id, context_id, turn_number) = {
            let mut state = lock(&live.state);
            state.push |= webhook.is_some();
            (state.task.id.clone(), state.task.context_id.clone(), state.turn)
        };
        mesh_server::observe::record_task(&task_id, Some(&context_id));
        let (sender, events) = mpsc::unbounded_channel();
        let previous_is_none = previous.is_none();
        let turn = Turn {
            tenant: tenant.to_owned(),
            task_id,
            context_id,
            message,
            previous,
            metadata,
            call,
            cancellation: live.cancellation.clone(),
        };
        let sink = TaskEvents {
            core: self.core.clone(),
            key: (tenant.to_owned(), turn.task_id.clone()),
            live,
            caller: sender,
            published: Arc::new(Mutex::new(false)),
            new_task: previous_is_none,
            turn: turn_number,
            follow,
            new_webhook,
        };
        let handler = self.handler.clone();
        // The turn runs in the request's trace: its spans join it, and its calls carry it on. The
        // handler's future and the turn's end are boxed: inline they made the turn's future
        // about 7 KiB, copied whole at each of the moves spawning makes.
        let turn_task = async move {
            let run = std::panic::AssertUnwindSafe(Box::pin(handler.run(turn, sink.clone()))).catch_unwind().await;
            let reason = match run {
                Ok(()) => "the agent ended its turn without a final state",
                Err(_) => "the agent failed while working on the task",
            };
            Box::pin(sink.end_turn(reason)).await;
        };
        let mut turn_task = Box::pin(mesh_telemetry::in_current_trace(turn_task));
        // Its first steps run here, on the request's task: a turn that ends without waiting (an
        // agent answering from what it holds, tasks kept in memory) then costs no task of its own,
        // and the request no hand-off to one and back. A turn that waits goes on on its own task,
        // so that it outlives a caller who leaves.
        if turn_task.as_mut().now_or_never().is_none() {
            tokio::spawn(turn_task);
        }
        Ok(events)
    }

    /// The live task a message continues, which must be waiting for input and not running, with
    /// the message taken as its next; and the task as it was before.
    async fn continue_task(
        &self,
        tenant: &str,
        task_id: &str,
        message: &mut Message,
    ) -> Result<(Arc<LiveTask>, Option<Task>), TaskError> {
        let key = (tenant.to_owned(), task_id.to_owned());
        let live = self.core.live_or_stored(&key, no_more_messages).await?;
        if self.core.push.is_some() && self.core.store.shares_events() && !lock(&live.state).push {
            // A replica sharing the store may have given the task webhooks since it was loaded.
            let pushed = self.core.store.has_push_configs(tenant, task_id).await?;
            lock(&live.state).push |= pushed;
        }
        let change = live.changes.lock().await;
        let previous = {
            let mut state = lock(&live.state);
            let task = &state.task;
            if let Some(context_id) = message.context_id.as_deref().filter(|c| !c.is_empty() && *c != task.context_id) {
                return Err(TaskError::InvalidParams(format!(
                    "message contextId {context_id} differs from the contextId {} of task {task_id}",
                    task.context_id
                )));
            }
            if state.closed || task.status.state.is_terminal() {
                return Err(no_more_messages(task));
            }
            if state.running || !accepts_messages(task.status.state) {
                return Err(TaskError::Unsupported(format!(
                    "task {task_id} is still working on the previous message; send when it asks for input"
                )));
            }
            state.running = true;
            state.turn += 1;
            state.touched = Instant::now();
            let previous = state.task.clone();
            take_message(&mut state, message);
            previous
        };
        drop(change);
        Ok((live, Some(previous)))
    }

    /// The task with at most `history_length` recent messages: from memory while it may change,
    /// from the store once it cannot; with its undelivered push notifications in its metadata.
    pub async fn get(&self, tenant: &str, request: &GetTaskRequest) -> Result<Task, TaskError> {
        let history_length = history_length(request.history_length)?;
        let key = (tenant.to_owned(), request.id.clone());
        let mut task = match self.core.live(&key) {
            Some(live) => {
                let _change = live.changes.lock().await;
                self.core.store_unsaved(tenant, &live).await?;
                lock(&live.state).task.clone()
            }
            None => self
                .core
                .store
                .get(tenant, &request.id)
                .await?
                .ok_or_else(|| TaskError::NotFound(request.id.clone()))?,
        };
        trim_history(&mut task, history_length);
        if let Some(push) = &self.core.push {
            push.report_undelivered(tenant, &mut task).await;
        }
        Ok(task)
    }

    /// Stores `task` as a new task of `tenant`, unless a task of that id is running here or
    /// stored (see [`TaskStore::create`]: the store's key decides across replicas); says whether
    /// it did.
    pub async fn create(&self, tenant: &str, task: &Task) -> Result<bool, TaskError> {
        if self.core.live(&(tenant.to_owned(), task.id.clone())).is_some() {
            return Ok(false);
        }
        self.core.store.create(tenant, task).await
    }

    pub async fn list(&self, tenant: &str, request: &ListTasksRequest) -> Result<ListTasksResponse, TaskError> {
        self.core.store.list(tenant, request).await
    }

    /// Cancels a task that is not finished: it becomes `canceled` at once, its running turn is
    /// told to stop, and its subscribers see the change.
    pub async fn cancel(&self, tenant: &str, request: &CancelTaskRequest) -> Result<Task, TaskError> {
        let key = (tenant.to_owned(), request.id.clone());
        let live = self.core.live_or_stored(&key, not_cancelable).await?;
        let _change = live.changes.lock().await;
        let (task, update) = {
            let state = lock(&live.state);
            if state.closed {
                return Err(not_cancelable(&state.task));
            }
            let update = status_update(&state.task, TaskState::Canceled, None);
            let mut task = state.task.clone();
            apply(&mut task, &update);
            (task, update)
        };
        // Stored before anyone hears of it: a cancellation the store refuses changes nothing,
        // and a running turn goes on.
        self.core.save(tenant, task.clone(), true).await?;
        let (subscribers, ran_here, push) = {
            let mut state = lock(&live.state);
            if state.closed {
                // Ended meanwhile on another replica: that end stands.
                return Err(not_cancelable(&state.task));
            }
            state.closed = true;
            state.task = task.clone();
            (state.stored, state.saved) = (true, true);
            (std::mem::take(&mut state.subscribers), state.running, state.push)
        };
        live.cancellation.cancel();
        if push {
            self.core.notify_webhooks(&key, std::slice::from_ref(&update)).await;
        }
        self.core.forget(&key, &live);
        if !ran_here && self.core.store.shares_events() {
            // Another replica may have finished the task first: its end stands, since the store
            // never overwrites a finished task's state.
            if let Ok(Some(stored)) = self.core.store.get(tenant, &request.id).await
                && stored.status.state != TaskState::Canceled
            {
                let ended = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                    task_id: stored.id.clone(),
                    context_id: stored.context_id.clone(),
                    status: stored.status.clone(),
                    metadata: None,
                });
                for subscriber in subscribers {
                    let _ = subscriber.send(Ok(ended.clone()));
                }
                return Err(not_cancelable(&stored));
            }
        }
        // The replica running the task stops its turn when it hears this.
        self.core.store.publish(tenant, &request.id, &update).await;
        for subscriber in subscribers {
            let _ = subscriber.send(Ok(update.clone()));
        }
        Ok(task)
    }

    /// A stream of the task's changes, starting with the task as it is now. Finished tasks have
    /// no changes to follow and are refused.
    pub async fn subscribe(&self, tenant: &str, task_id: &str) -> Result<TurnEvents, TaskError> {
        let key = (tenant.to_owned(), task_id.to_owned());
        let live = self.core.live_or_stored(&key, finished).await?;
        let change = live.changes.lock().await;
        // The subscriber is first shown the task as it is now: stored first.
        self.core.store_unsaved(tenant, &live).await?;
        let (events, runs_here) = {
            let mut state = lock(&live.state);
            if state.closed {
                return Err(finished(&state.task));
            }
            state.subscribers.retain(|subscriber| !subscriber.is_closed());
            if state.subscribers.len() >= self.core.limits.subscribers_per_task_max {
                return Err(TaskError::Busy(format!(
                    "task {task_id} has {} subscribers, as many as it may",
                    self.core.limits.subscribers_per_task_max
                )));
            }
            let (sender, events) = mpsc::unbounded_channel();
            let _ = sender.send(Ok(StreamResponse::Task(state.task.clone())));
            state.subscribers.push(sender);
            (events, state.running)
        };
        drop(change);
        if !runs_here && self.core.store.shares_events() {
            // The task may run on another replica, and have ended between the read that made the
            // copy here and the copy's first event heard: read it once more now that the copy is
            // followed, so no end slips between the two.
            self.core.resync(&key, &live).await;
        }
        Ok(events)
    }

    /// Records a task finished outside the engine (a seed `POST /tasks/send` call), so that the
    /// same task model and store hold it. Its answer does not wait for the commit: the record is
    /// bookkeeping of a stateless call (`GetTask` sees it at once all the same).
    pub async fn record(&self, tenant: &str, task: Task) -> Result<(), TaskError> {
        let bytes = artifact_bytes(&task.artifacts);
        if bytes > self.core.limits.artifact_bytes_max {
            return Err(artifacts_too_large(bytes, self.core.limits.artifact_bytes_max));
        }
        self.core.save(tenant, task, false).await
    }
}

/// Sweeps expired live tasks every `period` until the engine is gone.
async fn sweep_while_alive(core: Weak<Core>, period: Duration) {
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let Some(core) = core.upgrade() else { return };
        core.sweep().await;
    }
}

/// The size of artifacts as stored (JSON).
/// The size of `artifacts` as stored (JSON), counted as it is written rather than written out:
/// it is checked on every artifact event.
fn artifact_bytes(artifacts: &[Artifact]) -> usize {
    let mut counted = CountedBytes(0);
    serde_json::to_writer(&mut counted, artifacts).map_or(usize::MAX, |()| counted.0)
}

/// A writer that keeps only how many bytes went through it.
struct CountedBytes(usize);

impl std::io::Write for CountedBytes {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 = self.0.saturating_add(bytes.len());
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn artifacts_too_large(bytes: usize, max: usize) -> TaskError {
    TaskError::TooLarge(format!("the task's artifacts would take {bytes} bytes; at most {max} are stored"))
}

/// What a blocking `SendMessage` answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Task(Task),
    Message(Message),
}

/// Follows a turn to its answer: the agent's message, or the task once it is finished or waits
/// for the user (or as soon as it exists, with `return_immediately`).
pub async fn answer(mut events: TurnEvents, return_immediately: bool) -> Result<Answer, TaskError> {
    let mut task: Option<Task> = None;
    while let Some(event) = events.recv().await {
        match (event?, task.as_mut()) {
            (StreamResponse::Message(message), None) => return Ok(Answer::Message(message)),
            (StreamResponse::Task(snapshot), _) if return_immediately => return Ok(Answer::Task(snapshot)),
            (StreamResponse::Task(snapshot), _) => task = Some(snapshot),
            (event, Some(current)) => {
                apply(current, &event);
                if ends_stream(&event) {
                    break;
                }
            }
            (_, None) => {}
        }
    }
    task.map(Answer::Task).ok_or_else(|| TaskError::Storage("the agent ended without an answer".into()))
}

/// Whether a stream closes after this event: a status that is final for now (terminal, or
/// waiting on the user), or a message answer.
pub fn ends_stream(event: &StreamResponse) -> bool {
    match event {
        StreamResponse::Message(_) => true,
        StreamResponse::StatusUpdate(update) => {
            update.status.state.is_terminal() || update.status.state.is_interrupted()
        }
        StreamResponse::Task(_) | StreamResponse::ArtifactUpdate(_) => false,
    }
}

/// Whether the task is finished after this event (a message answer finishes the exchange).
pub fn ends_task(event: &StreamResponse) -> bool {
    match event {
        StreamResponse::Message(_) => true,
        StreamResponse::StatusUpdate(update) => update.status.state.is_terminal(),
        StreamResponse::Task(_) | StreamResponse::ArtifactUpdate(_) => false,
    }
}

fn not_cancelable(task: &Task) -> TaskError {
    TaskError::NotCancelable { id: task.id.clone(), state: state_name(task.status.state).to_owned() }
}

fn no_more_messages(task: &Task) -> TaskError {
    TaskError::Unsupported(format!("task {} is {} and takes no more messages", task.id, state_name(task.status.state)))
}

fn finished(task: &Task) -> TaskError {
    TaskError::Unsupported(format!(
        "task {} is {}: a finished task has no updates to subscribe to",
        task.id,
        state_name(task.status.state)
    ))
}

/// A message a turn can start from: from the user, with an id and content.
fn check_user_message(message: &Message) -> Result<(), TaskError> {
    if message.role != Role::User {
        return Err(TaskError::InvalidParams("the message must come from the user (ROLE_USER)".into()));
    }
    if message.message_id.is_empty() {
        return Err(TaskError::InvalidParams("message.messageId must not be empty".into()));
    }
    if message.parts.is_empty() {
        return Err(TaskError::InvalidParams("message.parts must contain at least one part".into()));
    }
    Ok(())
}

/// Makes `message` the task's next user message: its ids filled in, and added to the history,
/// which the store does not hold yet.
fn take_message(state: &mut LiveState, message: &mut Message) {
    message.task_id = Some(state.task.id.clone());
    message.context_id = Some(state.task.context_id.clone());
    add_user_message(&mut state.task, message.clone());
    state.saved = false;
}

fn status_update(task: &Task, state: TaskState, message: Option<Message>) -> StreamResponse {
    StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
        task_id: task.id.clone(),
        context_id: task.context_id.clone(),
        status: TaskStatus { state, message, timestamp: Some(now_timestamp()) },
        metadata: None,
    })
}

/// Why an event was not taken: the task is finished (say, canceled meanwhile) or the turn already
/// answered with a message. A handler may stop when it sees this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the task takes no more events")]
pub struct TaskClosed;

/// Where a handler reports its turn. Cheap to clone.
///
/// Each event is stored before it is shown (see the module's documentation). When the store
/// refuses one, the event is refused ([`TaskClosed`]) and the turn ends: the handler's
/// cancellation fires, the caller and the subscribers receive the store's error, and the task
/// leaves memory, moved to failed in the store when an earlier state of it may be there (and
/// the store takes that), or leaving nothing, its webhook config included, when none is.
#[derive(Debug, Clone)]
pub struct TaskEvents {
    core: Arc<Core>,
    key: TaskKey,
    live: Arc<LiveTask>,
    caller: mpsc::UnboundedSender<TaskUpdate>,
    /// Whether this turn has shown the task to its caller yet (or answered with a message).
    published: Arc<Mutex<bool>>,
    /// The turn started a task (rather than continuing one), so it may answer with a message.
    new_task: bool,
    /// Which of the task's turns this is (see [`LiveState::turn`]).
    turn: u64,
    /// What the caller is shown.
    follow: Follow,
    /// The id of the webhook config this turn's request stored for its new task.
    new_webhook: Option<String>,
}

impl TaskEvents {
    pub fn task_id(&self) -> &str {
        &self.key.1
    }

    /// Answers with a message and no task. Only as the turn's first event of a new task.
    pub fn reply(&self, message: Message) -> Result<(), TaskClosed> {
        let mut published = lock(&self.published);
        let mut state = lock(&self.live.state);
        if *published || state.closed || !self.new_task {
            return Err(TaskClosed);
        }
        *published = true;
        state.closed = true;
        let _ = self.caller.send(Ok(StreamResponse::Message(message)));
        Ok(())
    }

    /// Moves the task to `state`, with an agent message saying why or asking the user.
    pub async fn status(&self, state: TaskState, message: Option<&str>) -> Result<(), TaskClosed> {
        let message = message.map(|text| self.agent_message(text));
        self.status_with(state, message).await
    }

    /// [`Self::status`] with a message of any parts.
    pub async fn status_with(&self, state: TaskState, message: Option<Message>) -> Result<(), TaskClosed> {
        let update = status_update(&lock(&self.live.state).task, state, message);
        self.emit(update).await
    }

    /// Adds an artifact, or a chunk of one (`append`), the last when `last_chunk`.
    pub async fn artifact(&self, artifact: Artifact, append: bool, last_chunk: bool) -> Result<(), TaskClosed> {
        let (task_id, context_id) = self.key_and_context();
        let update = StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
            task_id,
            context_id,
            artifact,
            append,
            last_chunk,
            metadata: None,
        });
        self.emit(update).await
    }

    /// A message from the agent, with this turn's task and context.
    pub fn agent_message(&self, text: &str) -> Message {
        let (task_id, context_id) = self.key_and_context();
        let mut message = Message::text(Role::Agent, new_id(), text);
        message.task_id = Some(task_id);
        message.context_id = Some(context_id);
        message
    }

    /// [`Self::agent_message`] for a caller holding the task's state already.
    fn agent_message_in(&self, task: &Task, text: &str) -> Message {
        let mut message = Message::text(Role::Agent, new_id(), text);
        message.task_id = Some(task.id.clone());
        message.context_id = Some(task.context_id.clone());
        message
    }

    fn key_and_context(&self) -> (String, String) {
        (self.key.1.clone(), lock(&self.live.state).task.context_id.clone())
    }

    async fn emit(&self, event: StreamResponse) -> Result<(), TaskClosed> {
        let _change = self.live.changes.lock().await;
        let mut refused = false;
        let (next, first, event, push, watched) = {
            let published = lock(&self.published);
            let state = lock(&self.live.state);
            if state.closed || state.turn != self.turn {
                return Err(TaskClosed);
            }
            // An artifact past the cap is not stored: the task fails saying why instead.
            let event = match &event {
                StreamResponse::ArtifactUpdate(update) => {
                    let mut artifacts = state.task.artifacts.clone();
                    apply_artifact(&mut artifacts, update);
                    let (bytes, max) = (artifact_bytes(&artifacts), self.core.limits.artifact_bytes_max);
                    if bytes > max {
                        refused = true;
                        let reason = artifacts_too_large(bytes, max).to_string();
                        tracing::warn!(task = %self.key.1, %reason, "artifact refused; the task fails");
                        status_update(&state.task, TaskState::Failed, Some(self.agent_message_in(&state.task, &reason)))
                    } else {
                        event
                    }
                }
                _ => event,
            };
            let mut next = state.task.clone();
            apply(&mut next, &event);
            let first = (!*published).then(|| state.task.clone());
            // Seen before the turn ends, by anyone but a caller waiting for its answer.
            let watched = self.follow == Follow::Events
                || !state.subscribers.is_empty()
                || state.push
                || self.core.store.shares_events();
            (next, first, event, state.push, watched)
        };
        let task_state = next.status.state;
        let terminal = task_state.is_terminal();
        let ends_turn = terminal || task_state.is_interrupted();
        // Stored before anyone hears of it. The turn's end, and any change someone watches, as
        // safely as the store's durability makes a save (committed, in the default `durable`);
        // the steps nobody watches in the background, stored with the end at the latest.
        let awaited = ends_turn || watched;
        if let Err(error) = self.core.save(&self.key.0, next, awaited).await {
            self.abandon(error).await;
            return Err(TaskClosed);
        }
        {
            let mut published = lock(&self.published);
            let mut state = lock(&self.live.state);
            if state.closed {
                // Ended meanwhile on another replica (canceled there): that end stands.
                return Err(TaskClosed);
            }
            *published = true;
            // The state just stored: nothing else changes a running task's state meanwhile.
            apply(&mut state.task, &event);
            state.touched = Instant::now();
            (state.stored, state.saved) = (true, awaited);
            state.closed = terminal;
            if ends_turn {
                state.running = false;
            }
        }
        if first.is_some() {
            lock(&self.core.live).entry(self.key.clone()).or_insert_with(|| self.live.clone());
        }
        if push {
            // Queued once their state is stored: no notification tells of a state the store
            // does not hold.
            let mut events = Vec::with_capacity(2);
            events.extend(first.clone().map(StreamResponse::Task));
            events.push(event.clone());
            self.core.notify_webhooks(&self.key, &events).await;
        }
        if let Some(first) = first {
            let _ = self.caller.send(Ok(StreamResponse::Task(first)));
        }
        self.core.store.publish(&self.key.0, &self.key.1, &event).await;
        let mut state = lock(&self.live.state);
        state.subscribers.retain(|subscriber| subscriber.send(Ok(event.clone())).is_ok());
        let _ = self.caller.send(Ok(event));
        if terminal {
            // Dropping the senders ends the subscribers' streams.
            state.subscribers.clear();
            drop(state);
            self.core.forget(&self.key, &self.live);
        }
        if refused { Err(TaskClosed) } else { Ok(()) }
    }

    /// Ends the turn on a change the store refused (see [`TaskEvents`]); the caller holds the
    /// task's `changes`.
    async fn abandon(&self, error: TaskError) {
        tracing::error!(task = %self.key.1, %error, "could not store the task; its turn ends");
        let (subscribers, failed) = {
            let mut state = lock(&self.live.state);
            state.closed = true;
            state.running = false;
            let failed = state.stored.then(|| {
                let reason = "the agent could not store the task's state; the task was stopped";
                let message = self.agent_message_in(&state.task, reason);
                let mut task = state.task.clone();
                apply(&mut task, &status_update(&state.task, TaskState::Failed, Some(message)));
                task
            });
            (std::mem::take(&mut state.subscribers), failed)
        };
        self.live.cancellation.cancel();
        self.core.forget(&self.key, &self.live);
        // Recorded before the error is told, so that the caller then reads the task as it stays.
        let recorded = match (failed, &self.new_webhook) {
            (Some(failed), _) => self.core.save(&self.key.0, failed, true).await,
            (None, Some(config_id)) => self.core.store.delete_push_config(&self.key.0, &self.key.1, config_id).await,
            (None, None) => Ok(()),
        };
        if let Err(error) = recorded {
            tracing::error!(task = %self.key.1, %error, "could not record the end of a task the store refused");
        }
        for subscriber in subscribers {
            let _ = subscriber.send(Err(error.clone()));
        }
        let _ = self.caller.send(Err(error));
    }

    /// After the handler returned (or panicked): a turn that did not reach a final state fails.
    async fn end_turn(&self, reason: &str) {
        let (current, unfinished) = {
            let state = lock(&self.live.state);
            (state.turn == self.turn, !state.closed && !state.task.status.state.is_interrupted())
        };
        if !current {
            // The task asked for input and the next message already started the next turn.
            tracing::debug!(task = %self.key.1, turn = self.turn, "a turn ended after the next one started; the task is left to it");
            return;
        }
        if unfinished {
            let _ = self.status(TaskState::Failed, Some(reason)).await;
        }
        let mut state = lock(&self.live.state);
        if state.turn == self.turn {
            state.running = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifact_bytes_are_those_of_their_json() {
        let artifacts: Vec<Artifact> = serde_json::from_value(serde_json::json!([
            {"artifactId": "a1", "parts": [{"text": "héllo"}]},
            {"artifactId": "a2", "name": "n", "parts": [{"data": {"rows": [1, 2]}}]}
        ]))
        .unwrap();
        assert_eq!(artifact_bytes(&artifacts), serde_json::to_vec(&artifacts).unwrap().len());
        assert_eq!(artifact_bytes(&[]), 2, "an empty list is []");
    }

    #[test]
    fn only_user_messages_with_ids_and_parts_start_turns() {
        let ok = Message::text(Role::User, "m1", "hi");
        assert!(check_user_message(&ok).is_ok());
        let agent = Message { role: Role::Agent, ..ok.clone() };
        let no_id = Message { message_id: String::new(), ..ok.clone() };
        let no_parts = Message { parts: Vec::new(), ..ok };
        for bad in [agent, no_id, no_parts] {
            assert!(matches!(check_user_message(&bad), Err(TaskError::InvalidParams(_))), "{bad:?}");
        }
    }
}
