//! The task durabilities on real agents on port 0. `memory`: no database (none is created, and
//! `/health` claims none), bounded by its cap (the oldest finished task makes room; a store full
//! of unfinished tasks refuses a new one, saying why) and by the retention's time to live.
//! `buffered`: a task is read back at once after its answer, is committed within the flush
//! interval, and a graceful stop commits every queued task. `durable`: a change the store refuses
//! changes nothing (a cancellation here; the sends are attacked in the root crate's
//! `tests/attacks/durable_answers.rs`). (The serving surface in memory is tested with the other
//! A2A tests, in `a2a.rs`.)

use std::time::{Duration, Instant};

use mesh_agent_kit::{AgentApp, AgentConfig, TaskDurability, TaskEvents, TaskHandler, Turn};
use mesh_client::HttpClient;
use mesh_protocol::a2a::v1::TaskState;
use mesh_tasks::TaskStore;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Served, TIMEOUT, echo_card};
/// The card's name, hence the replica group the agent's tasks are stored under.
const AGENT: &str = "durability";

/// `ask` waits for the user; anything else completes at once.
#[derive(Debug)]
struct Asker;

impl TaskHandler for Asker {
    async fn run(&self, turn: Turn, events: TaskEvents) {
        let text = turn.message.parts.iter().filter_map(|p| p.as_text()).collect::<String>();
        let state = if text == "ask" { TaskState::InputRequired } else { TaskState::Completed };
        let _ = events.status(state, None).await;
    }
}

/// An agent of these tests ([`Asker`]) and the calls they make of it. A trait of this module's,
/// since [`Served`] is the test binary's and other modules give it calls of their own.
trait DurableAgent {
    async fn start(config: &AgentConfig) -> Self;
    async fn rpc(&self, method: &str, params: Value) -> Value;
    async fn send(&self, text: &str) -> Result<String, Value>;
    async fn state(&self, id: &str) -> Option<String>;
}

impl DurableAgent for Served {
    async fn start(config: &AgentConfig) -> Self {
        Self::serve(
            AgentApp::build_tasks(config, echo_card(AGENT), Asker, HttpClient::with_reqwest().unwrap()).await.unwrap(),
        )
    }

    async fn rpc(&self, method: &str, params: Value) -> Value {
        let response = self
            .http
            .post(format!("{}/", self.url))
            .header("A2A-Version", "1.0")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        response.json().await.unwrap()
    }

    /// Sends `text` as a new task's message; the answer's task id, or the error.
    async fn send(&self, text: &str) -> Result<String, Value> {
        let message =
            json!({"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": [{"text": text}]});
        let answer = self.rpc("SendMessage", json!({"message": message})).await;
        match answer["result"]["task"]["id"].as_str() {
            Some(id) => Ok(id.to_owned()),
            None => Err(answer["error"].clone()),
        }
    }

    /// The task's state, or `None` when the agent does not know it.
    async fn state(&self, id: &str) -> Option<String> {
        let got = self.rpc("GetTask", json!({"id": id})).await;
        if got["error"]["code"] == -32001 {
            return None;
        }
        Some(got["result"]["status"]["state"].as_str().unwrap_or_else(|| panic!("{got}")).to_owned())
    }
}

fn memory_config() -> AgentConfig {
    AgentConfig { task_durability: TaskDurability::Memory, ..AgentConfig::default() }
}

#[tokio::test]
async fn memory_tasks_touch_no_database_and_health_says_where_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tasks.db");
    let config = AgentConfig { task_store_url: Some(format!("sqlite://{}", file.display())), ..memory_config() };
    let agent = Served::start(&config).await;
    let id = agent.send("done").await.unwrap();
    assert_eq!(agent.state(&id).await.as_deref(), Some("TASK_STATE_COMPLETED"));
    assert!(!file.exists(), "memory durability opened the SQLite store at {}", file.display());

    let health: Value = agent.http.get(format!("{}/health", agent.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(health["status"], "healthy", "{health}");
    assert!(health["components"].get("database").is_none(), "no database is claimed: {health}");
    let store = &health["components"]["task_store"];
    assert_eq!(
        (store["status"].as_str(), store["durability"].as_str(), store["tasks"].as_u64()),
        (Some("ok"), Some("memory"), Some(1)),
        "{health}"
    );
    agent.stop().await;
}

#[tokio::test]
async fn memory_keeps_at_most_its_cap_evicting_the_oldest_finished_task_first() {
    let agent = Served::start(&AgentConfig { memory_tasks_max: 2, ..memory_config() }).await;
    let done = agent.send("done").await.unwrap();
    let first = agent.send("ask").await.unwrap();
    // Full: the finished task makes room for the second waiting one.
    let second = agent.send("ask").await.unwrap();
    assert_eq!(agent.state(&done).await, None, "the finished task was evicted");
    assert_eq!(agent.state(&first).await.as_deref(), Some("TASK_STATE_INPUT_REQUIRED"));

    // Full of unfinished tasks: a new one is refused, saying why.
    let refused = agent.send("ask").await.unwrap_err();
    assert!(refused["message"].as_str().unwrap().contains("memory_tasks_max"), "{refused}");
    assert_eq!(agent.state(&second).await.as_deref(), Some("TASK_STATE_INPUT_REQUIRED"), "nothing was evicted");

    // Once one of them finishes, it makes room in turn.
    let canceled = agent.rpc("CancelTask", json!({"id": first})).await;
    assert_eq!(canceled["result"]["status"]["state"], "TASK_STATE_CANCELED", "{canceled}");
    let third = agent.send("ask").await.unwrap();
    assert_eq!(agent.state(&first).await, None);
    assert_eq!(agent.state(&third).await.as_deref(), Some("TASK_STATE_INPUT_REQUIRED"));
    agent.stop().await;
}

#[tokio::test]
async fn memory_forgets_finished_tasks_after_their_time_to_live() {
    let config = AgentConfig { finished_task_ttl_ms: 100, task_purge_interval_ms: 20, ..memory_config() };
    let agent = Served::start(&config).await;
    let waiting = agent.send("ask").await.unwrap();
    let done = agent.send("done").await.unwrap();
    let deadline = Instant::now() + TIMEOUT;
    while agent.state(&done).await.is_some() {
        assert!(Instant::now() < deadline, "the finished task outlived its time to live by {TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(agent.state(&waiting).await.as_deref(), Some("TASK_STATE_INPUT_REQUIRED"), "unfinished tasks stay");
    agent.stop().await;
}

fn buffered_config(dir: &tempfile::TempDir, flush_interval_ms: u64) -> (AgentConfig, String) {
    let url = format!("sqlite://{}", dir.path().join("tasks.db").display());
    let config = AgentConfig {
        task_store_url: Some(url.clone()),
        task_durability: TaskDurability::Buffered,
        task_flush_interval_ms: flush_interval_ms,
        ..AgentConfig::default()
    };
    (config, url)
}

#[tokio::test]
async fn a_buffered_task_is_read_at_once_and_committed_within_the_flush_interval() {
    let dir = tempfile::tempdir().unwrap();
    let (config, url) = buffered_config(&dir, 50);
    let agent = Served::start(&config).await;
    let id = agent.send("done").await.unwrap();
    assert_eq!(agent.state(&id).await.as_deref(), Some("TASK_STATE_COMPLETED"), "read your writes");
    let table = TaskStore::open(&url, AGENT).await.unwrap();
    let deadline = Instant::now() + TIMEOUT;
    while table.get("", &id).await.unwrap().is_none() {
        assert!(Instant::now() < deadline, "not committed within {TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    agent.stop().await;
}

#[tokio::test]
async fn a_graceful_stop_commits_every_buffered_task() {
    const TASKS: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    // An interval no test outlasts: only the stop's flush can commit the tasks.
    let (config, url) = buffered_config(&dir, 3_600_000);
    let agent = Served::start(&config).await;
    let sends = (0..TASKS).map(|_| agent.send("done"));
    let ids: Vec<String> = futures::future::join_all(sends).await.into_iter().map(Result::unwrap).collect();
    let table = TaskStore::open(&url, AGENT).await.unwrap();
    assert_eq!(table.get("", &ids[0]).await.unwrap(), None, "answered before any commit");
    agent.stop().await;

    for id in &ids {
        let task = table.get("", id).await.unwrap().unwrap_or_else(|| panic!("task {id} was lost by the stop"));
        assert_eq!(task.status.state, TaskState::Completed);
    }
}

/// Runs `sql` on the SQLite database at `url`, beside the agent using it.
async fn execute(url: &str, sql: &'static str) {
    use sqlx::Connection;
    let mut connection = sqlx::SqliteConnection::connect(url).await.unwrap();
    sqlx::query(sql).execute(&mut connection).await.unwrap();
}

/// `durable` (the default): a cancellation the store refuses changes nothing and is answered the
/// internal error: the task is not shown canceled, to a subscriber or anyone, and goes on.
#[tokio::test]
async fn a_cancellation_the_store_refuses_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("tasks.db").display());
    let agent = Served::start(&AgentConfig { task_store_url: Some(url.clone()), ..AgentConfig::default() }).await;
    let id = agent.send("ask").await.unwrap();
    let subscription = agent
        .http
        .post(format!("{}/", agent.url))
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": id}}))
        .send()
        .await
        .unwrap();
    execute(
        &url,
        "CREATE TRIGGER refuse_cancel BEFORE INSERT ON a2a_tasks WHEN NEW.state = 'TASK_STATE_CANCELED' \
         BEGIN SELECT RAISE(ABORT, 'injected'); END",
    )
    .await;
    let refused = agent.rpc("CancelTask", json!({"id": id})).await;
    assert_eq!(refused["error"]["code"], -32603, "{refused}");
    assert_eq!(agent.state(&id).await.as_deref(), Some("TASK_STATE_INPUT_REQUIRED"));

    // The task goes on, and its subscriber sees that, not a cancellation.
    let message = json!({"messageId": "m2", "role": "ROLE_USER", "taskId": id, "parts": [{"text": "done"}]});
    let answer = agent.rpc("SendMessage", json!({"message": message})).await;
    assert_eq!(answer["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
    let events = tokio::time::timeout(TIMEOUT, subscription.text()).await.unwrap().unwrap();
    let states: Vec<Value> = events
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(|data| serde_json::from_str::<Value>(data.trim()).unwrap()["result"].clone())
        .filter_map(|event| {
            event.get("task").or_else(|| event.get("statusUpdate")).map(|e| e["status"]["state"].clone())
        })
        .collect();
    assert_eq!(states.first(), Some(&json!("TASK_STATE_INPUT_REQUIRED")), "{events}");
    assert_eq!(states.last(), Some(&json!("TASK_STATE_COMPLETED")), "{events}");
    assert!(!states.contains(&json!("TASK_STATE_CANCELED")), "{events}");
    agent.stop().await;
}
