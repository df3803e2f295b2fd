//! [`LlmClient`] against a fake OpenAI-compatible endpoint on a real socket: an axum router that
//! records every request and answers with a canned status, body and delay.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, StatusCode, Uri};
use mesh_client::HttpClient;
use mesh_llm::{LlmClient, LlmConfig, LlmError, api_key_from_env};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;

const MODEL: &str = "test-model";
const SYSTEM: &str = "Answer with a JSON object {\"agents\": [names]}.";
const USER: &str = "find the weather in Paris";
const CHAT_PATH: &str = "/v1/chat/completions";
/// Timeout for the slow-endpoint test; far below the fake's delay so only the timeout can end the call.
const SHORT_TIMEOUT_MS: u64 = 200;
/// How long the slow fake waits before answering.
const SLOW_REPLY_DELAY: Duration = Duration::from_secs(10);
/// A timed-out call must return well before the slow fake answers.
const TIMEOUT_RETURN_MAX: Duration = Duration::from_secs(1);

/// The JSON the tests ask the model for.
#[derive(Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
struct Plan {
    agents: Vec<String>,
}

/// One request as the fake endpoint saw it.
#[derive(Debug, Clone)]
struct Recorded {
    path: String,
    authorization: Option<String>,
    body: Value,
}

/// What the fake answers to every request.
#[derive(Debug, Clone)]
struct Reply {
    status: StatusCode,
    body: String,
    delay: Duration,
}

#[derive(Debug, Clone)]
struct FakeState {
    reply: Reply,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

#[derive(Debug)]
struct FakeLlm {
    /// `http://127.0.0.1:<port>/v1`, the way an OpenAI base URL is written.
    base_url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
}

impl FakeLlm {
    async fn start(reply: Reply) -> Self {
        let requests = Arc::new(Mutex::new(Vec::new()));
        let state = FakeState { reply, requests: requests.clone() };
        // A fallback rather than one route, so a request to a wrong path is recorded, not lost in a 404.
        let router = Router::new().fallback(record_and_reply).with_state(state);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the fake endpoint");
        let addr = listener.local_addr().expect("the fake endpoint's address");
        tokio::spawn(async move { axum::serve(listener, router).await });
        Self { base_url: format!("http://{addr}/v1"), requests }
    }

    /// A fake answering 200 with a chat completion whose content is `content`.
    async fn answering(content: &str) -> Self {
        Self::start(Reply { status: StatusCode::OK, body: completion(content), delay: Duration::ZERO }).await
    }

    fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().expect("the request log").clone()
    }

    fn client(&self, api_key: Option<&str>) -> LlmClient {
        client_for(&self.base_url, LlmConfig::default().timeout_ms, api_key)
    }
}

async fn record_and_reply(
    State(state): State<FakeState>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    state.requests.lock().expect("the request log").push(Recorded {
        path: uri.path().to_owned(),
        authorization: headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_owned),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    tokio::time::sleep(state.reply.delay).await;
    (state.reply.status, state.reply.body)
}

/// A chat-completions answer shaped like OpenAI's.
fn completion(content: &str) -> String {
    json!({
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
    })
    .to_string()
}

fn config(base_url: &str, timeout_ms: u64) -> LlmConfig {
    LlmConfig { base_url: base_url.to_owned(), model: MODEL.to_owned(), timeout_ms, ..LlmConfig::default() }
}

/// Each test builds its own HTTP client: every `#[tokio::test]` has its own runtime, and pooled
/// connections must not outlive the runtime that opened them.
fn client_for(base_url: &str, timeout_ms: u64, api_key: Option<&str>) -> LlmClient {
    let http = HttpClient::with_reqwest().expect("build the HTTP client");
    LlmClient::with_api_key(config(base_url, timeout_ms), http, api_key.map(str::to_owned)).expect("a valid config")
}

fn accept_any(_: &Plan) -> Result<(), String> {
    Ok(())
}

async fn plan_from(client: &LlmClient) -> Result<Plan, LlmError> {
    client.complete_json(SYSTEM, USER, accept_any).await
}

#[tokio::test]
async fn a_json_answer_is_parsed_and_the_request_is_openai_shaped() {
    let fake = FakeLlm::answering(r#"{"agents": ["weather", "geo"]}"#).await;
    let client = fake.client(Some("sk-test-key"));

    let plan = plan_from(&client).await.expect("a valid plan");

    assert_eq!(plan, Plan { agents: vec!["weather".into(), "geo".into()] });
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.path, CHAT_PATH);
    assert_eq!(request.authorization.as_deref(), Some("Bearer sk-test-key"));
    assert_eq!(
        request.body,
        json!({
            "model": MODEL,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}],
            "temperature": 0.0,
            "response_format": {"type": "json_object"},
        })
    );
}

#[tokio::test]
async fn without_a_key_no_authorization_header_is_sent() {
    let fake = FakeLlm::answering(r#"{"agents": []}"#).await;

    for api_key in [None, Some("  ")] {
        plan_from(&fake.client(api_key)).await.expect("a valid plan");
    }

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|r| r.authorization.is_none()), "{requests:?}");
}

#[test]
fn the_api_key_is_read_from_the_named_variable_and_never_printed() {
    // Cargo sets CARGO_PKG_NAME for the test process; reading an existing variable avoids set_var.
    let from_cargo = LlmConfig { api_key_env: "CARGO_PKG_NAME".into(), ..LlmConfig::default() };
    assert_eq!(api_key_from_env(&from_cargo).as_deref(), Some("mesh-llm"));
    let unset = LlmConfig { api_key_env: "MESH_LLM_TEST_KEY_THAT_IS_NEVER_SET".into(), ..LlmConfig::default() };
    assert_eq!(api_key_from_env(&unset), None);

    let client = client_for("http://127.0.0.1:1/v1", SHORT_TIMEOUT_MS, Some("sk-very-secret"));
    let printed = format!("{client:?}");
    assert!(!printed.contains("sk-very-secret"), "{printed}");
}

#[tokio::test]
async fn a_fenced_json_answer_is_accepted() {
    let fake = FakeLlm::answering("```json\n{\"agents\": [\"weather\"]}\n```").await;

    let plan = plan_from(&fake.client(None)).await.expect("the fenced JSON is accepted");

    assert_eq!(plan, Plan { agents: vec!["weather".into()] });
}

#[tokio::test]
async fn malformed_json_content_is_invalid_json() {
    let fake = FakeLlm::answering("{\"agents\": [\"weather\",").await;

    let error = plan_from(&fake.client(None)).await.unwrap_err();

    assert!(matches!(error, LlmError::InvalidJson(_)), "{error:?}");
}

#[tokio::test]
async fn json_of_the_wrong_shape_is_invalid_json() {
    let fake = FakeLlm::answering(r#"{"agent": "weather"}"#).await;

    let error = plan_from(&fake.client(None)).await.unwrap_err();

    assert!(matches!(&error, LlmError::InvalidJson(reason) if reason.contains("agent")), "{error:?}");
}

#[tokio::test]
async fn an_answer_the_validation_refuses_is_rejected() {
    let fake = FakeLlm::answering(r#"{"agents": ["teleporter"]}"#).await;
    let known_agents_only = |plan: &Plan| match plan.agents.iter().find(|a| *a != "weather") {
        Some(unknown) => Err(format!("unknown agent {unknown:?}")),
        None => Ok(()),
    };

    let error = fake.client(None).complete_json(SYSTEM, USER, known_agents_only).await.unwrap_err();

    assert_eq!(error, LlmError::Rejected("unknown agent \"teleporter\"".into()));
}

#[tokio::test]
async fn a_server_error_is_http_with_the_servers_message() {
    let body = json!({"error": {"message": "the model is overloaded", "type": "server_error"}}).to_string();
    let fake = FakeLlm::start(Reply { status: StatusCode::INTERNAL_SERVER_ERROR, body, delay: Duration::ZERO }).await;

    let error = plan_from(&fake.client(None)).await.unwrap_err();

    assert_eq!(error, LlmError::Http { status: 500, message: "the model is overloaded".into() });
}

#[tokio::test]
async fn an_unauthorized_answer_points_at_the_api_key_variable() {
    let body = json!({"error": {"message": "Incorrect API key provided"}}).to_string();
    let fake = FakeLlm::start(Reply { status: StatusCode::UNAUTHORIZED, body, delay: Duration::ZERO }).await;

    let error = plan_from(&fake.client(Some("sk-wrong"))).await.unwrap_err();

    assert!(matches!(&error, LlmError::Http { status: 401, .. }), "{error:?}");
    let shown = error.to_string();
    assert!(shown.contains("OPENAI_API_KEY") && !shown.contains("sk-wrong"), "{shown}");
}

#[tokio::test]
async fn a_slow_endpoint_times_out_promptly() {
    let body = completion(r#"{"agents": []}"#);
    let fake = FakeLlm::start(Reply { status: StatusCode::OK, body, delay: SLOW_REPLY_DELAY }).await;
    let client = client_for(&fake.base_url, SHORT_TIMEOUT_MS, None);

    let started = Instant::now();
    let error = plan_from(&client).await.unwrap_err();

    assert_eq!(error, LlmError::Timeout { timeout_ms: SHORT_TIMEOUT_MS });
    assert!(started.elapsed() < TIMEOUT_RETURN_MAX, "took {:?}", started.elapsed());
}

#[tokio::test]
async fn answers_without_usable_content_are_bad_responses() {
    let bodies = [
        json!({"object": "chat.completion", "choices": []}).to_string(),
        json!({"choices": [{"message": {"role": "assistant", "content": null}}]}).to_string(),
        json!({"choices": [{"message": {"role": "assistant", "content": null, "refusal": "I can't help"}}]})
            .to_string(),
        json!({"data": [{"embedding": [0.1]}]}).to_string(),
        "<html>welcome to nginx</html>".to_owned(),
    ];
    for body in bodies {
        let fake = FakeLlm::start(Reply { status: StatusCode::OK, body: body.clone(), delay: Duration::ZERO }).await;

        let error = plan_from(&fake.client(None)).await.unwrap_err();

        assert!(matches!(error, LlmError::BadResponse(_)), "{body}: {error:?}");
    }
}

#[tokio::test]
async fn a_refused_connection_is_a_transport_error() {
    // Bind then drop a listener: the port was just free, so nothing listens there now.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a port");
    let addr = listener.local_addr().expect("the port's address");
    drop(listener);

    let error = plan_from(&client_for(&format!("http://{addr}/v1"), SHORT_TIMEOUT_MS, None)).await.unwrap_err();

    assert!(matches!(error, LlmError::Transport(_)), "{error:?}");
}

#[tokio::test]
async fn base_urls_with_or_without_a_trailing_slash_reach_chat_completions() {
    let fake = FakeLlm::answering(r#"{"agents": []}"#).await;

    for base_url in [fake.base_url.clone(), format!("{}/", fake.base_url)] {
        let client = client_for(&base_url, LlmConfig::default().timeout_ms, None);
        plan_from(&client).await.unwrap_or_else(|e| panic!("{base_url}: {e}"));
    }

    let paths: Vec<String> = fake.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, [CHAT_PATH, CHAT_PATH]);
}

#[test]
fn an_unset_or_unusable_config_fails_at_construction() {
    let http = HttpClient::with_reqwest().expect("build the HTTP client");
    let build = |config: LlmConfig| LlmClient::with_api_key(config, http.clone(), None).map(|_| ());

    assert_eq!(build(LlmConfig::default()), Err(LlmError::NotConfigured));
    assert_eq!(build(LlmConfig { model: String::new(), ..config("http://h/v1", 1) }), Err(LlmError::NotConfigured));
    for bad in [config("not a url", 1), config("ftp://h/v1", 1), config("http://h/v1", 0)] {
        assert!(matches!(build(bad.clone()), Err(LlmError::InvalidConfig(_))), "{bad:?}");
    }
    let with_newline_key = LlmClient::with_api_key(config("http://h/v1", 1), http, Some("sk-a\nb".into()));
    assert!(matches!(with_newline_key, Err(LlmError::InvalidConfig(_))));
}
