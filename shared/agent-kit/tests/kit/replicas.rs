//! Two replicas of one task agent (real servers on port 0) over one PostgreSQL task store: a task
//! running on replica A is read, listed, followed (`SubscribeToTask`, both bindings) and
//! canceled through replica B; the turn on A hears its cancellation; a replica that starts while
//! another runs a task leaves that task running. Skipped outside CI without
//! `MESH_TEST_POSTGRES_URL`.

use std::sync::Arc;
use std::time::Duration;

use mesh_agent_kit::{AgentApp, AgentConfig, TaskEvents, TaskHandler, Turn};
use mesh_client::HttpClient;
use mesh_protocol::a2a::v1::{AgentCard, Artifact, Part, TaskState};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

use crate::common::{Served, TIMEOUT};

fn card(name: &str) -> AgentCard {
    serde_json::from_value(json!({
        "name": name, "description": "test agent", "version": "1",
        "supportedInterfaces": [], "capabilities": {"streaming": true},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "hold", "name": "Hold", "description": "works until released", "tags": ["hold"]}]
    }))
    .unwrap()
}

/// What the test sees of one replica's turns: a turn works until released (then answers with an
/// artifact and completes) or canceled (then says so).
#[derive(Debug, Default)]
struct Turns {
    release: Notify,
    canceled: Mutex<Option<mpsc::UnboundedSender<String>>>,
}

type Mutex<T> = std::sync::Mutex<T>;

#[derive(Debug, Clone)]
struct Held(Arc<Turns>);

impl TaskHandler for Held {
    async fn run(&self, turn: Turn, events: TaskEvents) {
        let _ = events.status(TaskState::Working, Some("holding")).await;
        tokio::select! {
            () = turn.cancellation.cancelled() => {
                if let Some(canceled) = self.0.canceled.lock().unwrap().as_ref() {
                    let _ = canceled.send(turn.task_id.clone());
                }
                // Too late: the task is canceled, here and in the store.
                let _ = events.status(TaskState::Completed, None).await;
            }
            () = self.0.release.notified() => {
                let answer = Artifact {
                    artifact_id: "a1".into(),
                    name: None,
                    description: None,
                    parts: vec![Part::text("released")],
                    metadata: None,
                    extensions: None,
                };
                let _ = events.artifact(answer, false, true).await;
                let _ = events.status(TaskState::Completed, None).await;
            }
        }
    }
}

struct Replica {
    served: Served,
    turns: Arc<Turns>,
}

impl Replica {
    /// A replica of the agent whose card is named `group`, registering under a name of its own
    /// (as a pod does): replicas share their tasks through the card's name, not their own.
    async fn start(store: &str, group: &str) -> Self {
        let config = AgentConfig {
            task_store_url: Some(store.to_owned()),
            name: Some(format!("{group}-{}", uuid::Uuid::new_v4().simple())),
            ..AgentConfig::default()
        };
        let turns = Arc::new(Turns::default());
        let app = AgentApp::build_tasks(&config, card(group), Held(turns.clone()), HttpClient::with_reqwest().unwrap())
            .await
            .unwrap();
        Self { served: Served::serve(app), turns }
    }

    async fn stop(self) {
        self.served.stop().await;
    }

    async fn rpc(&self, method: &str, params: Value) -> Value {
        let response = self
            .served
            .http
            .post(format!("{}/", self.served.url))
            .header("A2A-Version", "1.0")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        response.json().await.unwrap()
    }

    /// Starts a held task and returns its id once it is stored as working.
    async fn start_held(&self) -> String {
        let message =
            json!({"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": [{"text": "hold"}]});
        let sent =
            self.rpc("SendMessage", json!({"message": message, "configuration": {"returnImmediately": true}})).await;
        sent["result"]["task"]["id"].as_str().unwrap_or_else(|| panic!("no task: {sent}")).to_owned()
    }

    async fn state(&self, id: &str) -> String {
        let got = self.rpc("GetTask", json!({"id": id})).await;
        got["result"]["status"]["state"].as_str().unwrap_or_else(|| panic!("no task: {got}")).to_owned()
    }

    /// Waits (up to the timeout) until the task reads as `state` here: another replica's task is
    /// found once its first save commits.
    async fn await_state(&self, id: &str, state: &str) {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        let read = || async { self.rpc("GetTask", json!({"id": id})).await["result"]["status"]["state"].clone() };
        while read().await != state {
            assert!(tokio::time::Instant::now() < deadline, "task {id} never became {state} on {}", self.served.url);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Opens a subscription, over JSON-RPC or HTTP+JSON, and returns it once its first event (the
    /// task) has arrived.
    async fn subscribe(&self, id: &str, jsonrpc: bool) -> Subscription {
        let request = if jsonrpc {
            self.served
                .http
                .post(format!("{}/", self.served.url))
                .json(&json!({"jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask", "params": {"id": id}}))
        } else {
            self.served
                .http
                .post(format!("{}/tasks/{id}:subscribe", self.served.url))
                .header("content-type", "application/json")
        };
        let response = request.header("A2A-Version", "1.0").send().await.unwrap();
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let mut subscription = Subscription { response, buffer: String::new(), events: Vec::new() };
        let first = subscription.next().await.expect("the task first");
        assert!(first.get("task").is_some(), "{first}");
        subscription
    }
}

/// An open SSE stream, read event by event.
struct Subscription {
    response: reqwest::Response,
    buffer: String,
    events: Vec<Value>,
}

impl Subscription {
    /// The next event (a JSON-RPC result unwrapped), `None` once the stream ends.
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else { continue };
                let mut event: Value = serde_json::from_str(data).unwrap();
                if let Some(result) = event.get_mut("result") {
                    event = result.take();
                }
                self.events.push(event.clone());
                return Some(event);
            }
            let chunk =
                tokio::time::timeout(TIMEOUT, self.response.chunk()).await.expect("an event in time").unwrap()?;
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// Every event until the stream ends, as `kind:state` (`statusUpdate:TASK_STATE_COMPLETED`).
    async fn rest(mut self) -> Vec<String> {
        while self.next().await.is_some() {}
        self.events
            .iter()
            .skip(1)
            .map(|event| {
                let (kind, body) = event.as_object().unwrap().iter().next().unwrap();
                match body["status"]["state"].as_str() {
                    Some(state) => format!("{kind}:{state}"),
                    None => kind.clone(),
                }
            })
            .collect()
    }
}

#[tokio::test]
async fn a_task_running_on_one_replica_is_read_listed_followed_and_canceled_through_another() {
    let Some(store) = mesh_test_support::postgres_url() else { return };
    let name = format!("replicas-{}", uuid::Uuid::new_v4());
    let (a, b) = (Replica::start(&store, &name).await, Replica::start(&store, &name).await);
    let (canceled, mut canceled_on_a) = mpsc::unbounded_channel();
    *a.turns.canceled.lock().unwrap() = Some(canceled);

    // Read and listed through B while A runs it; followed through B until it completes on A.
    let finishing = a.start_held().await;
    b.await_state(&finishing, "TASK_STATE_WORKING").await;
    let listed = b.rpc("ListTasks", json!({})).await;
    let ids: Vec<&str> =
        listed["result"]["tasks"].as_array().unwrap().iter().filter_map(|t| t["id"].as_str()).collect();
    assert_eq!(ids, [finishing.as_str()], "{listed}");
    let followed = b.subscribe(&finishing, true).await;
    a.turns.release.notify_one();
    assert_eq!(followed.rest().await, ["artifactUpdate", "statusUpdate:TASK_STATE_COMPLETED"]);
    let got = b.rpc("GetTask", json!({"id": finishing})).await;
    assert_eq!(got["result"]["artifacts"][0]["parts"][0]["text"], "released", "{got}");

    // Canceled through B: the turn on A stops, B's subscribers see it, and it stays canceled.
    let canceling = a.start_held().await;
    b.await_state(&canceling, "TASK_STATE_WORKING").await;
    let followed_rest = b.subscribe(&canceling, false).await;
    let followed_rpc = b.subscribe(&canceling, true).await;
    let answer = b.rpc("CancelTask", json!({"id": canceling})).await;
    assert_eq!(answer["result"]["status"]["state"], "TASK_STATE_CANCELED", "{answer}");
    let heard = tokio::time::timeout(TIMEOUT, canceled_on_a.recv()).await.expect("A's turn hears it in time");
    assert_eq!(heard.as_deref(), Some(canceling.as_str()));
    for followed in [followed_rest, followed_rpc] {
        assert_eq!(followed.rest().await, ["statusUpdate:TASK_STATE_CANCELED"]);
    }
    for replica in [&a, &b] {
        assert_eq!(replica.state(&canceling).await, "TASK_STATE_CANCELED");
    }
    let again = a.rpc("CancelTask", json!({"id": canceling})).await;
    assert_eq!(again["error"]["code"], -32002, "a canceled task is not cancelable: {again}");

    // Followed through A while it runs on B too: the subscription ends when B's task is canceled
    // through A, and B's turn is stopped.
    let (canceled, mut canceled_on_b) = mpsc::unbounded_channel();
    *b.turns.canceled.lock().unwrap() = Some(canceled);
    let on_b = b.start_held().await;
    a.await_state(&on_b, "TASK_STATE_WORKING").await;
    let followed = a.subscribe(&on_b, false).await;
    let answer = a.rpc("CancelTask", json!({"id": on_b})).await;
    assert_eq!(answer["result"]["status"]["state"], "TASK_STATE_CANCELED", "{answer}");
    let heard = tokio::time::timeout(TIMEOUT, canceled_on_b.recv()).await.expect("B's turn hears it in time");
    assert_eq!(heard.as_deref(), Some(on_b.as_str()));
    assert_eq!(followed.rest().await, ["statusUpdate:TASK_STATE_CANCELED"]);
    a.stop().await;
    b.stop().await;
}

#[tokio::test]
async fn a_replica_starting_while_another_runs_a_task_leaves_it_running() {
    let Some(store) = mesh_test_support::postgres_url() else { return };
    let name = format!("replicas-start-{}", uuid::Uuid::new_v4());
    let a = Replica::start(&store, &name).await;
    let running = a.start_held().await;
    a.await_state(&running, "TASK_STATE_WORKING").await;
    // The new replica fails the running tasks that no live replica holds, at start: not this one.
    let c = Replica::start(&store, &name).await;
    assert_eq!(c.state(&running).await, "TASK_STATE_WORKING");
    let followed = c.subscribe(&running, false).await;
    a.turns.release.notify_one();
    assert_eq!(followed.rest().await, ["artifactUpdate", "statusUpdate:TASK_STATE_COMPLETED"]);
    assert_eq!(c.state(&running).await, "TASK_STATE_COMPLETED");
    a.stop().await;
    c.stop().await;
}
