//! Conversation messages per second through the bus, and the time to rebuild caches by replay,
//! on the embedded log and on Kafka side by side.
//!
//! Throughput: client tasks each append a message node to docmem and produce its record; an
//! echo agent ([`Participant`]) consumes, materializes the conversation, writes its answer node
//! and produces the answer; a client consumer counts the answers. Figures: answered messages per
//! second over the whole run, and p50/p99 from producing a message to seeing its answer.
//! Replay: a topic of 100,000 records (1,000 conversations of 100 messages) rebuilt into caches.
//!
//! `cargo bench -p mesh-bus --bench bus_throughput -- [--messages 20000] [--senders 16] [--replay-records 100000] [--docmem-postgres] [--partitions 4] [--participants 1]`
//! Kafka runs when `MESH_TEST_KAFKA_BROKERS` names a broker (`scripts/kafka-broker.sh`), its topics
//! with `--partitions` partitions and the echo agent as `--participants` instances in one group
//! (the embedded log has one partition, so one instance). Docmem is on SQLite, or with
//! `--docmem-postgres` in a scratch database on `MESH_TEST_POSTGRES_URL`'s server.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mesh_bus::{
    ACTION_APPEND, Answerer, BusError, BusRecord, ChatMessage, ConversationBus, Conversations,
    KAFKA_TOPIC_PARTITIONS_DEFAULT, KafkaBus, LogBus, Participant, ParticipantSettings,
};
use mesh_docmem::{Context, Docmem, Node};

const ECHO_AGENT: &str = "echo-1";
const CLIENT_AGENT: &str = "ui-1";
/// Conversations the throughput run spreads its messages over.
const CONVERSATIONS: usize = 100;
/// Client tasks producing at once (many users typing), unless `--senders` says otherwise.
const SENDERS_DEFAULT: usize = 16;
/// Messages per conversation in the replay topic.
const REPLAY_CONVERSATION_MESSAGES: usize = 100;
const CACHE_CONVERSATIONS_MAX: usize = 10_000;
/// Longest a run may wait for its last answer.
const RUN_DEADLINE_MS: u64 = 600_000;

/// An echo instance, counting what it answered (so the warm-up sees every instance at work).
#[derive(Debug)]
struct Echo {
    answered: Arc<AtomicUsize>,
}

impl Answerer for Echo {
    async fn answer(&self, _: &BusRecord, node: &Node, _: Vec<ChatMessage>) -> Result<Option<String>, BusError> {
        self.answered.fetch_add(1, Ordering::Relaxed);
        Ok(Some(node.content.clone()))
    }
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{name} takes a number")))
        .unwrap_or(default)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[derive(Debug, Clone, Copy)]
struct Throughput {
    messages_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
}

async fn throughput(
    bus: Arc<dyn ConversationBus>,
    docmem: &Docmem,
    messages: usize,
    senders: usize,
    participants: usize,
) -> Throughput {
    let run = uuid::Uuid::new_v4().simple().to_string();
    let topic = format!("echo-bench-{run}");
    // Groups of this run's own: a member of an earlier run that was killed would hold a shared
    // group's rebalance until the broker gives up on it.
    let echo_agent = format!("{ECHO_AGENT}-{run}");
    bus.ensure_topic(&topic).await.unwrap();
    let settings = ParticipantSettings {
        agent_id: echo_agent.clone(),
        topic: topic.clone(),
        service: ECHO_AGENT.into(),
        cache_conversations_max: CACHE_CONVERSATIONS_MAX.try_into().unwrap(),
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let answered_by: Vec<Arc<AtomicUsize>> = (0..participants).map(|_| Arc::default()).collect();
    let echoes: Vec<_> = answered_by
        .iter()
        .map(|answered| {
            let mut stopped = stopped.clone();
            let echo = Arc::new(Echo { answered: answered.clone() });
            let participant = Participant::new(settings.clone(), bus.clone(), docmem.clone(), echo);
            tokio::spawn(participant.run_until(async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            }))
        })
        .collect();
    let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let mut roots = Vec::new();
    for _ in 0..CONVERSATIONS {
        roots.push(docmem.create_root("", &Context::default(), "").await.unwrap().id);
    }
    // The client consumer: counts answers, the warm-up's first (Kafka group joins).
    let (answered_tx, mut answered) = tokio::sync::mpsc::channel::<f64>(messages + 1);
    let mut consumer = bus.consumer(&topic, &format!("agent-{CLIENT_AGENT}-{run}")).await.unwrap();
    let waiting = sent.clone();
    let counter = tokio::spawn(async move {
        loop {
            for delivered in consumer.next_batch().await.unwrap() {
                let record = delivered.record;
                if record.agent_id != echo_agent {
                    continue;
                }
                let question = record.correlation_id.unwrap_or_default();
                let started = waiting.lock().unwrap().remove(&question);
                if let Some(started) = started
                    && answered_tx.send(started.elapsed().as_secs_f64() * 1e3).await.is_err()
                {
                    return;
                }
            }
        }
    });
    let send = {
        let (bus, docmem, topic, sent) = (bus.clone(), docmem.clone(), topic.clone(), sent.clone());
        move |root: String, text: String| {
            let (bus, docmem, topic, sent) = (bus.clone(), docmem.clone(), topic.clone(), sent.clone());
            async move {
                let node = docmem.append_child(&root, &Context::agent_text(CLIENT_AGENT), &text).await.unwrap();
                sent.lock().unwrap().insert(node.id.clone(), Instant::now());
                let record = BusRecord::message(CLIENT_AGENT, &root, &node.id, ACTION_APPEND);
                bus.produce(&topic, &record).await.unwrap();
            }
        }
    };
    // Warm-up rounds, a message in every conversation each, until one round was answered by every
    // instance: the group has settled, and no rebalance falls in the measured run.
    let deadline = Duration::from_millis(RUN_DEADLINE_MS);
    loop {
        let before: Vec<usize> = answered_by.iter().map(|a| a.load(Ordering::Relaxed)).collect();
        for root in &roots {
            send(root.clone(), "warm-up".into()).await;
        }
        for _ in &roots {
            tokio::time::timeout(deadline, answered.recv()).await.expect("warm-up answered");
        }
        if answered_by.iter().zip(before).all(|(now, before)| now.load(Ordering::Relaxed) > before) {
            break;
        }
    }

    let started = Instant::now();
    let senders: Vec<_> = (0..senders)
        .map(|sender| {
            let roots = roots.clone();
            let send = send.clone();
            tokio::spawn(async move {
                for i in (sender..messages).step_by(senders) {
                    send(roots[i % CONVERSATIONS].clone(), format!("message {i}")).await;
                }
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(messages);
    while latencies.len() < messages {
        let latency = tokio::time::timeout(deadline, answered.recv()).await.expect("answers keep coming").unwrap();
        latencies.push(latency);
    }
    let elapsed = started.elapsed().as_secs_f64();
    for sender in senders {
        sender.await.unwrap();
    }
    let _ = stop.send(true);
    for echo in echoes {
        echo.await.unwrap();
    }
    counter.abort();
    latencies.sort_by(f64::total_cmp);
    Throughput {
        messages_per_s: messages as f64 / elapsed,
        p50_ms: percentile(&latencies, 0.50),
        p99_ms: percentile(&latencies, 0.99),
    }
}

/// Seconds to rebuild caches from a topic of `records` records.
async fn replay(bus: &dyn ConversationBus, docmem: &Docmem, records: usize) -> f64 {
    let topic = format!("replay-bench-{}", uuid::Uuid::new_v4().simple());
    bus.ensure_topic(&topic).await.unwrap();
    let conversations = records.div_ceil(REPLAY_CONVERSATION_MESSAGES);
    for _ in 0..conversations {
        let root = docmem.create_root("", &Context::default(), "").await.unwrap().id;
        let children: Vec<(Context, String)> = (0..REPLAY_CONVERSATION_MESSAGES)
            .map(|i| {
                let sender = if i % 2 == 0 { CLIENT_AGENT } else { ECHO_AGENT };
                (Context::agent_text(sender), format!("message {i} of a conversation replayed"))
            })
            .collect();
        let nodes = docmem.append_children(&root, &children).await.unwrap();
        let batch: Vec<BusRecord> = nodes
            .iter()
            .map(|n| BusRecord::message(n.context.agent_id().unwrap(), &root, &n.id, ACTION_APPEND))
            .collect();
        bus.produce_many(&topic, &batch).await.unwrap();
    }
    let started = Instant::now();
    let mut caches = Conversations::new(CACHE_CONVERSATIONS_MAX.try_into().unwrap());
    let replayed = caches.rebuild(bus, docmem, &topic, &|_| true).await.unwrap();
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(replayed, conversations * REPLAY_CONVERSATION_MESSAGES);
    assert_eq!(caches.len(), conversations.min(CACHE_CONVERSATIONS_MAX));
    elapsed
}

#[tokio::main]
async fn main() {
    let messages = arg("--messages", 20_000);
    let replay_records = arg("--replay-records", 100_000);
    let senders = arg("--senders", SENDERS_DEFAULT);
    let partitions = arg("--partitions", KAFKA_TOPIC_PARTITIONS_DEFAULT as usize);
    let kafka_participants = arg("--participants", 1);
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("bus.db").display());
    // Docmem on PostgreSQL as seed 001 draws it (a scratch database on MESH_TEST_POSTGRES_URL's
    // server, dropped at the end), or on SQLite beside the embedded log.
    let on_postgres = std::env::args().any(|a| a == "--docmem-postgres");
    let scratch = if on_postgres {
        Some(
            mesh_test_support::ScratchDatabase::create("bench_bus")
                .await
                .expect("MESH_TEST_POSTGRES_URL names a server"),
        )
    } else {
        None
    };
    let docmem_engine = if on_postgres { "PostgreSQL" } else { "SQLite" };
    let docmem = Docmem::open(scratch.as_ref().map_or(&url, |db| &db.url)).await.unwrap();
    let mut backends: Vec<(&str, Arc<dyn ConversationBus>, usize)> =
        vec![("embedded log (SQLite)", Arc::new(LogBus::open(&url, None).await.unwrap()), 1)];
    match std::env::var("MESH_TEST_KAFKA_BROKERS") {
        Ok(brokers) => {
            let partitions =
                u32::try_from(partitions).ok().and_then(std::num::NonZeroU32::new).expect("--partitions ≥ 1");
            backends.push((
                "kafka (tansu)",
                Arc::new(KafkaBus::connect(&brokers, partitions).unwrap()),
                kafka_participants,
            ));
        }
        Err(_) => println!("MESH_TEST_KAFKA_BROKERS unset: Kafka is not measured"),
    }
    println!(
        "{messages} messages over {CONVERSATIONS} conversations from {senders} senders; replay of {replay_records} records; docmem on {docmem_engine}; kafka: {partitions} partitions, {kafka_participants} echo instances"
    );
    println!("{:<24} {:>12} {:>10} {:>10} {:>14}", "backend", "messages/s", "p50 ms", "p99 ms", "replay s");
    let mut rows = Vec::new();
    for (name, bus, participants) in backends {
        let run = throughput(bus.clone(), &docmem, messages, senders, participants).await;
        let replay_s = replay(bus.as_ref(), &docmem, replay_records).await;
        println!(
            "{name:<24} {:>12.0} {:>10.2} {:>10.2} {:>14.2}",
            run.messages_per_s, run.p50_ms, run.p99_ms, replay_s
        );
        rows.push((run, replay_s));
    }
    if let [(log, log_replay), (kafka, kafka_replay)] = rows.as_slice() {
        println!(
            "kafka / embedded log: throughput x{:.2}, p50 x{:.2}, replay time x{:.2}",
            kafka.messages_per_s / log.messages_per_s,
            kafka.p50_ms / log.p50_ms,
            kafka_replay / log_replay
        );
    }
    drop(docmem);
    if let Some(scratch) = scratch {
        scratch.drop_database().await;
    }
}
