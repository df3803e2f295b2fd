//! The HTTP surface of an agent built with the kit, exercised over real sockets: each test starts
//! an [`AgentApp`] on port 0 around a small test handler and talks to it with one shared client.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State};
use axum::routing::{delete, post};
use axum::{Json, Router};
use mesh_agent_kit::{AgentApp, AgentConfig, AgentError, AgentHandler, AgentReply, KitError, TaskInput};
use mesh_client::HttpClient;
use mesh_protocol::a2a::v1::AgentCard;
use mesh_protocol::error::{ErrorBody, FailureStatus};
use mesh_protocol::registry::Registration;
use mesh_protocol::seed::{Message, Part, ResponseStatus, Role, TaskResponse};
use mesh_server::{HealthReport, RegistrationState};
use reqwest::header::{CACHE_CONTROL, CONTENT_TYPE, ETAG, IF_NONE_MATCH, LAST_MODIFIED};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use mesh_test_support::logs;

use crate::common::{HTTP, LOG_TARGETS, eventually};

const CARD: &str = r#"{
    "name": "Echo Agent",
    "description": "echoes",
    "version": "1.0.0",
    "supportedInterfaces": [],
    "capabilities": {},
    "defaultInputModes": ["text/plain"],
    "defaultOutputModes": ["application/json"],
    "skills": [{"id": "echo", "name": "Echo", "description": "echo", "tags": ["echo"]}]
}"#;
const CARD_NAME: &str = "Echo Agent";
const TASKS: &str = "/tasks/send";
const CARD_PATHS: [&str; 2] = ["/.well-known/agent-card.json", "/agent.json"];
const REQUEST_ID: &str = "x-request-id";

/// How long "slow" works: longer than any request timeout the tests configure.
const SLOW: Duration = Duration::from_secs(10);
/// How long "nap" works: shorter than the default request timeout, long enough to be observed.
const NAP: Duration = Duration::from_millis(800);
/// Longest wait for an agent to stop once its shutdown is signalled.
const DEADLINE: Duration = Duration::from_secs(10);

/// Behaves according to the first word of the task text.
#[derive(Debug, Clone, Copy)]
struct TestAgent;

impl AgentHandler for TestAgent {
    async fn handle(&self, task: TaskInput) -> Result<AgentReply, AgentError> {
        match task.text.split_whitespace().next().unwrap_or_default() {
            "echo" => Ok(AgentReply::data(json!({"echo": task.text, "data": task.data}))),
            "partial" => Ok(AgentReply {
                warnings: vec!["only half of the answer".into()],
                ..AgentReply::data(json!({"half": 1}))
            }),
            "invalid" => Err(AgentError::InvalidInput("the query makes no sense".into())),
            "down" => Err(AgentError::Unavailable("the backend is down".into())),
            "slow" => {
                tokio::time::sleep(SLOW).await;
                Ok(AgentReply::data(json!({"slow": true})))
            }
            "nap" => {
                tokio::time::sleep(NAP).await;
                Ok(AgentReply::data(json!({"napped": true})))
            }
            "panic" => panic!("the test handler was asked to panic"),
            other => Err(AgentError::InvalidInput(format!("unknown command {other:?}"))),
        }
    }
}

fn card() -> AgentCard {
    serde_json::from_str(CARD).expect("the test card is a valid AgentCard")
}

/// A one-message seed task holding `text` and no id.
fn task(text: &str) -> Value {
    json!({"messages": [{"role": "user", "parts": [{"type": "text", "text": text}]}]})
}

/// A running agent; [`Agent::stop`] signals its shutdown.
#[derive(Debug)]
struct Agent {
    url: String,
    shutdown: oneshot::Sender<()>,
    run: JoinHandle<Result<(), KitError>>,
}

impl Agent {
    async fn start(mut config: AgentConfig) -> Self {
        // Each agent's tasks in a database of its own that leaves nothing behind: the default
        // store is a file under the crate, where a task id one run took is taken in the next.
        config.task_store_url.get_or_insert_with(|| mesh_storage::SQLITE_MEMORY_URL.to_owned());
        let http = HttpClient::with_reqwest().expect("the kit's HTTP client builds");
        let app = AgentApp::build(&config, card(), TestAgent, http).await.expect("the agent builds");
        assert_ne!(app.port(), 0, "port 0 binds an actual port");
        let url = app.url().to_owned();
        assert!(url.ends_with(&format!(":{}", app.port())), "{url} is not on port {}", app.port());
        let (shutdown, signalled) = oneshot::channel::<()>();
        let run = tokio::spawn(app.run_until_stopped(async move {
            let _ = signalled.await;
        }));
        Self { url, shutdown, run }
    }

    async fn with_defaults() -> Self {
        Self::start(AgentConfig::default()).await
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        HTTP.request(method, format!("{}{path}", self.url))
    }

    fn task_request(&self, body: &Value) -> RequestBuilder {
        self.request(Method::POST, TASKS).json(body)
    }

    async fn send_task(&self, body: &Value) -> Response {
        self.task_request(body).send().await.expect("the agent answers")
    }

    /// `POST /tasks/send` with a raw body and, when given, a content type.
    async fn post_raw(&self, content_type: Option<&str>, body: impl Into<reqwest::Body>) -> Response {
        let request = self.request(Method::POST, TASKS).body(body);
        let request = match content_type {
            Some(content_type) => request.header(CONTENT_TYPE, content_type),
            None => request,
        };
        request.send().await.expect("the agent answers")
    }

    async fn get(&self, path: &str) -> Response {
        self.request(Method::GET, path).send().await.expect("the agent answers")
    }

    async fn health(&self) -> HealthReport {
        let response = self.get("/health").await;
        assert_eq!(response.status(), StatusCode::OK);
        response.json().await.expect("/health answers a HealthReport")
    }

    /// Signals shutdown now; the returned future resolves with what the run future returned.
    fn stop(self) -> impl Future<Output = Result<(), KitError>> {
        let _ = self.shutdown.send(());
        async move {
            tokio::time::timeout(DEADLINE, self.run)
                .await
                .expect("the agent stops after shutdown is signalled")
                .expect("the run task does not panic")
        }
    }
}

/// Asserts a successful task answer and returns it.
async fn expect_task(response: Response) -> TaskResponse {
    let status = response.status();
    let body = response.text().await.expect("the body is readable");
    assert_eq!(status, StatusCode::OK, "body: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("not a TaskResponse ({e}): {body}"))
}

/// Asserts `status` with the mesh error body carrying `code` (`TIMEOUT` for 504, else `ERROR`).
async fn expect_error(response: Response, status: StatusCode, code: &str) -> ErrorBody {
    assert_eq!(response.status(), status, "for {code}");
    let content_type = response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    assert!(content_type.starts_with("application/json"), "{code} answered with content type {content_type:?}");
    let text = response.text().await.expect("the body is readable");
    let body: ErrorBody = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not an ErrorBody ({e}): {text}"));
    let failure = if status == StatusCode::GATEWAY_TIMEOUT { FailureStatus::Timeout } else { FailureStatus::Error };
    assert_eq!((body.status, body.error_code.as_str()), (failure, code), "body: {text}");
    assert!(!body.error_message.is_empty(), "the error message is empty: {text}");
    body
}

fn header<'a>(response: &'a Response, name: &str) -> &'a str {
    response.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_else(|| panic!("no {name} header"))
}

#[tokio::test]
async fn seed_task_is_answered_with_its_id_and_the_last_user_message() {
    let agent = Agent::with_defaults().await;
    let body = json!({"id": "task-1", "messages": [
        {"role": "user", "parts": [{"type": "text", "text": "echo earlier"}]},
        {"role": "user", "parts": [
            {"type": "text", "text": "echo hello"},
            {"type": "data", "data": {"a": 1, "b": 1}},
            {"type": "text", "text": "world"},
            {"type": "data", "data": {"b": 2}}
        ]},
        {"role": "agent", "parts": [{"type": "text", "text": "not the question"}]}
    ]});
    let answer = expect_task(agent.send_task(&body).await).await;
    assert_eq!((answer.id.as_str(), answer.status), ("task-1", ResponseStatus::Success));
    assert_eq!(
        answer.messages,
        vec![Message {
            role: Role::Agent,
            parts: vec![Part::Data { data: json!({"echo": "echo hello\nworld", "data": {"a": 1, "b": 2}}) }],
        }]
    );
    assert!(answer.warnings.is_empty());
    assert_eq!(answer.metadata.agent, CARD_NAME);
}

#[tokio::test]
async fn a_seed_answer_gives_its_processing_time_in_milliseconds() {
    let agent = Agent::with_defaults().await;
    let started = Instant::now();
    let answer = expect_task(agent.send_task(&task("nap")).await).await;
    let round_trip_ms = started.elapsed().as_secs_f64() * 1000.0;
    let processing_ms = answer.metadata.processing_time_ms;
    // At least the handler's nap, and no more than the whole round trip the client saw.
    assert!(
        (NAP.as_secs_f64() * 1000.0..=round_trip_ms).contains(&processing_ms),
        "{processing_ms} ms processing, {round_trip_ms} ms round trip, a nap of {NAP:?}"
    );
}

#[tokio::test]
async fn task_without_id_is_assigned_a_fresh_uuid() {
    let agent = Agent::with_defaults().await;
    let first = expect_task(agent.send_task(&task("echo one")).await).await;
    let second = expect_task(agent.send_task(&task("echo two")).await).await;
    for answer in [&first, &second] {
        assert!(uuid::Uuid::parse_str(&answer.id).is_ok(), "{:?} is not a UUID", answer.id);
        assert_eq!(answer.status, ResponseStatus::Success);
    }
    assert_ne!(first.id, second.id);
}

#[tokio::test]
async fn request_id_is_echoed_or_generated() {
    let agent = Agent::with_defaults().await;

    let response = agent.task_request(&task("echo hi")).header(REQUEST_ID, "req-42").send().await.unwrap();
    assert_eq!(header(&response, REQUEST_ID), "req-42");
    assert_eq!(expect_task(response).await.metadata.request_id.as_deref(), Some("req-42"));

    let response = agent.send_task(&task("echo hi")).await;
    let generated = header(&response, REQUEST_ID).to_owned();
    assert!(!generated.is_empty());
    assert_eq!(expect_task(response).await.metadata.request_id, Some(generated));

    let response = agent.task_request(&task("invalid")).header(REQUEST_ID, "req-43").send().await.unwrap();
    assert_eq!(header(&response, REQUEST_ID), "req-43");
    let error = expect_error(response, StatusCode::BAD_REQUEST, "TASK_INVALID_INPUT").await;
    assert_eq!(error.request_id.as_deref(), Some("req-43"));
}

#[tokio::test]
async fn reply_with_warnings_is_partial() {
    let agent = Agent::with_defaults().await;
    let answer = expect_task(agent.send_task(&task("partial")).await).await;
    assert_eq!(answer.status, ResponseStatus::Partial);
    assert_eq!(answer.warnings, ["only half of the answer"]);
    assert_eq!(answer.messages[0].parts, [Part::Data { data: json!({"half": 1}) }]);
}

#[tokio::test]
async fn card_is_served_at_both_paths_with_validators_and_revalidated_with_304() {
    let agent = Agent::with_defaults().await;
    let mut expected = card();
    mesh_a2a_server::describe_interfaces(&mut expected, &agent.url, true);
    expected.capabilities.push_notifications = Some(true);
    let mut etags = Vec::new();
    for path in CARD_PATHS {
        let response = agent.get(path).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert!(header(&response, "content-type").starts_with("application/json"), "{path}");
        assert!(header(&response, CACHE_CONTROL.as_str()).contains("max-age="), "{path}");
        let last_modified = header(&response, LAST_MODIFIED.as_str());
        assert!(
            chrono::DateTime::parse_from_rfc2822(last_modified).is_ok(),
            "{path}: an HTTP date, not {last_modified:?}"
        );
        let etag = header(&response, ETAG.as_str()).to_owned();
        let served: AgentCard = response.json().await.expect("the card parses");
        assert_eq!(served, expected, "{path}");

        let revalidated = agent.request(Method::GET, path).header(IF_NONE_MATCH, &etag).send().await.unwrap();
        assert_eq!(revalidated.status(), StatusCode::NOT_MODIFIED, "{path}");
        assert_eq!(header(&revalidated, ETAG.as_str()), etag);
        assert!(revalidated.bytes().await.unwrap().is_empty(), "a 304 has no body");

        let stale = agent.request(Method::GET, path).header(IF_NONE_MATCH, "\"stale\"").send().await.unwrap();
        assert_eq!(stale.status(), StatusCode::OK, "{path} with a stale validator");
        etags.push(etag);
    }
    assert_eq!(etags[0], etags[1], "both paths serve the same document");
}

#[tokio::test]
async fn health_reports_the_service_and_its_counters() {
    let agent = Agent::with_defaults().await;
    let response = agent.get("/health").await;
    assert_eq!(response.status(), StatusCode::OK);
    let raw: Value = response.json().await.unwrap();
    assert_eq!(raw["status"], "healthy");
    assert_eq!(raw["service"], CARD_NAME);
    let metrics = raw["metrics"].as_object().expect("metrics is an object");
    for key in ["uptime_s", "in_flight", "served", "errors"] {
        assert!(metrics[key].is_u64(), "metrics.{key} is a count: {raw}");
    }
    assert_eq!((&metrics["in_flight"], &metrics["served"], &metrics["errors"]), (&json!(0), &json!(0), &json!(0)));
}

#[tokio::test]
async fn health_counts_served_tasks_and_errors_exactly() {
    let agent = Agent::with_defaults().await;
    for (text, status) in [
        ("echo a", StatusCode::OK),
        ("echo b", StatusCode::OK),
        ("partial", StatusCode::OK),
        ("invalid", StatusCode::BAD_REQUEST),
        ("down", StatusCode::SERVICE_UNAVAILABLE),
    ] {
        assert_eq!(agent.send_task(&task(text)).await.status(), status, "{text}");
    }
    assert_eq!(agent.post_raw(Some("application/json"), "{").await.status(), StatusCode::BAD_REQUEST);
    // Neither the card nor the health endpoint counts as a served task.
    agent.get(CARD_PATHS[0]).await;
    agent.health().await;

    let metrics = agent.health().await.metrics;
    assert_eq!((metrics.served, metrics.errors, metrics.in_flight), (6, 3, 0), "{metrics:?}");
}

#[tokio::test]
async fn in_flight_counts_a_running_task_until_it_ends() {
    let agent = Agent::start(AgentConfig { request_timeout_ms: 1_000, ..Default::default() }).await;
    let pending = tokio::spawn(agent.task_request(&task("slow")).send());
    eventually("the slow task to be in flight", async || agent.health().await.metrics.in_flight == 1).await;
    let response = pending.await.unwrap().expect("the agent answers");
    expect_error(response, StatusCode::GATEWAY_TIMEOUT, "REQUEST_TIMEOUT").await;
    assert_eq!(agent.health().await.metrics.in_flight, 0);
}

#[tokio::test]
async fn timed_out_and_panicked_tasks_count_as_served_errors() {
    let agent = Agent::start(AgentConfig { request_timeout_ms: 300, ..Default::default() }).await;
    assert_eq!(agent.send_task(&task("slow")).await.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(agent.send_task(&task("panic")).await.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let metrics = agent.health().await.metrics;
    assert_eq!((metrics.served, metrics.errors, metrics.in_flight), (2, 2, 0), "{metrics:?}");
}

#[tokio::test]
async fn malformed_json_is_400() {
    let agent = Agent::with_defaults().await;
    for body in ["{", "not json", r#"{"messages": [}"#] {
        expect_error(
            agent.post_raw(Some("application/json"), body).await,
            StatusCode::BAD_REQUEST,
            "REQUEST_MALFORMED_JSON",
        )
        .await;
    }
}

#[tokio::test]
async fn missing_or_wrong_content_type_is_415() {
    let agent = Agent::with_defaults().await;
    let body = task("echo hi").to_string();
    for content_type in [None, Some("text/plain")] {
        let response = agent.post_raw(content_type, body.clone()).await;
        expect_error(response, StatusCode::UNSUPPORTED_MEDIA_TYPE, "REQUEST_UNSUPPORTED_MEDIA_TYPE").await;
    }
}

#[tokio::test]
async fn body_over_the_limit_is_413() {
    let agent = Agent::start(AgentConfig { body_limit_bytes: 1024, ..Default::default() }).await;
    let small = task("echo small");
    expect_task(agent.send_task(&small).await).await;
    let large = task(&format!("echo {}", "x".repeat(2048)));
    expect_error(agent.send_task(&large).await, StatusCode::PAYLOAD_TOO_LARGE, "REQUEST_BODY_TOO_LARGE").await;
}

#[tokio::test]
async fn json_of_the_wrong_shape_is_422() {
    let agent = Agent::with_defaults().await;
    for body in [
        json!({"messages": "echo hi"}),
        json!({"id": "t", "messages": [{"role": "user", "parts": [{"type": "video", "url": "x"}]}]}),
        json!({"messages": [{"role": "robot", "parts": [{"type": "text", "text": "echo"}]}]}),
        json!({"id": "no messages"}),
        json!([1, 2]),
    ] {
        expect_error(agent.send_task(&body).await, StatusCode::UNPROCESSABLE_ENTITY, "REQUEST_INVALID_BODY").await;
    }
}

#[tokio::test]
async fn task_without_a_usable_user_message_or_with_an_empty_id_is_400() {
    let agent = Agent::with_defaults().await;
    for body in [
        json!({"messages": []}),
        json!({"messages": [{"role": "agent", "parts": [{"type": "text", "text": "echo"}]}]}),
        json!({"messages": [{"role": "user", "parts": []}]}),
        json!({"id": "", "messages": [{"role": "user", "parts": [{"type": "text", "text": "echo"}]}]}),
    ] {
        expect_error(agent.send_task(&body).await, StatusCode::BAD_REQUEST, "TASK_INVALID").await;
    }
}

#[tokio::test]
async fn unknown_route_is_404_and_wrong_method_is_405() {
    let agent = Agent::with_defaults().await;
    for (method, path) in
        [(Method::GET, "/nope"), (Method::POST, "/tasks/send/extra"), (Method::GET, "/tasks/send/extra")]
    {
        let response = agent.request(method, path).send().await.unwrap();
        expect_error(response, StatusCode::NOT_FOUND, "ROUTE_NOT_FOUND").await;
    }
    for (method, path) in [(Method::GET, TASKS), (Method::POST, "/health"), (Method::DELETE, CARD_PATHS[0])] {
        let response = agent.request(method, path).send().await.unwrap();
        expect_error(response, StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED").await;
    }
}

#[tokio::test]
async fn handler_errors_map_to_their_status_and_code() {
    let agent = Agent::with_defaults().await;
    expect_error(agent.send_task(&task("invalid")).await, StatusCode::BAD_REQUEST, "TASK_INVALID_INPUT").await;
    expect_error(agent.send_task(&task("down")).await, StatusCode::SERVICE_UNAVAILABLE, "DEPENDENCY_UNAVAILABLE").await;
}

#[tokio::test]
async fn slow_task_is_cut_off_with_504_timeout() {
    let agent = Agent::start(AgentConfig { request_timeout_ms: 300, ..Default::default() }).await;
    let started = Instant::now();
    let response = agent.send_task(&task("slow")).await;
    assert!(started.elapsed() < SLOW, "the server answered only when the handler finished");
    let error = expect_error(response, StatusCode::GATEWAY_TIMEOUT, "REQUEST_TIMEOUT").await;
    assert!(error.error_message.contains("300"), "{error:?}");
    expect_task(agent.send_task(&task("echo after")).await).await;
}

#[tokio::test]
async fn panicking_handler_answers_500_and_the_server_keeps_serving() {
    let agent = Agent::with_defaults().await;
    expect_error(agent.send_task(&task("panic")).await, StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR").await;
    let answer = expect_task(agent.send_task(&task("echo still here")).await).await;
    assert_eq!(answer.messages[0].parts, [Part::Data { data: json!({"echo": "echo still here", "data": {}}) }]);
    assert_eq!(agent.health().await.metrics.in_flight, 0);
}

#[tokio::test]
async fn shutdown_lets_the_task_in_flight_finish_then_stops() {
    let agent = Agent::with_defaults().await;
    let url = agent.url.clone();
    let pending = tokio::spawn(agent.task_request(&task("nap")).send());
    eventually("the nap to be in flight", async || agent.health().await.metrics.in_flight == 1).await;
    let stopped = agent.stop();
    let answer = expect_task(pending.await.unwrap().expect("the task in flight is answered")).await;
    assert_eq!(answer.messages[0].parts, [Part::Data { data: json!({"napped": true}) }]);
    stopped.await.expect("the run future returns Ok");
    assert!(HTTP.get(format!("{url}/health")).send().await.is_err(), "the agent still answers after it stopped");
}

/// What the fake registry was sent.
#[derive(Debug, Default, Clone)]
struct RegistryLog {
    attempts: usize,
    registered: Vec<Registration>,
    deregistered: Vec<String>,
}

#[derive(Debug)]
struct RegistryState {
    /// Registration attempts answered 503 before the registry accepts one.
    failures: usize,
    log: Mutex<RegistryLog>,
}

/// A registry stand-in recording `POST /register` and `DELETE /agents/{name}`.
#[derive(Debug)]
struct FakeRegistry {
    url: String,
    state: Arc<RegistryState>,
}

impl FakeRegistry {
    async fn start(failures: usize) -> Self {
        let state = Arc::new(RegistryState { failures, log: Mutex::default() });
        let router = Router::new()
            .route("/register", post(register))
            .route("/agents/{name}", delete(deregister))
            .with_state(state.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("the fake registry binds");
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await });
        Self { url, state }
    }

    fn log(&self) -> RegistryLog {
        self.state.log.lock().unwrap().clone()
    }
}

async fn register(
    State(state): State<Arc<RegistryState>>,
    Json(registration): Json<Registration>,
) -> (StatusCode, Json<Value>) {
    let mut log = state.log.lock().unwrap();
    log.attempts += 1;
    if log.attempts <= state.failures {
        let body = json!({"status": "ERROR", "error_code": "REGISTRY_UNAVAILABLE", "error_message": "try again later"});
        return (StatusCode::SERVICE_UNAVAILABLE, Json(body));
    }
    log.registered.push(registration);
    (StatusCode::OK, Json(json!({"status": "success", "message": "registered"})))
}

async fn deregister(State(state): State<Arc<RegistryState>>, Path(name): Path<String>) -> Json<Value> {
    state.log.lock().unwrap().deregistered.push(name);
    Json(json!({"status": "success", "message": "deregistered"}))
}

/// Starts an agent registering with `registry`, named `name` when given.
async fn start_registered(registry: &FakeRegistry, name: Option<&str>) -> Agent {
    let config =
        AgentConfig { registry_url: Some(registry.url.clone()), name: name.map(str::to_owned), ..Default::default() };
    Agent::start(config).await
}

/// Asserts the one accepted registration describes `agent` under `name`.
fn assert_registered(log: &RegistryLog, agent: &Agent, name: &str) {
    let [registration] = log.registered.as_slice() else { panic!("expected one registration: {log:?}") };
    assert_eq!(registration.name, name);
    assert_eq!(registration.url, agent.url);
    assert_eq!(registration.capabilities, ["echo"]);
    assert_eq!(registration.health_endpoint, "/health");
    assert_eq!(registration.process_endpoint, TASKS);
    assert_eq!(registration.agent_card_url, Some(format!("{}{}", agent.url, CARD_PATHS[0])));
}

#[tokio::test]
async fn registration_is_retried_while_serving_and_undone_on_shutdown() {
    let registry = FakeRegistry::start(2).await;
    let agent = start_registered(&registry, None).await;

    eventually("a first registration attempt", async || registry.log().attempts >= 1).await;
    assert_eq!(agent.health().await.status, "healthy");
    expect_task(agent.send_task(&task("echo while registering")).await).await;
    assert!(registry.log().registered.is_empty(), "the agent served before registration succeeded");

    eventually("an accepted registration", async || !registry.log().registered.is_empty()).await;
    let log = registry.log();
    assert_eq!(log.attempts, 3, "two refused attempts, then the accepted one");
    assert_registered(&log, &agent, CARD_NAME);
    assert!(log.deregistered.is_empty());

    agent.stop().await.expect("the agent stops cleanly");
    assert_eq!(registry.log().deregistered, [CARD_NAME]);
}

#[tokio::test]
async fn health_shows_the_registration_state_and_registration_is_refreshed() {
    let registry = FakeRegistry::start(2).await;
    let config =
        AgentConfig { registry_url: Some(registry.url.clone()), registration_refresh_ms: 50, ..Default::default() };
    let agent = Agent::start(config).await;
    eventually("a first, refused attempt", async || registry.log().attempts >= 1).await;
    if registry.log().registered.is_empty() {
        assert_eq!(agent.health().await.registration, Some(RegistrationState::Pending));
    }
    // Re-registered every 50 ms once accepted, so a registry that lost the entry gets it back.
    eventually("three accepted registrations", async || registry.log().registered.len() >= 3).await;
    assert_eq!(agent.health().await.registration, Some(RegistrationState::Registered));
    // A second agent refreshing at the same pace keeps running: once it has refreshed three
    // times more, the stopped agent would have too, had its refresh outlived it.
    let control = Agent::start(AgentConfig {
        registry_url: Some(registry.url.clone()),
        registration_refresh_ms: 50,
        name: Some("control".into()),
        ..Default::default()
    })
    .await;
    agent.stop().await.expect("the agent stops cleanly");
    let registrations_of = |name: &str| registry.log().registered.iter().filter(|r| r.name == name).count();
    let (after_stop, control_before) = (registrations_of(CARD_NAME), registrations_of("control"));
    eventually("the control agent refreshes three times", async || registrations_of("control") >= control_before + 3)
        .await;
    assert_eq!(registrations_of(CARD_NAME), after_stop, "no registration after shutdown");
    control.stop().await.expect("the control agent stops cleanly");
}

#[tokio::test]
async fn a_registration_is_announced_in_the_log_once_not_on_every_refresh() {
    logs::capture(LOG_TARGETS);
    let registry = FakeRegistry::start(0).await;
    let name = "announced-once";
    let config = AgentConfig {
        registry_url: Some(registry.url.clone()),
        registration_refresh_ms: 50,
        name: Some(name.into()),
        ..Default::default()
    };
    let agent = Agent::start(config).await;
    // Each line is logged before the next registration is sent: after three, the first's is in.
    eventually("three accepted registrations", async || registry.log().registered.len() >= 3).await;
    assert_eq!(logs::count(&["registered", &format!("agent={name}")]), 1);
    agent.stop().await.expect("the agent stops cleanly");
}

#[tokio::test]
async fn without_a_registry_health_has_no_registration_state() {
    let agent = Agent::with_defaults().await;
    assert_eq!(agent.health().await.registration, None);
}

#[tokio::test]
async fn configured_name_overrides_the_card_name_everywhere() {
    let registry = FakeRegistry::start(0).await;
    let agent = start_registered(&registry, Some("echo-2")).await;

    let served: AgentCard = agent.get(CARD_PATHS[0]).await.json().await.unwrap();
    assert_eq!(served.name, "echo-2");
    assert_eq!(agent.health().await.service, "echo-2");
    assert_eq!(expect_task(agent.send_task(&task("echo")).await).await.metadata.agent, "echo-2");

    eventually("an accepted registration", async || !registry.log().registered.is_empty()).await;
    assert_registered(&registry.log(), &agent, "echo-2");

    agent.stop().await.expect("the agent stops cleanly");
    assert_eq!(registry.log().deregistered, ["echo-2"]);
}

/// How long the rolling-restart test's agent keeps accepting once stopped: long enough to observe
/// the not-ready answers and the deregistration before it stops listening.
const UNREADY: Duration = Duration::from_millis(1_500);

#[tokio::test]
async fn on_shutdown_readiness_turns_false_while_requests_are_still_served_then_the_drain_ends() {
    let registry = FakeRegistry::start(0).await;
    let config = AgentConfig {
        registry_url: Some(registry.url.clone()),
        shutdown_unready_ms: UNREADY.as_millis() as u64,
        ..Default::default()
    };
    let agent = Agent::start(config).await;
    eventually("an accepted registration", async || !registry.log().registered.is_empty()).await;
    assert_eq!(agent.get("/health/ready").await.status(), StatusCode::OK);
    let pending = tokio::spawn(agent.task_request(&task("nap")).send());
    eventually("the nap to be in flight", async || agent.health().await.metrics.in_flight == 1).await;

    let url = agent.url.clone();
    let stopped_at = Instant::now();
    let stopped = tokio::spawn(agent.stop());
    eventually("readiness to turn false", async || {
        HTTP.get(format!("{url}/health/ready"))
            .send()
            .await
            .is_ok_and(|r| r.status() == StatusCode::SERVICE_UNAVAILABLE)
    })
    .await;
    let ready: Value = HTTP.get(format!("{url}/health/ready")).send().await.unwrap().json().await.unwrap();
    assert_eq!((ready["status"].as_str(), ready["draining"].as_bool()), (Some("not_ready"), Some(true)), "{ready}");
    let health = HTTP.get(format!("{url}/health")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::SERVICE_UNAVAILABLE, "the registry's poller must see it too");
    let health: HealthReport = health.json().await.unwrap();
    assert!(health.draining && health.reasons[0].starts_with("draining"), "{health:?}");
    assert_eq!(
        HTTP.get(format!("{url}/health/live")).send().await.unwrap().status(),
        StatusCode::OK,
        "no restart asked"
    );
    eventually("the deregistration", async || !registry.log().deregistered.is_empty()).await;

    // A caller that has not noticed yet is still answered, on a new connection.
    let late = HTTP.post(format!("{url}{TASKS}")).json(&task("echo late")).send().await.expect("still accepting");
    expect_task(late).await;
    let answer = expect_task(pending.await.unwrap().expect("the task in flight is answered")).await;
    assert_eq!(answer.messages[0].parts, [Part::Data { data: json!({"napped": true}) }]);

    stopped.await.unwrap().expect("the run future returns Ok");
    let elapsed = stopped_at.elapsed();
    assert!(elapsed >= UNREADY, "stopped listening after {elapsed:?}, before the unready time");
    assert!(HTTP.get(format!("{url}/health")).send().await.is_err(), "the agent still answers after it stopped");
    assert_eq!(registry.log().deregistered, [CARD_NAME]);
}
