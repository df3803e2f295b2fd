//! Issue #34, finding 2: with `task_durability = "durable"` an answer must never report a task
//! state the store did not commit. Attacked: the store of a real agent on port 0 (the
//! entity-extraction agent, as the issue reproduced it) refuses writes, through a SQLite trigger
//! on its database file that aborts every insert into `a2a_tasks`, or only the one of the
//! completed state. What must hold: the send is answered with the protocol's internal error
//! (JSON-RPC -32603 with its `ErrorInfo`, HTTP 500 with the JSON error body, gRPC `INTERNAL`),
//! a stream carries no event of a state that was not committed and ends with that error, no
//! push notification reports such a state, and nothing of the refused task is left behind (no
//! task row, no webhook config, no queued notification); a task whose end could not be stored is
//! recorded as failed.
//!
//! The same check on every other store that acknowledges a write, where the finding's premise
//! turned out wrong (each already refuses, and the tests below show it): push notification
//! configs, the registry's registrations, the search agent's document log, and the UI agent's
//! docmem conversations and bus log.

use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use entity_extraction::EntityExtractionConfig;
use futures::{SinkExt, StreamExt};
use mesh_a2a_grpc::GrpcClient;
use mesh_agent_kit::AgentConfig;
use mesh_auth::{AuthConfig, Role};
use mesh_client::HttpClient;
use mesh_docmem::DocmemError;
use mesh_protocol::jsonrpc::A2aErrorCode;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{AssertSqlSafe, Connection, SqliteConnection};
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::Message as WsMessage;

use crate::secured::{SECRET, message, token};
use crate::ui_websocket::{AGENT, Ui, handshake};

/// Longest wait for anything the tests wait on.
const WAIT_DEADLINE: Duration = Duration::from_secs(20);
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// The state the second attack's store refuses to write.
const COMPLETED: &str = "TASK_STATE_COMPLETED";

/// A SQLite file of a running server, written to beside it.
struct Database(String);

impl Database {
    async fn connect(&self) -> SqliteConnection {
        let options = SqliteConnectOptions::from_str(&self.0).unwrap();
        SqliteConnection::connect_with(&options).await.unwrap()
    }

    async fn execute(&self, sql: String) {
        // Audited: the tests' own statements.
        sqlx::query(AssertSqlSafe(sql)).execute(&mut self.connect().await).await.unwrap();
    }

    /// Makes every insert into `table` that matches `when` (SQL on `NEW`) fail, as a full disk or
    /// a broken file would.
    async fn refuse_inserts(&self, table: &str, when: &str) {
        let sql = format!(
            "CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table} WHEN {when} BEGIN SELECT RAISE(ABORT, 'injected'); END"
        );
        self.execute(sql).await;
    }

    async fn refuse_deletes(&self, table: &str) {
        let sql = format!(
            "CREATE TRIGGER refuse_delete_{table} BEFORE DELETE ON {table} BEGIN SELECT RAISE(ABORT, 'injected'); END"
        );
        self.execute(sql).await;
    }

    async fn accept_again(&self, trigger: &str) {
        self.execute(format!("DROP TRIGGER {trigger}")).await;
    }

    async fn rows(&self, table: &str) -> i64 {
        let sql = format!("SELECT COUNT(*) FROM {table}");
        // Audited: a table name of the tests.
        sqlx::query_scalar(AssertSqlSafe(sql)).fetch_one(&mut self.connect().await).await.unwrap()
    }
}

/// The entity-extraction agent on port 0 with its tasks in a SQLite file (durable, the default),
/// webhooks on loopback allowed.
struct Agent {
    url: String,
    tasks: Database,
    http: reqwest::Client,
    _stop: oneshot::Sender<()>,
    _data: tempfile::TempDir,
}

impl Agent {
    async fn start() -> Self {
        let data = tempfile::tempdir().unwrap();
        let tasks = format!("sqlite://{}", data.path().join("tasks.db").display());
        let config = EntityExtractionConfig {
            agent: AgentConfig {
                port: 0,
                task_store_url: Some(tasks.clone()),
                push_allowed_networks: vec!["127.0.0.0/8".into()],
                ..AgentConfig::default()
            },
            ..EntityExtractionConfig::default()
        };
        let app = entity_extraction::build(&config, HttpClient::with_reqwest().unwrap()).await.unwrap();
        let url = app.url().to_owned();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(app.run_until_stopped(async {
            let _ = stopped.await;
        }));
        Self { url, tasks: Database(tasks), http: reqwest::Client::new(), _stop: stop, _data: data }
    }

    /// A JSON-RPC call in the version its method belongs to (0.3 methods have a `/`).
    async fn rpc(&self, method: &str, params: Value) -> reqwest::Response {
        let mut request = self.http.post(format!("{}/", self.url));
        if !method.contains('/') {
            request = request.header("A2A-Version", "1.0");
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        request.json(&body).send().await.unwrap()
    }

    async fn rpc_json(&self, method: &str, params: Value) -> Value {
        let response = self.rpc(method, params).await;
        assert_eq!(response.status(), StatusCode::OK);
        response.json().await.unwrap()
    }

    /// The events of a JSON-RPC stream, each a JSON-RPC response, until the agent ends it.
    async fn rpc_stream(&self, method: &str, params: Value) -> Vec<Value> {
        let response = self.rpc(method, params).await;
        assert_eq!(response.status(), StatusCode::OK);
        let text = tokio::time::timeout(WAIT_DEADLINE, response.text()).await.expect("the stream never ended").unwrap();
        text.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(|data| serde_json::from_str(data.trim()).unwrap())
            .collect()
    }

    async fn grpc(&self) -> GrpcClient {
        GrpcClient::connect(self.url.trim_start_matches("http://")).await.unwrap()
    }

    /// The ids of the tasks `ListTasks` lists.
    async fn listed(&self) -> Vec<String> {
        let listed = self.rpc_json("ListTasks", json!({})).await;
        let tasks = listed["result"]["tasks"].as_array().unwrap_or_else(|| panic!("{listed}"));
        tasks.iter().map(|task| task["id"].as_str().unwrap().to_owned()).collect()
    }
}

/// Checks a JSON-RPC answer is the internal error with the 1.0 `ErrorInfo`, not a result.
fn assert_internal_error(answer: &Value) {
    let error = &answer["error"];
    assert_eq!(error["code"], A2aErrorCode::InternalError.code(), "{answer}");
    assert_eq!(error["data"][0]["reason"], "INTERNAL_ERROR", "{answer}");
    assert!(answer.get("result").is_none(), "{answer}");
}

/// A webhook receiver on port 0 keeping what it received.
struct Webhook {
    received: Arc<Mutex<Vec<Value>>>,
    addr: SocketAddr,
}

impl Webhook {
    async fn start() -> Self {
        let received = Arc::new(Mutex::new(Vec::new()));
        let app = axum::Router::new()
            .route(
                "/hook",
                axum::routing::post(
                    |State(received): State<Arc<Mutex<Vec<Value>>>>, body: axum::body::Bytes| async move {
                        received.lock().unwrap().push(serde_json::from_slice(&body).unwrap_or(Value::Null));
                        axum::http::StatusCode::OK
                    },
                ),
            )
            .with_state(received.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { received, addr }
    }

    fn config(&self) -> Value {
        json!({"url": format!("http://{}/hook", self.addr), "token": "t"})
    }

    fn received(&self) -> Vec<Value> {
        self.received.lock().unwrap().clone()
    }
}

/// `message(text)` with a webhook for the task.
fn message_with_webhook(text: &str, webhook: &Webhook) -> Value {
    let mut params = message(text);
    params["configuration"] = json!({"taskPushNotificationConfig": webhook.config()});
    params
}

/// The task states that `events` (stream responses or webhook notifications, in ProtoJSON) report.
fn reported_states(events: &[Value]) -> Vec<String> {
    let state = |event: &Value| {
        let status = event.get("task").or_else(|| event.get("statusUpdate")).map(|e| e["status"]["state"].clone());
        status.and_then(|state| state.as_str().map(str::to_owned))
    };
    events.iter().filter_map(state).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_whose_task_the_store_refuses_is_answered_an_internal_error_on_every_binding() {
    let agent = Agent::start().await;
    let webhook = Webhook::start().await;
    agent.tasks.refuse_inserts("a2a_tasks", "1").await;

    // JSON-RPC, 1.0 and 0.3; the 1.0 send with a webhook for its task.
    let answer = agent.rpc_json("SendMessage", message_with_webhook("Tokyo is in Japan", &webhook)).await;
    assert_internal_error(&answer);
    let legacy =
        json!({"message": {"messageId": "m-03", "role": "user", "parts": [{"kind": "text", "text": "Paris"}]}});
    let answer = agent.rpc_json("message/send", legacy).await;
    assert_eq!(answer["error"]["code"], A2aErrorCode::InternalError.code(), "{answer}");
    assert!(answer.get("result").is_none(), "{answer}");

    // HTTP+JSON: 500 with the JSON error body.
    let response = agent
        .http
        .post(format!("{}/message:send", agent.url))
        .header("A2A-Version", "1.0")
        .json(&message("Berlin"))
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert_eq!(
        (body["error"]["code"].as_u64(), body["error"]["status"].as_str()),
        (Some(500), Some("INTERNAL")),
        "{body}"
    );

    // gRPC: INTERNAL, with the A2A ErrorInfo.
    let refused =
        agent.grpc().await.unary("SendMessage", message("Rome"), &[("a2a-version", "1.0")]).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Internal, "{refused:?}");
    assert_eq!(mesh_a2a_grpc::a2a_error(&refused), Some(A2aErrorCode::InternalError), "{refused:?}");

    // A stream shows no state at all, and ends with the error.
    let events = agent.rpc_stream("SendStreamingMessage", message_with_webhook("Madrid", &webhook)).await;
    let (last, shown) = events.split_last().expect("an empty stream");
    assert!(shown.iter().all(|event| event.get("result").is_none()), "shown before the error: {events:#?}");
    assert_internal_error(last);

    // Nothing of the refused tasks is left: no task, no webhook config, no notification.
    assert_eq!(agent.listed().await, Vec::<String>::new());
    assert_eq!(agent.tasks.rows("a2a_tasks").await, 0);
    assert_eq!(agent.tasks.rows("a2a_push_configs").await, 0, "the refused tasks' webhooks are left");
    let notified = agent.tasks.rows("a2a_push_outbox").await + webhook.received().len() as i64;
    assert_eq!(notified, 0, "notifications of tasks never stored: {:#?}", webhook.received());

    // The store recovers, and so does the agent.
    agent.tasks.accept_again("refuse_a2a_tasks").await;
    let answer = agent.rpc_json("SendMessage", message("Tokyo is in Japan")).await;
    assert_eq!(answer["result"]["task"]["status"]["state"], COMPLETED, "{answer}");
    let id = answer["result"]["task"]["id"].as_str().unwrap();
    let got = agent.rpc_json("GetTask", json!({"id": id})).await;
    assert_eq!(got["result"]["status"]["state"], COMPLETED, "{got}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_whose_end_the_store_refuses_reports_no_end_and_is_recorded_failed() {
    let agent = Agent::start().await;
    let webhook = Webhook::start().await;
    agent.tasks.refuse_inserts("a2a_tasks", &format!("NEW.state = '{COMPLETED}'")).await;

    // The blocking send the issue made: it answered COMPLETED, and GetTask did not know it.
    let answer = agent.rpc_json("SendMessage", message("Tokyo is in Japan")).await;
    assert_internal_error(&answer);

    // A stream with a webhook: the states stored before the end are shown, the end is not.
    let events = agent.rpc_stream("SendStreamingMessage", message_with_webhook("Paris", &webhook)).await;
    let (last, shown) = events.split_last().expect("an empty stream");
    assert_internal_error(last);
    let results: Vec<Value> = shown.iter().map(|event| event["result"].clone()).collect();
    assert!(!reported_states(&results).iter().any(|state| state == COMPLETED), "{events:#?}");
    let id =
        results[0]["task"]["id"].as_str().unwrap_or_else(|| panic!("the stream did not show its task: {events:#?}"));

    // The webhook is told what was stored, never the end that was not.
    let deadline = Instant::now() + WAIT_DEADLINE;
    while agent.tasks.rows("a2a_push_outbox").await > 0 {
        assert!(Instant::now() < deadline, "the notifications were never delivered");
        tokio::time::sleep(POLL_INTERVAL).await;
    }
    let notified = webhook.received();
    assert!(!notified.is_empty(), "the stored states were not notified");
    assert!(!reported_states(&notified).iter().any(|state| state == COMPLETED), "{notified:#?}");

    // Both tasks are recorded as failed, saying why, rather than left working: the blocking
    // send's steps before its end were stored too.
    let got = agent.rpc_json("GetTask", json!({"id": id})).await;
    assert_eq!(got["result"]["status"]["state"], "TASK_STATE_FAILED", "{got}");
    let reason = got["result"]["status"]["message"]["parts"][0]["text"].as_str().unwrap_or_default();
    assert!(reason.contains("could not store"), "{got}");
    let listed = agent.rpc_json("ListTasks", json!({})).await;
    let states = reported_states(
        &listed["result"]["tasks"].as_array().unwrap().iter().map(|task| json!({"task": task})).collect::<Vec<_>>(),
    );
    assert_eq!(states, ["TASK_STATE_FAILED", "TASK_STATE_FAILED"], "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_configs_the_store_refuses_are_refused() {
    let agent = Agent::start().await;
    let webhook = Webhook::start().await;
    let answer = agent.rpc_json("SendMessage", message("Tokyo is in Japan")).await;
    let id = answer["result"]["task"]["id"].as_str().unwrap_or_else(|| panic!("{answer}")).to_owned();
    agent.tasks.refuse_inserts("a2a_push_configs", "1").await;

    let mut config = webhook.config();
    config["taskId"] = json!(id);
    let created = agent.rpc_json("CreateTaskPushNotificationConfig", config).await;
    assert_internal_error(&created);
    let listed = agent.rpc_json("ListTaskPushNotificationConfigs", json!({"taskId": id})).await;
    assert_eq!(listed["result"]["configs"], json!([]), "{listed}");

    // A send whose webhook cannot be stored runs no task.
    let answer = agent.rpc_json("SendMessage", message_with_webhook("Paris", &webhook)).await;
    assert_internal_error(&answer);
    assert_eq!(agent.listed().await, [id]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrations_the_store_refuses_are_refused() {
    let data = tempfile::tempdir().unwrap();
    let database = format!("sqlite://{}", data.path().join("registry.db").display());
    let registry = registry::Application::build(&registry::RegistryConfig {
        port: 0,
        database_url: database.clone(),
        verify_registrations: false,
        auth: AuthConfig { jwt_hs256_secret: Some(SECRET.into()), ..AuthConfig::default() },
        ..registry::RegistryConfig::default()
    })
    .await
    .unwrap();
    let url = registry.url();
    let (_stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(registry.run_until_stopped(async {
        let _ = stopped.await;
    }));
    let database = Database(database);
    let http = reqwest::Client::new();
    let admin = token("ops", "", &[Role::Admin]);
    let call = |method: reqwest::Method, path: &str, body: Option<Value>| {
        let mut request = http.request(method, format!("{url}{path}")).bearer_auth(&admin);
        if let Some(body) = body {
            request = request.json(&body);
        }
        async move {
            let response = request.send().await.unwrap();
            let status = response.status();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    let registration = json!({"name": "writer", "url": "http://127.0.0.1:9", "capabilities": ["write"]});

    database.refuse_inserts("agents", "1").await;
    let (status, body) = call(reqwest::Method::POST, "/register", Some(registration.clone())).await;
    assert_eq!(
        (status, body["error_code"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("STORAGE_UNAVAILABLE")),
        "{body}"
    );
    let (status, body) = call(reqwest::Method::GET, "/agents/writer", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "a refused registration is listed: {body}");

    database.accept_again("refuse_agents").await;
    let (status, body) = call(reqwest::Method::POST, "/register", Some(registration)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    database.refuse_deletes("agents").await;
    let (status, body) = call(reqwest::Method::DELETE, "/agents/writer", None).await;
    assert_eq!(
        (status, body["error_code"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("STORAGE_UNAVAILABLE")),
        "{body}"
    );
    let (status, body) = call(reqwest::Method::GET, "/agents/writer", None).await;
    assert_eq!(status, StatusCode::OK, "a refused removal removed the agent: {body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_the_log_refuses_are_refused() {
    let data = tempfile::tempdir().unwrap();
    let corpus = data.path().join("corpus.jsonl");
    std::fs::write(&corpus, r#"{"_id":"seed-1","title":"Seed","text":"the document the index starts with"}"#).unwrap();
    let log = format!("sqlite://{}", data.path().join("documents.db").display());
    let config = search::SearchConfig {
        agent: AgentConfig { port: 0, task_store_url: Some("sqlite::memory:".into()), ..AgentConfig::default() },
        data_dir: Some(data.path().join("search")),
        corpus_path: Some(corpus),
        dense: search::config::DenseConfig { enabled: false, ..search::config::DenseConfig::default() },
        documents_database_url: Some(log.clone()),
        ..search::SearchConfig::default()
    };
    let agent = search::build(&config, HttpClient::with_reqwest().unwrap()).await.unwrap();
    let url = agent.url().to_owned();
    let (_stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(agent.run_until_stopped(async {
        let _ = stopped.await;
    }));
    let log = Database(log);
    log.refuse_inserts("search_document_log", "1").await;
    let http = reqwest::Client::new();

    let documents = json!({"documents": [{"_id": "doc-1", "title": "Quokka", "text": "a smiling quokka"}]});
    let response = http.post(format!("{url}/documents")).json(&documents).send().await.unwrap();
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        (status, body["error_code"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some("DEPENDENCY_UNAVAILABLE")),
        "{body}"
    );
    let response = http.get(format!("{url}/documents/doc-1")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND, "a refused document is served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_messages_docmem_or_the_bus_log_refuse_are_refused() {
    let ui = Ui::start(&[]).await;
    let database = Database(ui.bus_url.clone());
    let alice = token("alice", "acme", &[Role::User]);
    let records = database.rows("bus_records").await;

    // docmem refuses the conversation: the socket says so, nothing is written or produced.
    database.refuse_inserts("docmem_nodes", "1").await;
    let (mut socket, id) = handshake(&ui.socket_url(&format!("agent={AGENT}")), &alice, &[]).await.unwrap();
    socket.send(WsMessage::Text("hello".into())).await.unwrap();
    let answer = tokio::time::timeout(WAIT_DEADLINE, socket.next()).await.expect("no answer").unwrap().unwrap();
    assert!(answer.to_text().unwrap().starts_with("error: "), "{answer:?}");
    assert!(matches!(ui.docmem.get(&id).await, Err(DocmemError::NotFound(_))), "a refused conversation was written");
    assert_eq!(database.rows("docmem_nodes").await, 0);
    assert_eq!(database.rows("bus_records").await, records, "a record of a refused message was produced");

    // The bus log refuses the record: the socket says so.
    database.accept_again("refuse_docmem_nodes").await;
    database.refuse_inserts("bus_records", "1").await;
    socket.send(WsMessage::Text("hello again".into())).await.unwrap();
    let answer = tokio::time::timeout(WAIT_DEADLINE, socket.next()).await.expect("no answer").unwrap().unwrap();
    assert!(answer.to_text().unwrap().starts_with("error: "), "{answer:?}");
    assert_eq!(database.rows("bus_records").await, records, "a refused record was produced");
    socket.close(None).await.unwrap();
    ui.stop().await;
}
