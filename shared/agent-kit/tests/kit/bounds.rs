//! The bounds every kit server keeps, on real servers on port 0: load beyond the concurrency
//! limit is shed (503), a tenant over its rate is refused (429), both with `Retry-After` and the
//! mesh JSON error body while `/health` stays up; header values with control characters are
//! refused; shutdown ends within its drain deadline with an SSE stream open; tasks a crash left
//! working are failed at start; a task whose artifacts outgrow the cap fails saying why; every
//! refusal is counted in `/metrics` by reason; an agent whose task database stops answering is
//! unhealthy and not ready, yet alive.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mesh_agent_kit::{
    AgentApp, AgentConfig, AgentError, AgentHandler, AgentReply, TaskEvents, TaskHandler, TaskInput, Turn,
};
use mesh_client::HttpClient;
use mesh_protocol::a2a::v1::{Artifact, Part, Task, TaskState, TaskStatus};
use mesh_protocol::error::ErrorBody;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

use crate::common::{echo_card, eventually, sqlite_memory_config};

const TIMEOUT: Duration = Duration::from_secs(10);
/// How long a `sleep` task takes: long enough to hold the server's slots while the test probes.
const SLEEP_MS: u64 = 1_500;

/// A seed agent: `sleep` takes [`SLEEP_MS`], anything else answers at once; counts started tasks.
#[derive(Debug, Default)]
struct Sleeper {
    started: Arc<AtomicUsize>,
}

impl AgentHandler for Sleeper {
    async fn handle(&self, task: TaskInput) -> Result<AgentReply, AgentError> {
        self.started.fetch_add(1, Ordering::SeqCst);
        if task.text == "sleep" {
            tokio::time::sleep(Duration::from_millis(SLEEP_MS)).await;
        }
        Ok(AgentReply::data(json!({"echo": task.text})))
    }
}

/// A task agent: `wait` works until canceled; anything else completes with an artifact holding
/// the text ten times over.
#[derive(Debug)]
struct Worker;

impl TaskHandler for Worker {
    async fn run(&self, turn: Turn, events: TaskEvents) {
        let text = turn.message.parts.iter().filter_map(|p| p.as_text()).collect::<String>();
        if text == "wait" {
            let _ = events.status(TaskState::Working, None).await;
            turn.cancellation.cancelled().await;
            return;
        }
        let artifact = Artifact {
            artifact_id: "a1".into(),
            name: None,
            description: None,
            parts: vec![Part::text(text.repeat(10))],
            metadata: None,
            extensions: None,
        };
        if events.artifact(artifact, false, true).await.is_ok() {
            let _ = events.status(TaskState::Completed, None).await;
        }
    }
}

/// An agent served until [`Served::stop`]; `stopped` says how long its shutdown took.
struct Served {
    url: String,
    http: reqwest::Client,
    stop: oneshot::Sender<()>,
    served: tokio::task::JoinHandle<Result<(), mesh_agent_kit::KitError>>,
}

impl Served {
    fn start(app: AgentApp) -> Self {
        let url = app.url().to_owned();
        let (stop, stopped) = oneshot::channel::<()>();
        let served = tokio::spawn(app.run_until_stopped(async {
            let _ = stopped.await;
        }));
        Self { url, http: reqwest::Client::builder().timeout(TIMEOUT).build().unwrap(), stop, served }
    }

    async fn seed_task(&self, text: &str, tenant: Option<&str>) -> reqwest::Response {
        let body = json!({"id": uuid::Uuid::new_v4().to_string(), "messages": [{"role": "user", "parts": [{"type": "text", "text": text}]}]});
        let mut request = self.http.post(format!("{}/tasks/send", self.url)).json(&body);
        if let Some(tenant) = tenant {
            request = request.header("x-mesh-tenant", tenant);
        }
        request.send().await.unwrap()
    }

    async fn health(&self) -> StatusCode {
        self.http.get(format!("{}/health", self.url)).send().await.unwrap().status()
    }

    async fn get_json(&self, path: &str) -> (StatusCode, Value) {
        let response = self.http.get(format!("{}{path}", self.url)).send().await.unwrap();
        (response.status(), response.json().await.unwrap())
    }

    /// The agent's Prometheus text.
    async fn metrics(&self) -> String {
        self.http.get(format!("{}/metrics", self.url)).send().await.unwrap().text().await.unwrap()
    }

    async fn rpc(&self, method: &str, params: Value) -> Value {
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let response = self.http.post(format!("{}/", self.url)).header("A2A-Version", "1.0").json(&request);
        response.send().await.unwrap().json().await.unwrap()
    }

    /// Stops the agent and returns how long it took to stop.
    async fn stop(self) -> Duration {
        let started = Instant::now();
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(30), self.served)
            .await
            .expect("the agent stops")
            .expect("the serving task ends")
            .expect("the agent served");
        started.elapsed()
    }
}

/// Expects a refusal: `status`, `Retry-After` (in seconds, at least 1) and the mesh error body.
async fn expect_refusal(response: reqwest::Response, status: StatusCode, code: &str) -> ErrorBody {
    assert_eq!(response.status(), status);
    let retry_after: u64 = response.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry_after >= 1, "Retry-After {retry_after}");
    assert_eq!(response.headers()["content-type"], "application/json");
    let body: ErrorBody = response.json().await.unwrap();
    assert_eq!(body.error_code, code, "{body:?}");
    assert!(!body.error_message.is_empty() && body.request_id.is_some(), "{body:?}");
    body
}

fn message(text: &str) -> Value {
    json!({"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": [{"text": text}]})
}

#[tokio::test]
async fn load_beyond_the_concurrency_limit_is_shed_with_503_and_health_stays_up() {
    mesh_telemetry::install_metrics().unwrap();
    let started = Arc::new(AtomicUsize::new(0));
    let config = AgentConfig { concurrency_max: 2, ..sqlite_memory_config() };
    let handler = Sleeper { started: started.clone() };
    let agent = Arc::new(Served::start(
        AgentApp::build(&config, echo_card("sleeper"), handler, HttpClient::with_reqwest().unwrap()).await.unwrap(),
    ));
    let busy: Vec<_> = (0..2)
        .map(|_| {
            let agent = agent.clone();
            tokio::spawn(async move { agent.seed_task("sleep", None).await.status() })
        })
        .collect();
    eventually("both admitted tasks to start", async || started.load(Ordering::SeqCst) == 2).await;
    let shed = agent.seed_task("quick", None).await;
    let body = expect_refusal(shed, StatusCode::SERVICE_UNAVAILABLE, "SERVER_OVERLOADED").await;
    assert_eq!(started.load(Ordering::SeqCst), 2, "the shed task never ran: {body:?}");
    // Liveness and discovery are never shed.
    assert_eq!(agent.health().await, StatusCode::OK);
    let card = agent.http.get(format!("{}/.well-known/agent-card.json", agent.url)).send().await.unwrap();
    assert_eq!(card.status(), StatusCode::OK);
    for task in busy {
        assert_eq!(task.await.unwrap(), StatusCode::OK, "admitted tasks finish normally");
    }
    // Once the slots are free the agent serves again.
    assert_eq!(agent.seed_task("quick", None).await.status(), StatusCode::OK);
    let metrics = agent.metrics().await;
    assert!(metrics.contains(r#"mesh_requests_rejected_total{service="sleeper",reason="overloaded"} 1"#), "{metrics}");
    Arc::into_inner(agent).expect("no other holder").stop().await;
}

#[tokio::test]
async fn a_tenant_over_its_rate_gets_429_and_other_tenants_are_served() {
    mesh_telemetry::install_metrics().unwrap();
    let config = AgentConfig { rate_limit_per_s: 1, rate_limit_burst: 3, ..sqlite_memory_config() };
    let agent = Served::start(
        AgentApp::build(&config, echo_card("limited"), Sleeper::default(), HttpClient::with_reqwest().unwrap())
            .await
            .unwrap(),
    );
    for _ in 0..3 {
        assert_eq!(agent.seed_task("hi", Some("acme")).await.status(), StatusCode::OK);
    }
    let limited = agent.seed_task("hi", Some("acme")).await;
    let body = expect_refusal(limited, StatusCode::TOO_MANY_REQUESTS, "RATE_LIMITED").await;
    assert!(body.error_message.contains("acme"), "{body:?}");
    // Every tenant has its own bucket; the default tenant too.
    assert_eq!(agent.seed_task("hi", Some("globex")).await.status(), StatusCode::OK);
    assert_eq!(agent.seed_task("hi", None).await.status(), StatusCode::OK);
    for _ in 0..10 {
        assert_eq!(agent.health().await, StatusCode::OK, "health is not rate limited");
    }
    let metrics = agent.metrics().await;
    assert!(
        metrics.contains(r#"mesh_requests_rejected_total{service="limited",reason="rate_limited"} 1"#),
        "{metrics}"
    );
    assert!(!metrics.contains("overloaded"), "{metrics}");
    agent.stop().await;
}

/// Sends `head` (the request line and headers, CRLF-separated, without the blank line) over a
/// raw connection, so header values can hold bytes an HTTP client library would refuse.
async fn raw_request(url: &str, head: &[u8]) -> (u16, String) {
    let address = url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(head).await.unwrap();
    stream.write_all(b"\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(TIMEOUT, stream.read_to_end(&mut answer)).await.unwrap().unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, answer)
}

#[tokio::test]
async fn control_characters_in_header_values_are_refused_with_400_json() {
    let agent = Served::start(
        AgentApp::build(
            &sqlite_memory_config(),
            echo_card("headers"),
            Sleeper::default(),
            HttpClient::with_reqwest().unwrap(),
        )
        .await
        .unwrap(),
    );
    let host = agent.url.trim_start_matches("http://").to_owned();
    let cases: [&[u8]; 4] = [
        b"X-Request-Id: abc\tFORGED log line",
        b"X-Correlation-Id: caf\xc2\x85e",
        b"X-Mesh-Tenant: acme\xe2\x80\xa8x",
        b"User-Agent: probe\tx",
    ];
    for header in cases {
        let head = [format!("GET /health HTTP/1.1\r\nHost: {host}\r\n").as_bytes(), header].concat();
        let (status, answer) = raw_request(&agent.url, &head).await;
        assert_eq!(status, 400, "{:?}: {answer}", String::from_utf8_lossy(header));
        assert!(answer.contains("\"REQUEST_HEADER_INVALID\""), "{answer}");
        assert!(!answer.contains("FORGED") && !answer.contains("probe"), "the value is not echoed: {answer}");
    }
    let head = format!("GET /health HTTP/1.1\r\nHost: {host}\r\nX-Request-Id: fine-id-1");
    let (status, answer) = raw_request(&agent.url, head.as_bytes()).await;
    assert_eq!(status, 200, "{answer}");
    agent.stop().await;
}

#[tokio::test]
async fn shutdown_ends_within_the_drain_deadline_with_an_sse_stream_open() {
    let drain = Duration::from_millis(500);
    let config = AgentConfig { shutdown_drain_ms: 500, ..sqlite_memory_config() };
    let agent = Served::start(
        AgentApp::build_tasks(&config, echo_card("streamer"), Worker, HttpClient::with_reqwest().unwrap())
            .await
            .unwrap(),
    );
    let request =
        json!({"jsonrpc": "2.0", "id": "s", "method": "SendStreamingMessage", "params": {"message": message("wait")}});
    let mut stream =
        agent.http.post(format!("{}/", agent.url)).header("A2A-Version", "1.0").json(&request).send().await.unwrap();
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    // The stream is open: its first event (the task) has arrived, and the task never ends.
    let first = stream.chunk().await.unwrap().expect("a first event");
    assert!(String::from_utf8_lossy(&first).contains("TASK_STATE_SUBMITTED"));
    let took = agent.stop().await;
    assert!(took >= drain, "the open stream was given its drain time ({took:?})");
    assert!(took < drain + Duration::from_secs(2), "shutdown took {took:?}");
}

#[tokio::test]
async fn tasks_a_crash_left_working_are_failed_at_start_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("tasks.db").display());
    {
        let store = mesh_tasks::TaskStore::open(&url, "restarted").await.unwrap();
        let task = Task {
            id: "t-crashed".into(),
            context_id: "c".into(),
            status: TaskStatus { state: TaskState::Working, message: None, timestamp: None },
            artifacts: Vec::new(),
            history: Vec::new(),
            metadata: None,
        };
        store.save("", task).await.unwrap();
    }
    let config = AgentConfig { task_store_url: Some(url), ..AgentConfig::default() };
    let agent = Served::start(
        AgentApp::build_tasks(&config, echo_card("restarted"), Worker, HttpClient::with_reqwest().unwrap())
            .await
            .unwrap(),
    );
    let answer = agent.rpc("GetTask", json!({"id": "t-crashed"})).await;
    let status = &answer["result"]["status"];
    assert_eq!(status["state"], "TASK_STATE_FAILED", "{answer}");
    assert!(status["message"]["parts"][0]["text"].as_str().unwrap().contains("stopped while working"), "{answer}");
    agent.stop().await;
}

#[tokio::test]
async fn a_task_whose_artifacts_outgrow_the_cap_fails_saying_why() {
    let config = AgentConfig { task_artifact_bytes_max: 200, ..sqlite_memory_config() };
    let agent = Served::start(
        AgentApp::build_tasks(&config, echo_card("capped"), Worker, HttpClient::with_reqwest().unwrap()).await.unwrap(),
    );
    let small = agent.rpc("SendMessage", json!({"message": message("ok")})).await;
    assert_eq!(small["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{small}");
    let big = agent.rpc("SendMessage", json!({"message": message(&"x".repeat(100))})).await;
    let task = &big["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_FAILED", "{big}");
    assert!(task["artifacts"].as_array().is_none_or(Vec::is_empty), "the oversize artifact is not stored: {big}");
    let reason = task["status"]["message"]["parts"][0]["text"].as_str().unwrap();
    assert!(reason.contains("at most 200"), "{reason}");
    agent.stop().await;
}

#[tokio::test]
async fn without_its_task_database_an_agent_is_unhealthy_and_not_ready_but_alive() {
    // A database of its own, dropped under the running agent: the outage a probe must notice.
    let Some(database) = mesh_test_support::ScratchDatabase::create("agent_health").await else { return };
    let config = AgentConfig { task_store_url: Some(database.url.clone()), ..AgentConfig::default() };
    let agent = Served::start(
        AgentApp::build(&config, echo_card("stored"), Sleeper::default(), HttpClient::with_reqwest().unwrap())
            .await
            .unwrap(),
    );
    let (status, health) = agent.get_json("/health").await;
    assert_eq!((status, health["components"]["database"]["status"].as_str()), (StatusCode::OK, Some("ok")), "{health}");
    assert_eq!(agent.get_json("/health/ready").await.0, StatusCode::OK);

    database.drop_database().await;
    let deadline = Instant::now() + TIMEOUT;
    while agent.health().await != StatusCode::SERVICE_UNAVAILABLE {
        assert!(Instant::now() < deadline, "the agent never noticed its database gone");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, health) = agent.get_json("/health").await;
    assert_eq!(health["status"], "unhealthy", "{health}");
    assert_eq!(health["components"]["database"]["status"], "unhealthy", "{health}");
    let (status, ready) = agent.get_json("/health/ready").await;
    assert_eq!((status, ready["status"].as_str()), (StatusCode::SERVICE_UNAVAILABLE, Some("not_ready")), "{ready}");
    assert_eq!(agent.get_json("/health/live").await.0, StatusCode::OK, "alive: a restart would not bring it back");
    agent.stop().await;
}

/// Replicas of one agent over one task store: a caller-chosen seed id sent to both at once is
/// taken by exactly one, and neither overwrites the other's record (the store's key decides, not
/// a process's memory). On a shared SQLite file, and on PostgreSQL when given (under CI it must be).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_chosen_seed_id_is_taken_once_across_replicas_sharing_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut stores = vec![format!("sqlite://{}", dir.path().join("tasks.db").display())];
    stores.extend(mesh_test_support::postgres_url());
    for store in stores {
        let replica = || async {
            let config = AgentConfig { task_store_url: Some(store.clone()), ..AgentConfig::default() };
            let app = AgentApp::build(
                &config,
                echo_card("replicated"),
                Sleeper::default(),
                HttpClient::with_reqwest().unwrap(),
            );
            Served::start(app.await.unwrap())
        };
        let (a, b) = (replica().await, replica().await);
        let id = uuid::Uuid::new_v4().to_string();
        let send = |served: &Served, text: &str| {
            let body = json!({"id": id, "messages": [{"role": "user", "parts": [{"type": "text", "text": text}]}]});
            served.http.post(format!("{}/tasks/send", served.url)).json(&body).send()
        };
        let (first, second) = tokio::join!(send(&a, "sleep"), send(&b, "sleep"));
        let mut statuses = [first.unwrap().status(), second.unwrap().status()];
        statuses.sort();
        assert_eq!(statuses, [StatusCode::OK, StatusCode::CONFLICT], "{store}: one replica takes the id");
        // Once answered, the id stays taken on either replica, and either reads the one record:
        // the replica that answered at once, the other once the answer's record (written after
        // the answer, for a seed call) is committed.
        let again = send(&b, "other").await.unwrap();
        assert_eq!(again.status(), StatusCode::CONFLICT, "{store}");
        for served in [&a, &b] {
            let deadline = Instant::now() + TIMEOUT;
            let task = loop {
                let task = served.rpc("GetTask", json!({"id": id})).await;
                if task["result"]["status"]["state"] == "TASK_STATE_COMPLETED" || Instant::now() > deadline {
                    break task;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            assert_eq!(task["result"]["status"]["state"], "TASK_STATE_COMPLETED", "{store}: {task}");
            assert!(!task.to_string().contains("other"), "{store}: the record was overwritten: {task}");
        }
        a.stop().await;
        b.stop().await;
    }
}
