//! The seed 001 loop of one LLM agent, on its own topic and docmem.
//!
//! A message from someone else on the topic (a user through the UI agent, an A2A caller through
//! [`AgentRuntime::submit`], another agent) starts a round: the role-relative message list is
//! rebuilt from the conversation, and the model called. A final answer becomes the agent's own
//! node and `append` record. Tool calls become the agent's own node (the calls as text, action
//! `tool_invoke`, one `tool_call` child node per call keeping name and arguments); each tool runs
//! and its output becomes a `text:agent:tool` node with an `append` record from agent `tool`,
//! whose `correlation_id` is the invoking node. When the last output of a round has come back
//! through the topic, like any record, the next round calls the model with the outputs as `user`
//! messages.
//!
//! Replayable: every node a round writes has an id derived from what started it (the answer to
//! node `n` is `answer_node_id(me, n)`, the outputs of invoking node `x` derive from `x`), and
//! docmem is asked before anything runs. A record delivered again after a restart finds its
//! answer, or its tool outputs, written: no model call or tool runs twice, and an interrupted
//! round finishes the tools it had not run. The consumer commits, in each partition, only past
//! records whose work is done. Conversations run side by side, each in order, on workers of their
//! own. When the group moves partitions between instances, each worker reads its conversation
//! afresh: the instance that held it meanwhile may have moved it on.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mesh_agent_kit::{A2A_CLIENT_SENDER, TaskInput};
use mesh_bus::{
    ACTION_APPEND, ACTION_CREATE, BusError, BusRecord, ChatMessage, CommitTracker, ConversationCache, Delivered,
    DoneOffsets, SharedBus, TOOL_AGENT_ID, answer_node_id, consumer_group, conversation_root_context,
    conversation_topic,
};
use mesh_client::CallScope;
use mesh_docmem::{CONTEXT_NAME_AGENT, Context, Docmem, DocmemError, NewChild, Node};
use mesh_graph::{LinkCache, LinkContext};
use mesh_protocol::call::CallContext;
use mesh_protocol::graph::LINK_CONTEXT_PREFIX;
use mesh_protocol::handoff::Handoff;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;

use crate::definition::Limits;
use crate::error::TurnError;
use crate::history;
use crate::model::{ChatModel, ModelError, ModelReply, ModelRequest, ToolCall};
use crate::prompt::{HandoffPromptContext, LinkPromptContext, OrgContext, PromptContext, PromptTool, Prompts};
use crate::tools::Toolbox;
use crate::waiters::{Answer, Waiters};

/// The action of the agent's node that calls tools (seed 001 names it).
pub const ACTION_TOOL_INVOKE: &str = "tool_invoke";
/// Context type of the child nodes keeping a round's calls: `tool_call:{tool}:{call id}`.
pub const TOOL_CALL_CONTEXT_TYPE: &str = "tool_call";
/// The name of the child node standing for the calls past the round's bound.
const SKIPPED_CALLS: &str = "skipped";
/// The record header naming the message whose answer a round works towards.
pub const TURN_ORIGIN_HEADER: &str = "x-mesh-turn-origin";
/// The record header carrying the turn's handoff context (seed 003) as JSON, when another agent
/// handed the work over: its rounds' prompts show it, and their calls pass it on.
pub const HANDOFF_HEADER: &str = "x-mesh-handoff";
/// Largest tool arguments kept (in the call's child node and the invoking node's text).
const TOOL_ARGUMENTS_BYTES_MAX: usize = 8 * 1024;
/// Longest tool name or call id kept from a model's answer.
const TOOL_CALL_FIELD_CHARS_MAX: usize = 64;
/// Model rounds one agent runs at once; more wait their turn.
pub const ROUNDS_CONCURRENT_MAX: usize = 64;
/// Records queued for one conversation's worker before the consumer waits.
const WORKER_QUEUE_RECORDS: usize = 256;
/// Attempts at one record whose docmem or bus work failed, before the consumer starts over.
const RECORD_ATTEMPTS_MAX: u32 = 3;
const RECORD_RETRY_DELAY_MS: u64 = 200;
/// Wait before a consumer that failed starts over.
const RESTART_DELAY_MS: u64 = 1_000;

/// Fixed namespaces of derived ids (UUID v5), so every process derives the same ones.
const TOOL_NODE_ID_NAMESPACE: uuid::Uuid = uuid::Uuid::from_u128(0x6c6c_6d2d_6167_656e_742d_746f_6f6c_7331);
const CONVERSATION_ID_NAMESPACE: uuid::Uuid = uuid::Uuid::from_u128(0x6c6c_6d2d_6167_656e_742d_636f_6e76_3031);
const MESSAGE_ID_NAMESPACE: uuid::Uuid = uuid::Uuid::from_u128(0x6c6c_6d2d_6167_656e_742d_6d73_6773_3031);

/// The node keeping call `index` of the round `invoke` started.
pub fn call_node_id(invoke: &str, index: usize) -> String {
    uuid::Uuid::new_v5(&TOOL_NODE_ID_NAMESPACE, format!("call\n{invoke}\n{index}").as_bytes()).to_string()
}

/// The `text:agent:tool` node of call `index`'s output.
pub fn output_node_id(invoke: &str, index: usize) -> String {
    uuid::Uuid::new_v5(&TOOL_NODE_ID_NAMESPACE, format!("output\n{invoke}\n{index}").as_bytes()).to_string()
}

/// Everything an agent's loop needs.
#[derive(Debug)]
pub struct AgentSetup {
    /// The name it registers under (links and call chains name it so).
    pub name: String,
    /// Its id on the bus, `{name}-{instance}`: its topic, and the sender of its records.
    pub bus_id: String,
    pub role: String,
    pub model_name: String,
    pub limits: Limits,
    pub bus: SharedBus,
    pub docmem: Docmem,
    pub model: Arc<dyn ChatModel>,
    pub prompts: Arc<Prompts>,
    pub toolbox: Toolbox,
    /// The links the registry's policy feed keeps current (no organisation without them).
    pub links: Option<Arc<LinkCache>>,
    pub conversations_max: usize,
}

/// One LLM agent's loop.
#[derive(Debug)]
pub struct AgentRuntime {
    setup: AgentSetup,
    topic: String,
    waiters: Waiters,
    rounds: Semaphore,
}

/// One tool call as kept in docmem.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KeptCall {
    name: String,
    arguments: String,
}

/// A conversation as its worker holds it.
#[derive(Debug)]
struct ConversationState {
    root: Node,
    cache: ConversationCache,
    /// Output count of each round whose invoking record came by.
    rounds: HashMap<String, usize>,
    /// Nodes whose records this worker consumed: what need not be announced again.
    consumed: HashSet<String>,
    /// Rounds this worker started (by the node they answer): a record seen again starts none.
    started: HashSet<String>,
}

/// The round under way: the node it will write (`response`), the node it answers (`trigger`),
/// the message whose answer the turn works towards (`origin`), and the call its tools act in.
#[derive(Debug)]
struct Round<'a> {
    response: String,
    trigger: &'a str,
    origin: &'a str,
    scope: &'a CallScope,
}

/// A conversation's worker, as the consumer sees it.
#[derive(Debug)]
struct Worker {
    queue: mpsc::Sender<Queued>,
    /// Records queued or in work: an idle worker may be let go.
    busy: Arc<AtomicUsize>,
}

/// A record for a conversation's worker, with the consumer's assignment generation when it came.
struct Queued {
    delivered: Delivered,
    generation: u64,
}

/// A record's partition and offset, and how its work ended.
type Done = mpsc::UnboundedSender<(i32, i64, Result<(), BusError>)>;

/// A batch as the topic's reader hands it over, with the consumer's assignment generation.
type Batch = (Vec<Delivered>, u64);

impl AgentRuntime {
    pub fn new(setup: AgentSetup) -> Self {
        let topic = mesh_bus::agent_topic(&setup.bus_id);
        Self { setup, topic, waiters: Waiters::default(), rounds: Semaphore::new(ROUNDS_CONCURRENT_MAX) }
    }

    pub fn name(&self) -> &str {
        &self.setup.name
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Creates the agent's topic unless it exists.
    pub async fn ensure_topic(&self) -> Result<(), BusError> {
        self.setup.bus.ensure_topic(&self.topic).await
    }

    /// An A2A (or seed) turn: the message joins its conversation on this agent's topic, as a
    /// node and a record, and the caller waits for the loop's answer (at most the call's
    /// deadline, or `turn_timeout_ms`).
    pub async fn submit(&self, task: &TaskInput) -> Result<Answer, TurnError> {
        let context = task.call.context();
        let tenant = context.tenant.clone().unwrap_or_default();
        let text = message_text(task)?;
        let root = self.conversation_for(&tenant, context.context_id.as_deref(), task.link.as_ref()).await?;
        let sender = context.chain.last().map_or(A2A_CLIENT_SENDER, String::as_str);
        let message_id =
            uuid::Uuid::new_v5(&MESSAGE_ID_NAMESPACE, format!("{}\n{}", root.id, task.task_id).as_bytes()).to_string();
        let mut wait = self
            .waiters
            .wait(&message_id)
            .ok_or_else(|| TurnError::Conversation("too many callers wait for answers: try again later".into()))?;
        let conversation = |e: DocmemError| TurnError::Conversation(format!("the conversation {}: {e}", root.id));
        let node = self
            .setup
            .docmem
            .append_child_with_id(&message_id, &root.id, &Context::agent_text(sender), &text)
            .await
            .map_err(conversation)?;
        let action = if node.position == 0 { ACTION_CREATE } else { ACTION_APPEND };
        let mut record = BusRecord::message(sender, &root.id, &message_id, action);
        record.headers.extend(turn_headers(&task.call, &message_id));
        self.setup
            .bus
            .produce(&self.topic, &record)
            .await
            .map_err(|e| TurnError::Conversation(format!("the agent's topic: {e}")))?;
        let limit = Duration::from_millis(self.setup.limits.turn_timeout_ms);
        let limit = task.call.time_left().map_or(limit, |left| left.min(limit));
        match tokio::time::timeout(limit, &mut wait.answer).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(TurnError::Conversation("the agent stopped before answering".into())),
            Err(_) => Err(TurnError::Timeout { timeout_ms: u64::try_from(limit.as_millis()).unwrap_or(u64::MAX) }),
        }
    }

    /// The conversation an A2A turn joins: a link's own (`link:{id}`), the bus conversation its
    /// `contextId` names on this topic (a UI conversation), or one of this tenant's derived from
    /// its `contextId` (so the turns of one A2A context share a history); made when new.
    async fn conversation_for(
        &self,
        tenant: &str,
        context_id: Option<&str>,
        link: Option<&LinkContext>,
    ) -> Result<Node, TurnError> {
        let docmem = &self.setup.docmem;
        let derived = |key: &str| uuid::Uuid::new_v5(&CONVERSATION_ID_NAMESPACE, format!("{tenant}\n{key}").as_bytes());
        let (root_id, content) = match (link, context_id) {
            (Some(link), _) => (derived(&link.context_id()).to_string(), link.context_id()),
            (None, Some(context_id)) => match docmem.get(context_id).await {
                Ok(root) if conversation_topic(&root) == Some(self.topic.as_str()) && root.tenant == tenant => {
                    return Ok(root);
                }
                _ => (derived(context_id).to_string(), String::new()),
            },
            (None, None) => (uuid::Uuid::now_v7().to_string(), String::new()),
        };
        let unavailable = |e: DocmemError| TurnError::Conversation(format!("the conversation {root_id}: {e}"));
        match docmem.get(&root_id).await {
            Ok(root) => return Ok(root),
            Err(DocmemError::NotFound(_)) => {}
            Err(error) => return Err(unavailable(error)),
        }
        let context = conversation_root_context(&self.topic);
        match docmem.create_root_with_id(&root_id, tenant, &context, &content).await {
            Ok(root) => Ok(root),
            // Made meanwhile by another turn of the same context.
            Err(error) => docmem.get(&root_id).await.map_err(|_| unavailable(error)),
        }
    }

    /// Consumes the topic until `stop` turns true, starting over after a failure.
    pub async fn run_until(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        loop {
            match self.consume(stop.clone()).await {
                Ok(()) => return,
                Err(error) => {
                    tracing::warn!(agent = %self.setup.bus_id, %error, "the LLM agent's consumer failed; starting over");
                }
            }
            tokio::select! {
                () = stopped(&mut stop) => return,
                () = tokio::time::sleep(Duration::from_millis(RESTART_DELAY_MS)) => {}
            }
        }
    }

    /// One run of the consumer: records go to their conversation's worker in offset order; the
    /// group's offset moves only past records whose work is done. `Ok` when stopped.
    async fn consume(self: &Arc<Self>, mut stop: watch::Receiver<bool>) -> Result<(), BusError> {
        let bus = &self.setup.bus;
        bus.ensure_topic(&self.topic).await?;
        let consumer = bus.consumer(&self.topic, &consumer_group(&self.setup.bus_id)).await?;
        let (batches, mut batches_in) = mpsc::channel(1);
        let (commits, commits_in) = watch::channel(DoneOffsets::default());
        let (reader_stop, reader_stopped) = watch::channel(false);
        let reader = tokio::spawn(read(consumer, batches, commits_in, reader_stopped));
        let (done, mut done_in) = mpsc::unbounded_channel();
        let mut workers: HashMap<String, Worker> = HashMap::new();
        let mut tasks = JoinSet::new();
        let mut tracker = CommitTracker::default();
        let outcome = loop {
            tokio::select! {
                () = stopped(&mut stop) => break Ok(()),
                batch = batches_in.recv() => {
                    let Some((batch, generation)) = batch else { break Ok(()) };
                    for delivered in batch {
                        tracker.started(delivered.partition, delivered.offset);
                        self.dispatch(Queued { delivered, generation }, &mut workers, &mut tasks, &done).await;
                    }
                }
                Some((partition, offset, result)) = done_in.recv() => {
                    tracker.finished(partition, offset);
                    if let Err(error) = result {
                        break Err(error);
                    }
                }
            }
            while tasks.try_join_next().is_some() {}
            let upto = tracker.committable();
            commits.send_if_modified(|committed| upto.is_ahead_of(committed).then(|| *committed = upto).is_some());
        };
        // Work under way stops here; its records were not committed and come again.
        tasks.shutdown().await;
        // A reader waiting to hand over a batch sees nobody takes it, commits and ends.
        drop(batches_in);
        let _ = reader_stop.send(true);
        let read = reader.await.map_err(|e| BusError::Handler(format!("the topic reader: {e}")))?;
        outcome.and(read)
    }

    /// Queues a record on its conversation's worker, starting one when there is none; idle
    /// workers beyond `conversations_max` are let go (their caches rebuild from docmem).
    async fn dispatch(
        self: &Arc<Self>,
        queued: Queued,
        workers: &mut HashMap<String, Worker>,
        tasks: &mut JoinSet<()>,
        done: &Done,
    ) {
        let id = queued.delivered.record.conversation_id.clone();
        if !workers.contains_key(&id) {
            if workers.len() >= self.setup.conversations_max {
                workers.retain(|_, worker| worker.busy.load(Ordering::Acquire) > 0);
            }
            let (queue, queued) = mpsc::channel(WORKER_QUEUE_RECORDS);
            let busy = Arc::new(AtomicUsize::new(0));
            tasks.spawn(self.clone().work(id.clone(), queued, busy.clone(), done.clone()));
            workers.insert(id.clone(), Worker { queue, busy });
        }
        let worker = &workers[&id];
        worker.busy.fetch_add(1, Ordering::AcqRel);
        let (partition, offset) = (queued.delivered.partition, queued.delivered.offset);
        if worker.queue.send(queued).await.is_err() {
            let stopped = BusError::Handler(format!("the worker of conversation {id} stopped"));
            let _ = done.send((partition, offset, Err(stopped)));
        }
    }

    /// One conversation's worker: its records in order, each retried a few times.
    async fn work(self: Arc<Self>, id: String, mut queued: mpsc::Receiver<Queued>, busy: Arc<AtomicUsize>, done: Done) {
        let mut state = None;
        let mut state_generation = None;
        while let Some(Queued { delivered, generation }) = queued.recv().await {
            if state_generation != Some(generation) {
                // Partitions moved since the state was read (or it never was): read it afresh.
                state = None;
                state_generation = Some(generation);
            }
            let mut attempt = 1;
            let result = loop {
                match self.process(&mut state, &id, &delivered.record).await {
                    Ok(()) => break Ok(()),
                    Err(error) if attempt < RECORD_ATTEMPTS_MAX => {
                        tracing::warn!(conversation = %id, offset = delivered.offset, %error, "retrying a record");
                        // Read the conversation again: what failed may have left it half changed.
                        state = None;
                        attempt += 1;
                        tokio::time::sleep(Duration::from_millis(RECORD_RETRY_DELAY_MS)).await;
                    }
                    Err(error) => break Err(error),
                }
            };
            busy.fetch_sub(1, Ordering::AcqRel);
            let _ = done.send((delivered.partition, delivered.offset, result));
        }
    }

    /// Applies one record and, when it completes someone else's message or a tool round, runs
    /// the round it starts.
    async fn process(
        &self,
        state: &mut Option<ConversationState>,
        id: &str,
        record: &BusRecord,
    ) -> Result<(), BusError> {
        let docmem = &self.setup.docmem;
        if state.is_none() {
            let root = match docmem.get(id).await {
                Ok(root) => root,
                // A conversation deleted since (retention): nothing left to answer.
                Err(DocmemError::NotFound(_)) => return Ok(()),
                Err(error) => return Err(error.into()),
            };
            let cache = ConversationCache::from_docmem(docmem, id).await?;
            *state = Some(ConversationState {
                root,
                cache,
                rounds: HashMap::new(),
                consumed: HashSet::new(),
                started: HashSet::new(),
            });
        }
        let state = state.as_mut().expect("loaded above");
        let node = match docmem.get(&record.node_id).await {
            Ok(node) => Some(node),
            Err(DocmemError::NotFound(_)) => None,
            Err(error) => return Err(error.into()),
        };
        state.cache.apply(record, node.as_ref());
        state.consumed.insert(record.node_id.clone());
        let me = self.setup.bus_id.as_str();
        if record.agent_id == me {
            if record.action == ACTION_TOOL_INVOKE {
                let outputs = record.command.as_ref().map_or(0, Vec::len);
                state.rounds.insert(record.node_id.clone(), outputs);
            }
            return Ok(());
        }
        if node.is_none() {
            return Ok(());
        }
        let trigger = if record.agent_id == TOOL_AGENT_ID {
            let Some(invoke) = record.correlation_id.clone() else { return Ok(()) };
            let outputs = match state.rounds.get(&invoke) {
                Some(&outputs) => outputs,
                None => self.calls_of(&state.root.id, &invoke).await?.len(),
            };
            let complete = outputs > 0 && (0..outputs).all(|i| state.cache.contains(&output_node_id(&invoke, i)));
            if !complete {
                return Ok(());
            }
            invoke
        } else if record.action == ACTION_CREATE || record.action == ACTION_APPEND {
            record.node_id.clone()
        } else {
            return Ok(());
        };
        if !state.started.insert(trigger.clone()) {
            return Ok(());
        }
        let origin = record.headers.get(TURN_ORIGIN_HEADER).cloned().unwrap_or_else(|| trigger.clone());
        let scope = self.scope_of(record, &state.root, &state.cache, &origin);
        let started = Instant::now();
        let root =
            mesh_telemetry::Root::start(&self.setup.name, mesh_telemetry::extract_fields(&record.headers), || {
                tracing::info_span!(
                    "llm_round",
                    otel.name = %format!("invoke_agent {}", self.setup.name),
                    otel.kind = "server",
                    a2a.context_id = %record.conversation_id,
                    gen_ai.operation.name = "invoke_agent",
                    gen_ai.agent.name = %self.setup.name,
                    gen_ai.request.model = %self.setup.model_name,
                    mesh.sender = %record.agent_id,
                )
            });
        let outcome = root.instrument(self.round(state, &trigger, &origin, &scope)).await;
        metrics::histogram!("mesh_llm_agent_round_duration_seconds", "agent" => self.setup.name.clone())
            .record(started.elapsed().as_secs_f64());
        outcome
    }

    /// The call scope a round's tools act in: the one the turn's first record carried (chain,
    /// depth, deadline, handoff), in the conversation's tenant, whatever a header claims. A turn
    /// no agent handed over starts its own handoff context: this conversation, and the message
    /// `origin` that started the turn as the original request.
    fn scope_of(&self, record: &BusRecord, root: &Node, cache: &ConversationCache, origin: &str) -> CallScope {
        let headers = &record.headers;
        let mut context = CallContext::from_headers(|name| headers.get(name).map(String::as_str)).unwrap_or_default();
        context.tenant = Some(root.tenant.clone()).filter(|tenant| !tenant.is_empty());
        context.context_id = Some(root.id.clone());
        let handoff = headers
            .get(HANDOFF_HEADER)
            .and_then(|json| serde_json::from_str::<Handoff>(json).ok())
            .unwrap_or_else(|| Handoff {
                session_id: Some(root.id.clone()),
                original_request: cache
                    .messages()
                    .iter()
                    .rev()
                    .find(|m| m.node_id == origin)
                    .map(|m| m.content.clone()),
                ..Handoff::default()
            });
        CallScope::received(self.setup.name.clone(), context).with_handoff(Some(handoff.bounded()))
    }

    /// The round that answers node `trigger` (someone's message, or a round whose outputs all
    /// came back), unless docmem shows it ran: then only what it left undone is done.
    async fn round(
        &self,
        state: &mut ConversationState,
        trigger: &str,
        origin: &str,
        scope: &CallScope,
    ) -> Result<(), BusError> {
        let me = self.setup.bus_id.as_str();
        let response = answer_node_id(me, trigger);
        let round = Round { response: response.clone(), trigger, origin, scope };
        let written: HashMap<String, Node> = self
            .setup
            .docmem
            .get_many(&[response.clone(), call_node_id(&response, 0)])
            .await?
            .into_iter()
            .map(|node| (node.id.clone(), node))
            .collect();
        match written.get(&response) {
            Some(_) if written.contains_key(&call_node_id(&response, 0)) => {
                let calls = self.calls_of(&state.root.id, &response).await?;
                self.run_calls(state, &response, origin, scope, &calls).await
            }
            Some(answer) => {
                // Answered before (a record delivered again): announced again unless its record
                // came by, and handed to a caller still waiting here.
                if !state.consumed.contains(&response) {
                    self.produce(state, &round, me, ACTION_APPEND, None).await?;
                }
                self.waiters.answer(origin, Ok(Answer::from_model(&answer.content, Vec::new())));
                Ok(())
            }
            None => self.ask_model(state, &round).await,
        }
    }

    /// Calls the model and writes what it answered: a final answer, or a tool round.
    async fn ask_model(&self, state: &mut ConversationState, round: &Round<'_>) -> Result<(), BusError> {
        let me = self.setup.bus_id.as_str();
        let limits = &self.setup.limits;
        let rounds_done = tool_rounds_since_origin(&state.cache, me);
        let tools_allowed = rounds_done < limits.tool_rounds_max;
        let tools = if tools_allowed { self.setup.toolbox.offered(&self.setup.name) } else { Vec::new() };
        let system = self.system_prompt(&state.root, &tools, round.scope.handoff());
        let request = ModelRequest { system, messages: self.history(state).await?, tools };
        let reply = {
            let _turn = self.rounds.acquire().await.map_err(|e| BusError::Handler(e.to_string()))?;
            let timeout = Duration::from_millis(limits.llm_timeout_ms);
            match tokio::time::timeout(timeout, self.setup.model.complete(request)).await {
                Ok(reply) => reply,
                Err(_) => Err(ModelError::Timeout { timeout_ms: limits.llm_timeout_ms }),
            }
        };
        let outcome = match &reply {
            Ok(reply) if reply.tool_calls.is_empty() => "answer",
            Ok(_) if tools_allowed => "tool_calls",
            Ok(_) => "rounds_exhausted",
            Err(ModelError::Timeout { .. }) => "timeout",
            Err(_) => "error",
        };
        metrics::counter!("mesh_llm_agent_rounds_total", "agent" => self.setup.name.clone(), "outcome" => outcome)
            .increment(1);
        match reply {
            Err(error) => {
                // The conversation says what went wrong; the caller gets an ERROR or TIMEOUT.
                let text = format!("error: {error}");
                self.write_answer(state, round, &text).await?;
                let failure = match error {
                    ModelError::Timeout { .. } => TurnError::ModelTimeout(error.to_string()),
                    _ => TurnError::Model(error.to_string()),
                };
                self.waiters.answer(round.origin, Err(failure));
                Ok(())
            }
            Ok(reply) if reply.tool_calls.is_empty() || !tools_allowed => {
                self.answer(state, round, reply, rounds_done).await
            }
            Ok(reply) => self.invoke(state, round, reply).await,
        }
    }

    /// Writes the model's final answer, bounded, and hands it to a waiting caller.
    async fn answer(
        &self,
        state: &mut ConversationState,
        round: &Round<'_>,
        reply: ModelReply,
        rounds_done: usize,
    ) -> Result<(), BusError> {
        let limits = &self.setup.limits;
        let mut warnings = Vec::new();
        let mut text = reply.text;
        if !reply.tool_calls.is_empty() {
            warnings.push(format!("the turn stopped after {rounds_done} tool rounds, the most it may take"));
            if text.trim().is_empty() {
                text = format!("I stopped after {rounds_done} rounds of tool calls without reaching an answer.");
            }
        }
        if text.trim().is_empty() {
            let error = "the language model answered with neither text nor tool calls";
            self.write_answer(state, round, &format!("error: {error}")).await?;
            self.waiters.answer(round.origin, Err(TurnError::Model(error.into())));
            return Ok(());
        }
        if let Some(cut) = history::cut_to(&text, limits.answer_bytes_max) {
            warnings.push(format!("the answer was cut to {} of its {} bytes", cut.len(), text.len()));
            text = cut.to_owned();
        }
        // The conversation keeps what the model wrote; the caller gets the text and its confidence.
        self.write_answer(state, round, &text).await?;
        self.waiters.answer(round.origin, Ok(Answer::from_model(&text, warnings)));
        Ok(())
    }

    /// The agent's own node `response` holding `text`, and its record.
    async fn write_answer(&self, state: &ConversationState, round: &Round<'_>, text: &str) -> Result<(), BusError> {
        let me = self.setup.bus_id.as_str();
        self.setup.docmem.append_child_with_id(&round.response, &state.root.id, &Context::agent_text(me), text).await?;
        self.produce(state, round, me, ACTION_APPEND, None).await
    }

    /// A tool round: the invoking node with one child per call (one transaction), its record,
    /// then the calls.
    async fn invoke(
        &self,
        state: &mut ConversationState,
        round: &Round<'_>,
        reply: ModelReply,
    ) -> Result<(), BusError> {
        let me = self.setup.bus_id.as_str();
        let response = round.response.as_str();
        let bound = self.setup.limits.tool_calls_per_round_max;
        let mut calls: Vec<KeptCall> = reply
            .tool_calls
            .iter()
            .take(bound)
            .map(|call| KeptCall {
                name: cut_chars(&call.name, TOOL_CALL_FIELD_CHARS_MAX),
                arguments: history::cut_to(&call.arguments, TOOL_ARGUMENTS_BYTES_MAX)
                    .unwrap_or(&call.arguments)
                    .to_owned(),
            })
            .collect();
        let call_ids: Vec<String> =
            reply.tool_calls.iter().take(bound).map(|call| cut_chars(&call.id, TOOL_CALL_FIELD_CHARS_MAX)).collect();
        let skipped = reply.tool_calls.len().saturating_sub(bound);
        if skipped > 0 {
            calls.push(KeptCall { name: SKIPPED_CALLS.into(), arguments: skipped.to_string() });
        }
        let mut text =
            history::cut_to(&reply.text, self.setup.limits.answer_bytes_max).unwrap_or(&reply.text).to_owned();
        for call in &calls {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&format!("Calling {} {}", call.name, call.arguments));
        }
        let mut nodes = vec![NewChild {
            id: response.to_owned(),
            parent_id: state.root.id.clone(),
            context: Context::agent_text(me),
            content: text,
        }];
        for (index, call) in calls.iter().enumerate() {
            let value = call_ids.get(index).cloned().unwrap_or_default();
            nodes.push(NewChild {
                id: call_node_id(response, index),
                parent_id: response.to_owned(),
                context: Context { kind: TOOL_CALL_CONTEXT_TYPE.into(), name: call.name.clone(), value },
                content: call.arguments.clone(),
            });
        }
        self.setup.docmem.append_many(&nodes).await?;
        let names: Vec<String> = calls.iter().map(|call| call.name.clone()).collect();
        self.produce(state, round, me, ACTION_TOOL_INVOKE, Some(names)).await?;
        self.run_calls(state, response, round.origin, round.scope, &calls).await
    }

    /// Runs the calls of round `invoke` whose outputs are not written yet, writing each output as
    /// it comes, then announces every output whose record has not come by.
    async fn run_calls(
        &self,
        state: &ConversationState,
        invoke: &str,
        origin: &str,
        scope: &CallScope,
        calls: &[KeptCall],
    ) -> Result<(), BusError> {
        let ids: Vec<String> = (0..calls.len()).map(|i| output_node_id(invoke, i)).collect();
        let written: HashSet<String> =
            self.setup.docmem.get_many(&ids).await?.into_iter().map(|node| node.id).collect();
        let runs = calls.iter().enumerate().filter(|(i, _)| !written.contains(&ids[*i])).map(|(index, call)| {
            let id = ids[index].clone();
            async move {
                let output = self.run_call(scope, call).await;
                let content = format!("Result of {}:\n{output}", call.name);
                self.setup
                    .docmem
                    .append_child_with_id(&id, &state.root.id, &Context::agent_text(TOOL_AGENT_ID), &content)
                    .await
            }
        });
        for written in futures::future::join_all(runs).await {
            written?;
        }
        let records: Vec<BusRecord> = ids
            .iter()
            .filter(|id| !state.consumed.contains(*id))
            .map(|id| {
                let mut record = BusRecord::message(TOOL_AGENT_ID, &state.root.id, id, ACTION_APPEND);
                record.conversation_id.clone_from(&state.root.id);
                record.correlation_id = Some(invoke.to_owned());
                record.headers.extend(turn_headers(scope, origin));
                record
            })
            .collect();
        self.setup.bus.produce_many(&self.topic, &records).await?;
        Ok(())
    }

    /// One call's output (or tool error), bounded.
    async fn run_call(&self, scope: &CallScope, call: &KeptCall) -> String {
        let bound = self.setup.limits.tool_calls_per_round_max;
        let (text, outcome) = if call.name == SKIPPED_CALLS {
            let count = call.arguments.as_str();
            (format!("error: {count} further tool calls were not run: at most {bound} run per answer"), "skipped")
        } else {
            let model_call = ToolCall { id: String::new(), name: call.name.clone(), arguments: call.arguments.clone() };
            let outcome = self.setup.toolbox.run(scope, &model_call).await;
            (outcome.text, if outcome.failed { "error" } else { "ok" })
        };
        metrics::counter!(
            "mesh_llm_agent_tool_calls_total",
            "agent" => self.setup.name.clone(),
            // Names a model made up would be labels without bound.
            "tool" => if self.setup.toolbox.has(&call.name) { call.name.clone() } else { outcome_tool_label(outcome) },
            "outcome" => outcome,
        )
        .increment(1);
        let bytes_max = self.setup.limits.tool_output_bytes_max;
        match history::cut_to(&text, bytes_max) {
            Some(cut) => format!("{cut}\n[output cut to {} of its {} bytes]", cut.len(), text.len()),
            None => text,
        }
    }

    /// Produces the record of the round's node.
    async fn produce(
        &self,
        state: &ConversationState,
        round: &Round<'_>,
        sender: &str,
        action: &str,
        command: Option<Vec<String>>,
    ) -> Result<(), BusError> {
        let mut record = BusRecord::message(sender, &state.root.id, &round.response, action);
        record.correlation_id = Some(round.trigger.to_owned());
        record.command = command;
        record.headers.extend(turn_headers(round.scope, round.origin));
        self.setup.bus.produce(&self.topic, &record).await?;
        Ok(())
    }

    /// The calls kept under invoking node `invoke`, in order.
    async fn calls_of(&self, root: &str, invoke: &str) -> Result<Vec<KeptCall>, BusError> {
        let mut children: Vec<Node> = self
            .setup
            .docmem
            .read_tree(root)
            .await?
            .into_iter()
            .filter(|node| node.parent_id.as_deref() == Some(invoke) && node.context.kind == TOOL_CALL_CONTEXT_TYPE)
            .collect();
        children.sort_by_key(|node| node.position);
        Ok(children.into_iter().map(|node| KeptCall { name: node.context.name, arguments: node.content }).collect())
    }

    /// The system prompt: the role, the organisation from the links in force now, the link
    /// context in a link's conversation, the tools last.
    /// The messages the model sees (see [`crate::history`]): the conversation within the token
    /// budget, the older part summarised when the definition asks for it and the model can.
    async fn history(&self, state: &ConversationState) -> Result<Vec<ChatMessage>, BusError> {
        let me = self.setup.bus_id.as_str();
        let limits = &self.setup.limits;
        let messages = state.cache.messages();
        let budget = limits.history_tokens_max;
        let summary_budget = budget / history::SUMMARY_BUDGET_DIVISOR;
        let first = history::first_kept(messages, budget - summary_budget);
        let summary = if limits.summarise_history && first > 0 && history::first_kept(messages, budget) > 0 {
            self.summary(state, first, summary_budget).await?
        } else {
            None
        };
        let (mut kept, dropped) = match &summary {
            Some(_) => history::within_budget(state.cache.message_list(me).split_off(first), budget - summary_budget),
            None => history::within_budget(state.cache.message_list(me), budget),
        };
        let dropped = dropped + if summary.is_some() { first } else { 0 };
        if dropped > 0 {
            metrics::counter!("mesh_llm_agent_history_messages_dropped_total").increment(dropped as u64);
        }
        if let Some(summary) = summary {
            kept.insert(0, history::summary_message(&summary));
        }
        Ok(kept)
    }

    /// The summary of the messages before `first`: the one written before (a replayed turn), or
    /// a new one extending the newest earlier summary, written as a `summary` node. `None` when
    /// the model could not summarise: the older messages are then only dropped.
    async fn summary(
        &self,
        state: &ConversationState,
        first: usize,
        tokens_max: usize,
    ) -> Result<Option<String>, BusError> {
        let me = self.setup.bus_id.as_str();
        let root = state.root.id.as_str();
        let messages = state.cache.messages();
        let id = history::summary_node_id(root, &messages[first - 1].node_id);
        if let Some(written) = self.setup.docmem.get_many(std::slice::from_ref(&id)).await?.pop() {
            return Ok(Some(written.content));
        }
        let earlier = history::earlier_summary_ids(root, messages, first);
        let ids: Vec<String> = earlier.iter().map(|(_, id)| id.clone()).collect();
        let found: HashMap<String, Node> =
            self.setup.docmem.get_many(&ids).await?.into_iter().map(|node| (node.id.clone(), node)).collect();
        let previous = earlier.iter().find_map(|(index, id)| found.get(id).map(|node| (*index, node.content.as_str())));
        let (from, previous) = previous.map_or((0, None), |(index, text)| (index + 1, Some(text)));
        let bytes_max = self.setup.limits.history_tokens_max.saturating_mul(history::BYTES_PER_TOKEN);
        let transcript = history::transcript(previous, &messages[from..first], me, bytes_max);
        let request = ModelRequest {
            system: self.setup.prompts.summary(&self.setup.name, tokens_max).unwrap_or_else(|error| {
                tracing::error!(agent = %self.setup.name, %error, "the summary prompt did not render");
                String::from("Summarise the conversation below briefly.")
            }),
            messages: vec![ChatMessage { role: mesh_bus::Role::User, content: transcript }],
            tools: Vec::new(),
        };
        let reply = {
            let _turn = self.rounds.acquire().await.map_err(|e| BusError::Handler(e.to_string()))?;
            let timeout = Duration::from_millis(self.setup.limits.llm_timeout_ms);
            tokio::time::timeout(timeout, self.setup.model.complete(request)).await
        };
        let text = match reply {
            Ok(Ok(reply)) if !reply.text.trim().is_empty() => reply.text.trim().to_owned(),
            outcome => {
                let why = match outcome {
                    Ok(Err(error)) => error.to_string(),
                    Err(_) => format!("no answer within {} ms", self.setup.limits.llm_timeout_ms),
                    Ok(Ok(_)) => "an empty answer".to_owned(),
                };
                tracing::warn!(agent = %self.setup.name, %why, "the history could not be summarised; older messages are dropped");
                metrics::counter!("mesh_llm_agent_summaries_total", "agent" => self.setup.name.clone(), "outcome" => "failed")
                    .increment(1);
                return Ok(None);
            }
        };
        // What the model wrote is untrusted: bounded like any answer, and plain text in docmem.
        let text =
            history::cut_to(&text, tokens_max.saturating_mul(history::BYTES_PER_TOKEN)).unwrap_or(&text).to_owned();
        let context =
            Context { kind: history::SUMMARY_CONTEXT_TYPE.into(), name: CONTEXT_NAME_AGENT.into(), value: me.into() };
        self.setup.docmem.append_child_with_id(&id, root, &context, &text).await?;
        metrics::counter!("mesh_llm_agent_summaries_total", "agent" => self.setup.name.clone(), "outcome" => "written")
            .increment(1);
        Ok(Some(text))
    }

    fn system_prompt(&self, root: &Node, tools: &[crate::model::ToolSpec], handoff: Option<&Handoff>) -> String {
        let name = self.setup.name.as_str();
        let policy = self.setup.links.as_ref().map(|links| links.policy());
        let can_message =
            tools.iter().any(|tool| tool.name == mesh_agent_kit::agent_message::SEND_AGENT_MESSAGE_SKILL_ID);
        let org_context = policy.as_ref().and_then(|policy| OrgContext::of(&policy.org_chart(name), can_message));
        let link_context = root.content.strip_prefix(LINK_CONTEXT_PREFIX).and_then(|link_id| {
            let link = policy.as_ref()?.link(link_id)?.clone();
            let other = if link.from_agent_id == name { &link.to_agent_id } else { &link.from_agent_id };
            let sender = LinkContext::of_sender(&link, other)?;
            Some(LinkPromptContext { agent_name: other.clone(), relationship: sender.relationship })
        });
        let context = PromptContext {
            agent_name: name,
            role: &self.setup.role,
            org_context,
            link_context,
            handoff_context: handoff.and_then(HandoffPromptContext::of),
            tools: tools
                .iter()
                .map(|t| PromptTool { name: t.name.clone(), description: t.description.clone() })
                .collect(),
        };
        self.setup.prompts.system(&context).unwrap_or_else(|error| {
            // The templates rendered at load; a render failing now keeps the role at least.
            tracing::error!(agent = name, %error, "the system prompt did not render");
            self.setup.role.clone()
        })
    }
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

/// The tool label of a call to no known tool.
fn outcome_tool_label(outcome: &str) -> String {
    if outcome == "skipped" { SKIPPED_CALLS.to_owned() } else { "unknown".to_owned() }
}

/// Reads the topic into `batches`, committing what the consumer asks between batches and once
/// more when stopped.
async fn read(
    mut consumer: Box<dyn mesh_bus::BusConsumer>,
    batches: mpsc::Sender<Batch>,
    mut commits: watch::Receiver<DoneOffsets>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), BusError> {
    let mut committed = DoneOffsets::default();
    loop {
        let batch = tokio::select! {
            biased;
            () = stopped(&mut stop) => break,
            batch = consumer.next_batch() => batch?,
        };
        if batches.send((batch, consumer.assignment_generation())).await.is_err() {
            break;
        }
        let wanted = commits.borrow_and_update().clone();
        if wanted.is_ahead_of(&committed) {
            consumer.commit(&wanted).await?;
            committed = wanted;
        }
    }
    let wanted = commits.borrow().clone();
    if wanted.is_ahead_of(&committed) {
        consumer.commit(&wanted).await?;
    }
    Ok(())
}

/// The headers a turn's records carry: the trace, the call context its tools act in, and the
/// message it answers.
fn turn_headers(scope: &CallScope, origin: &str) -> HashMap<String, String> {
    let mut context = scope.context().clone();
    // What is left of the caller's deadline, not what it was.
    context.deadline_ms = scope.time_left().map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX));
    let mut headers = mesh_telemetry::current_fields();
    headers.extend(context.to_headers().into_iter().map(|(name, value)| (name.to_owned(), value)));
    headers.insert(TURN_ORIGIN_HEADER.into(), origin.to_owned());
    // Only a handoff from another agent travels: a turn of its own is rebuilt from the conversation.
    if let Some(handoff) = scope.handoff().filter(|handoff| !handoff.prior_agents.is_empty())
        && let Ok(json) = serde_json::to_string(handoff)
    {
        headers.insert(HANDOFF_HEADER.into(), json);
    }
    headers
}

/// The text of an A2A message: its text parts, or its data as JSON when it has only data.
fn message_text(task: &TaskInput) -> Result<String, TurnError> {
    let text = if task.text.trim().is_empty() && !task.data.is_empty() {
        serde_json::Value::Object(task.data.clone()).to_string()
    } else {
        task.text.clone()
    };
    if text.trim().is_empty() {
        return Err(TurnError::Conversation("the message has no text".into()));
    }
    Ok(text)
}

/// Tool rounds the current turn has taken: this agent's messages since the last message from
/// someone else that is not a tool output.
fn tool_rounds_since_origin(cache: &ConversationCache, me: &str) -> usize {
    cache
        .messages()
        .iter()
        .rev()
        .take_while(|m| m.sender == me || m.sender == TOOL_AGENT_ID)
        .filter(|m| m.sender == me)
        .count()
}

fn cut_chars(text: &str, chars: usize) -> String {
    text.chars().take(chars).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_fall_on_character_boundaries() {
        assert_eq!(history::cut_to("héllo", 2), Some("h"));
        assert_eq!(history::cut_to("héllo", 3), Some("hé"));
        assert_eq!(history::cut_to("hi", 2), None);
        assert_eq!(cut_chars("abcdef", 3), "abc");
    }

    #[test]
    fn derived_ids_differ_by_round_and_index_and_repeat() {
        assert_eq!(output_node_id("x", 0), output_node_id("x", 0));
        let ids = [output_node_id("x", 0), output_node_id("x", 1), output_node_id("y", 0), call_node_id("x", 0)];
        let unique: HashSet<&String> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len());
    }
}
