//! The registry's HTTP API against real servers on port 0.

use mesh_client::ClientError;
use mesh_protocol::error::ErrorBody;
use mesh_protocol::registry::{AgentRecord, HealthStatus};
use serde_json::{Value, json};

use crate::common::{FakeAgent, TestRegistry, eventually};

fn status_of(error: ClientError) -> (u16, String) {
    match error {
        ClientError::Status { status, body: Some(body), .. } => (status, body.error_code),
        other => panic!("expected an error answer with a body, got {other}"),
    }
}

#[tokio::test]
async fn registers_lists_updates_and_deregisters() {
    let registry = TestRegistry::start().await;
    let agent = FakeAgent::start("search_agent").await;

    let answer = registry.client.register(&agent.registration(&["search"])).await.unwrap();
    assert_eq!(serde_json::to_value(answer).unwrap(), json!({"status": "success", "message": "registered"}));
    let first: AgentRecord = registry.client.agent("search_agent").await.unwrap();
    assert_eq!(first.capabilities, ["search"]);
    assert_eq!(first.health_endpoint, format!("{}/health", agent.url));
    assert_eq!(first.agent_card_url, format!("{}/.well-known/agent-card.json", agent.url));

    // Re-registering updates the capabilities and keeps the first registration time.
    registry.client.register(&agent.registration(&["search", "rank"])).await.unwrap();
    let updated = registry.client.agent("search_agent").await.unwrap();
    assert_eq!(updated.capabilities, ["rank", "search"]);
    assert_eq!(updated.registered_at, first.registered_at);
    let list = registry.client.agents().await.unwrap();
    assert_eq!((list.total, list.agents.len()), (1, 1));
    assert_eq!(registry.client.discover("rank").await.unwrap().agents[0].name, "search_agent");

    // A stopping instance at another URL must not remove the one registered now.
    let elsewhere = registry.client.deregister("search_agent", Some("http://127.0.0.1:1")).await.unwrap_err();
    assert_eq!(status_of(elsewhere), (409, "AGENT_INSTANCE_REPLACED".into()));
    assert!(registry.client.agent("search_agent").await.is_ok());
    let gone = registry.client.deregister("search_agent", Some(&agent.url)).await.unwrap();
    assert_eq!(gone.message, "deregistered");
    assert_eq!(status_of(registry.client.agent("search_agent").await.unwrap_err()), (404, "AGENT_NOT_FOUND".into()));
    assert_eq!(
        status_of(registry.client.deregister("search_agent", None).await.unwrap_err()),
        (404, "AGENT_NOT_FOUND".into())
    );
    assert_eq!(registry.client.agents().await.unwrap().total, 0);
    registry.stop().await;
}

#[tokio::test]
async fn discovers_by_capability_with_health() {
    let registry = TestRegistry::start().await;
    let search = FakeAgent::start("search_agent").await;
    let entities = FakeAgent::start("entity_agent").await;
    registry.client.register(&search.registration(&["search"])).await.unwrap();
    registry.client.register(&entities.registration(&["entity_extraction"])).await.unwrap();

    let found = registry.client.discover("search").await.unwrap();
    assert_eq!(found.capability, "search");
    assert_eq!(found.agents.len(), 1);
    assert_eq!((found.agents[0].name.as_str(), found.agents[0].url.as_str()), ("search_agent", search.url.as_str()));
    // Health is checked right after registration, not only at the next poll.
    eventually("the new agent is healthy", || async {
        registry.client.discover("search").await.unwrap().agents[0].health_status == HealthStatus::Healthy
    })
    .await;

    let unknown = registry.client.discover("teleportation").await.unwrap_err();
    assert_eq!(status_of(unknown), (404, "CAPABILITY_NOT_FOUND".into()));
    registry.stop().await;
}

#[tokio::test]
async fn picks_round_robin_over_three_replicas() {
    let registry = TestRegistry::start().await;
    let mut replicas = Vec::new();
    for name in ["search-1", "search-2", "search-3"] {
        let agent = FakeAgent::start(name).await;
        registry.client.register(&agent.registration(&["search"])).await.unwrap();
        replicas.push(agent);
    }
    eventually("all three replicas are healthy", || async {
        registry.client.stats().await.unwrap().healthy_agents == 3
    })
    .await;

    let mut picks = Vec::new();
    for _ in 0..9 {
        let pick = registry.client.pick("search").await.unwrap();
        assert!(!pick.fallback && pick.warning.is_none());
        picks.push(pick.agent.name);
    }
    // Each replica in turn, in a fixed order, three times over.
    assert_eq!(picks[0..3], picks[3..6]);
    assert_eq!(picks[0..3], picks[6..9]);
    let mut turn: Vec<_> = picks[0..3].to_vec();
    turn.sort();
    assert_eq!(turn, ["search-1", "search-2", "search-3"]);
    registry.stop().await;
}

#[tokio::test]
async fn pick_falls_back_to_an_unhealthy_agent_and_says_so() {
    let registry = TestRegistry::start().await;
    let agent = FakeAgent::start("search_agent").await;
    agent.answer_health(500);
    registry.client.register(&agent.registration(&["search"])).await.unwrap();
    eventually("the agent is unhealthy", || async { registry.client.stats().await.unwrap().unhealthy_agents == 1 })
        .await;
    let pick = registry.client.pick("search").await.unwrap();
    assert!(pick.fallback);
    assert_eq!(pick.agent.health_status, HealthStatus::Unhealthy);
    assert!(pick.warning.unwrap().contains("no healthy agent"));
    registry.stop().await;
}

#[tokio::test]
async fn verification_refuses_unreachable_invalid_and_mismatched_cards() {
    let registry = TestRegistry::start().await;
    let impostor = FakeAgent::start_with_card_name("search_agent", "someone_else").await;
    let error = registry.client.register(&impostor.registration(&["search"])).await.unwrap_err();
    assert_eq!(status_of(error), (422, "AGENT_CARD_MISMATCH".into()));

    let dead = FakeAgent::start("dead_agent").await;
    let registration = dead.registration(&["search"]);
    dead.kill().await;
    let error = registry.client.register(&registration).await.unwrap_err();
    assert_eq!(status_of(error), (422, "AGENT_CARD_UNREACHABLE".into()));

    let alive = FakeAgent::start("odd_agent").await;
    let mut registration = alive.registration(&["search"]);
    registration.agent_card_url = Some("/health".into()); // answers 200 with an empty body
    let error = registry.client.register(&registration).await.unwrap_err();
    assert_eq!(status_of(error), (422, "AGENT_CARD_INVALID".into()));

    assert_eq!(registry.client.agents().await.unwrap().total, 0, "nothing refused was stored");
    registry.stop().await;
}

#[tokio::test]
async fn verification_can_be_switched_off() {
    let registry = TestRegistry::start_with(|c| c.verify_registrations = false).await;
    let impostor = FakeAgent::start_with_card_name("search_agent", "someone_else").await;
    registry.client.register(&impostor.registration(&["search"])).await.unwrap();
    assert_eq!(registry.client.agents().await.unwrap().total, 1);
    registry.stop().await;
}

/// Sends a raw request and returns the status and the parsed error body, asserting it is one.
async fn raw(
    registry: &TestRegistry,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> (u16, ErrorBody) {
    let mut request =
        registry.http.request(method.parse().unwrap(), format!("{}{path}", registry.url)).body(body.to_owned());
    if let Some(content_type) = content_type {
        request = request.header("content-type", content_type);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let request_id = response.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(response.headers()["content-type"], "application/json", "{method} {path}");
    let text = response.text().await.unwrap();
    let body: ErrorBody = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {path}: {e}: {text}"));
    assert_eq!(body.request_id.as_deref(), Some(request_id.as_str()), "{method} {path}: the body names the request");
    (status, body)
}

#[tokio::test]
async fn bad_input_gets_a_json_error_with_the_right_status() {
    let registry = TestRegistry::start_with(|c| c.body_limit_bytes = 4096).await;
    let json = Some("application/json");
    let valid = |overrides: Value| {
        let mut body = json!({"name": "a", "url": "http://127.0.0.1:1", "capabilities": ["search"]});
        body.as_object_mut().unwrap().extend(overrides.as_object().unwrap().clone());
        body.to_string()
    };
    // (method, path, content type, body, expected status, expected error code)
    type Case<'a> = (&'a str, &'a str, Option<&'a str>, String, u16, &'a str);
    let cases: Vec<Case> = vec![
        ("POST", "/register", json, "{not json".into(), 400, "REQUEST_MALFORMED_JSON"),
        ("POST", "/register", Some("text/plain"), valid(json!({})), 415, "REQUEST_UNSUPPORTED_MEDIA_TYPE"),
        ("POST", "/register", None, valid(json!({})), 415, "REQUEST_UNSUPPORTED_MEDIA_TYPE"),
        ("POST", "/register", json, "x".repeat(5000), 413, "REQUEST_BODY_TOO_LARGE"),
        // Neither form: the seed's takes name and url, a card registration agent_card_url alone.
        ("POST", "/register", json, r#"{"name":"a"}"#.into(), 400, "REGISTRATION_INVALID"),
        ("POST", "/register", json, valid(json!({"capabilities": "search"})), 422, "REQUEST_INVALID_BODY"),
        ("POST", "/register", json, valid(json!({"name": ""})), 400, "REGISTRATION_INVALID"),
        ("POST", "/register", json, valid(json!({"url": "not a url"})), 400, "REGISTRATION_INVALID"),
        ("POST", "/register", json, valid(json!({"url": "file:///etc/passwd"})), 400, "REGISTRATION_INVALID"),
        ("POST", "/register", json, valid(json!({"capabilities": ["two words"]})), 400, "REGISTRATION_INVALID"),
        ("POST", "/register", json, valid(json!({"name": "é".repeat(129)})), 400, "REGISTRATION_INVALID"),
        (
            "POST",
            "/register",
            json,
            valid(json!({"agent_card_url": "http://elsewhere.example/card.json"})),
            400,
            "REGISTRATION_INVALID",
        ),
        ("GET", "/register", None, String::new(), 405, "METHOD_NOT_ALLOWED"),
        ("PUT", "/agents/x", None, String::new(), 405, "METHOD_NOT_ALLOWED"),
        ("GET", "/agents/nobody", None, String::new(), 404, "AGENT_NOT_FOUND"),
        ("GET", "/agents/%F0%9F%A6%80%20%2F", None, String::new(), 404, "AGENT_NOT_FOUND"),
        ("GET", "/agents/%FF", None, String::new(), 400, "REQUEST_INVALID_PATH"),
        ("DELETE", "/agents/%FF", None, String::new(), 400, "REQUEST_INVALID_PATH"),
        ("GET", "/capabilities/%FF/next", None, String::new(), 400, "REQUEST_INVALID_PATH"),
        ("DELETE", "/agents/nobody", None, String::new(), 404, "AGENT_NOT_FOUND"),
        ("GET", "/capabilities/nothing", None, String::new(), 404, "CAPABILITY_NOT_FOUND"),
        ("GET", "/capabilities/nothing/next", None, String::new(), 404, "CAPABILITY_NOT_FOUND"),
        ("GET", "/no/such/route", None, String::new(), 404, "ROUTE_NOT_FOUND"),
        ("POST", "/stats", json, "{}".into(), 405, "METHOD_NOT_ALLOWED"),
    ];
    for (method, path, content_type, body, status, code) in cases {
        let (got_status, got) = raw(&registry, method, path, content_type, &body).await;
        assert_eq!(
            (got_status, got.error_code.as_str()),
            (status, code),
            "{method} {path} {body:.60}: {}",
            got.error_message
        );
        assert!(!got.error_message.is_empty());
    }
    // None of it was stored, and the registry still serves.
    assert_eq!(registry.client.agents().await.unwrap().total, 0);
    registry.stop().await;
}

#[tokio::test]
async fn serves_health_stats_and_an_openapi_document() {
    let registry = TestRegistry::start().await;
    let health: Value =
        registry.http.get(format!("{}/health", registry.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(health["status"], "healthy");
    assert!(health["metrics"]["uptime_s"].is_u64());
    let stats: Value = registry.http.get(format!("{}/stats", registry.url)).send().await.unwrap().json().await.unwrap();
    assert_eq!(
        stats,
        json!({"total_agents": 0, "healthy_agents": 0, "unhealthy_agents": 0, "unreachable_agents": 0, "unknown_agents": 0})
    );
    let spec: Value =
        registry.http.get(format!("{}/openapi.json", registry.url)).send().await.unwrap().json().await.unwrap();
    assert!(spec["openapi"].as_str().unwrap().starts_with('3'));
    for path in [
        "/register",
        "/agents",
        "/agents/{name}",
        "/capabilities/{capability}",
        "/capabilities/{capability}/next",
        "/stats",
    ] {
        assert!(spec["paths"].get(path).is_some(), "{path} is documented");
    }
    registry.stop().await;
}
