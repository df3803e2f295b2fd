//! An agent on the bus: it consumes a topic with its own group, ignores its own records,
//! materializes each conversation role-relative, asks its [`Answerer`], writes the answer node,
//! produces the answer record on the same topic, and only then commits.
//!
//! Delivery is at least once; applying a record twice changes nothing. The answer to message
//! node `n` has the id [`answer_node_id`]`(me, n)`, so a record redelivered after a crash (between
//! producing the answer and committing) finds its answer written and does not answer again.

use std::collections::{HashMap, HashSet};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use mesh_docmem::{Context, Docmem, DocmemError, NewChild, Node};

use crate::{
    ACTION_APPEND, ACTION_CREATE, BusError, BusRecord, ChatMessage, ConversationBus, ConversationCache, Conversations,
    Delivered, DoneOffsets, consumer_group,
};

/// Fixed namespace of answer node ids (UUID v5), so every process derives the same id.
const ANSWER_ID_NAMESPACE: uuid::Uuid = uuid::Uuid::from_u128(0x6d65_7368_2d62_7573_2d61_6e73_7765_7273);
/// Wait before a participant that failed (bus or docmem unreachable) starts over.
const RESTART_DELAY_MS: u64 = 1_000;

/// The server-like root span of the turn a record starts, continuing the trace its producer
/// carried (sampled at its head like a request).
fn turn_root(settings: &ParticipantSettings, record: &BusRecord) -> mesh_telemetry::Root {
    mesh_telemetry::Root::start(&settings.service, mesh_telemetry::extract_fields(&record.headers), || {
        tracing::info_span!(
            "bus_turn",
            otel.name = "bus.turn",
            otel.kind = "server",
            a2a.context_id = %record.conversation_id,
            messaging.destination.name = %settings.topic,
            messaging.message.id = %record.node_id,
            mesh.correlation_id = record.correlation_id.as_deref(),
            mesh.sender = %record.agent_id,
            gen_ai.agent.name = %settings.service,
            gen_ai.operation.name = "invoke_agent",
        )
    })
}

/// The id of `agent_id`'s answer to the message node `node_id`.
pub fn answer_node_id(agent_id: &str, node_id: &str) -> String {
    uuid::Uuid::new_v5(&ANSWER_ID_NAMESPACE, format!("{agent_id}\n{node_id}").as_bytes()).to_string()
}

/// What a participant does with a new message from someone else.
pub trait Answerer: Send + Sync + 'static {
    /// `messages` is the conversation so far as this agent sees it, the new message last.
    /// Returns the answer's plain text, or `None` to stay silent.
    fn answer(
        &self,
        record: &BusRecord,
        node: &Node,
        messages: Vec<ChatMessage>,
    ) -> impl Future<Output = Result<Option<String>, BusError>> + Send;
}

/// How a participant runs.
#[derive(Debug, Clone)]
pub struct ParticipantSettings {
    /// The agent's id (the `agent_id` of its records); its group is `agent-{agent_id}`.
    pub agent_id: String,
    /// The topic it consumes and answers on.
    pub topic: String,
    /// The service whose turns these are, in traces (`service.name`).
    pub service: String,
    /// Conversations cached at most.
    pub cache_conversations_max: NonZeroUsize,
}

/// One agent consuming one topic.
#[derive(Debug)]
pub struct Participant<A> {
    settings: ParticipantSettings,
    bus: Arc<dyn ConversationBus>,
    docmem: Docmem,
    answerer: Arc<A>,
    conversations: Conversations,
}

impl<A: Answerer> Participant<A> {
    pub fn new(settings: ParticipantSettings, bus: Arc<dyn ConversationBus>, docmem: Docmem, answerer: Arc<A>) -> Self {
        let conversations = Conversations::new(settings.cache_conversations_max);
        Self { settings, bus, docmem, answerer, conversations }
    }

    /// The conversations cached now.
    pub fn conversations(&self) -> &Conversations {
        &self.conversations
    }

    /// Runs until `stop` resolves, starting over after a failure.
    pub async fn run_until(mut self, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => return,
                Err(error) = self.run_once() => {
                    tracing::warn!(agent = %self.settings.agent_id, topic = %self.settings.topic, %error, "bus participant failed; starting over");
                }
            }
            tokio::select! {
                () = &mut stop => return,
                () = tokio::time::sleep(Duration::from_millis(RESTART_DELAY_MS)) => {}
            }
        }
    }

    /// Ensures the topic, then consumes from the committed offsets. Returns only on failure.
    ///
    /// The caches are rebuilt by replay once the group has given this instance its partitions
    /// (its first batch): earlier, another instance of the agent could still be answering in
    /// them. When the group moves partitions again, the caches are dropped and each conversation
    /// is read afresh from docmem as its next record comes: the instance that held it meanwhile
    /// may have moved it on.
    pub async fn run_once(&mut self) -> Result<(), BusError> {
        let topic = self.settings.topic.clone();
        self.bus.ensure_topic(&topic).await?;
        let mut consumer = self.bus.consumer(&topic, &consumer_group(&self.settings.agent_id)).await?;
        let mut generation = None;
        loop {
            let batch = consumer.next_batch().await?;
            let assigned = consumer.assignment_generation();
            if generation != Some(assigned) {
                self.conversations = Conversations::new(self.settings.cache_conversations_max);
                if generation.is_none() {
                    let replayed =
                        self.conversations.rebuild(self.bus.as_ref(), &self.docmem, &topic, &|_| true).await?;
                    tracing::info!(agent = %self.settings.agent_id, %topic, replayed, backend = self.bus.backend(), "conversations rebuilt");
                } else {
                    tracing::info!(agent = %self.settings.agent_id, %topic, generation = assigned, "partitions reassigned; conversations will be read afresh");
                }
                generation = Some(assigned);
            }
            self.apply_batch(&batch).await?;
            // Every answer of the batch is in docmem and on the topic: only now move the group on.
            consumer.commit(&DoneOffsets::of_batch(&batch)).await?;
        }
    }

    /// Applies delivered records in order: caches each and answers every new message from
    /// someone else once. The batch's answers are written to docmem in one transaction, then
    /// their records produced together.
    pub async fn apply_batch(&mut self, batch: &[Delivered]) -> Result<(), BusError> {
        let me = self.settings.agent_id.clone();
        let ids: Vec<String> = batch.iter().map(|d| d.record.node_id.clone()).collect();
        let nodes: HashMap<String, Node> =
            self.docmem.get_many(&ids).await?.into_iter().map(|n| (n.id.clone(), n)).collect();
        // Answers already written (before a crash between writing and committing), in one read.
        let answer_ids: Vec<String> =
            batch.iter().filter(|d| d.record.agent_id != me).map(|d| answer_node_id(&me, &d.record.node_id)).collect();
        let written: HashMap<String, Node> =
            self.docmem.get_many(&answer_ids).await?.into_iter().map(|n| (n.id.clone(), n)).collect();
        // Answers whose own record is in this batch (an HTTP turn produces its message and answer
        // together): applied when their record comes, not produced again.
        let in_batch: HashSet<&str> = batch.iter().map(|d| d.record.node_id.as_str()).collect();
        let mut answers = Vec::new();
        let mut replies = Vec::new();
        for delivered in batch {
            let record = &delivered.record;
            if let Some((reply, answer)) = self.apply(record, nodes.get(&record.node_id), &written, &in_batch).await? {
                answers.extend(answer);
                replies.push(reply);
            }
        }
        self.docmem.append_many(&answers).await?;
        self.bus.produce_many(&self.settings.topic, &replies).await?;
        Ok(())
    }

    /// Caches one record whose node is `node` (`None`: gone from docmem) and, when it is someone
    /// else's new message not answered yet (neither cached nor among the nodes of `in_batch`),
    /// answers it: the answer's record to produce, and its node to write unless `written` holds
    /// it already.
    async fn apply(
        &mut self,
        record: &BusRecord,
        node: Option<&Node>,
        written: &HashMap<String, Node>,
        in_batch: &HashSet<&str>,
    ) -> Result<Option<(BusRecord, Option<NewChild>)>, BusError> {
        let me = self.settings.agent_id.clone();
        let cache = self.cache(&record.conversation_id).await?;
        cache.apply(record, node);
        // Own records are never answered; tool results (`tool`) are someone else's.
        let is_message = record.action == ACTION_CREATE || record.action == ACTION_APPEND;
        let Some(node) = node.filter(|_| record.agent_id != me && is_message) else { return Ok(None) };
        let answer_id = answer_node_id(&me, &node.id);
        if cache.contains(&answer_id) || in_batch.contains(answer_id.as_str()) {
            return Ok(None);
        }
        let messages = cache.message_list(&me);
        let mut turn_headers = HashMap::new();
        let (content, new) = match written.get(&answer_id) {
            // Written before a crash, perhaps not produced: produce it (a duplicate record is
            // harmless, every reader applies a node once).
            Some(existing) => (existing.content.clone(), None),
            None => {
                let answerer = self.answerer.clone();
                let answered = turn_root(&self.settings, record)
                    .instrument(async move {
                        let text = answerer.answer(record, node, messages).await?;
                        // The answer's record carries the turn's trace on.
                        Ok::<_, BusError>(text.map(|text| (text, mesh_telemetry::current_fields())))
                    })
                    .await?;
                let Some((text, headers)) = answered else { return Ok(None) };
                turn_headers = headers;
                let child = NewChild {
                    id: answer_id.clone(),
                    parent_id: record.docmem_node_id.clone(),
                    context: Context::agent_text(&me),
                    content: text.clone(),
                };
                (text, Some(child))
            }
        };
        let mut reply = BusRecord::message(&me, &record.docmem_node_id, &answer_id, ACTION_APPEND);
        reply.conversation_id.clone_from(&record.conversation_id);
        reply.correlation_id = Some(node.id.clone());
        reply.headers = turn_headers;
        // Cached at once, so the next message of the conversation sees it and a redelivered
        // record later in the batch finds it answered.
        self.cache(&record.conversation_id).await?.append(&answer_id, &me, &content);
        Ok(Some((reply, new)))
    }

    /// The cache of a conversation, rebuilt from docmem when it was evicted or never loaded.
    async fn cache(&mut self, conversation_id: &str) -> Result<&mut ConversationCache, BusError> {
        if self.conversations.peek(conversation_id).is_none() {
            let cache = match ConversationCache::from_docmem(&self.docmem, conversation_id).await {
                Ok(cache) => cache,
                Err(BusError::Docmem(DocmemError::NotFound(_))) => ConversationCache::default(),
                Err(error) => return Err(error),
            };
            self.conversations.insert(conversation_id.to_owned(), cache);
        }
        Ok(self.conversations.get(conversation_id).expect("inserted above"))
    }
}
