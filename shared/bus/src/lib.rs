//! The conversation bus (seed 001): every agent owns one topic, `{agent-type}-{instance-id}`;
//! conversations are multiplexed on it by `conversation_id`, the record key; every participant
//! reads it with its own consumer group, `agent-{agent_id}`. Records only point at docmem nodes:
//! content never travels on the bus.
//!
//! [`ConversationBus`] is the one interface, with two backends: [`LogBus`], an offset-ordered
//! table in the mesh's own database (the default: no broker needed), and [`KafkaBus`], `rdkafka`
//! against a Kafka-protocol broker. [`Participant`] is what an agent runs on it: it materializes
//! conversations role-relative, answers them, and rebuilds its caches by replay.
//! [`ConversationJoin`] lets an A2A message over HTTP take a turn in such a conversation.

mod config;
mod conversation;
mod error;
mod join;
mod kafka;
mod log;
mod offsets;
mod participant;
mod record;

use std::fmt::Debug;
use std::sync::Arc;

pub use config::{BusConfig, open_bus};
pub use conversation::{CachedMessage, ChatMessage, ConversationCache, Conversations, Role, message_list};
pub use error::BusError;
pub use join::{ConversationJoin, JoinedTurn, conversation_root_context, conversation_topic};
pub use kafka::{KAFKA_TOPIC_PARTITIONS_DEFAULT, KafkaBus};
pub use log::{LOG_PARTITION, LogBus};
pub use offsets::{CommitTracker, DoneOffsets, Position};
pub use participant::{Answerer, Participant, ParticipantSettings, answer_node_id};
pub use record::{
    ACTION_APPEND, ACTION_CREATE, BusRecord, Delivered, RECORD_VERSION, TOOL_AGENT_ID, agent_id, agent_topic,
    consumer_group,
};

/// Longest any single bus operation (produce, commit, topic creation, a replay read) may take.
pub const BUS_OPERATION_TIMEOUT_MS: u64 = 10_000;
/// Most records one [`BusConsumer::next_batch`] returns, and so most held in memory per consumer.
pub const CONSUMER_BATCH_MAX: usize = 512;

/// One topic-and-group reader: yields records from the group's committed offsets on, each
/// partition in offset order, and moves the committed offsets only when told to. The consumers of
/// one group split a topic's partitions between them, and so its conversations.
#[async_trait::async_trait]
pub trait BusConsumer: Send + Debug {
    /// Waits until at least one record is there, then returns those at hand (at most
    /// [`CONSUMER_BATCH_MAX`]), each partition's in offset order. Cancel-safe: once the first
    /// record is taken nothing awaits any more.
    async fn next_batch(&mut self) -> Result<Vec<Delivered>, BusError>;
    /// Records that, in each partition named, every record up to and including its offset is
    /// done with: a restarted consumer of this group starts after them.
    async fn commit(&mut self, done: &DoneOffsets) -> Result<(), BusError>;
    /// How many times the group gave this consumer its partitions, as of the last batch. When it
    /// changes, another member may have read (and answered in) the conversations now here, so
    /// what this consumer kept of them is stale. Constant where a group is never rebalanced.
    fn assignment_generation(&self) -> u64;
}

/// A read of a whole topic from its first record to (at least) the end it had when the read began.
#[async_trait::async_trait]
pub trait BusReplay: Send + Debug {
    /// The next records in offset order; `None` once the end is reached.
    async fn next_batch(&mut self) -> Result<Option<Vec<Delivered>>, BusError>;
}

/// The conversation bus: the one interface both backends implement.
#[async_trait::async_trait]
pub trait ConversationBus: Send + Sync + Debug {
    /// Creates the topic unless it exists, with the backend's number of partitions (records go to
    /// a partition by their key, the conversation id, so a conversation stays in one).
    async fn ensure_topic(&self, topic: &str) -> Result<(), BusError>;
    /// Whether the topic exists (an agent consuming it made it), without making it.
    async fn topic_exists(&self, topic: &str) -> Result<bool, BusError>;
    /// Appends a record to an existing topic, keyed by its `conversation_id`; returns where it
    /// was written once it is durable.
    async fn produce(&self, topic: &str, record: &BusRecord) -> Result<Position, BusError>;
    /// Appends records in their order, at once (one transaction, or sends in flight together);
    /// returns where they were written once all are durable. The records of one conversation
    /// keep their order.
    async fn produce_many(&self, topic: &str, records: &[BusRecord]) -> Result<Vec<Position>, BusError>;
    /// A consumer of `topic` for `group`, starting at the group's committed offsets (at the
    /// beginning for a new group).
    async fn consumer(&self, topic: &str, group: &str) -> Result<Box<dyn BusConsumer>, BusError>;
    /// Reads `topic` from the beginning, whatever any group committed: for rebuilding state.
    /// Every partition, each in offset order.
    async fn replay(&self, topic: &str) -> Result<Box<dyn BusReplay>, BusError>;
    /// Which backend this is, for logs and `/health`.
    fn backend(&self) -> &'static str;
}

/// A bus shared by the tasks of a process.
pub type SharedBus = Arc<dyn ConversationBus>;

/// Runs one outbound bus operation under [`BUS_OPERATION_TIMEOUT_MS`].
pub(crate) async fn bounded<T>(
    operation: &'static str,
    future: impl Future<Output = Result<T, BusError>>,
) -> Result<T, BusError> {
    tokio::time::timeout(std::time::Duration::from_millis(BUS_OPERATION_TIMEOUT_MS), future)
        .await
        .map_err(|_| BusError::Timeout { operation, timeout_ms: BUS_OPERATION_TIMEOUT_MS })?
}
