//! End to end over the conversation bus: a WebSocket conversation with the orchestrator through
//! the UI agent. The orchestrator runs as a child process on the bus (embedded log in a SQLite
//! file shared with this process); it is SIGKILLed and restarted mid-conversation, and the
//! conversation goes on with its history intact and the seed's roles. The same again on Kafka
//! when `MESH_TEST_KAFKA_BROKERS` names a broker.

#[path = "common/binaries.rs"]
mod binaries;
mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use a2a_mesh::SuiteConfig;
use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

/// Longest one answer may take (the first includes the orchestrator's start and discovery).
const ANSWER_DEADLINE_MS: u64 = 60_000;

/// The orchestrator binary beside this test's own binaries.
fn orchestrator_binary() -> std::path::PathBuf {
    binaries::service_binaries(&["orchestrator"]).join("orchestrator")
}

fn spawn_orchestrator(binary: &std::path::Path, registry: &str, bus: &mesh_bus::BusConfig) -> Child {
    let mut command = Command::new(binary);
    if let Some(brokers) = &bus.kafka_brokers {
        command.env("MESH_ORCHESTRATOR_BUS__KAFKA_BROKERS", brokers);
    }
    command
        .args(["--registry-url", registry, "--port", "0"])
        .env("MESH_ORCHESTRATOR_BUS__DATABASE_URL", &bus.database_url)
        .env("MESH_ORCHESTRATOR_BUS__INSTANCE_ID", &bus.instance_id)
        .env("MESH_ORCHESTRATOR_TASK_STORE_URL", "sqlite::memory:")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the orchestrator starts")
}

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Sends one line and waits for the one answer's query.
async fn turn(socket: &mut Socket, text: &str) -> String {
    socket.send(Message::Text(text.into())).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_millis(ANSWER_DEADLINE_MS), socket.next())
        .await
        .unwrap_or_else(|_| panic!("no answer to {text:?}"))
        .unwrap()
        .unwrap();
    let Message::Text(answer) = answer else { panic!("a text answer, not {answer:?}") };
    parse(answer.as_str())
}

/// The orchestrator's answer over the bus is its answer's text part, as `ask` prints it (then
/// any warnings of a partial answer): the query it searched is its first line.
fn parse(answer: &str) -> String {
    let first = answer.lines().next().unwrap_or_default();
    let query = first.strip_prefix("Query: ").unwrap_or_else(|| panic!("no query line: {answer}"));
    assert!(answer.contains("\n 1. ["), "ranked results: {answer}");
    query.to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_on_the_embedded_log_survives_the_orchestrator_being_killed() {
    conversation_survives_a_killed_orchestrator(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_on_kafka_survives_the_orchestrator_being_killed() {
    if let Some(brokers) = mesh_test_support::kafka_brokers() {
        conversation_survives_a_killed_orchestrator(Some(brokers)).await;
    }
}

/// Seed 001 as drawn: the bus on Kafka, docmem (and the orchestrator's and UI agent's bus state)
/// on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_on_kafka_with_docmem_on_postgresql_survives_the_orchestrator_being_killed() {
    let Some(brokers) = mesh_test_support::kafka_brokers() else { return };
    let Some(database) = mesh_test_support::ScratchDatabase::create("bus_conversation").await else { return };
    conversation_survives_a_killed_orchestrator_on(Some(brokers), Some(database.url.clone())).await;
    database.drop_database().await;
}

async fn conversation_survives_a_killed_orchestrator(kafka_brokers: Option<String>) {
    conversation_survives_a_killed_orchestrator_on(kafka_brokers, None).await;
}

/// The conversation, on Kafka when `kafka_brokers` is given (else the embedded log), with docmem
/// in `database_url` when given (else the suite's SQLite file).
async fn conversation_survives_a_killed_orchestrator_on(kafka_brokers: Option<String>, database_url: Option<String>) {
    let binary = tokio::task::spawn_blocking(orchestrator_binary).await.unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut config = SuiteConfig::ephemeral(data.path());
    // The bus's orchestrator is the child process below; the in-process one answers HTTP only.
    config.orchestrator.agent.bus = None;
    // Topics and groups of their own on a broker that outlives test runs.
    config.ui_agent.bus.instance_id = format!("t{}", uuid::Uuid::new_v4().simple());
    config.ui_agent.bus.kafka_brokers = kafka_brokers;
    if let Some(url) = database_url {
        config.ui_agent.bus.database_url = url;
    }
    let bus = config.ui_agent.bus.clone();
    // Every agent registered first: the child orchestrator's first question discovers search.
    let suite = common::start_healthy(config, None).await;
    let mut orchestrator = spawn_orchestrator(&binary, &suite.urls.registry, &bus);
    let orchestrator_id = mesh_bus::agent_id("orchestrator", &bus.instance_id);
    let ui_agent_id = mesh_bus::agent_id("ui", &bus.instance_id);

    let ws_url = format!("{}/ws?agent=orchestrator", suite.urls.ui_agent.replacen("http://", "ws://", 1));
    let (mut socket, response) = tokio_tungstenite::connect_async(ws_url.as_str()).await.unwrap();
    let conversation = response.headers()[ui_agent::WS_CONVERSATION_HEADER].to_str().unwrap().to_owned();

    let questions = [
        "show me robots playing soccer",
        "what about underwater drones",
        "and solar powered cars",
        "now electric guitars",
        "finally mountain bikes",
    ];
    // Follow-ups are searched with the turns they follow, across the restart too (the history
    // comes from docmem); "finally ..." opens a query of its own.
    let searched = [
        "show me robots playing soccer",
        "show me robots playing soccer underwater drones",
        "show me robots playing soccer underwater drones solar powered cars",
        "show me robots playing soccer underwater drones solar powered cars electric guitars",
        "finally mountain bikes",
    ];
    for (question, expected) in questions.iter().zip(searched).take(3) {
        assert_eq!(turn(&mut socket, question).await, expected);
    }

    let http = reqwest::Client::new();
    let messages = |viewer: &str| {
        let url = format!("{}/conversations/{conversation}/messages?as={viewer}", suite.urls.ui_agent);
        let http = http.clone();
        async move { http.get(url).send().await.unwrap().json::<serde_json::Value>().await.unwrap() }
    };

    // Killed mid-conversation: the next message waits on the topic until it comes back. The UI
    // agent stores the question in docmem before it produces it: once stored, it is sent while
    // no orchestrator runs.
    orchestrator.kill().unwrap();
    orchestrator.wait().unwrap();
    socket.send(Message::Text(questions[3].into())).await.unwrap();
    mesh_test_support::eventually(
        "the question is stored while the orchestrator is down",
        Duration::from_millis(ANSWER_DEADLINE_MS),
        async || {
            let stored = messages(&orchestrator_id).await;
            let list = stored["messages"].as_array().cloned().unwrap_or_default();
            list.len() == 7 && list[6]["content"] == questions[3]
        },
    )
    .await;
    let mut orchestrator = spawn_orchestrator(&binary, &suite.urls.registry, &bus);
    let answer =
        tokio::time::timeout(Duration::from_millis(ANSWER_DEADLINE_MS), socket.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(parse(answer.to_text().unwrap()), searched[3]);
    assert_eq!(turn(&mut socket, questions[4]).await, searched[4]);
    orchestrator.kill().unwrap();
    orchestrator.wait().unwrap();

    // Five questions, five answers, none twice, in order: the history came through the restart.
    let as_orchestrator = messages(&orchestrator_id).await;
    let list = as_orchestrator["messages"].as_array().unwrap();
    assert_eq!(list.len(), 10, "{as_orchestrator}");
    for (i, question) in questions.iter().enumerate() {
        assert_eq!(list[2 * i]["role"], "user");
        assert_eq!(list[2 * i]["content"], *question);
        assert_eq!(list[2 * i + 1]["role"], "assistant");
        assert_eq!(parse(list[2 * i + 1]["content"].as_str().unwrap()), searched[i]);
    }
    let as_ui = messages(&ui_agent_id).await;
    let roles: Vec<&str> = as_ui["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["assistant", "user"].repeat(5));

    // The log rebuilds the same conversation, and lists and the tree find it.
    let replay: serde_json::Value = http
        .post(format!("{}/conversations/{conversation}/replay?as={orchestrator_id}", suite.urls.ui_agent))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(replay["matches_docmem"], true, "{replay}");
    assert_eq!(replay["messages"], as_orchestrator["messages"]);
    let listed: serde_json::Value = http
        .get(format!("{}/conversations?agent={orchestrator_id}", suite.urls.ui_agent))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["conversations"][0]["id"], conversation.as_str(), "{listed}");
    let tree: serde_json::Value = http
        .get(format!("{}/conversations/{conversation}", suite.urls.ui_agent))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(tree["nodes"].as_array().unwrap().len(), 11, "root and ten messages");
    assert_eq!(tree["nodes"][1]["context"], format!("text:agent:{ui_agent_id}"));
    let missing = http.get(format!("{}/conversations/nope", suite.urls.ui_agent)).send().await.unwrap();
    assert_eq!(missing.status(), 404);
    // The tree is where the configuration says: on PostgreSQL, the eleven nodes are its rows.
    if bus.database_url.starts_with("postgres") {
        let pool = sqlx::PgPool::connect(&bus.database_url).await.unwrap();
        let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM docmem_nodes").fetch_one(&pool).await.unwrap();
        assert_eq!(rows, 11, "root and ten messages in PostgreSQL's docmem");
        pool.close().await;
    }

    socket.close(None).await.unwrap();
    suite.stop().await.unwrap();
}
