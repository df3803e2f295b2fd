//! The Kafka backend: `rdkafka` against any Kafka-protocol broker. Topics are created with the
//! admin client, with the configured number of partitions; records are keyed by conversation id,
//! so the partitioner keeps a conversation in one partition, in order. The producer is idempotent
//! and keeps every record of a call in flight at once; consumer groups split the partitions
//! between their members and commit by hand, only what the caller says is done.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};

use crate::{
    BUS_OPERATION_TIMEOUT_MS, BusConsumer, BusError, BusRecord, BusReplay, CONSUMER_BATCH_MAX, ConversationBus,
    Delivered, DoneOffsets, Position, bounded,
};

/// Partitions of a topic this backend creates, unless configured: more than one, so that two
/// instances of an agent in one group share its conversations (seed 001's scaling).
pub const KAFKA_TOPIC_PARTITIONS_DEFAULT: u32 = 4;
/// A departed member's partitions move to a new one after this long (DEPENDENCIES.md: short,
/// so a restarted agent resumes quickly).
const SESSION_TIMEOUT_MS: u64 = 6_000;
/// How long the broker may hold a fetch waiting for data: bounds a conversation turn's latency.
const FETCH_WAIT_MAX_MS: u64 = 10;
/// How long the producer waits to batch records; a few ms trades little latency for throughput.
const PRODUCER_LINGER_MS: u64 = 2;
/// Records the producer may hold unsent: a bounded queue (librdkafka's own default is 100,000).
const PRODUCER_QUEUE_RECORDS_MAX: u64 = 50_000;
/// Records a consumer prefetches per partition (bounded memory).
const CONSUMER_QUEUE_RECORDS_MIN: u64 = 10_000;
/// A replay waits this long for a record before the end it read at its start.
const REPLAY_IDLE_MS: u64 = 5_000;
/// Past that end, a replay stops once the topic is quiet this long. Some brokers (tansu 0.6)
/// report the high watermark as the last batch's base offset + 1, short of the batch's end, so
/// the watermark alone would cut a replay short.
const REPLAY_TAIL_IDLE_MS: u64 = 250;
/// Past that end, a replay reads on at most this long in all. Under steady traffic the topic is
/// never quiet; what comes after the replay began is the live consumer's to apply, and the one
/// batch a watermark can leave out is at hand at once.
const REPLAY_TAIL_MAX_MS: u64 = 1_000;

/// The Kafka backend; clones share one producer and one admin client.
#[derive(Clone)]
pub struct KafkaBus {
    brokers: String,
    topic_partitions: NonZeroU32,
    producer: FutureProducer,
    admin: Arc<AdminClient<DefaultClientContext>>,
}

impl std::fmt::Debug for KafkaBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaBus").field("brokers", &self.brokers).finish_non_exhaustive()
    }
}

impl KafkaBus {
    /// Connects lazily to `brokers` (`host:port[,host:port...]`); topics it creates get
    /// `topic_partitions` partitions (a topic that exists keeps its own: changing the count would
    /// move conversations between partitions, out of order).
    pub fn connect(brokers: &str, topic_partitions: NonZeroU32) -> Result<Self, BusError> {
        let producer = base_config(brokers)
            .set("acks", "all")
            // A record retried after a lost acknowledgement is written once, in its place: the
            // broker drops the repeat by the producer's id and sequence number. The records of
            // a conversation stay in order with several batches in flight.
            .set("enable.idempotence", "true")
            .set("linger.ms", PRODUCER_LINGER_MS.to_string())
            .set("message.timeout.ms", BUS_OPERATION_TIMEOUT_MS.to_string())
            .set("queue.buffering.max.messages", PRODUCER_QUEUE_RECORDS_MAX.to_string())
            .create()?;
        let admin = base_config(brokers).create()?;
        Ok(Self { brokers: brokers.to_owned(), topic_partitions, producer, admin: Arc::new(admin) })
    }

    fn consumer_config(&self, group: &str) -> ClientConfig {
        let mut config = base_config(&self.brokers);
        config
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("session.timeout.ms", SESSION_TIMEOUT_MS.to_string())
            .set("fetch.wait.max.ms", FETCH_WAIT_MAX_MS.to_string())
            .set("queued.min.messages", CONSUMER_QUEUE_RECORDS_MIN.to_string());
        config
    }
}

fn base_config(brokers: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("socket.timeout.ms", BUS_OPERATION_TIMEOUT_MS.to_string())
        .set("log_level", "4");
    config
}

#[async_trait::async_trait]
impl ConversationBus for KafkaBus {
    async fn ensure_topic(&self, topic: &str) -> Result<(), BusError> {
        let timeout = Duration::from_millis(BUS_OPERATION_TIMEOUT_MS);
        let options = AdminOptions::new().operation_timeout(Some(timeout)).request_timeout(Some(timeout));
        let created = bounded("creating a topic", async {
            let partitions = i32::try_from(self.topic_partitions.get()).unwrap_or(i32::MAX);
            let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
            Ok(self.admin.create_topics(&[new], &options).await?)
        })
        .await?;
        for result in created {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((name, code)) => return Err(BusError::Kafka(format!("cannot create topic {name}: {code}"))),
            }
        }
        Ok(())
    }

    async fn topic_exists(&self, topic: &str) -> Result<bool, BusError> {
        Ok(self.partitions(topic).await?.is_some())
    }

    async fn produce(&self, topic: &str, record: &BusRecord) -> Result<Position, BusError> {
        let positions = self.produce_many(topic, std::slice::from_ref(record)).await?;
        Ok(positions[0])
    }

    async fn produce_many(&self, topic: &str, records: &[BusRecord]) -> Result<Vec<Position>, BusError> {
        let bodies = records.iter().map(BusRecord::to_json).collect::<Result<Vec<_>, _>>()?;
        let timeout = Duration::from_millis(BUS_OPERATION_TIMEOUT_MS);
        // All in flight at once. The key picks the partition, and librdkafka keeps the order of a
        // partition's queue, so a conversation's records stay in order; each future settles when
        // the broker acknowledged its record.
        let sends = records.iter().zip(&bodies).map(|(record, body)| {
            let send = FutureRecord::to(topic).key(&record.conversation_id).payload(body);
            async move {
                self.producer
                    .send(send, timeout)
                    .await
                    .map(|delivery| Position { partition: delivery.partition, offset: delivery.offset })
                    .map_err(|(error, _)| match error.rdkafka_error_code() {
                        Some(RDKafkaErrorCode::UnknownTopicOrPartition) => BusError::UnknownTopic(topic.to_owned()),
                        _ => error.into(),
                    })
            }
        });
        bounded("producing records", futures::future::try_join_all(sends)).await
    }

    async fn consumer(&self, topic: &str, group: &str) -> Result<Box<dyn BusConsumer>, BusError> {
        let assignments = Assignments::default();
        let consumer: GroupConsumer = self.consumer_config(group).create_with_context(assignments.clone())?;
        consumer.subscribe(&[topic])?;
        Ok(Box::new(KafkaConsumer {
            topic: topic.to_owned(),
            consumer: Some(Arc::new(consumer)),
            assignments,
            generation: 0,
        }))
    }

    async fn replay(&self, topic: &str) -> Result<Box<dyn BusReplay>, BusError> {
        let partitions = self.partitions(topic).await?.ok_or_else(|| BusError::UnknownTopic(topic.to_owned()))?;
        // A group of its own that never commits: a replay moves no agent's offsets.
        let consumer: StreamConsumer = self.consumer_config(&format!("replay-{}", uuid::Uuid::new_v4())).create()?;
        let consumer = Arc::new(consumer);
        let (owned_topic, probe) = (topic.to_owned(), consumer.clone());
        let ends = bounded("reading a topic's end", async move {
            tokio::task::spawn_blocking(move || {
                let timeout = Duration::from_millis(BUS_OPERATION_TIMEOUT_MS);
                partitions
                    .into_iter()
                    .map(|partition| {
                        let (low, high) = probe.fetch_watermarks(&owned_topic, partition, timeout)?;
                        Ok(PartitionEnd { partition, next_offset: low, end: high })
                    })
                    .collect::<Result<Vec<_>, BusError>>()
            })
            .await
            .map_err(|e| BusError::Kafka(e.to_string()))?
        })
        .await?;
        let mut assignment = TopicPartitionList::new();
        for end in &ends {
            assignment.add_partition_offset(topic, end.partition, Offset::Beginning)?;
        }
        consumer.assign(&assignment)?;
        Ok(Box::new(KafkaReplay {
            topic: topic.to_owned(),
            consumer: Some(consumer),
            ends,
            tail_since: None,
            done: false,
        }))
    }

    fn backend(&self) -> &'static str {
        "kafka"
    }
}

impl KafkaBus {
    /// The partitions of `topic`, `None` when it does not exist. From the metadata of every topic:
    /// asking for one by name lets a broker auto-create it.
    async fn partitions(&self, topic: &str) -> Result<Option<Vec<i32>>, BusError> {
        let admin = self.admin.clone();
        let wanted = topic.to_owned();
        let listed = tokio::task::spawn_blocking(move || {
            let metadata = admin.inner().fetch_metadata(None, Duration::from_millis(BUS_OPERATION_TIMEOUT_MS))?;
            let found = metadata.topics().iter().find(|t| t.name() == wanted && t.error().is_none());
            Ok::<_, BusError>(found.map(|t| t.partitions().iter().map(|p| p.id()).collect()))
        });
        bounded("reading the topics", async { listed.await.map_err(|e| BusError::Kafka(e.to_string()))? }).await
    }
}

/// Counts the assignments the group gives a consumer. The callback runs on the thread polling the
/// consumer, inside `recv`, so the count is current when a batch is returned.
#[derive(Debug, Clone, Default)]
struct Assignments {
    generation: Arc<AtomicU64>,
}

impl ClientContext for Assignments {}

impl ConsumerContext for Assignments {
    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(partitions) => {
                let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
                let partitions: Vec<i32> = partitions.elements().iter().map(|p| p.partition()).collect();
                tracing::debug!(generation, ?partitions, "bus partitions assigned");
            }
            Rebalance::Revoke(_) => tracing::debug!("bus partitions revoked"),
            Rebalance::Error(error) => tracing::warn!(%error, "a bus consumer group rebalance failed"),
        }
    }
}

/// A member of a consumer group.
type GroupConsumer = StreamConsumer<Assignments>;

/// Reads what is at hand without waiting, after a first record that was waited for.
async fn take_ready<C: ConsumerContext + 'static>(
    consumer: &StreamConsumer<C>,
    topic: &str,
    batch: &mut Vec<Delivered>,
    max: usize,
) -> Result<(), BusError> {
    while batch.len() < max {
        match tokio::time::timeout(Duration::ZERO, consumer.recv()).await {
            Ok(message) => batch.push(delivered(topic, &message?)?),
            Err(_) => break,
        }
    }
    Ok(())
}

fn delivered(topic: &str, message: &rdkafka::message::BorrowedMessage<'_>) -> Result<Delivered, BusError> {
    let payload = message.payload().ok_or_else(|| BusError::InvalidRecord("a record without a value".into()))?;
    Ok(Delivered {
        topic: topic.to_owned(),
        partition: message.partition(),
        offset: message.offset(),
        record: BusRecord::from_json(payload)?,
    })
}

/// Closing a consumer blocks (it leaves its group), so it happens off the async threads.
fn close_in_background<T: Send + Sync + 'static>(consumer: Option<Arc<T>>) {
    if let (Some(consumer), Ok(runtime)) = (consumer, tokio::runtime::Handle::try_current()) {
        runtime.spawn_blocking(move || drop(consumer));
    }
}

struct KafkaConsumer {
    topic: String,
    /// Always present until dropped; an option only so that `drop` can move it off-thread.
    consumer: Option<Arc<GroupConsumer>>,
    assignments: Assignments,
    /// The assignment generation as of the last batch.
    generation: u64,
}

impl KafkaConsumer {
    fn consumer(&self) -> &Arc<GroupConsumer> {
        self.consumer.as_ref().expect("present until dropped")
    }
}

impl std::fmt::Debug for KafkaConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaConsumer").field("topic", &self.topic).finish_non_exhaustive()
    }
}

impl Drop for KafkaConsumer {
    fn drop(&mut self) {
        close_in_background(self.consumer.take());
    }
}

#[async_trait::async_trait]
impl BusConsumer for KafkaConsumer {
    async fn next_batch(&mut self) -> Result<Vec<Delivered>, BusError> {
        let consumer = self.consumer().clone();
        // Waiting for the next record is not an outbound call: it waits as long as the topic is quiet.
        let first = consumer.recv().await?;
        let mut batch = vec![delivered(&self.topic, &first)?];
        drop(first);
        take_ready(&consumer, &self.topic, &mut batch, CONSUMER_BATCH_MAX).await?;
        self.generation = self.assignments.generation.load(Ordering::Acquire);
        Ok(batch)
    }

    async fn commit(&mut self, done: &DoneOffsets) -> Result<(), BusError> {
        if done.is_empty() {
            return Ok(());
        }
        let mut offsets = TopicPartitionList::new();
        for (partition, offset) in done.iter() {
            // Kafka commits the next offset to read.
            offsets.add_partition_offset(&self.topic, partition, Offset::Offset(offset + 1))?;
        }
        let consumer = self.consumer().clone();
        bounded("committing offsets", async move {
            // A synchronous commit blocks its thread until the broker answers.
            tokio::task::spawn_blocking(move || consumer.commit(&offsets, CommitMode::Sync))
                .await
                .map_err(|e| BusError::Kafka(e.to_string()))?
                .map_err(BusError::from)
        })
        .await
    }

    fn assignment_generation(&self) -> u64 {
        self.generation
    }
}

/// Where a replay of one partition began and where it ends.
#[derive(Debug)]
struct PartitionEnd {
    partition: i32,
    next_offset: i64,
    /// The partition's end (high watermark) as the broker reported it when the replay began.
    end: i64,
}

struct KafkaReplay {
    topic: String,
    consumer: Option<Arc<StreamConsumer>>,
    ends: Vec<PartitionEnd>,
    /// When the replay passed the end of every partition.
    tail_since: Option<Instant>,
    done: bool,
}

impl std::fmt::Debug for KafkaReplay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaReplay").field("topic", &self.topic).field("ends", &self.ends).finish_non_exhaustive()
    }
}

impl Drop for KafkaReplay {
    fn drop(&mut self) {
        close_in_background(self.consumer.take());
    }
}

#[async_trait::async_trait]
impl BusReplay for KafkaReplay {
    async fn next_batch(&mut self) -> Result<Option<Vec<Delivered>>, BusError> {
        if self.done {
            return Ok(None);
        }
        let consumer = self.consumer.as_ref().expect("present until dropped").clone();
        let past_end = self.ends.iter().all(|end| end.next_offset >= end.end);
        if past_end {
            let since = *self.tail_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= Duration::from_millis(REPLAY_TAIL_MAX_MS) {
                self.done = true;
                return Ok(None);
            }
        }
        let wait_ms = if past_end { REPLAY_TAIL_IDLE_MS } else { REPLAY_IDLE_MS };
        let first = match tokio::time::timeout(Duration::from_millis(wait_ms), consumer.recv()).await {
            Ok(message) => message?,
            Err(_) if past_end => {
                self.done = true;
                return Ok(None);
            }
            Err(_) => return Err(BusError::Timeout { operation: "replaying records", timeout_ms: wait_ms }),
        };
        let mut batch = vec![delivered(&self.topic, &first)?];
        drop(first);
        take_ready(&consumer, &self.topic, &mut batch, CONSUMER_BATCH_MAX * 8).await?;
        // Records produced since the replay began may come too: applying them is harmless, the
        // live consumer applies each node once.
        for delivered in &batch {
            if let Some(end) = self.ends.iter_mut().find(|end| end.partition == delivered.partition) {
                end.next_offset = end.next_offset.max(delivered.offset + 1);
            }
        }
        Ok(Some(batch))
    }
}
