//! A2A push notifications on real agents on port 0, with a webhook receiver of the test's own
//! (an axum server on port 0): configs created, read, listed and deleted over JSON-RPC and
//! HTTP+JSON in 1.0 and in 0.3; every event of a task delivered with the client's
//! token and credentials and a sequence number; a failing webhook served once it recovers; a
//! redirect not followed, and delivery given up after its attempts; a refused address (or one
//! on a non-public network not opted in) refused with a clear error; a hanging webhook delaying nothing;
//! delivery from SQLite, PostgreSQL and memory stores; and pending
//! notifications delivered by the next agent on the same store after a stop, and after a SIGKILL
//! of a real agent process (this test binary run again as [`agent_process`]).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use mesh_a2a_server::push::PUSH_UNDELIVERED_METADATA_KEY;
use mesh_agent_kit::{AgentApp, AgentConfig, TaskDurability, TaskEvents, TaskHandler, Turn};
use mesh_client::HttpClient;
use mesh_protocol::a2a::v1::{Artifact, Part, TaskState};
use mesh_test_support::wait::eventually;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::common::{Served, TIMEOUT, echo_card};
const AGENT: &str = "push";
const TOKEN: &str = "client-token-1";
const CREDENTIALS: &str = "webhook-secret";

/// `ask` waits for the user; `wait` works until canceled; anything else works, adds an artifact
/// and completes.
#[derive(Debug)]
struct Worker;

impl TaskHandler for Worker {
    async fn run(&self, turn: Turn, events: TaskEvents) {
        let text = turn.message.parts.iter().filter_map(|p| p.as_text()).collect::<String>();
        match text.as_str() {
            "ask" => {
                let _ = events.status(TaskState::InputRequired, Some("which city?")).await;
            }
            "wait" => {
                let _ = events.status(TaskState::Working, None).await;
                turn.cancellation.cancelled().await;
            }
            _ => {
                let _ = events.status(TaskState::Working, None).await;
                let artifact = Artifact {
                    artifact_id: "a1".into(),
                    name: None,
                    description: None,
                    parts: vec![Part::text(format!("did {text}"))],
                    metadata: None,
                    extensions: None,
                };
                let _ = events.artifact(artifact, false, true).await;
                let _ = events.status(TaskState::Completed, None).await;
            }
        }
    }
}

/// One request the webhook received.
#[derive(Debug, Clone)]
struct Received {
    headers: HeaderMap,
    body: Value,
    /// What the webhook answered.
    status: StatusCode,
}

impl Received {
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default()
    }

    fn sequence(&self) -> u64 {
        self.header("x-a2a-notification-sequence").parse().unwrap_or_else(|_| panic!("no sequence: {self:?}"))
    }

    /// The payload's kind and the task state it carries (`task` and `statusUpdate`), or
    /// `artifactUpdate`.
    fn summary(&self) -> String {
        let (kind, value) = self.body.as_object().and_then(|o| o.iter().next()).expect("a one-key StreamResponse");
        match value["status"]["state"].as_str() {
            Some(state) => format!("{kind} {state}"),
            None => kind.clone(),
        }
    }
}

/// How the webhook answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Behaviour {
    Accept,
    /// 503 to the next `n` requests, then accept.
    FailNext(u32),
    /// Never answers.
    Hang,
}

#[derive(Debug)]
struct Hook {
    /// Requests to `/redirect`, which sends them on to `/hook` with a 307.
    redirected: std::sync::atomic::AtomicUsize,
    received: Mutex<Vec<Received>>,
    behaviour: Mutex<Behaviour>,
    arrived: Notify,
}

/// A webhook receiver on port 0.
struct Webhook {
    hook: Arc<Hook>,
    addr: SocketAddr,
}

impl Webhook {
    async fn start(behaviour: Behaviour) -> Self {
        let hook = Arc::new(Hook {
            redirected: Default::default(),
            received: Mutex::new(Vec::new()),
            behaviour: Mutex::new(behaviour),
            arrived: Notify::new(),
        });
        let app = axum::Router::new()
            .route("/hook", axum::routing::post(receive))
            .route("/redirect", axum::routing::post(redirect))
            .with_state(hook.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { hook, addr }
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    fn set(&self, behaviour: Behaviour) {
        *self.hook.behaviour.lock().unwrap() = behaviour;
    }

    fn received(&self) -> Vec<Received> {
        self.hook.received.lock().unwrap().clone()
    }

    /// The requests it accepted, once `count` were, in the order they came.
    async fn accepted(&self, count: usize) -> Vec<Received> {
        self.accepted_within(count, TIMEOUT).await
    }

    async fn accepted_within(&self, count: usize, timeout: Duration) -> Vec<Received> {
        let deadline = Instant::now() + timeout;
        loop {
            let arrived = self.hook.arrived.notified();
            let accepted: Vec<Received> = self.received().into_iter().filter(|r| r.status == StatusCode::OK).collect();
            if accepted.len() >= count {
                return accepted;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "{count} notifications expected within {timeout:?}, got {:#?}", self.received());
            let _ = tokio::time::timeout(left, arrived).await;
        }
    }
}

async fn redirect(State(hook): State<Arc<Hook>>) -> axum::response::Redirect {
    hook.redirected.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    axum::response::Redirect::temporary("/hook")
}

async fn receive(State(hook): State<Arc<Hook>>, headers: HeaderMap, body: axum::body::Bytes) -> StatusCode {
    let status = {
        let mut behaviour = hook.behaviour.lock().unwrap();
        match *behaviour {
            Behaviour::Accept => Some(StatusCode::OK),
            Behaviour::FailNext(n) => {
                *behaviour = if n <= 1 { Behaviour::Accept } else { Behaviour::FailNext(n - 1) };
                Some(StatusCode::SERVICE_UNAVAILABLE)
            }
            Behaviour::Hang => None,
        }
    };
    let Some(status) = status else { return std::future::pending().await };
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    hook.received.lock().unwrap().push(Received { headers, body, status });
    hook.arrived.notify_waiters();
    status
}

/// An agent of these tests ([`Worker`]) and the calls they make of it. A trait of this module's,
/// since [`Served`] is the test binary's and other modules give it calls of their own.
trait PushAgent {
    async fn start(config: &AgentConfig) -> Self;
    async fn rpc(&self, method: &str, params: Value) -> Value;
    async fn rest(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value);
    async fn send(&self, text: &str, webhook: Option<Value>) -> Value;
}

impl PushAgent for Served {
    async fn start(config: &AgentConfig) -> Self {
        Self::serve(
            AgentApp::build_tasks(config, echo_card(AGENT), Worker, HttpClient::with_reqwest().unwrap()).await.unwrap(),
        )
    }

    async fn rpc(&self, method: &str, params: Value) -> Value {
        rpc(&self.http, &self.url, method, params).await
    }

    /// An HTTP+JSON call, in 1.0 (0.3 under `/v1/`, without a version header); the status and
    /// the body.
    async fn rest(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.url));
        if !path.starts_with("/v1/") {
            request = request.header("A2A-Version", "1.0");
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
    }

    /// Sends `text` as a new task's message, with a webhook when given, waiting for the answer
    /// unless the task is `wait`; the answer's `result`.
    async fn send(&self, text: &str, webhook: Option<Value>) -> Value {
        let answer = self.rpc("SendMessage", send_params(text, webhook)).await;
        answer.get("result").cloned().unwrap_or_else(|| panic!("no result: {answer}"))
    }
}

/// A JSON-RPC call to the agent at `url` in the version its method belongs to; the whole response.
async fn rpc(http: &reqwest::Client, url: &str, method: &str, params: Value) -> Value {
    let mut request = http.post(format!("{url}/"));
    if !method.contains('/') {
        request = request.header("A2A-Version", "1.0");
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let response = request.json(&body).send().await.unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    response.json().await.unwrap()
}

/// A config of the webhook at `url` with the test's token and credentials.
fn webhook_config(url: &str) -> Value {
    json!({"url": url, "token": TOKEN, "authentication": {"scheme": "Bearer", "credentials": CREDENTIALS}})
}

/// An agent on a SQLite file of its own (kept by the returned folder), retrying fast, its
/// webhooks allowed on loopback (where the tests' receivers listen).
fn config(dir: &tempfile::TempDir) -> AgentConfig {
    AgentConfig {
        task_store_url: Some(format!("sqlite://{}", dir.path().join("tasks.db").display())),
        push_allowed_networks: vec!["127.0.0.0/8".into()],
        push_retry_delay_min_ms: 20,
        push_retry_delay_max_ms: 200,
        ..AgentConfig::default()
    }
}

#[tokio::test]
async fn the_card_says_push_notifications_are_offered() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Served::start(&config(&dir)).await;
    let card = agent.public_card().await;
    assert_eq!(card["capabilities"]["pushNotifications"], true, "{card}");
    agent.stop().await;

    let off = AgentConfig { push_notifications: false, ..config(&dir) };
    let agent = Served::start(&off).await;
    let card = agent.public_card().await;
    assert_eq!(card["capabilities"]["pushNotifications"], false, "{card}");
    let task_id = agent.send("ask", None).await["task"]["id"].as_str().unwrap().to_owned();
    let refused =
        agent.rpc("CreateTaskPushNotificationConfig", json!({"taskId": task_id, "url": "http://127.0.0.1:9/"})).await;
    assert_eq!(refused["error"]["code"], -32003, "{refused}");
    agent.stop().await;
}

#[tokio::test]
async fn configs_are_created_read_listed_and_deleted_over_every_binding_and_version() {
    let dir = tempfile::tempdir().unwrap();
    for durability in [TaskDurability::Durable, TaskDurability::Memory] {
        let agent = Served::start(&AgentConfig { task_durability: durability, ..config(&dir) }).await;
        let hook = "http://127.0.0.1:9/hook";
        let task_id = agent.send("ask", None).await["task"]["id"].as_str().unwrap().to_owned();

        // JSON-RPC 1.0: without an id, the config is named as its task.
        let created = agent
            .rpc("CreateTaskPushNotificationConfig", json!({"taskId": task_id, "url": hook, "token": TOKEN}))
            .await;
        assert_eq!(
            created["result"],
            json!({"id": task_id, "taskId": task_id, "url": hook, "token": TOKEN}),
            "{durability:?}"
        );
        let got = agent.rpc("GetTaskPushNotificationConfig", json!({"taskId": task_id, "id": task_id})).await;
        assert_eq!(got["result"], created["result"]);

        // HTTP+JSON 1.0: the path names the task.
        let (status, rest_created) = agent
            .rest(
                reqwest::Method::POST,
                &format!("/tasks/{task_id}/pushNotificationConfigs"),
                Some(json!({"id": "second", "url": hook})),
            )
            .await;
        assert_eq!(
            (status, &rest_created["id"], &rest_created["taskId"]),
            (200, &json!("second"), &json!(task_id)),
            "{rest_created}"
        );
        let (status, rest_got) =
            agent.rest(reqwest::Method::GET, &format!("/tasks/{task_id}/pushNotificationConfigs/second"), None).await;
        assert_eq!((status, rest_got), (200, rest_created.clone()));
        let (status, listed) =
            agent.rest(reqwest::Method::GET, &format!("/tasks/{task_id}/pushNotificationConfigs"), None).await;
        assert_eq!(status, 200);
        let mut ids: Vec<&str> =
            listed["configs"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
        ids.sort_unstable();
        let mut expected = ["second", task_id.as_str()];
        expected.sort_unstable();
        assert_eq!(ids, expected, "{listed}");
        let rpc_listed = agent.rpc("ListTaskPushNotificationConfigs", json!({"taskId": task_id})).await;
        assert_eq!(rpc_listed["result"]["configs"], listed["configs"]);

        // 0.3 names: set, get (by id, and the default one without), list, delete.
        let v03 = json!({"taskId": task_id, "pushNotificationConfig": {"id": "old", "url": hook, "authentication": {"schemes": ["Bearer"], "credentials": "c"}}});
        let set = agent.rpc("tasks/pushNotificationConfig/set", v03.clone()).await;
        assert_eq!(set["result"], v03, "{set}");
        let got = agent
            .rpc("tasks/pushNotificationConfig/get", json!({"id": task_id, "pushNotificationConfigId": "old"}))
            .await;
        assert_eq!(got["result"], v03);
        let default = agent.rpc("tasks/pushNotificationConfig/get", json!({"id": task_id})).await;
        assert_eq!(default["result"]["pushNotificationConfig"]["id"], json!(task_id), "{default}");
        let listed = agent.rpc("tasks/pushNotificationConfig/list", json!({"id": task_id})).await;
        assert_eq!(listed["result"].as_array().map(Vec::len), Some(3), "{listed}");
        let deleted = agent
            .rpc("tasks/pushNotificationConfig/delete", json!({"id": task_id, "pushNotificationConfigId": "old"}))
            .await;
        assert_eq!(deleted["result"], Value::Null, "{deleted}");

        // 0.3 over HTTP+JSON, the body in the proto field names the SDK writes.
        let configs = format!("/v1/tasks/{task_id}/pushNotificationConfigs");
        let body = json!({"parent": format!("tasks/{task_id}"), "config_id": "rest03",
            "config": {"name": "", "push_notification_config": {"url": hook, "token": TOKEN}}});
        let (status, created) = agent.rest(reqwest::Method::POST, &configs, Some(body)).await;
        let name = format!("tasks/{task_id}/pushNotificationConfigs/rest03");
        let expected = json!({"name": name, "pushNotificationConfig": {"id": "rest03", "url": hook, "token": TOKEN}});
        assert_eq!((status, &created), (200, &expected), "{created}");
        let (status, got) = agent.rest(reqwest::Method::GET, &format!("{configs}/rest03"), None).await;
        assert_eq!((status, got), (200, expected.clone()));
        let (status, listed) = agent.rest(reqwest::Method::GET, &configs, None).await;
        assert_eq!((status, listed["configs"].as_array().map(Vec::len)), (200, Some(3)), "{listed}");
        let (status, deleted) = agent.rest(reqwest::Method::DELETE, &format!("{configs}/rest03"), None).await;
        assert_eq!((status, deleted), (200, json!({})));

        // Deletes are idempotent in both bindings; a deleted config is not found.
        for _ in 0..2 {
            let deleted =
                agent.rpc("DeleteTaskPushNotificationConfig", json!({"taskId": task_id, "id": task_id})).await;
            assert_eq!((deleted.get("error"), &deleted["result"]), (None, &Value::Null), "{deleted}");
            let (status, body) = agent
                .rest(reqwest::Method::DELETE, &format!("/tasks/{task_id}/pushNotificationConfigs/second"), None)
                .await;
            assert_eq!((status, body), (200, json!({})));
        }
        let gone = agent.rpc("GetTaskPushNotificationConfig", json!({"taskId": task_id, "id": "second"})).await;
        assert_eq!(gone["error"]["code"], -32001, "{gone}");
        let (status, gone) =
            agent.rest(reqwest::Method::GET, &format!("/tasks/{task_id}/pushNotificationConfigs/second"), None).await;
        assert_eq!((status, &gone["error"]["status"]), (404, &json!("NOT_FOUND")), "{gone}");
        let listed = agent.rpc("ListTaskPushNotificationConfigs", json!({"taskId": task_id})).await;
        assert_eq!(listed["result"], json!({"configs": [], "nextPageToken": ""}));

        // An unknown task is not found, whatever the operation.
        let unknown = agent.rpc("CreateTaskPushNotificationConfig", json!({"taskId": "nope", "url": hook})).await;
        assert_eq!(unknown["error"]["code"], -32001, "{unknown}");
        let unknown = agent.rpc("tasks/pushNotificationConfig/list", json!({"id": "nope"})).await;
        assert_eq!(unknown["error"]["code"], -32001, "{unknown}");
        agent.stop().await;
    }
}

#[tokio::test]
async fn a_webhook_receives_every_state_change_of_a_task_with_its_token_and_sequence_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let webhook = Webhook::start(Behaviour::Accept).await;
    let agent = Served::start(&config(&dir)).await;
    let answer = agent.send("report", Some(webhook_config(&webhook.url()))).await;
    let task_id = answer["task"]["id"].as_str().unwrap().to_owned();
    assert_eq!(answer["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");

    let received = webhook.accepted(4).await;
    let summaries: Vec<String> = received.iter().map(Received::summary).collect();
    assert_eq!(
        summaries,
        [
            "task TASK_STATE_SUBMITTED",
            "statusUpdate TASK_STATE_WORKING",
            "artifactUpdate",
            "statusUpdate TASK_STATE_COMPLETED"
        ]
    );
    for (n, request) in received.iter().enumerate() {
        assert_eq!(request.sequence(), n as u64 + 1);
        assert_eq!(request.header("x-a2a-notification-token"), TOKEN);
        assert_eq!(request.header("authorization"), format!("Bearer {CREDENTIALS}"));
        assert_eq!(request.header("x-a2a-notification-task-id"), task_id);
        assert_eq!(request.header("content-type"), "application/a2a+json");
    }
    assert_eq!(received[0].body["task"]["id"], json!(task_id));

    // A config set on a running task hears the rest of it: here its cancellation.
    let waiting = agent.send("wait", None).await;
    let waiting_id = waiting["task"]["id"].as_str().unwrap_or_else(|| panic!("{waiting}")).to_owned();
    let mut config = webhook_config(&webhook.url());
    config["taskId"] = json!(waiting_id);
    let created = agent.rpc("CreateTaskPushNotificationConfig", config).await;
    assert!(created.get("error").is_none(), "{created}");
    let canceled = agent.rpc("CancelTask", json!({"id": waiting_id})).await;
    assert_eq!(canceled["result"]["status"]["state"], "TASK_STATE_CANCELED");
    let received = webhook.accepted(5).await;
    assert_eq!(received[4].summary(), "statusUpdate TASK_STATE_CANCELED");
    assert_eq!((received[4].sequence(), received[4].header("x-a2a-notification-task-id")), (1, waiting_id.as_str()));
    agent.stop().await;
}

/// The params of a `SendMessage` of `text`, with a webhook when given; a `wait` task is answered
/// at once (it works until canceled).
fn send_params(text: &str, webhook: Option<Value>) -> Value {
    let message =
        json!({"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": [{"text": text}]});
    let mut configuration = json!({"returnImmediately": text == "wait"});
    if let Some(webhook) = webhook {
        configuration["taskPushNotificationConfig"] = webhook;
    }
    json!({"message": message, "configuration": configuration})
}

#[tokio::test]
async fn a_webhook_failing_twice_receives_every_event_once_retries_end() {
    let dir = tempfile::tempdir().unwrap();
    let webhook = Webhook::start(Behaviour::FailNext(2)).await;
    let agent = Served::start(&config(&dir)).await;
    agent.send("report", Some(webhook_config(&webhook.url()))).await;

    let accepted = webhook.accepted(4).await;
    let sequences: Vec<u64> = accepted.iter().map(Received::sequence).collect();
    assert_eq!(sequences, [1, 2, 3, 4], "each event once, in order");
    let all = webhook.received();
    let refused: Vec<u64> = all.iter().filter(|r| r.status != StatusCode::OK).map(Received::sequence).collect();
    assert_eq!(refused, [1, 1], "the first notification was retried until accepted, and held back the others");
    agent.stop().await;
}

#[tokio::test]
async fn a_refused_webhook_address_gets_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Served::start(&config(&dir)).await;
    let task_id = agent.send("ask", None).await["task"]["id"].as_str().unwrap().to_owned();
    let metadata = "http://169.254.169.254/latest/meta-data/";

    let refused = agent.rpc("CreateTaskPushNotificationConfig", json!({"taskId": task_id, "url": metadata})).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(
        refused["error"]["message"],
        format!(
            "push notification url {metadata:?} is refused by the outbound address policy: 169.254.169.254 is in a \
             network that is always refused (link-local, metadata or unspecified)"
        ),
        "{refused}"
    );
    let (status, body) = agent
        .rest(
            reqwest::Method::POST,
            &format!("/tasks/{task_id}/pushNotificationConfigs"),
            Some(json!({"url": metadata})),
        )
        .await;
    assert_eq!((status, &body["error"]["status"]), (400, &json!("INVALID_ARGUMENT")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("169.254.169.254"), "{body}");
    let not_http =
        agent.rpc("CreateTaskPushNotificationConfig", json!({"taskId": task_id, "url": "file:///etc/passwd"})).await;
    assert_eq!(not_http["error"]["code"], -32602, "{not_http}");

    // Given with a message, it is refused before any task starts.
    let refused = agent.rpc("SendMessage", send_params("report", Some(json!({"url": metadata})))).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let listed = agent.rpc("ListTasks", json!({})).await;
    assert_eq!(listed["result"]["totalSize"], 1, "only the first task exists: {listed}");
    assert!(
        agent.rpc("ListTaskPushNotificationConfigs", json!({"taskId": task_id})).await["result"]["configs"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    agent.stop().await;
}

#[tokio::test]
async fn a_webhook_whose_name_does_not_resolve_yet_is_kept_and_its_deliveries_retried() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Served::start(&config(&dir)).await;
    // `.invalid` never resolves (RFC 2606): a DNS outage looks the same to the agent.
    let unresolved = "http://webhook.invalid/hook";
    let answer = agent.send("report", Some(json!({"url": unresolved, "token": "t"}))).await;
    assert_eq!(answer["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
    let task_id = answer["task"]["id"].as_str().unwrap();
    let listed = agent.rpc("ListTaskPushNotificationConfigs", json!({"taskId": task_id})).await;
    assert_eq!(listed["result"]["configs"][0]["url"], unresolved, "{listed}");

    // Not given up as a refused address is after one attempt: its notifications stay queued and
    // are tried again.
    let database = format!("sqlite://{}", dir.path().join("tasks.db").display());
    let deadline = Instant::now() + Duration::from_secs(10);
    while most_attempts(&database).await < 2 {
        assert!(Instant::now() < deadline, "the unresolved webhook's notifications were not retried");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(pending(&database).await >= 2, "the task's notifications are all still queued");
    agent.stop().await;
}

/// The most attempts made at one queued notification.
async fn most_attempts(database: &str) -> i64 {
    outbox_number(database, "SELECT COALESCE(MAX(attempts), 0) AS n FROM a2a_push_outbox").await
}

#[tokio::test]
async fn a_hanging_webhook_does_not_delay_the_task() {
    let dir = tempfile::tempdir().unwrap();
    let webhook = Webhook::start(Behaviour::Hang).await;
    // A timeout longer than the test: only a delivery off the task's path lets it finish.
    let agent = Served::start(&AgentConfig { push_delivery_timeout_ms: 60_000, ..config(&dir) }).await;
    let started = Instant::now();
    for _ in 0..3 {
        let answer = agent.send("report", Some(webhook_config(&webhook.url()))).await;
        assert_eq!(answer["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
    }
    assert!(started.elapsed() < Duration::from_secs(5), "three tasks took {:?}", started.elapsed());
    assert!(webhook.received().is_empty(), "the hanging webhook answered nothing");
    agent.stop().await;
}

#[tokio::test]
async fn pending_notifications_are_delivered_by_the_next_agent_on_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("tasks.db").display());
    // Down (refusing everything) while the first agent runs; its retries wait long.
    let webhook = Webhook::start(Behaviour::FailNext(u32::MAX)).await;
    let slow_retries = AgentConfig { push_retry_delay_min_ms: 60_000, push_retry_delay_max_ms: 60_000, ..config(&dir) };
    let first = Served::start(&slow_retries).await;
    let answer = first.send("report", Some(webhook_config(&webhook.url()))).await;
    assert_eq!(answer["task"]["status"]["state"], "TASK_STATE_COMPLETED");
    // Its first attempt failed; the rest wait for the retry, a minute away.
    let deadline = Instant::now() + TIMEOUT;
    while webhook.received().is_empty() {
        assert!(Instant::now() < deadline, "no attempt within {TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    first.stop().await;
    assert_eq!(pending(&database).await, 4, "the four notifications wait in the outbox");

    webhook.set(Behaviour::Accept);
    // The next agent on the same file. The failed notification's retry was set a minute away:
    // it is made due now, as after a stop longer than that.
    make_due(&database).await;
    let second = Served::start(&config(&dir)).await;
    let accepted = webhook.accepted(4).await;
    let sequences: Vec<u64> = accepted.iter().map(Received::sequence).collect();
    assert_eq!(sequences, [1, 2, 3, 4]);
    assert_eq!(accepted[3].summary(), "statusUpdate TASK_STATE_COMPLETED");
    second.stop().await;
    outbox_empties(&database).await;
}

async fn pending(database: &str) -> i64 {
    outbox_number(database, "SELECT COUNT(*) AS n FROM a2a_push_outbox").await
}

/// Waits (up to the timeout) until the outbox is empty: the webhook records a notification
/// before it answers, and the agent deletes it once the answer is in, so the last delete may
/// come a moment after the webhook has all of them (a stopped agent's deliveries finish on
/// their own).
async fn outbox_empties(database: &str) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let left = pending(database).await;
        if left == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "{left} notification(s) still in the outbox after {TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The number `n` that `query` reads from the agent's SQLite `database`.
async fn outbox_number(database: &str, query: &'static str) -> i64 {
    use sqlx::{Connection, Row};
    let mut connection = sqlx::SqliteConnection::connect(database).await.unwrap();
    sqlx::query(query).fetch_one(&mut connection).await.unwrap().get("n")
}

async fn make_due(database: &str) {
    use sqlx::Connection;
    let mut connection = sqlx::SqliteConnection::connect(database).await.unwrap();
    sqlx::query("UPDATE a2a_push_outbox SET due_at = '0'").execute(&mut connection).await.unwrap();
}

/// Names the task store of the agent process [`agent_process`] serves.
const AGENT_PROCESS_STORE_ENV: &str = "MESH_PUSH_TEST_AGENT_STORE";
/// The line by which [`agent_process`] says where it listens.
const AGENT_PROCESS_URL_LINE: &str = "agent listening at ";

/// The agent process killed by [`pending_notifications_survive_a_sigkill_of_the_agent`], which
/// runs this test binary again with only this test: an agent on the store it is given, retrying
/// a notification after a second, serving until killed.
#[tokio::test]
#[ignore = "the agent process of pending_notifications_survive_a_sigkill_of_the_agent, which runs it"]
async fn agent_process() {
    let store =
        std::env::var(AGENT_PROCESS_STORE_ENV).expect("run by pending_notifications_survive_a_sigkill_of_the_agent");
    let config = AgentConfig {
        task_store_url: Some(store),
        push_allowed_networks: vec!["127.0.0.0/8".into()],
        push_delivery_timeout_ms: 1_000,
        push_retry_delay_min_ms: 1_000,
        push_retry_delay_max_ms: 1_000,
        ..AgentConfig::default()
    };
    let app =
        AgentApp::build_tasks(&config, echo_card(AGENT), Worker, HttpClient::with_reqwest().unwrap()).await.unwrap();
    println!("{AGENT_PROCESS_URL_LINE}{}", app.url());
    app.run_until_stopped(std::future::pending()).await.unwrap();
}

#[tokio::test]
async fn pending_notifications_survive_a_sigkill_of_the_agent() {
    use tokio::io::AsyncBufReadExt;
    let dir = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", dir.path().join("tasks.db").display());
    let webhook = Webhook::start(Behaviour::FailNext(u32::MAX)).await;
    let mut agent = tokio::process::Command::new(std::env::current_exe().unwrap())
        // The test's full name in the kit's test binary: this module's path, then its own name.
        .args(["--exact", "push::agent_process", "--ignored", "--nocapture"])
        .env(AGENT_PROCESS_STORE_ENV, &database)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(agent.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(TIMEOUT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(url) = line.strip_prefix(AGENT_PROCESS_URL_LINE) {
                return url.to_owned();
            }
        }
        panic!("the agent process ended without saying where it listens");
    })
    .await
    .expect("the agent process starts");

    let http = reqwest::Client::builder().timeout(TIMEOUT).build().unwrap();
    let answer = rpc(&http, &url, "SendMessage", send_params("report", Some(webhook_config(&webhook.url())))).await;
    assert_eq!(answer["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
    let deadline = Instant::now() + TIMEOUT;
    while webhook.received().is_empty() {
        assert!(Instant::now() < deadline, "no attempt within {TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Killed with the first notification refused (or still being refused) and the rest queued.
    agent.start_kill().unwrap();
    agent.wait().await.unwrap();
    assert_eq!(pending(&database).await, 4, "the four notifications wait in the outbox");

    // The next agent delivers them all once the first is due again (its retry, or the killed
    // process's claim expired): within the first agent's retry delay plus its claim.
    webhook.set(Behaviour::Accept);
    let next = Served::start(&config(&dir)).await;
    // At most the killed process's claim (6 s) on an idle machine; twice the usual wait for a busy one.
    let accepted = webhook.accepted_within(4, 2 * TIMEOUT).await;
    let sequences: Vec<u64> = accepted.iter().map(Received::sequence).collect();
    assert_eq!(sequences, [1, 2, 3, 4]);
    next.stop().await;
    outbox_empties(&database).await;
}

/// An agent with `config` delivers a task's four events, in order, to a webhook that refuses
/// the first attempt.
async fn delivers_every_event(config: &AgentConfig) {
    let webhook = Webhook::start(Behaviour::FailNext(1)).await;
    let agent = Served::start(config).await;
    let answer = agent.send("report", Some(webhook_config(&webhook.url()))).await;
    assert_eq!(answer["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{answer}");
    let accepted = webhook.accepted(4).await;
    let sequences: Vec<u64> = accepted.iter().map(Received::sequence).collect();
    assert_eq!(sequences, [1, 2, 3, 4]);
    assert_eq!(accepted[3].summary(), "statusUpdate TASK_STATE_COMPLETED");
    agent.stop().await;
}

#[tokio::test]
async fn notifications_are_delivered_from_a_postgresql_store_too() {
    let Some(database) = mesh_test_support::ScratchDatabase::create("push_delivery").await else { return };
    let dir = tempfile::tempdir().unwrap();
    delivers_every_event(&AgentConfig { task_store_url: Some(database.url.clone()), ..config(&dir) }).await;
    database.drop_database().await;
}

#[tokio::test]
async fn notifications_are_delivered_in_the_memory_and_buffered_durabilities_too() {
    let dir = tempfile::tempdir().unwrap();
    for durability in [TaskDurability::Memory, TaskDurability::Buffered] {
        delivers_every_event(&AgentConfig { task_durability: durability, ..config(&dir) }).await;
    }
}

#[tokio::test]
async fn a_webhook_on_a_non_public_network_is_refused_unless_its_network_is_opted_in() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Served::start(&AgentConfig { push_allowed_networks: vec!["10.0.0.0/8".into()], ..config(&dir) }).await;
    let task_id = agent.send("ask", None).await["task"]["id"].as_str().unwrap().to_owned();
    let refused = agent
        .rpc("CreateTaskPushNotificationConfig", json!({"taskId": task_id, "url": "http://127.0.0.1:9/hook"}))
        .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("127.0.0.1 is not a public address"), "{message}");
    for allowed in ["http://10.1.2.3:9/hook", "http://93.184.216.34:9/hook"] {
        let created = agent
            .rpc("CreateTaskPushNotificationConfig", json!({"taskId": task_id, "id": allowed, "url": allowed}))
            .await;
        assert_eq!(created["result"]["url"], allowed, "{created}");
    }
    agent.stop().await;
}

#[tokio::test]
async fn a_webhook_given_with_the_answer_to_a_question_hears_the_rest_of_the_task() {
    let dir = tempfile::tempdir().unwrap();
    let webhook = Webhook::start(Behaviour::Accept).await;
    let agent = Served::start(&config(&dir)).await;
    let asked = agent.send("ask", None).await;
    let task_id = asked["task"]["id"].as_str().unwrap().to_owned();

    let mut params = send_params("report", Some(webhook_config(&webhook.url())));
    params["message"]["taskId"] = json!(task_id);
    let answered = agent.rpc("SendMessage", params).await;
    assert_eq!(answered["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{answered}");
    let received = webhook.accepted(4).await;
    let summaries: Vec<String> = received.iter().map(Received::summary).collect();
    assert_eq!(
        summaries[1..],
        ["statusUpdate TASK_STATE_WORKING", "artifactUpdate", "statusUpdate TASK_STATE_COMPLETED"]
    );
    assert!(summaries[0].starts_with("task "), "the task as the turn first showed it: {summaries:?}");
    assert_eq!(received.iter().map(Received::sequence).collect::<Vec<_>>(), [1, 2, 3, 4]);

    // A webhook given with a message to a task the tenant does not have is refused with it.
    let mut params = send_params("report", Some(webhook_config(&webhook.url())));
    params["message"]["taskId"] = json!("nope");
    let refused = agent.rpc("SendMessage", params).await;
    assert_eq!(refused["error"]["code"], -32001, "{refused}");
    agent.stop().await;
}

#[tokio::test]
async fn redirects_are_not_followed_and_delivery_gives_up_after_its_attempts() {
    const ATTEMPTS: usize = 2;
    let dir = tempfile::tempdir().unwrap();
    let webhook = Webhook::start(Behaviour::Accept).await;
    let config = AgentConfig { push_delivery_attempts_max: ATTEMPTS as u32, ..config(&dir) };
    let agent = Served::start(&config).await;
    let redirecting = format!("http://{}/redirect", webhook.addr);
    let sent = agent.send("report", Some(webhook_config(&redirecting))).await;
    let task_id = sent["task"]["id"].clone();
    // Each of the four notifications is tried twice, then given up for the next. A notification
    // given up is settled in the outbox and reported with the task: once the task reports all
    // four, no attempt of any is left to come, so the count below is final, not a snapshot.
    eventually("the task to report its four notifications given up", TIMEOUT, async || {
        let got = agent.rpc("GetTask", json!({"id": task_id})).await;
        got["result"]["metadata"][PUSH_UNDELIVERED_METADATA_KEY][0]["count"] == 4
    })
    .await;
    assert_eq!(webhook.hook.redirected.load(std::sync::atomic::Ordering::SeqCst), 4 * ATTEMPTS);
    assert!(webhook.received().is_empty(), "a redirect was followed: {:?}", webhook.received());
    agent.stop().await;
}
