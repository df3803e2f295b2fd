//! Finding agents by what they do (issue #37), on a real registry on port 0 whose agents register
//! by their cards, served here: `GET /agents?q=` ranks them, with the skills that matched and the
//! filters; `POST /route` answers the healthy agent and skill for a message; bad requests get a
//! JSON error; and on the labelled set (`tests/data/discovery`, 200+ cards, 500+ requests) the
//! routing meets its quality floors on the held-out third.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use mesh_auth::{AuthConfig, Claims, Role, mint_hs256};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::common::{TOKEN_TTL_S, TestRegistry, eventually, eventually_within};

const DATA_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/discovery");
const SECRET: &str = "a-discovery-test-secret-of-32-bytes!";
/// How long the labelled set's skills may take to embed.
const EMBEDDING_WAIT: std::time::Duration = std::time::Duration::from_secs(180);

/// Cards served at `/cards/{index}/.well-known/agent-card.json`, each completed into a valid A2A
/// 1.0 card whose interface is on this server.
struct CardServer {
    base: String,
}

impl CardServer {
    async fn start(cards: Vec<Value>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let cards: Vec<Value> = cards
            .into_iter()
            .enumerate()
            .map(|(index, mut card)| {
                card["supportedInterfaces"] = json!([{
                    "url": format!("{base}/cards/{index}/"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"
                }]);
                card["capabilities"] = json!({});
                card["defaultInputModes"] = json!(["text/plain"]);
                card["defaultOutputModes"] = json!(["text/plain"]);
                card
            })
            .collect();
        let router =
            Router::new().route("/cards/{index}/.well-known/agent-card.json", get(card)).with_state(Arc::new(cards));
        tokio::spawn(async move { axum::serve(listener, router).await });
        Self { base }
    }

    fn card_url(&self, index: usize) -> String {
        format!("{}/cards/{index}/.well-known/agent-card.json", self.base)
    }
}

async fn card(State(cards): State<Arc<Vec<Value>>>, Path(index): Path<usize>) -> impl IntoResponse {
    match cards.get(index) {
        Some(card) => (StatusCode::OK, axum::Json(card.clone())).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

fn card_of(name: &str, description: &str, skills: Value) -> Value {
    json!({"name": name, "description": description, "version": "1.0.0", "skills": skills})
}

fn small_catalog() -> Vec<Value> {
    vec![
        card_of(
            "Currency Converter",
            "Money across borders",
            json!([{"id": "convert_currency", "name": "Convert currency",
                    "description": "Converts an amount between two currencies at the current exchange rate",
                    "tags": ["fx", "money"], "examples": ["100 USD in EUR"]}]),
        ),
        card_of(
            "travel-desk",
            "Plans business trips",
            json!([
                {"id": "book_flight", "name": "Book a flight", "description": "Books airline tickets between two cities",
                 "tags": ["flights", "airline"]},
                {"id": "find_hotel", "name": "Find a hotel", "description": "Finds rooms to stay in a city for given dates",
                 "tags": ["hotels", "lodging"]}
            ]),
        ),
        card_of(
            "WeatherBot",
            "Forecasts",
            json!([{"id": "forecast", "name": "Weather forecast",
                    "description": "Tells the weather for the coming days in a city", "tags": ["weather", "rain"]}]),
        ),
    ]
}

async fn register(registry: &TestRegistry, card_url: &str, bearer: Option<&str>) -> (u16, Value) {
    let mut request =
        registry.http.post(format!("{}/register", registry.url)).json(&json!({"agent_card_url": card_url}));
    if let Some(token) = bearer {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

async fn get_json(registry: &TestRegistry, path_and_query: &str, bearer: Option<&str>) -> (u16, Value) {
    let mut request = registry.http.get(format!("{}{path_and_query}", registry.url));
    if let Some(token) = bearer {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

async fn route(registry: &TestRegistry, text: &str) -> (u16, Value) {
    let message = json!({"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": text}]});
    let response =
        registry.http.post(format!("{}/route", registry.url)).json(&json!({"message": message})).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap_or(Value::Null))
}

fn search_path(query: &str, extra: &str) -> String {
    let encoded: String = url::form_urlencoded::byte_serialize(query.as_bytes()).collect();
    format!("/agents?q={encoded}{extra}")
}

/// Registers every card and waits until the index has seen them all, healthy (polled on
/// their cards).
async fn register_all(registry: &TestRegistry, server: &CardServer, count: usize) {
    for index in 0..count {
        let (status, body) = register(registry, &server.card_url(index), None).await;
        assert_eq!(status, 200, "card {index}: {body}");
    }
    eventually("every agent is healthy and indexed", || async {
        let (_, stats) = get_json(registry, "/stats", None).await;
        stats["healthy_agents"] == json!(count)
            && registry.service.discovery().skills() > 0
            && *registry.service.discovery().applied().borrow() > 0
    })
    .await;
}

#[tokio::test]
async fn a_search_ranks_agents_by_their_cards_with_the_skills_that_matched() {
    let registry = TestRegistry::start().await;
    let server = CardServer::start(small_catalog()).await;
    register_all(&registry, &server, 3).await;
    // The index follows registrations: wait until it holds every skill (4).
    eventually("every skill is indexed", || async { registry.service.discovery().skills() == 4 }).await;

    let (status, found) = get_json(&registry, &search_path("I need a room in Porto next week", ""), None).await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["status"], "success");
    assert_eq!(found["query"], "I need a room in Porto next week");
    assert_eq!(found["rankings"], json!(["bm25"]), "no model configured: words only");
    assert_eq!(found["agents"][0]["name"], "travel-desk", "{found:#}");
    assert_eq!(found["agents"][0]["matched_skills"][0]["id"], "find_hotel", "{found:#}");
    assert_eq!(found["agents"][0]["skills"].as_array().unwrap().len(), 2, "the agent's skills, all of them");
    assert!(found["agents"][0]["score"].as_f64().unwrap() > 0.0);
    assert_eq!(found["total"], json!(found["agents"].as_array().unwrap().len()));

    // Filters: by capability and health.
    let (_, filtered) = get_json(&registry, &search_path("room flight forecast", "&capability=forecast"), None).await;
    let names: Vec<&str> = filtered["agents"].as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["WeatherBot"]);
    let (_, unhealthy) = get_json(&registry, &search_path("room flight forecast", "&health=unhealthy"), None).await;
    assert_eq!(unhealthy["agents"], json!([]), "every agent is healthy");
    let (_, limited) = get_json(&registry, &search_path("room flight forecast currency", "&limit=1"), None).await;
    assert_eq!(limited["agents"].as_array().unwrap().len(), 1);

    // Bad searches: a JSON error each.
    for (query, problem) in [
        ("/agents?q=%20%20", "no text"),
        (&search_path("x", "&limit=0") as &str, "limit must be 1 to 100"),
        (&search_path("x", "&limit=101"), "limit must be 1 to 100"),
        (&search_path(&"word ".repeat(500), ""), "at most 2000 are searched"),
    ] {
        let (status, body) = get_json(&registry, query, None).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error_code"], "QUERY_INVALID", "{body}");
        assert!(body["error_message"].as_str().unwrap().contains(problem), "{body}");
    }
    // The listing without `q` is unchanged, and filters too.
    let (_, listed) = get_json(&registry, "/agents?capability=book_flight", None).await;
    assert_eq!(listed["total"], 1);
    assert_eq!(listed["agents"][0]["name"], "travel-desk");
    assert_eq!(listed["agents"][0]["description"], "Plans business trips");
    registry.stop().await;
}

#[tokio::test]
async fn a_route_answers_the_healthy_agent_and_skill_for_a_message_and_follows_changes() {
    let registry = TestRegistry::start().await;
    let mut cards = small_catalog();
    cards.push(card_of(
        "Rain Oracle",
        "Also forecasts",
        json!([{"id": "forecast", "name": "Weather forecast", "description": "Tells the weather for the coming days",
                "tags": []}]),
    ));
    let server = CardServer::start(cards).await;
    register_all(&registry, &server, 3).await;

    let (status, routed) = route(&registry, "will it rain in Oslo tomorrow?").await;
    assert_eq!(status, 200, "{routed}");
    assert_eq!(routed["agent"]["name"], "WeatherBot", "{routed:#}");
    assert_eq!(routed["skill"]["id"], "forecast");
    assert!(routed["alternatives"].as_array().unwrap().len() <= 4);

    // A new agent is found as soon as the index has seen it.
    let (status, _) = register(&registry, &server.card_url(3), None).await;
    assert_eq!(status, 200);
    eventually("the new agent is routed to", || async {
        let (_, routed) = route(&registry, "will it rain in Oslo tomorrow?").await;
        let names: Vec<Value> = std::iter::once(routed["agent"]["name"].clone())
            .chain(routed["alternatives"].as_array().into_iter().flatten().map(|c| c["agent"]["name"].clone()))
            .collect();
        names.contains(&json!("Rain Oracle"))
    })
    .await;

    // A removed agent is not.
    let response = registry.http.delete(format!("{}/agents/WeatherBot", registry.url)).send().await.unwrap();
    assert_eq!(response.status(), 200);
    eventually("the removed agent is no longer routed to", || async {
        let (_, routed) = route(&registry, "will it rain in Oslo tomorrow?").await;
        routed["agent"]["name"] == "Rain Oracle"
    })
    .await;

    // No text, and nothing matching: JSON errors.
    let (status, body) = route(&registry, "   ").await;
    assert_eq!((status, body["error_code"].as_str()), (400, Some("QUERY_INVALID")), "{body}");
    let (status, body) = route(&registry, "zzzqqq xyzzy").await;
    assert_eq!((status, body["error_code"].as_str()), (404, Some("NO_AGENT_FOR_REQUEST")), "{body}");
    let response =
        registry.http.post(format!("{}/route", registry.url)).json(&json!({"message": "hi"})).send().await.unwrap();
    assert_eq!(response.status(), 422, "a body that is not a route request");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error_code"], "REQUEST_INVALID_BODY", "{body}");
    registry.stop().await;
}

fn token(subject: &str, tenant: &str, roles: &[Role]) -> String {
    mint_hs256(SECRET.as_bytes(), &Claims::new(subject, tenant, roles, TOKEN_TTL_S)).unwrap()
}

#[tokio::test]
async fn a_tenant_finds_its_own_agents_and_the_shared_ones_never_another_tenants() {
    let registry = TestRegistry::start_with(|config| {
        config.auth = AuthConfig { jwt_hs256_secret: Some(SECRET.into()), ..AuthConfig::default() };
    })
    .await;
    let server = CardServer::start(small_catalog()).await;
    // An admin registers the converter for everyone; tenant agents register their own.
    let admin = token("ops", "", &[Role::Admin]);
    let acme_agent = token("travel-desk", "acme", &[Role::Agent]);
    let globex_agent = token("WeatherBot", "globex", &[Role::Agent]);
    for (index, bearer) in [(0, &admin), (1, &acme_agent), (2, &globex_agent)] {
        let (status, body) = register(&registry, &server.card_url(index), Some(bearer)).await;
        assert_eq!(status, 200, "{body}");
    }
    eventually("every skill is indexed", || async { registry.service.discovery().skills() == 4 }).await;

    let acme_user = token("alice", "acme", &[Role::User]);
    let query = search_path("room flight forecast currency exchange", "&limit=10");
    let (status, found) = get_json(&registry, &query, Some(&acme_user)).await;
    assert_eq!(status, 200, "{found}");
    let mut names: Vec<&str> =
        found["agents"].as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(names, ["Currency Converter", "travel-desk"], "acme's own and the shared one: {found:#}");
    // Not listed, not fetched, and not reachable by naming the other tenant.
    let (_, listed) = get_json(&registry, "/agents", Some(&acme_user)).await;
    assert_eq!(listed["total"], 2, "{listed}");
    let (status, _) = get_json(&registry, "/agents/WeatherBot", Some(&acme_user)).await;
    assert_eq!(status, 404);
    let (status, body) = get_json(&registry, &search_path("forecast", "&tenant=globex"), Some(&acme_user)).await;
    assert_eq!((status, body["error_code"].as_str()), (403, Some("TENANT_FORBIDDEN")), "{body}");
    // Nor routed to, nor listed in the catalogs.
    let message = json!({"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "weather forecast rain"}]});
    let response = registry
        .http
        .post(format!("{}/route", registry.url))
        .bearer_auth(&acme_user)
        .json(&json!({"message": message}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404, "only globex's agent forecasts");
    let (status, catalog) = get_json(&registry, "/.well-known/ai-catalog.json", Some(&acme_user)).await;
    assert_eq!(status, 200, "{catalog}");
    let mut names: Vec<&str> =
        catalog["entries"].as_array().unwrap().iter().map(|e| e["displayName"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(names, ["Currency Converter", "travel-desk"], "{catalog:#}");
    // The admin sees all three, or one tenant's view when it names it.
    let (_, all) = get_json(&registry, &query, Some(&admin)).await;
    assert_eq!(all["total"], 3, "{all}");
    let (_, as_globex) = get_json(&registry, &query.replace("&limit=10", "&tenant=globex"), Some(&admin)).await;
    let mut names: Vec<&str> =
        as_globex["agents"].as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(names, ["Currency Converter", "WeatherBot"], "{as_globex:#}");
    registry.stop().await;
}

/// One labelled request of the evaluation set.
#[derive(Debug, serde::Deserialize)]
struct Labelled {
    id: String,
    text: String,
    expected: Vec<Expected>,
    split: String,
}

#[derive(Debug, serde::Deserialize, PartialEq, Eq, Hash, Clone)]
struct Expected {
    agent: String,
    skill: String,
}

/// Top-1 accuracy and recall@5 of one split.
#[derive(Debug, Default)]
struct Quality {
    requests: usize,
    top1: usize,
    top5: usize,
}

impl Quality {
    fn top1(&self) -> f64 {
        self.top1 as f64 / self.requests.max(1) as f64
    }

    fn recall5(&self) -> f64 {
        self.top5 as f64 / self.requests.max(1) as f64
    }
}

/// Floors on the held-out third (never used to tune the ranking), a little under what the
/// ranking measures there (top-1 0.50, recall@5 0.81 with the model; `cargo bench -p registry
/// --bench discovery`), so a regression fails. The goals, 0.8 and 0.95, are not met
/// (docs/benchmarks/discovery.md says why).
const HELD_OUT_TOP1_FLOOR: f64 = 0.45;
const HELD_OUT_RECALL5_FLOOR: f64 = 0.75;

#[tokio::test]
async fn on_the_labelled_set_routing_meets_its_floors_on_the_held_out_third() {
    let cards: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(format!("{DATA_DIR}/agents.json")).unwrap()).unwrap();
    let requests: Vec<Labelled> =
        serde_json::from_str(&std::fs::read_to_string(format!("{DATA_DIR}/requests.json")).unwrap()).unwrap();
    assert!(cards.len() >= 200 && requests.len() >= 500, "{} cards, {} requests", cards.len(), requests.len());
    // The model as the registry loads it (downloaded on first use): required under CI.
    let (encoder, status) = mesh_embedding::load_encoder(&mesh_embedding::DenseConfig::default()).await;
    let model = mesh_test_support::require("the embedding model", encoder.ok_or(format!("{status:?}")));
    let dense = model.is_some();
    let registry = TestRegistry::start_with(|config| config.dense.enabled = dense).await;
    let server = CardServer::start(cards.clone()).await;
    register_all(&registry, &server, cards.len()).await;
    let skills: usize = cards.iter().map(|card| card["skills"].as_array().map_or(0, Vec::len)).sum();
    // About a thousand texts to embed: seconds alone, longer beside the other tests.
    eventually_within("every skill is indexed, with its vector when the model is loaded", EMBEDDING_WAIT, || async {
        let index = registry.service.discovery();
        index.skills() == skills && index.dense() == dense && index.vectors() == if dense { skills } else { 0 }
    })
    .await;

    let mut quality: HashMap<&str, Quality> = HashMap::new();
    let mut misses = Vec::new();
    let started = Instant::now();
    for request in &requests {
        let (status, routed) = route(&registry, &request.text).await;
        assert_eq!(status, 200, "{}: {routed}", request.id);
        let choices: Vec<Expected> = std::iter::once(&routed)
            .chain(routed["alternatives"].as_array().into_iter().flatten())
            .map(|choice| Expected {
                agent: choice["agent"]["name"].as_str().unwrap().to_owned(),
                skill: choice["skill"]["id"].as_str().unwrap().to_owned(),
            })
            .collect();
        let split = quality.entry(request.split.as_str()).or_default();
        split.requests += 1;
        if request.expected.contains(&choices[0]) {
            split.top1 += 1;
        } else if request.split == "tune" {
            misses
                .push(format!("{} {:?} -> {:?}, wanted {:?}", request.id, request.text, choices[0], request.expected));
        }
        if choices.iter().take(5).any(|choice| request.expected.contains(choice)) {
            split.top5 += 1;
        }
    }
    let elapsed = started.elapsed();
    for (split, q) in &quality {
        println!(
            "{split}: {} requests, top-1 {:.3}, recall@5 {:.3} (rankings: bm25{})",
            q.requests,
            q.top1(),
            q.recall5(),
            if dense { " + dense" } else { "" }
        );
    }
    println!("{} routes in {elapsed:?}; tune-split misses:\n{}", requests.len(), misses.join("\n"));
    let held_out = &quality["held_out"];
    assert!(held_out.requests * 3 >= requests.len() - 2, "a third is held out");
    if model.is_some() {
        assert!(held_out.top1() >= HELD_OUT_TOP1_FLOOR, "held-out top-1 {:.3}", held_out.top1());
        assert!(held_out.recall5() >= HELD_OUT_RECALL5_FLOOR, "held-out recall@5 {:.3}", held_out.recall5());
    }
    registry.stop().await;
}
