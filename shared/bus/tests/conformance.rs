//! One conformance suite, run against both backends: the embedded log always (on SQLite, and on
//! PostgreSQL too when `MESH_TEST_POSTGRES_URL` is set), Kafka when `MESH_TEST_KAFKA_BROKERS`
//! names a broker (`scripts/kafka-broker.sh` starts one). Under CI a missing database or broker
//! fails the suite instead of skipping its half.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mesh_bus::{
    ACTION_APPEND, ACTION_CREATE, Answerer, BusError, BusRecord, ChatMessage, ConversationBus, Conversations,
    Delivered, DoneOffsets, KAFKA_TOPIC_PARTITIONS_DEFAULT, KafkaBus, LogBus, Participant, ParticipantSettings, Role,
    TOOL_AGENT_ID, answer_node_id, consumer_group, message_list,
};
use mesh_docmem::{Context, Docmem, Node};

/// Longest a test waits for the bus to deliver (a Kafka group join takes a few seconds).
const DELIVERY_WAIT_MS: u64 = 30_000;

struct Backend {
    name: &'static str,
    bus: Arc<dyn ConversationBus>,
    docmem: Docmem,
    _dir: tempfile::TempDir,
}

async fn backends() -> Vec<Backend> {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("bus.db").display());
    let docmem = Docmem::open(&url).await.unwrap();
    let mut backends = vec![Backend {
        name: "embedded-log",
        bus: Arc::new(LogBus::open(&url, None).await.unwrap()),
        docmem,
        _dir: dir,
    }];
    if let Some(url) = mesh_test_support::postgres_url() {
        // Topics and groups are unique per test, so runs sharing the database never meet.
        let bus = Arc::new(LogBus::open(&url, None).await.unwrap());
        let docmem = Docmem::open(&url).await.unwrap();
        backends.push(Backend { name: "embedded-log-postgres", bus, docmem, _dir: tempfile::tempdir().unwrap() });
    }
    if let Some(brokers) = mesh_test_support::kafka_brokers() {
        let dir = tempfile::tempdir().unwrap();
        let docmem = Docmem::open(&format!("sqlite://{}", dir.path().join("docmem.db").display())).await.unwrap();
        backends.push(Backend {
            name: "kafka",
            bus: Arc::new(KafkaBus::connect(&brokers, KAFKA_TOPIC_PARTITIONS_DEFAULT.try_into().unwrap()).unwrap()),
            docmem,
            _dir: dir,
        });
    }
    backends
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// Appends a message node from `sender` and produces its record, as a client agent does.
async fn say(backend: &Backend, topic: &str, root: &str, sender: &str, text: &str) -> BusRecord {
    let node = backend.docmem.append_child(root, &Context::agent_text(sender), text).await.unwrap();
    let first = backend.docmem.read_conversation(root).await.unwrap().len() == 1;
    let record = BusRecord::message(sender, root, &node.id, if first { ACTION_CREATE } else { ACTION_APPEND });
    backend.bus.produce(topic, &record).await.unwrap();
    record
}

async fn new_conversation(backend: &Backend) -> String {
    backend.docmem.create_root("", &Context::default(), "").await.unwrap().id
}

/// Reads `count` records of `topic` for `group`, without committing.
async fn read(backend: &Backend, topic: &str, group: &str, count: usize) -> Vec<mesh_bus::Delivered> {
    let mut consumer = backend.bus.consumer(topic, group).await.unwrap();
    let mut read = Vec::new();
    let deadline = Duration::from_millis(DELIVERY_WAIT_MS);
    while read.len() < count {
        let batch = tokio::time::timeout(deadline, consumer.next_batch()).await.expect("records delivered").unwrap();
        read.extend(batch);
    }
    read
}

#[derive(Debug)]
struct Echo;

impl Answerer for Echo {
    async fn answer(&self, _: &BusRecord, node: &Node, messages: Vec<ChatMessage>) -> Result<Option<String>, BusError> {
        Ok(Some(format!("echo {} (of {} messages)", node.content, messages.len())))
    }
}

/// An echo that says which instance of the agent answered.
#[derive(Debug)]
struct InstanceEcho(&'static str);

impl Answerer for InstanceEcho {
    async fn answer(&self, _: &BusRecord, node: &Node, messages: Vec<ChatMessage>) -> Result<Option<String>, BusError> {
        Ok(Some(format!("{}: echo {} (of {} messages)", self.0, node.content, messages.len())))
    }
}

fn settings(agent_id: &str, topic: &str) -> ParticipantSettings {
    ParticipantSettings {
        agent_id: agent_id.into(),
        topic: topic.into(),
        service: agent_id.into(),
        cache_conversations_max: 100.try_into().unwrap(),
    }
}

fn participant(backend: &Backend, agent_id: &str, topic: &str) -> Participant<Echo> {
    Participant::new(settings(agent_id, topic), backend.bus.clone(), backend.docmem.clone(), Arc::new(Echo))
}

/// Waits until the conversation holds `count` messages.
async fn wait_for_messages(backend: &Backend, root: &str, count: usize) -> Vec<Node> {
    let started = Instant::now();
    loop {
        let messages = backend.docmem.read_conversation(root).await.unwrap();
        if messages.len() >= count {
            return messages;
        }
        assert!(
            started.elapsed() < Duration::from_millis(DELIVERY_WAIT_MS),
            "{}: {} of {count} messages",
            backend.name,
            messages.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_a_conversation_arrive_in_order() {
    for backend in backends().await {
        let topic = unique("agent");
        backend.bus.ensure_topic(&topic).await.unwrap();
        backend.bus.ensure_topic(&topic).await.unwrap();
        let root = new_conversation(&backend).await;
        let mut sent = Vec::new();
        for i in 0..20 {
            sent.push(say(&backend, &topic, &root, "ui-1", &format!("m{i}")).await.node_id);
        }
        let read = read(&backend, &topic, &unique("group"), 20).await;
        let offsets: Vec<i64> = read.iter().map(|d| d.offset).collect();
        assert!(offsets.windows(2).all(|w| w[0] < w[1]), "{}: {offsets:?}", backend.name);
        let nodes: Vec<String> = read.iter().map(|d| d.record.node_id.clone()).collect();
        assert_eq!(nodes, sent, "{}", backend.name);
        assert_eq!(read[0].record.action, ACTION_CREATE);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interleaved_conversations_on_one_topic_stay_apart() {
    for backend in backends().await {
        let topic = unique("agent");
        backend.bus.ensure_topic(&topic).await.unwrap();
        let (a, b) = (new_conversation(&backend).await, new_conversation(&backend).await);
        for i in 0..10 {
            say(&backend, &topic, &a, "ui-1", &format!("a{i}")).await;
            say(&backend, &topic, &b, "ui-2", &format!("b{i}")).await;
        }
        let read = read(&backend, &topic, &unique("group"), 20).await;
        let mut conversations = Conversations::new(10.try_into().unwrap());
        conversations.apply_batch(&backend.docmem, &read).await.unwrap();
        for (root, prefix) in [(&a, "a"), (&b, "b")] {
            let texts: Vec<String> =
                conversations.peek(root).unwrap().message_list("x").into_iter().map(|m| m.content).collect();
            assert_eq!(texts, (0..10).map(|i| format!("{prefix}{i}")).collect::<Vec<_>>(), "{}", backend.name);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_answers_others_and_tools_but_never_itself() {
    for backend in backends().await {
        let topic = unique("conv");
        let agent = topic.clone();
        backend.bus.ensure_topic(&topic).await.unwrap();
        let root = new_conversation(&backend).await;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(participant(&backend, &agent, &topic).run_until(async {
            let _ = stopped.await;
        }));
        say(&backend, &topic, &root, "ui-123", "Hello").await;
        wait_for_messages(&backend, &root, 2).await;
        // A tool result is someone else's message: it is answered. A record of the agent's own
        // is not.
        say(&backend, &topic, &root, TOOL_AGENT_ID, "total 48").await;
        wait_for_messages(&backend, &root, 4).await;
        say(&backend, &topic, &root, &agent, "a note to myself").await;
        say(&backend, &topic, &root, "ui-123", "Bye").await;
        let messages = wait_for_messages(&backend, &root, 7).await;
        let _ = stop.send(());
        running.await.unwrap();
        let roles: Vec<Role> = message_list(&messages, &agent).iter().map(|m| m.role).collect();
        use Role::{Assistant as A, User as U};
        assert_eq!(roles, [U, A, U, A, A, U, A], "{}", backend.name);
        assert_eq!(messages[1].content, "echo Hello (of 1 messages)", "{}", backend.name);
        assert_eq!(messages[3].content, "echo total 48 (of 3 messages)", "{}", backend.name);
        assert_eq!(messages[6].content, "echo Bye (of 6 messages)", "{}", backend.name);
        let seen_from_ui: Vec<Role> = message_list(&messages, "ui-123").iter().map(|m| m.role).collect();
        assert_eq!(seen_from_ui, [A, U, U, U, U, A, U], "{}", backend.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_resumes_after_its_committed_offset() {
    for backend in backends().await {
        let topic = unique("agent");
        let group = consumer_group(&unique("ui"));
        backend.bus.ensure_topic(&topic).await.unwrap();
        let root = new_conversation(&backend).await;
        for i in 0..6 {
            say(&backend, &topic, &root, "ui-1", &format!("m{i}")).await;
        }
        {
            let mut consumer = backend.bus.consumer(&topic, &group).await.unwrap();
            let mut read = Vec::new();
            while read.len() < 6 {
                read.extend(consumer.next_batch().await.unwrap());
            }
            consumer.commit(&DoneOffsets::of_batch(&read[..3])).await.unwrap();
        }
        // The restarted consumer of the group goes on after the committed record, not from the start.
        let resumed = read(&backend, &topic, &group, 3).await;
        let texts: Vec<String> = backend
            .docmem
            .get_many(&resumed.iter().map(|d| d.record.node_id.clone()).collect::<Vec<_>>())
            .await
            .unwrap()
            .into_iter()
            .map(|n| n.content)
            .collect();
        let mut texts = texts;
        texts.sort();
        assert_eq!(texts, ["m3", "m4", "m5"], "{}", backend.name);
        assert_eq!(resumed[0].offset, 3, "{}: offsets start at 0 on a new topic", backend.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_rebuilds_the_same_message_lists() {
    for backend in backends().await {
        let topic = unique("conv");
        let agent = topic.clone();
        backend.bus.ensure_topic(&topic).await.unwrap();
        let roots = [new_conversation(&backend).await, new_conversation(&backend).await];
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(participant(&backend, &agent, &topic).run_until(async {
            let _ = stopped.await;
        }));
        for turn in 0..3 {
            for root in &roots {
                say(&backend, &topic, root, "ui-9", &format!("turn {turn}")).await;
                wait_for_messages(&backend, root, 2 * turn + 2).await;
            }
        }
        let _ = stop.send(());
        running.await.unwrap();
        let mut rebuilt = Conversations::new(10.try_into().unwrap());
        let replayed = rebuilt.rebuild(backend.bus.as_ref(), &backend.docmem, &topic, &|_| true).await.unwrap();
        assert_eq!(replayed, 12, "{}", backend.name);
        for root in &roots {
            let stored = message_list(&backend.docmem.read_conversation(root).await.unwrap(), &agent);
            assert_eq!(rebuilt.peek(root).unwrap().message_list(&agent), stored, "{}", backend.name);
            assert_eq!(stored.len(), 6);
        }
        // Only one conversation, when the filter asks for it.
        let mut one = Conversations::new(10.try_into().unwrap());
        let root = roots[0].clone();
        one.rebuild(backend.bus.as_ref(), &backend.docmem, &topic, &|r| r.conversation_id == root).await.unwrap();
        assert_eq!(one.len(), 1, "{}", backend.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_between_answering_and_committing_answers_once() {
    for backend in backends().await {
        let topic = unique("conv");
        let agent = topic.clone();
        backend.bus.ensure_topic(&topic).await.unwrap();
        let root = new_conversation(&backend).await;
        let question = say(&backend, &topic, &root, "ui-1", "once?").await;
        {
            // The agent answers (node written, record produced) and dies before committing.
            let mut consumer = backend.bus.consumer(&topic, &consumer_group(&agent)).await.unwrap();
            let batch = tokio::time::timeout(Duration::from_millis(DELIVERY_WAIT_MS), consumer.next_batch())
                .await
                .unwrap()
                .unwrap();
            participant(&backend, &agent, &topic).apply_batch(&batch).await.unwrap();
        }
        assert_eq!(backend.docmem.read_conversation(&root).await.unwrap().len(), 2, "{}", backend.name);
        // The restarted agent gets the question again, finds it answered, and goes on.
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(participant(&backend, &agent, &topic).run_until(async {
            let _ = stopped.await;
        }));
        let again = say(&backend, &topic, &root, "ui-1", "and again?").await;
        // The answer to the later message: the agent has applied every record before it, so a
        // wrong second answer to the first question, were one coming, is written by now.
        let answered = answer_node_id(&agent, &again.node_id);
        mesh_test_support::eventually(
            &format!("{}: the answer to the second question", backend.name),
            Duration::from_millis(DELIVERY_WAIT_MS),
            async || backend.docmem.get_many(std::slice::from_ref(&answered)).await.unwrap().len() == 1,
        )
        .await;
        let _ = stop.send(());
        running.await.unwrap();
        let messages = backend.docmem.read_conversation(&root).await.unwrap();
        let texts: Vec<&str> = messages.iter().map(|n| n.content.as_str()).collect();
        assert_eq!(
            texts,
            ["once?", "echo once? (of 1 messages)", "and again?", "echo and again? (of 3 messages)"],
            "{}",
            backend.name
        );
        assert_eq!(messages[1].id, answer_node_id(&agent, &question.node_id), "{}", backend.name);
        // No duplicate answer on the topic either, as a replay sees it.
        let mut rebuilt = Conversations::new(10.try_into().unwrap());
        rebuilt.rebuild(backend.bus.as_ref(), &backend.docmem, &topic, &|_| true).await.unwrap();
        assert_eq!(rebuilt.peek(&root).unwrap().len(), 4, "{}", backend.name);
    }
}

#[tokio::test]
async fn producing_to_a_missing_topic_is_refused() {
    for backend in backends().await {
        if backend.name == "kafka" {
            // Brokers may auto-create topics; the embedded log never does.
            continue;
        }
        let record = BusRecord::message("ui-1", "root", "n1", ACTION_CREATE);
        let error = backend.bus.produce(&unique("missing"), &record).await.unwrap_err();
        assert!(matches!(error, BusError::UnknownTopic(_)), "{error}");
    }
}

#[tokio::test]
async fn a_topic_exists_once_made_and_asking_makes_none() {
    for backend in backends().await {
        let topic = unique("exists");
        for _ in 0..2 {
            assert!(!backend.bus.topic_exists(&topic).await.unwrap(), "{}: {topic} made by asking", backend.name);
        }
        backend.bus.ensure_topic(&topic).await.unwrap();
        // A broker's metadata may trail the topic's creation by a moment.
        mesh_test_support::eventually(
            &format!("{}: {topic} listed once made", backend.name),
            Duration::from_millis(DELIVERY_WAIT_MS),
            async || backend.bus.topic_exists(&topic).await.unwrap(),
        )
        .await;
    }
}

/// A refused produce has begun a write (the topic's offset is claimed, and found missing, inside
/// its transaction): it must end that transaction before the next writer's turn, or the next
/// produce finds the database locked.
#[tokio::test]
async fn a_refused_produce_leaves_the_log_writable_at_once() {
    for backend in backends().await {
        if backend.name == "kafka" {
            continue;
        }
        let topic = unique("writable");
        backend.bus.ensure_topic(&topic).await.unwrap();
        let record = BusRecord::message("ui-1", "root", "n1", ACTION_CREATE);
        for round in 0..200 {
            let refused = backend.bus.produce(&unique("missing"), &record).await;
            assert!(matches!(refused, Err(BusError::UnknownTopic(_))), "{}, round {round}: {refused:?}", backend.name);
            let position = backend.bus.produce(&topic, &record).await;
            assert_eq!(position.unwrap().offset, round, "{}, round {round}", backend.name);
        }
    }
}

/// Fixed conversation ids: the partitioner hashes the key, so they land on the same partitions
/// in every run.
fn fixed_conversations(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("conversation-{i}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_conversation_keeps_to_one_partition_in_order() {
    for backend in backends().await {
        let topic = unique("agent");
        backend.bus.ensure_topic(&topic).await.unwrap();
        let conversations = fixed_conversations(12);
        // Interleaved across conversations, produced in several calls of several records.
        let mut produced: BTreeMap<String, Vec<(mesh_bus::Position, String)>> = BTreeMap::new();
        for round in 0..5 {
            let records: Vec<BusRecord> = conversations
                .iter()
                .map(|c| BusRecord::message("ui-1", c, &format!("{c}/{round}"), ACTION_APPEND))
                .collect();
            let positions = backend.bus.produce_many(&topic, &records).await.unwrap();
            for (record, position) in records.iter().zip(positions) {
                produced.entry(record.conversation_id.clone()).or_default().push((position, record.node_id.clone()));
            }
        }
        let mut partitions_used = BTreeSet::new();
        for (conversation, records) in &produced {
            let partitions: BTreeSet<i32> = records.iter().map(|(p, _)| p.partition).collect();
            assert_eq!(partitions.len(), 1, "{}: {conversation} spread over {partitions:?}", backend.name);
            assert!(records.windows(2).all(|w| w[0].0.offset < w[1].0.offset), "{}: {records:?}", backend.name);
            partitions_used.extend(partitions);
        }
        let read = read(&backend, &topic, &unique("group"), 60).await;
        for (conversation, records) in &produced {
            let delivered: Vec<(mesh_bus::Position, String)> = read
                .iter()
                .filter(|d| &d.record.conversation_id == conversation)
                .map(|d| (mesh_bus::Position { partition: d.partition, offset: d.offset }, d.record.node_id.clone()))
                .collect();
            assert_eq!(&delivered, records, "{}: {conversation} delivered where and as produced", backend.name);
        }
        if backend.name == "kafka" {
            assert!(
                partitions_used.len() > 1,
                "12 conversations over {KAFKA_TOPIC_PARTITIONS_DEFAULT} partitions used only {partitions_used:?}"
            );
        } else {
            assert_eq!(partitions_used, BTreeSet::from([mesh_bus::LOG_PARTITION]), "{}", backend.name);
        }
    }
}

/// What the members of a group received: which member, and the record.
type Received = Arc<Mutex<Vec<(usize, Delivered)>>>;

/// Runs a group member that commits every batch, until aborted.
fn member(
    mut consumer: Box<dyn mesh_bus::BusConsumer>,
    index: usize,
    received: Received,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let batch = consumer.next_batch().await.unwrap();
            received.lock().unwrap().extend(batch.iter().map(|d| (index, d.clone())));
            consumer.commit(&DoneOffsets::of_batch(&batch)).await.unwrap();
        }
    })
}

/// Seed 001's scaling: two consumers in one group share a topic's conversations, each
/// conversation wholly with one of them, in order. Kafka only: the embedded log has one partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_of_two_splits_the_conversations() {
    let Some(backend) = backends().await.into_iter().find(|b| b.name == "kafka") else { return };
    let topic = unique("agent");
    let group = unique("group");
    backend.bus.ensure_topic(&topic).await.unwrap();
    let received: Received = Arc::default();
    let members = [
        member(backend.bus.consumer(&topic, &group).await.unwrap(), 0, received.clone()),
        member(backend.bus.consumer(&topic, &group).await.unwrap(), 1, received.clone()),
    ];
    let conversations = fixed_conversations(12);
    let deadline = Duration::from_millis(DELIVERY_WAIT_MS);
    // Until both members hold partitions: rounds of one record per conversation, each round read
    // in full, until one round came to both members and to each only once.
    let mut round = 0;
    let started = Instant::now();
    loop {
        let records: Vec<BusRecord> = conversations
            .iter()
            .map(|c| BusRecord::message("ui-1", c, &format!("warm-{round}"), ACTION_APPEND))
            .collect();
        backend.bus.produce_many(&topic, &records).await.unwrap();
        let tag = format!("warm-{round}");
        let this_round = || -> Vec<(usize, String)> {
            received
                .lock()
                .unwrap()
                .iter()
                .filter(|(_, d)| d.record.node_id == tag)
                .map(|(member, d)| (*member, d.record.conversation_id.clone()))
                .collect()
        };
        mesh_test_support::eventually(&format!("round {round} delivered"), deadline, async || {
            this_round().iter().map(|(_, c)| c).collect::<BTreeSet<_>>().len() == conversations.len()
        })
        .await;
        let got = this_round();
        let members_used: BTreeSet<usize> = got.iter().map(|(m, _)| *m).collect();
        if got.len() == conversations.len() && members_used.len() == 2 {
            break;
        }
        assert!(started.elapsed() < deadline, "the group never split: last round {got:?}");
        round += 1;
    }
    received.lock().unwrap().clear();
    let mut records = Vec::new();
    for i in 0..10 {
        records.extend(conversations.iter().map(|c| BusRecord::message("ui-1", c, &format!("{c}/{i}"), ACTION_APPEND)));
    }
    backend.bus.produce_many(&topic, &records).await.unwrap();
    mesh_test_support::eventually("every record delivered", deadline, async || {
        received.lock().unwrap().len() >= records.len()
    })
    .await;
    for member in &members {
        member.abort();
    }
    let received = received.lock().unwrap().clone();
    assert_eq!(received.len(), records.len(), "each record delivered once");
    let mut holders: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    for conversation in &conversations {
        let of_it: Vec<&(usize, Delivered)> =
            received.iter().filter(|(_, d)| &d.record.conversation_id == conversation).collect();
        let order: Vec<String> = of_it.iter().map(|(_, d)| d.record.node_id.clone()).collect();
        assert_eq!(order, (0..10).map(|i| format!("{conversation}/{i}")).collect::<Vec<_>>());
        holders.insert(conversation.clone(), of_it.iter().map(|(m, _)| *m).collect());
    }
    assert!(holders.values().all(|members| members.len() == 1), "a conversation read by both: {holders:?}");
    let by_member: BTreeSet<usize> = holders.values().flatten().copied().collect();
    assert_eq!(by_member, BTreeSet::from([0, 1]), "both members hold conversations: {holders:?}");
}

/// Two instances of one agent in its group: every message is answered once, by the instance that
/// holds its conversation, with the whole conversation in view, including the turns the other
/// instance answered before the group moved the conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_of_an_agent_answer_each_message_once() {
    let Some(backend) = backends().await.into_iter().find(|b| b.name == "kafka") else { return };
    let topic = unique("conv");
    let agent = topic.clone();
    backend.bus.ensure_topic(&topic).await.unwrap();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let run = |name: &'static str| {
        let mut stopped = stopped.clone();
        let participant = Participant::new(
            settings(&agent, &topic),
            backend.bus.clone(),
            backend.docmem.clone(),
            Arc::new(InstanceEcho(name)),
        );
        tokio::spawn(participant.run_until(async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }))
    };
    // The first instance holds every partition and answers alone; then the second joins.
    let first = run("first");
    // Enough conversations that both instances' partitions hold some (all 16 on one side's half of
    // the partitions: 1 in 32,768).
    let mut roots = Vec::new();
    for _ in 0..16 {
        roots.push(new_conversation(&backend).await);
    }
    for root in &roots {
        say(&backend, &topic, root, "ui-1", "turn 0").await;
    }
    for root in &roots {
        wait_for_messages(&backend, root, 2).await;
    }
    let second = run("second");
    let mut turns = 1;
    let started = Instant::now();
    loop {
        for root in &roots {
            say(&backend, &topic, root, "ui-1", &format!("turn {turns}")).await;
        }
        turns += 1;
        let mut answerers = BTreeSet::new();
        for root in &roots {
            let messages = wait_for_messages(&backend, root, 2 * turns).await;
            answerers.insert(messages.last().unwrap().content.split(':').next().unwrap().to_owned());
        }
        if answerers.len() == 2 {
            break;
        }
        assert!(started.elapsed() < Duration::from_millis(DELIVERY_WAIT_MS), "the second instance never answered");
    }
    let _ = stop.send(true);
    first.await.unwrap();
    second.await.unwrap();
    for root in &roots {
        let messages = backend.docmem.read_conversation(root).await.unwrap();
        assert_eq!(messages.len(), 2 * turns, "each message answered once: {messages:?}");
        for (turn, pair) in messages.chunks(2).enumerate() {
            assert_eq!(pair[0].content, format!("turn {turn}"));
            let answer = pair[1].content.split_once(": ").unwrap().1;
            // The answering instance saw every message before it, whoever answered them.
            assert_eq!(answer, format!("echo turn {turn} (of {} messages)", 2 * turn + 1), "{messages:?}");
        }
    }
}

/// A replay ends while producers keep writing: it reads to the end the topic had when it began
/// (and on Kafka a short tail past it), not for as long as records keep coming.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_ends_under_steady_traffic() {
    for backend in backends().await {
        let topic = unique("busy");
        backend.bus.ensure_topic(&topic).await.unwrap();
        let conversations = fixed_conversations(8);
        let records: Vec<BusRecord> = conversations
            .iter()
            .map(|c| BusRecord::message("ui-1", c, &format!("{c}/before"), ACTION_APPEND))
            .collect();
        backend.bus.produce_many(&topic, &records).await.unwrap();
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let traffic = {
            let (bus, topic, conversations) = (backend.bus.clone(), topic.clone(), conversations.clone());
            tokio::spawn(async move {
                let mut produced = 0_usize;
                while !*stopped.borrow_and_update() {
                    let conversation = &conversations[produced % conversations.len()];
                    let record = BusRecord::message("ui-1", conversation, &format!("during-{produced}"), ACTION_APPEND);
                    bus.produce(&topic, &record).await.unwrap();
                    produced += 1;
                }
                produced
            })
        };
        // Traffic is flowing before the replay begins.
        let mut watcher = backend.bus.consumer(&topic, &unique("group")).await.unwrap();
        mesh_test_support::eventually(
            &format!("{}: traffic", backend.name),
            Duration::from_millis(DELIVERY_WAIT_MS),
            async || {
                let batch = watcher.next_batch().await.unwrap();
                batch.iter().any(|d| d.record.node_id.starts_with("during-"))
            },
        )
        .await;
        let mut conversations_rebuilt = Conversations::new(10.try_into().unwrap());
        let replayed = tokio::time::timeout(
            Duration::from_millis(DELIVERY_WAIT_MS),
            conversations_rebuilt.rebuild(backend.bus.as_ref(), &backend.docmem, &topic, &|_| true),
        )
        .await
        .unwrap_or_else(|_| panic!("{}: the replay never ended under traffic", backend.name))
        .unwrap();
        let _ = stop.send(true);
        let produced = traffic.await.unwrap();
        assert!(replayed >= records.len(), "{}: {replayed} records replayed", backend.name);
        assert!(produced > 0, "{}", backend.name);
    }
}
