//! What every binding applies to a call, on kit agents served on port 0: the authenticated
//! extended card (with a token, and behind the trust layer), required extensions, and agents that
//! do not stream; in JSON-RPC and HTTP+JSON, 1.0 and 0.3.

use mesh_agent_kit::{AgentApp, AgentConfig, KitError};
use mesh_client::HttpClient;
use mesh_tck_agent::{TCK_EXTENDED_SKILL_ID, TCK_REQUIRED_EXTENSION_URI, TckAgent, Variant, card};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::{self, Served, skill_ids, sqlite_memory_config};

/// The token that opens the extended card of the token-holding agents.
const TOKEN: &str = "extended-card-token-for-tests";
/// The HS256 secret of the agents behind the trust layer.
const SECRET: &str = "surface-test-secret-of-32-bytes-at-least";
/// JSON-RPC code of a request without valid credentials (`mesh_server::auth`).
const AUTH_REQUIRED: i64 = mesh_server::auth::AUTH_REQUIRED_JSONRPC_CODE;

/// The conformance agent as `variant`, on `config`.
async fn build(variant: Variant, mut config: AgentConfig) -> Result<AgentApp, KitError> {
    let mut card = card().unwrap();
    variant.apply(&mut card, &mut config);
    AgentApp::build_tasks(&config, card, TckAgent, HttpClient::with_reqwest().unwrap()).await
}

async fn serve(variant: Variant, config: AgentConfig) -> Served {
    Served::serve(build(variant, config).await.unwrap())
}

/// One call of the A2A surface: how it is sent, and how its answer reads.
#[derive(Debug, Clone)]
enum Call {
    /// JSON-RPC at `POST /`: method and the version header (none: 0.3).
    Rpc(&'static str, Option<&'static str>),
    /// HTTP+JSON: method, path and the version header.
    Rest(&'static str, String, Option<&'static str>),
}

fn rest(method: &'static str, path: &str, version: Option<&'static str>) -> Call {
    Call::Rest(method, path.to_owned(), version)
}

/// An answer: HTTP status, headers and JSON body (SSE answers keep their first event's data).
struct Answer {
    status: StatusCode,
    headers: reqwest::header::HeaderMap,
    body: Value,
}

impl Answer {
    /// The HTTP+JSON `ErrorInfo` reason, or the JSON-RPC error code, of a refusal.
    fn error(&self) -> Value {
        let error = &self.body["error"];
        match error.get("details") {
            Some(details) => details[0]["reason"].clone(),
            None => error.get("code").cloned().unwrap_or(Value::Null),
        }
    }

    fn error_message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or_default()
    }
}

/// The calls these tests make of a served agent. A trait of this module's, since [`Served`] is the
/// test binary's and other modules give it calls of their own.
trait SurfaceCalls {
    async fn call(&self, call: &Call, params: Value, headers: &[(&str, &str)]) -> Answer;
}

impl SurfaceCalls for Served {
    async fn call(&self, call: &Call, params: Value, headers: &[(&str, &str)]) -> Answer {
        let (request, version) = match *call {
            Call::Rpc(method, version) => (
                self.http
                    .post(format!("{}/", self.url))
                    .json(&json!({"jsonrpc": "2.0", "id": 9, "method": method, "params": params})),
                version,
            ),
            Call::Rest(method, ref path, version) => {
                let request =
                    self.http.request(Method::from_bytes(method.as_bytes()).unwrap(), format!("{}{path}", self.url));
                let request = if method == "POST" { request.json(&params) } else { request };
                (request, version)
            }
        };
        let mut request = request;
        if let Some(version) = version {
            request = request.header("A2A-Version", version);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        let data = text.lines().find_map(|line| line.strip_prefix("data: ")).unwrap_or(&text);
        Answer { status, headers, body: serde_json::from_str(data).unwrap_or(Value::Null) }
    }
}

/// Every way to ask for the extended card.
fn extended_card_calls() -> [Call; 5] {
    [
        Call::Rpc("GetExtendedAgentCard", Some("1.0")),
        Call::Rpc("agent/getAuthenticatedExtendedCard", None),
        rest("GET", "/extendedAgentCard", Some("1.0")),
        rest("GET", "/team-a/extendedAgentCard", Some("1.0")),
        rest("GET", "/v1/card", None),
    ]
}

/// The card an answer carries: the JSON-RPC result, or the HTTP+JSON body.
fn card_of(answer: &Answer) -> &Value {
    answer.body.get("result").unwrap_or(&answer.body)
}

/// Asks for the extended card every way with `headers`, expecting it refused as the trust layer
/// refuses a missing (or, with `invalid`, a wrong) credential.
async fn expect_unauthenticated(agent: &Served, headers: &[(&str, &str)], invalid: bool) {
    for call in extended_card_calls() {
        let answer = agent.call(&call, json!({}), headers).await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{call:?} with {headers:?}: {}", answer.body);
        let challenge = answer.headers["www-authenticate"].to_str().unwrap();
        assert_eq!(challenge.contains("invalid_token"), invalid, "{call:?}: {challenge}");
        let expected_error = match call {
            Call::Rpc(..) => json!(AUTH_REQUIRED),
            Call::Rest(..) => json!(if invalid { "AUTH_INVALID" } else { "AUTH_REQUIRED" }),
        };
        let error = answer.body["error"]["code"].clone();
        let error = if error.is_null() { answer.body["error_code"].clone() } else { error };
        assert_eq!(error, expected_error, "{call:?}: {}", answer.body);
        assert!(!answer.body.to_string().contains(TCK_EXTENDED_SKILL_ID), "{call:?} leaked the card");
    }
}

#[tokio::test]
async fn the_extended_card_opens_to_its_token_in_every_binding_and_version() {
    let agent =
        serve(Variant::ExtendedCard, AgentConfig { extended_card_token: Some(TOKEN.into()), ..sqlite_memory_config() })
            .await;
    let public = agent.public_card().await;
    assert_eq!(public["capabilities"]["extendedAgentCard"], true, "{public}");
    assert_eq!(public["supportsAuthenticatedExtendedCard"], true, "the 0.3 flag with the 0.3 fields: {public}");
    assert_eq!(skill_ids(&public), ["tck"], "the extra skill is not on the public card");
    // The public card says how to authenticate: the token, as a bearer credential.
    assert_eq!(public["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"], "Bearer", "{public}");

    let bearer = format!("Bearer {TOKEN}");
    for call in extended_card_calls() {
        let answer = agent.call(&call, json!({}), &[("authorization", &bearer)]).await;
        assert_eq!(answer.status, StatusCode::OK, "{call:?}: {}", answer.body);
        let extended = card_of(&answer);
        assert_eq!(skill_ids(extended), ["tck", TCK_EXTENDED_SKILL_ID], "{call:?}: {extended}");
        assert_eq!(extended["supportedInterfaces"], public["supportedInterfaces"], "{call:?}");
        if let Call::Rest(..) = call {
            let cache = answer.headers["cache-control"].to_str().unwrap();
            assert!(cache.starts_with("private"), "no shared cache may keep it: {cache}");
        }
    }
    expect_unauthenticated(&agent, &[], false).await;
    expect_unauthenticated(&agent, &[("authorization", "Bearer not-the-token")], true).await;
    // Tasks stay open to anyone: the token guards the extended card only.
    let sent = agent.call(&Call::Rpc("SendMessage", Some("1.0")), send_params(), &[]).await;
    assert!(sent.body.get("result").is_some(), "{}", sent.body);
    agent.stop().await;
}

#[tokio::test]
async fn the_extended_card_opens_to_callers_the_trust_layer_authenticates() {
    let mut config = sqlite_memory_config();
    config.auth.jwt_hs256_secret = Some(SECRET.into());
    let agent = serve(Variant::ExtendedCard, config).await;
    let claims = mesh_auth::Claims::new("reader", "acme", &[mesh_auth::Role::User], 600);
    let bearer = format!("Bearer {}", mesh_auth::mint_hs256(SECRET.as_bytes(), &claims).unwrap());
    for call in extended_card_calls() {
        let answer = agent.call(&call, json!({}), &[("authorization", &bearer)]).await;
        assert_eq!(answer.status, StatusCode::OK, "{call:?}: {}", answer.body);
        assert_eq!(skill_ids(card_of(&answer)), ["tck", TCK_EXTENDED_SKILL_ID], "{call:?}");
    }
    expect_unauthenticated(&agent, &[], false).await;
    agent.stop().await;
}

#[tokio::test]
async fn an_agent_without_an_extended_card_answers_unsupported_operation_everywhere() {
    let agent = serve(Variant::Standard, sqlite_memory_config()).await;
    assert_eq!(agent.public_card().await["capabilities"].get("extendedAgentCard"), None);
    for call in extended_card_calls() {
        let answer = agent.call(&call, json!({}), &[("authorization", "Bearer anything")]).await;
        match call {
            Call::Rpc(..) => assert_eq!(answer.error(), json!(-32004), "{call:?}: {}", answer.body),
            Call::Rest(..) => {
                assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{call:?}");
                assert_eq!(answer.error(), "UNSUPPORTED_OPERATION", "{call:?}: {}", answer.body);
            }
        }
        assert_eq!(answer.error_message(), "The agent does not support authenticated extended cards");
    }
    agent.stop().await;

    // A card that announces one the configuration does not give: not configured (-32007).
    let mut card = card().unwrap();
    card.capabilities.extended_agent_card = Some(true);
    let app = AgentApp::build_tasks(&sqlite_memory_config(), card, TckAgent, HttpClient::with_reqwest().unwrap())
        .await
        .unwrap();
    let agent = Served::serve(app);
    for call in extended_card_calls() {
        let answer = agent.call(&call, json!({}), &[]).await;
        let expected = match call {
            Call::Rpc(..) => json!(-32007),
            Call::Rest(..) => json!("EXTENDED_AGENT_CARD_NOT_CONFIGURED"),
        };
        assert_eq!(answer.error(), expected, "{call:?}: {}", answer.body);
    }
    agent.stop().await;
}

#[tokio::test]
async fn an_extended_card_nobody_could_open_is_refused_at_start() {
    let refused = build(Variant::ExtendedCard, sqlite_memory_config()).await.unwrap_err().to_string();
    assert!(refused.contains("extended_card_token"), "{refused}");
    let mut behind_the_trust_layer = AgentConfig { extended_card_token: Some(TOKEN.into()), ..sqlite_memory_config() };
    behind_the_trust_layer.auth.jwt_hs256_secret = Some(SECRET.into());
    let refused = build(Variant::ExtendedCard, behind_the_trust_layer).await.unwrap_err().to_string();
    assert!(refused.contains("extended_card_token is for agents without access control"), "{refused}");
}

fn send_params() -> Value {
    json!({"message": {"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "parts": [{"text": "hi"}]}})
}

/// The body of `POST /v1/message:send` (0.3 HTTP+JSON: the SDK's proto JSON).
fn send_body_0_3_rest() -> Value {
    json!({"message": {"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER", "content": [{"text": "hi"}]}})
}

/// `message/send` params in the 0.3 shape.
fn send_params_0_3() -> Value {
    json!({"message": {"messageId": uuid::Uuid::new_v4().to_string(), "role": "user", "kind": "message",
        "parts": [{"kind": "text", "text": "hi"}]}})
}

#[tokio::test]
async fn a_required_extension_must_be_activated_in_every_binding_and_version() {
    let agent = serve(Variant::RequiredExtension, sqlite_memory_config()).await;
    let card = agent.public_card().await;
    assert_eq!(
        card["capabilities"]["extensions"][0],
        json!({"uri": TCK_REQUIRED_EXTENSION_URI,
        "description": "Every call must activate it (A2A-Extensions)", "required": true})
    );
    let sends = [
        (Call::Rpc("SendMessage", Some("1.0")), send_params()),
        (Call::Rpc("message/send", None), send_params_0_3()),
        (rest("POST", "/message:send", Some("1.0")), send_params()),
        (rest("POST", "/v1/message:send", None), send_body_0_3_rest()),
        (Call::Rpc("ListTasks", Some("1.0")), json!({})),
        (rest("GET", "/tasks", Some("1.0")), Value::Null),
        (Call::Rpc("GetExtendedAgentCard", Some("1.0")), json!({})),
    ];
    for (call, params) in &sends {
        let refused = agent.call(call, params.clone(), &[]).await;
        match call {
            Call::Rpc(..) => assert_eq!(refused.error(), json!(-32008), "{call:?}: {}", refused.body),
            Call::Rest(..) => {
                assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{call:?}");
                assert_eq!(refused.error(), "EXTENSION_SUPPORT_REQUIRED", "{call:?}: {}", refused.body);
            }
        }
        assert!(refused.error_message().contains(TCK_REQUIRED_EXTENSION_URI), "{}", refused.body);
        // Another extension is not the required one.
        let other = agent.call(call, params.clone(), &[("A2A-Extensions", "urn:other")]).await;
        assert_ne!(other.error(), Value::Null, "{call:?}");
    }
    // Activated, in either header name, among others: served, and the agent's own echoed.
    let activation = format!("urn:other, {TCK_REQUIRED_EXTENSION_URI}");
    for (call, params) in sends.iter().take(6) {
        for header in ["A2A-Extensions", "X-A2A-Extensions"] {
            let served = agent.call(call, params.clone(), &[(header, &activation)]).await;
            assert_eq!(served.status, StatusCode::OK, "{call:?} {header}: {}", served.body);
            assert!(served.body.get("error").is_none(), "{call:?} {header}: {}", served.body);
            assert_eq!(served.headers["a2a-extensions"], TCK_REQUIRED_EXTENSION_URI, "{call:?}");
            assert_eq!(served.headers.contains_key("x-a2a-extensions"), header == "X-A2A-Extensions", "{call:?}");
        }
    }
    agent.stop().await;
}

#[tokio::test]
async fn an_agent_that_does_not_stream_refuses_every_streaming_method() {
    let agent = serve(Variant::NoStreaming, sqlite_memory_config()).await;
    assert_eq!(agent.public_card().await["capabilities"]["streaming"], false);
    let sent = agent.call(&Call::Rpc("SendMessage", Some("1.0")), send_params(), &[]).await;
    let task_id = sent.body["result"]["task"]["id"].as_str().expect("a task").to_owned();
    let streams = [
        (Call::Rpc("SendStreamingMessage", Some("1.0")), send_params()),
        (Call::Rpc("message/stream", None), send_params_0_3()),
        (Call::Rpc("SubscribeToTask", Some("1.0")), json!({"id": task_id})),
        (Call::Rpc("tasks/resubscribe", None), json!({"id": task_id})),
        (rest("POST", "/message:stream", Some("1.0")), send_params()),
        (rest("POST", "/v1/message:stream", None), send_body_0_3_rest()),
        (rest("GET", &format!("/tasks/{task_id}:subscribe"), Some("1.0")), Value::Null),
        (rest("POST", &format!("/v1/tasks/{task_id}:subscribe"), None), Value::Null),
    ];
    for (call, params) in streams {
        let refused = agent.call(&call, params, &[]).await;
        match call {
            Call::Rpc(..) => {
                assert_eq!(refused.status, StatusCode::OK, "{call:?}");
                assert_eq!(refused.error(), json!(-32004), "{call:?}: {}", refused.body);
            }
            Call::Rest(..) => {
                assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{call:?}");
                assert_eq!(refused.error(), "UNSUPPORTED_OPERATION", "{call:?}: {}", refused.body);
            }
        }
        assert_eq!(refused.error_message(), "Streaming is not supported by the agent", "{call:?}");
        assert_eq!(refused.headers["content-type"], "application/json", "{call:?}: an error, not a stream");
    }
    agent.stop().await;
}

/// The services stream (the kit serves their streams), so their cards say so: the kit takes a
/// card's `streaming: false` at its word and would refuse every streaming call.
#[test]
fn the_shipped_agent_cards_declare_that_they_stream() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../agent-cards");
    let mut cards = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let card: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(card["capabilities"]["streaming"], true, "{}", path.display());
        cards += 1;
    }
    assert_eq!(cards, 4, "the four agents' cards in {}", dir.display());
}

/// How long a test client waits between a request's headers and its body: far longer than the
/// agent takes to answer a cancel, so an agent that answered without the body would have.
const LATE_BODY: std::time::Duration = std::time::Duration::from_millis(200);

/// Reads one HTTP/1.1 answer with a `Content-Length` from `stream`: its status and body. Panics
/// when the agent closes the connection first.
async fn read_answer(stream: &mut tokio::net::TcpStream) -> (u16, String) {
    use tokio::io::AsyncReadExt;
    let mut answer = Vec::new();
    let mut chunk = [0_u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&answer).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|line| line.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
                .and_then(|v| v.parse::<usize>().ok())
                .expect("an answer with a Content-Length");
            if body.len() >= length {
                let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
                return (status, body[..length].to_owned());
            }
        }
        let read = tokio::time::timeout(common::TIMEOUT, stream.read(&mut chunk)).await.unwrap().unwrap();
        assert!(read > 0, "the agent closed the connection before answering; got {text:?}");
        answer.extend_from_slice(&chunk[..read]);
    }
}

/// A cancel whose body arrives well after its headers, as a client that writes them apart may
/// send it (the SDK's 1.0 and 0.3 HTTP+JSON clients send one): the agent answers once it has the
/// body, and the connection stays open for the client's next request. Answering before the body
/// closed the connection under that request, which a pooled client saw dropped unanswered.
#[tokio::test]
async fn a_cancel_reads_its_late_body_and_keeps_the_connection_open() {
    use tokio::io::AsyncWriteExt;
    let agent = serve(Variant::Standard, sqlite_memory_config()).await;
    let sent = agent.call(&rest("POST", "/message:send", Some("1.0")), send_params(), &[]).await;
    let id = sent.body["task"]["id"].as_str().unwrap().to_owned();
    let host = agent.url.trim_start_matches("http://").to_owned();
    let cancels = [
        (format!("/tasks/{id}:cancel"), "A2A-Version: 1.0\r\n", json!({"id": id})),
        (format!("/v1/tasks/{id}:cancel"), "", json!({"name": format!("tasks/{id}")})),
    ];
    for (path, version, body) in cancels {
        let mut stream = tokio::net::TcpStream::connect(&host).await.unwrap();
        let body = body.to_string();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {host}\r\n{version}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        tokio::time::sleep(LATE_BODY).await;
        stream.write_all(body.as_bytes()).await.unwrap();
        let (status, answer) = read_answer(&mut stream).await;
        assert_eq!(status, 409, "{path}: a completed task is not cancelable: {answer}");
        assert!(answer.contains("TASK_NOT_CANCELABLE"), "{path}: {answer}");
        stream.write_all(format!("GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes()).await.unwrap();
        let (status, answer) = read_answer(&mut stream).await;
        assert_eq!(status, 200, "{path}: the next request on the connection: {answer}");
    }
    agent.stop().await;
}

/// A task action's body, when there is one, is checked as any other: JSON with a JSON content
/// type, and naming the path's task if it names one.
#[tokio::test]
async fn a_cancel_body_naming_another_task_or_not_json_is_refused() {
    let agent = serve(Variant::Standard, sqlite_memory_config()).await;
    let sent = agent.call(&rest("POST", "/message:send", Some("1.0")), send_params(), &[]).await;
    let id = sent.body["task"]["id"].as_str().unwrap().to_owned();
    let cancel = rest("POST", &format!("/tasks/{id}:cancel"), Some("1.0"));
    let other = agent.call(&cancel, json!({"id": "another-task"}), &[]).await;
    assert_eq!(other.status, StatusCode::BAD_REQUEST, "{}", other.body);
    assert_eq!(other.error(), "INVALID_PARAMS", "{}", other.body);
    assert!(other.error_message().contains("another-task"), "{}", other.body);
    let url = format!("{}/tasks/{id}:cancel", agent.url);
    let text = agent.http.post(&url).header("A2A-Version", "1.0").body("not json").send().await.unwrap();
    assert_eq!(text.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let broken = agent
        .http
        .post(&url)
        .header("A2A-Version", "1.0")
        .header("content-type", "application/json")
        .body("{\"id\":")
        .send()
        .await
        .unwrap();
    assert_eq!(broken.status(), StatusCode::BAD_REQUEST);
    // The same task named, or nothing at all: the cancel itself answers (a completed task: 409).
    for body in [json!({"id": id, "metadata": {"why": "test"}}), json!({})] {
        let answer = agent.call(&cancel, body.clone(), &[]).await;
        assert_eq!(answer.error(), "TASK_NOT_CANCELABLE", "{body}: {}", answer.body);
    }
    agent.stop().await;
}
