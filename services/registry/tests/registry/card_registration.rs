//! Standard A2A agents register as they are (issue #36): `POST /register` with `agent_card_url`
//! alone, against a real registry on port 0. The official Python SDK's echo agent registers by
//! its card, becomes healthy on its card (it has no `/health`) and is found by its skill; a card
//! served here shows what is read from it, how it is polled, the path form of its name and the
//! refusals, each a JSON body naming the problem.

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use mesh_auth::{AuthConfig, Claims, Role, mint_hs256};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::common::{self, TOKEN_TTL_S, TestRegistry, WAIT_DEADLINE_MS, eventually};

const CAPTURED_CARD: &str = include_str!("../../../../shared/protocol/tests/fixtures/card.json");
/// The official SDK's echo agent (`a2a-sdk`), as the interop tests and the benchmark run it.
const SDK_ECHO_AGENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/interop/echo_agent.py");
const CARD_PATH: &str = "/.well-known/agent-card.json";
const SECRET: &str = "a-card-registration-secret-of-32-bytes";

/// What the card server answers: a status and a body.
type Answer = Arc<Mutex<(u16, Vec<u8>)>>;

/// An agent that serves only its card (no `/health`), as a standard A2A agent does.
struct CardServer {
    base: String,
    answer: Answer,
}

impl CardServer {
    /// Serves the captured SDK card, named `name`, with its URLs on this server.
    async fn start(name: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let answer: Answer = Arc::new(Mutex::new((200, Vec::new())));
        let server = Self { base, answer: answer.clone() };
        server.serve_card(server.card(name));
        let router = Router::new().route(CARD_PATH, get(card)).with_state(answer);
        tokio::spawn(async move { axum::serve(listener, router).await });
        server
    }

    /// The captured card named `name`, its interfaces moved onto this server.
    fn card(&self, name: &str) -> Value {
        let mut card: Value =
            serde_json::from_str(&CAPTURED_CARD.replace("http://127.0.0.1:18765", &self.base)).unwrap();
        card["name"] = json!(name);
        card
    }

    fn card_url(&self) -> String {
        format!("{}{CARD_PATH}", self.base)
    }

    fn serve_card(&self, card: Value) {
        self.serve(200, serde_json::to_vec(&card).unwrap());
    }

    fn serve(&self, status: u16, body: Vec<u8>) {
        *self.answer.lock().unwrap() = (status, body);
    }
}

async fn card(State(answer): State<Answer>) -> impl IntoResponse {
    let (status, body) = answer.lock().unwrap().clone();
    (StatusCode::from_u16(status).unwrap(), [("content-type", "application/json")], body)
}

/// `POST /register` with `body` (and `bearer`); the status and the JSON answer.
async fn register(registry: &TestRegistry, body: Value, bearer: Option<&str>) -> (u16, Value) {
    let mut request = registry.http.post(format!("{}/register", registry.url)).json(&body);
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or_else(|_| panic!("answered {status} without JSON: {text}")))
}

/// `GET /agents/{name}`, the name percent-encoded.
async fn agent(registry: &TestRegistry, name: &str) -> Value {
    let url = reqwest::Url::parse(&format!("{}/agents/", registry.url)).unwrap().join(name).unwrap();
    registry.http.get(url).send().await.unwrap().json().await.unwrap()
}

fn refusal(answer: &(u16, Value)) -> (u16, &str, &str) {
    let (status, body) = answer;
    (*status, body["error_code"].as_str().unwrap_or_default(), body["error_message"].as_str().unwrap_or_default())
}

#[tokio::test]
async fn a_card_registration_reads_name_skills_and_interfaces_and_polls_the_card() {
    let registry = TestRegistry::start().await;
    let server = CardServer::start("Echo Agent").await;
    let answer = register(&registry, json!({"agent_card_url": server.card_url()}), None).await;
    assert_eq!(answer.0, 200, "{}", answer.1);

    let record = agent(&registry, "Echo Agent").await;
    let base = &server.base;
    assert_eq!(record["path"], "echo-agent", "{record}");
    assert_eq!(record["url"], format!("{base}/rest"), "called at its 1.0 HTTP+JSON interface");
    assert_eq!(record["process_endpoint"], format!("{base}/"), "its first interface");
    assert_eq!(
        (record["health_probe"].clone(), record["health_endpoint"].clone()),
        (json!("card"), json!(server.card_url()))
    );
    assert_eq!(record["capabilities"], json!(["echo"]));
    assert_eq!(
        record["interfaces"],
        json!([
            {"protocol_binding": "JSONRPC", "protocol_version": "1.0", "url": format!("{base}/")},
            {"protocol_binding": "HTTP+JSON", "protocol_version": "1.0", "url": format!("{base}/rest")},
            {"protocol_binding": "JSONRPC", "protocol_version": "0.3", "url": format!("{base}/")},
            {"protocol_binding": "HTTP+JSON", "protocol_version": "0.3", "url": format!("{base}/rest")},
        ])
    );
    let listed: Value =
        registry.http.get(format!("{}/agents", registry.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(listed["agents"][0]["path"], "echo-agent", "the list carries the same fields");

    let health = || async { agent(&registry, "Echo Agent").await["health_status"].as_str().unwrap().to_owned() };
    eventually("the agent is healthy on its card", || async { health().await == "healthy" }).await;
    let found = registry.client.discover("echo").await.unwrap();
    assert_eq!(found.agents.iter().map(|a| a.name.as_str()).collect::<Vec<_>>(), ["Echo Agent"]);
    // A 200 that is not a card is not health; an error status neither.
    server.serve(200, b"{\"status\":\"healthy\"}".to_vec());
    eventually("an answer that is not a card is unhealthy", || async { health().await == "unhealthy" }).await;
    server.serve_card(server.card("Echo Agent"));
    eventually("the card again is healthy", || async { health().await == "healthy" }).await;
    server.serve(503, Vec::new());
    eventually("an error status is unhealthy", || async { health().await == "unhealthy" }).await;

    // Re-registering by the card changes nothing; the seed's form still works beside it.
    server.serve_card(server.card("Echo Agent"));
    let again = register(&registry, json!({"agent_card_url": server.card_url()}), None).await;
    assert_eq!((again.0, agent(&registry, "Echo Agent").await["path"].clone()), (200, json!("echo-agent")));
    let seed = common::FakeAgent::start("seed_agent").await;
    registry.client.register(&seed.registration(&["search"])).await.unwrap();
    let record = agent(&registry, "seed_agent").await;
    assert_eq!((record["path"].clone(), record["health_probe"].clone()), (json!("seed_agent"), json!("health")));
    registry.stop().await;
}

#[tokio::test]
async fn card_registrations_are_refused_with_a_json_body_naming_the_problem() {
    let registry = TestRegistry::start().await;
    let server = CardServer::start("Echo Agent").await;
    let by_card = json!({"agent_card_url": server.card_url()});

    for (body, expected) in [
        (json!({}), "agent_card_url alone"),
        (json!({"name": "x"}), "agent_card_url alone"),
        (json!({"agent_card_url": "not a url"}), "agent_card_url"),
        (json!({"agent_card_url": "ftp://127.0.0.1/card.json"}), "agent_card_url"),
        (json!({"agent_card_url": server.card_url(), "path": "a/b"}), "path"),
    ] {
        let answer = register(&registry, body.clone(), None).await;
        let (status, code, message) = refusal(&answer);
        assert_eq!((status, code), (400, "REGISTRATION_INVALID"), "{body}: {}", answer.1);
        assert!(message.contains(expected), "{body}: {message}");
    }

    let mut nameless = server.card("");
    nameless["name"] = json!("  ");
    let mut huge = server.card("Echo Agent");
    huge["description"] = json!("x".repeat(300 * 1024));
    let mut elsewhere = server.card("Echo Agent");
    elsewhere["supportedInterfaces"][1]["url"] = json!("http://169.254.169.254/rest");
    for (status, body, expected) in [
        (200, serde_json::to_vec(&nameless).unwrap(), "names no agent"),
        (200, b"<html>not json</html>".to_vec(), "not JSON"),
        (200, serde_json::to_vec(&huge).unwrap(), "larger than"),
        (200, br#"{"name": "Echo Agent"}"#.to_vec(), "does not parse as an A2A agent card"),
        (200, serde_json::to_vec(&elsewhere).unwrap(), "interface 2"),
    ] {
        server.serve(status, body);
        let answer = register(&registry, by_card.clone(), None).await;
        let (status, code, message) = refusal(&answer);
        assert_eq!((status, code), (422, "AGENT_CARD_INVALID"), "{expected}: {}", answer.1);
        assert!(message.contains(expected), "{message}");
        assert!(!message.contains("169.254") && !message.contains("<html>"), "nothing of the card quoted: {message}");
    }
    server.serve(404, Vec::new());
    let answer = register(&registry, by_card.clone(), None).await;
    assert_eq!(refusal(&answer).1, "AGENT_CARD_UNREACHABLE", "{}", answer.1);
    let metadata = json!({"agent_card_url": "http://169.254.169.254/.well-known/agent-card.json"});
    let answer = register(&registry, metadata, None).await;
    assert_eq!(refusal(&answer).1, "AGENT_ADDRESS_REFUSED", "{}", answer.1);
    assert_eq!(registry.client.stats().await.unwrap().total_agents, 0, "nothing was registered");
    registry.stop().await;
}

#[tokio::test]
async fn paths_are_unique_and_a_clash_is_a_409_until_another_path_is_asked_for() {
    let registry = TestRegistry::start().await;
    let first = CardServer::start("Echo Agent").await;
    let second = CardServer::start("echo agent!").await;
    assert_eq!(register(&registry, json!({"agent_card_url": first.card_url()}), None).await.0, 200);

    let answer = register(&registry, json!({"agent_card_url": second.card_url()}), None).await;
    let (status, code, message) = refusal(&answer);
    assert_eq!((status, code), (409, "AGENT_PATH_TAKEN"), "{}", answer.1);
    assert!(message.contains("echo-agent") && message.contains("Echo Agent"), "{message}");
    let answer = register(&registry, json!({"agent_card_url": second.card_url(), "path": "echo-agent-2"}), None).await;
    assert_eq!(answer.0, 200, "{}", answer.1);
    assert_eq!(agent(&registry, "echo agent!").await["path"], "echo-agent-2");
    // A URL-safe name is its own path, and takes no other agent's.
    let named = common::FakeAgent::start("echo-agent-2").await;
    let answer = register(&registry, json!({"name": named.name, "url": named.url, "capabilities": []}), None).await;
    assert_eq!(refusal(&answer).1, "AGENT_PATH_TAKEN", "{}", answer.1);
    registry.stop().await;
}

#[tokio::test]
async fn with_authentication_a_card_registration_follows_the_ownership_rules() {
    let registry = TestRegistry::start_with(|config| {
        config.auth = AuthConfig { jwt_hs256_secret: Some(SECRET.into()), ..AuthConfig::default() };
    })
    .await;
    let token = |subject: &str, roles: &[Role]| {
        mint_hs256(SECRET.as_bytes(), &Claims::new(subject, "", roles, TOKEN_TTL_S)).unwrap()
    };
    let server = CardServer::start("Echo Agent").await;
    let by_card = json!({"agent_card_url": server.card_url()});
    let answer = register(&registry, by_card.clone(), Some(&token("impostor", &[Role::Agent]))).await;
    assert_eq!(refusal(&answer).1, "NAME_FORBIDDEN", "an agent registers only its own card: {}", answer.1);
    let answer = register(&registry, by_card.clone(), Some(&token("Echo Agent", &[Role::Agent]))).await;
    assert_eq!(answer.0, 200, "{}", answer.1);
    let answer = register(&registry, by_card.clone(), Some(&token("Echo Agent", &[Role::Agent]))).await;
    assert_eq!(answer.0, 200, "its owner registers it again: {}", answer.1);
    let answer = register(&registry, by_card, None).await;
    assert_eq!(answer.0, 401, "{}", answer.1);
    registry.stop().await;
}

/// The SDK's echo agent on a free port, stopped when dropped.
struct SdkAgent {
    addr: SocketAddr,
    _process: tokio::process::Child,
}

impl SdkAgent {
    async fn start(python: &str) -> Self {
        // The port is picked here and handed over; another process taking it meanwhile is unlikely.
        let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let mut process = tokio::process::Command::new(python)
            .arg(SDK_ECHO_AGENT)
            .args(["--port", &addr.port().to_string()])
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the SDK's echo agent starts");
        let deadline = Instant::now() + Duration::from_millis(3 * WAIT_DEADLINE_MS);
        while tokio::net::TcpStream::connect(addr).await.is_err() {
            assert!(process.try_wait().unwrap().is_none(), "the SDK's echo agent exited");
            assert!(Instant::now() < deadline, "the SDK's echo agent did not listen in time");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Self { addr, _process: process }
    }
}

#[tokio::test]
async fn an_official_sdk_agent_registers_by_its_card_alone_becomes_healthy_and_is_found_by_its_skill() {
    let Some(python) = mesh_test_support::a2a_sdk_python() else { return };
    let registry = TestRegistry::start().await;
    let sdk = SdkAgent::start(&python).await;
    let card_url = format!("http://{}{CARD_PATH}", sdk.addr);
    let answer = register(&registry, json!({"agent_card_url": card_url}), None).await;
    assert_eq!(answer.0, 200, "{}", answer.1);

    eventually("the SDK agent is healthy", || async {
        agent(&registry, "Echo Agent").await["health_status"] == "healthy"
    })
    .await;
    let record = agent(&registry, "Echo Agent").await;
    assert_eq!((record["path"].clone(), record["health_probe"].clone()), (json!("echo-agent"), json!("card")));
    assert_eq!(record["url"], format!("http://{}/rest", sdk.addr));
    let bindings: Vec<_> = record["interfaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| format!("{} {}", i["protocol_binding"].as_str().unwrap(), i["protocol_version"].as_str().unwrap()))
        .collect();
    assert_eq!(bindings, ["JSONRPC 1.0", "HTTP+JSON 1.0", "JSONRPC 0.3", "HTTP+JSON 0.3"]);
    let pick = registry.client.pick("echo").await.unwrap();
    assert_eq!((pick.agent.name.as_str(), pick.fallback), ("Echo Agent", false), "found by its skill, healthy");

    // The mesh's own client reaches it where the registry says (HTTP+JSON `{url}/message:send`).
    let sent: Value = registry
        .http
        .post(format!("{}/message:send", pick.agent.url))
        .header("A2A-Version", "1.0")
        .json(&json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(sent["task"]["artifacts"][0]["parts"][0]["text"], "echo: hi", "{sent}");
    drop(sdk);
    eventually("a stopped SDK agent is unreachable", || async {
        agent(&registry, "Echo Agent").await["health_status"] == "unreachable"
    })
    .await;
    registry.stop().await;
}
