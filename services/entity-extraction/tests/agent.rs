//! The entity-extraction agent as a real server on port 0: its rules, its answers to bad input,
//! its card, and its LLM backend against a fake OpenAI-compatible endpoint that answers well,
//! badly, slowly, with an error status, or not at all.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderValue, Method, Request, StatusCode, header};
use axum::routing::post;
use axum::{Json, Router};
use entity_extraction::EntityExtractionConfig;
use mesh_client::{HttpClient, fetch_card, reply_data, send_task};
use mesh_llm::LlmConfig;
use mesh_protocol::agents::{Entity, EntityExtraction, EntityType};
use mesh_protocol::error::{ErrorBody, FailureStatus};
use mesh_protocol::seed::{ResponseStatus, TaskRequest, TaskResponse};
use mesh_query_analysis::extract_entities;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

/// Time allowed for one request from a test to the agent.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The LLM timeout the agents under test use: short, so a slow LLM is given up on quickly.
const LLM_TIMEOUT_MS: u64 = 300;
/// How long the slow fake LLM takes: far beyond [`LLM_TIMEOUT_MS`].
const SLOW_LLM_DELAY: Duration = Duration::from_secs(5);
/// A task whose LLM times out must still be answered well within this.
const SLOW_LLM_TASK_MAX: Duration = Duration::from_secs(2);
/// Confidence the agent gives every entity an LLM names.
const LLM_ENTITY_CONFIDENCE: f64 = 0.8;
/// Words every fallback warning carries.
const FALLBACK_WARNING: &str = "answered with the rules";

const TASKS_PATH: &str = "/tasks/send";
const JSON: &str = "application/json";

const SOCCER_QUERY: &str = "show me robots playing soccer";
const TOKYO_QUERY: &str = "Marathon in Tokyo on 3 March 2024";
const UNICODE_QUERY: &str = "Café in São Paulo 🤖";

// --- fake LLM ---

/// How the fake chat-completions endpoint answers.
#[derive(Debug, Clone)]
struct LlmBehaviour {
    status: StatusCode,
    /// The assistant message content, for 2xx answers.
    content: String,
    delay: Duration,
}

impl LlmBehaviour {
    fn answer(content: impl Into<String>) -> Self {
        Self { status: StatusCode::OK, content: content.into(), delay: Duration::ZERO }
    }

    fn answer_json(content: Value) -> Self {
        Self::answer(content.to_string())
    }
}

#[derive(Debug)]
struct FakeLlmState {
    behaviour: LlmBehaviour,
    /// Every request body received, in order.
    requests: Mutex<Vec<Value>>,
}

/// A fake OpenAI-compatible API on 127.0.0.1:0, served until the test's runtime stops.
struct FakeLlm {
    base_url: String,
    state: Arc<FakeLlmState>,
}

impl FakeLlm {
    async fn start(behaviour: LlmBehaviour) -> Self {
        let state = Arc::new(FakeLlmState { behaviour, requests: Mutex::new(Vec::new()) });
        let router = Router::new().route("/v1/chat/completions", post(chat_completion)).with_state(state.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
        Self { base_url, state }
    }

    fn requests(&self) -> Vec<Value> {
        self.state.requests.lock().unwrap().clone()
    }
}

async fn chat_completion(
    State(state): State<Arc<FakeLlmState>>,
    Json(request): Json<Value>,
) -> (StatusCode, Json<Value>) {
    state.requests.lock().unwrap().push(request);
    let behaviour = &state.behaviour;
    tokio::time::sleep(behaviour.delay).await;
    if !behaviour.status.is_success() {
        return (behaviour.status, Json(json!({"error": {"message": "the fake model is overloaded"}})));
    }
    let message = json!({"role": "assistant", "content": behaviour.content});
    (
        behaviour.status,
        Json(json!({"id": "fake", "object": "chat.completion", "choices": [{"index": 0, "message": message}]})),
    )
}

/// The LLM config the agents under test use for an endpoint at `base_url`.
fn llm_config(base_url: &str) -> LlmConfig {
    LlmConfig { base_url: base_url.to_owned(), model: "fake".into(), timeout_ms: LLM_TIMEOUT_MS, ..Default::default() }
}

// --- agent under test ---

/// The agent running in the background until dropped.
struct Agent {
    url: String,
    http: HttpClient,
    _stop: oneshot::Sender<()>,
}

impl Agent {
    /// The agent with rules only.
    async fn rules() -> Self {
        Self::start(LlmConfig::default()).await
    }

    /// The agent backed by the LLM at `base_url`.
    async fn with_llm(base_url: &str) -> Self {
        Self::start(llm_config(base_url)).await
    }

    async fn start(llm: LlmConfig) -> Self {
        let mut config = EntityExtractionConfig { llm, ..Default::default() };
        config.agent.port = 0;
        config.agent.registry_url = None;
        let http = HttpClient::with_reqwest().unwrap();
        let app = entity_extraction::build(&config, http.clone()).await.unwrap();
        let url = app.url().to_owned();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(app.run_until_stopped(async {
            let _ = stopped.await;
        }));
        Self { url, http, _stop: stop }
    }

    /// Sends a one-message task holding `query` and expects a 2xx answer.
    async fn extract(&self, query: &str) -> (TaskResponse, EntityExtraction) {
        let task = TaskRequest::from_text(Some("task-1".into()), query, None);
        let response = send_task(&self.http, &self.url, &task, CALL_TIMEOUT).await.unwrap();
        assert_eq!(response.id, "task-1");
        assert_eq!(response.metadata.agent, "entity_extraction");
        let extraction = reply_data(&self.url, &response).unwrap();
        (response, extraction)
    }

    /// A request for `path` carrying `body` as it is, labelled `content_type`.
    fn request(&self, method: Method, path: &str, content_type: &str, body: impl Into<Bytes>) -> Request<Bytes> {
        let mut request = Request::new(body.into());
        *request.method_mut() = method;
        *request.uri_mut() = format!("{}{path}", self.url).parse().unwrap();
        request.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_str(content_type).unwrap());
        request
    }

    /// Sends `request` and expects the mesh JSON error body with `status` and `code`.
    async fn expect_error(&self, request: Request<Bytes>, status: StatusCode, code: &str) -> ErrorBody {
        let target = format!("{} {}", request.method(), request.uri().path());
        let response = self.http.send(request, CALL_TIMEOUT).await.unwrap();
        let content_type = response.headers().get(header::CONTENT_TYPE).map(HeaderValue::as_bytes);
        assert_eq!(content_type, Some(&b"application/json"[..]), "{target}");
        let error: ErrorBody = serde_json::from_slice(response.body())
            .unwrap_or_else(|e| panic!("{target}: not an error body ({e}): {:?}", response.body()));
        assert_eq!((response.status(), error.error_code.as_str()), (status, code), "{target}: {error:?}");
        assert_eq!(error.status, FailureStatus::Error);
        assert!(!error.error_message.is_empty());
        assert!(error.request_id.is_some(), "the request id is stamped into every error body: {error:?}");
        error
    }

    /// Posts the task `body` and expects a 400 with `code`.
    async fn expect_bad_task(&self, body: Value, code: &str) -> ErrorBody {
        let request = self.request(Method::POST, TASKS_PATH, JSON, body.to_string());
        self.expect_error(request, StatusCode::BAD_REQUEST, code).await
    }
}

// --- assertions ---

/// The characters `start..end` of `text`, as the protocol defines entity offsets.
fn char_span(text: &str, start: usize, end: usize) -> String {
    text.chars().skip(start).take(end.saturating_sub(start)).collect()
}

/// Every entity's offsets index its text in `query`, in characters; spans are ordered and disjoint;
/// the count matches.
fn assert_consistent(query: &str, extraction: &EntityExtraction) {
    assert_eq!(extraction.entity_count, extraction.entities.len());
    let mut previous_end = 0;
    for entity in &extraction.entities {
        assert!(previous_end <= entity.start && entity.start < entity.end, "{entity:?} in {query:?}");
        assert!(entity.end <= query.chars().count(), "{entity:?} in {query:?}");
        assert_eq!(char_span(query, entity.start, entity.end), entity.text, "{query:?}");
        assert!((0.0..=1.0).contains(&entity.confidence), "{entity:?}");
        previous_end = entity.end;
    }
}

fn find<'a>(extraction: &'a EntityExtraction, text: &str) -> &'a Entity {
    extraction.entities.iter().find(|e| e.text == text).unwrap_or_else(|| panic!("no {text:?} in {extraction:?}"))
}

/// The agent answered with the rules after its LLM failed with a warning containing `cause`.
fn assert_rules_fallback(query: &str, response: &TaskResponse, extraction: &EntityExtraction, cause: &str) {
    assert_eq!(response.status, ResponseStatus::Partial);
    assert_eq!(response.warnings.len(), 1, "{:?}", response.warnings);
    let warning = &response.warnings[0];
    assert!(warning.contains(FALLBACK_WARNING) && warning.contains(cause), "{warning}");
    assert_eq!(extraction, &extract_entities(query), "the fallback is the rules' answer");
    assert_eq!(extraction.method, "rules");
}

/// One task answered by an agent backed by a fake LLM.
struct LlmRun {
    llm: FakeLlm,
    response: TaskResponse,
    extraction: EntityExtraction,
    /// Time the task took, as the caller saw it.
    elapsed: Duration,
}

/// Starts a fake LLM behaving as given and an agent using it, and sends `query`.
async fn run_with_llm(behaviour: LlmBehaviour, query: &str) -> LlmRun {
    let llm = FakeLlm::start(behaviour).await;
    let agent = Agent::with_llm(&llm.base_url).await;
    let started = Instant::now();
    let (response, extraction) = agent.extract(query).await;
    LlmRun { llm, response, extraction, elapsed: started.elapsed() }
}

/// [`run_with_llm`], expecting the rules' answer with a warning containing `cause`.
async fn expect_fallback(behaviour: LlmBehaviour, query: &str, cause: &str) -> LlmRun {
    let run = run_with_llm(behaviour, query).await;
    assert_rules_fallback(query, &run.response, &run.extraction, cause);
    run
}

// --- rules ---

#[tokio::test]
async fn rules_find_concepts_with_character_offsets() {
    let agent = Agent::rules().await;
    let (response, extraction) = agent.extract(SOCCER_QUERY).await;
    assert_eq!(response.status, ResponseStatus::Success);
    assert!(response.warnings.is_empty());
    assert_eq!(extraction.method, "rules");
    assert_consistent(SOCCER_QUERY, &extraction);
    for (text, start) in [("robots", 8), ("soccer", 23)] {
        let entity = find(&extraction, text);
        assert_eq!(entity.entity_type, EntityType::Concept);
        assert_eq!((entity.start, entity.end), (start, start + text.len()));
    }
    assert!(extraction.entities.iter().all(|e| e.text != "show" && e.text != "me"), "request words are not entities");
    assert_eq!(extraction.dominant_types, [EntityType::Concept]);
}

#[tokio::test]
async fn rules_find_a_place_and_a_date() {
    let agent = Agent::rules().await;
    let (response, extraction) = agent.extract(TOKYO_QUERY).await;
    assert_eq!(response.status, ResponseStatus::Success);
    assert_consistent(TOKYO_QUERY, &extraction);
    let tokyo = find(&extraction, "Tokyo");
    assert_eq!((tokyo.entity_type, tokyo.start, tokyo.end), (EntityType::Location, 12, 17));
    let date = extraction.entities.iter().find(|e| e.entity_type == EntityType::Date).expect("a DATE");
    assert_eq!((date.text.as_str(), date.start, date.end), ("3 March 2024", 21, 33));
    assert!(extraction.dominant_types.contains(&EntityType::Location));
    assert!(extraction.dominant_types.contains(&EntityType::Date));
}

#[tokio::test]
async fn unicode_queries_never_fail_and_offsets_count_characters() {
    let agent = Agent::rules().await;
    let (response, extraction) = agent.extract(UNICODE_QUERY).await;
    assert_eq!(response.status, ResponseStatus::Success);
    assert_consistent(UNICODE_QUERY, &extraction);
    // "Café " is 5 characters but 6 bytes: byte offsets would put São Paulo at 9.
    let place = find(&extraction, "São Paulo");
    assert_eq!((place.entity_type, place.start, place.end), (EntityType::Location, 8, 17));

    for query in
        ["🤖🤖🤖", "東京 2024年 マラソン", "Sa\u{0303}o Paulo", "\u{0301}", "\u{200D}\u{FE0F} ¿qué?", "ÉCOLE à Zürich"]
    {
        let (response, extraction) = agent.extract(query).await;
        assert_eq!(response.status, ResponseStatus::Success, "{query:?}");
        assert_consistent(query, &extraction);
        assert_eq!(extraction, extract_entities(query), "{query:?}");
    }
}

#[tokio::test]
async fn offsets_index_the_text_as_sent_even_with_surrounding_whitespace() {
    let agent = Agent::rules().await;
    let query = "   Marathon in Tokyo";
    let (_, extraction) = agent.extract(query).await;
    assert_consistent(query, &extraction);
    let tokyo = find(&extraction, "Tokyo");
    assert_eq!((tokyo.start, tokyo.end), (15, 20));
}

// --- bad input ---

#[tokio::test]
async fn tasks_without_text_are_invalid_input() {
    let agent = Agent::rules().await;
    let data_only = json!({"messages": [{"role": "user", "parts": [{"type": "data", "data": {"q": "robots"}}]}]});
    let whitespace = json!({"messages": [{"role": "user", "parts": [{"type": "text", "text": " \n\t "}]}]});
    for body in [data_only, whitespace] {
        let error = agent.expect_bad_task(body, "TASK_INVALID_INPUT").await;
        assert!(error.error_message.contains("no text"), "{error:?}");
    }
}

#[tokio::test]
async fn tasks_of_the_wrong_shape_are_refused() {
    let agent = Agent::rules().await;
    let error = agent.expect_bad_task(json!({"messages": []}), "TASK_INVALID").await;
    assert!(error.error_message.contains("no messages"), "{error:?}");
    let agent_only = json!({"messages": [{"role": "agent", "parts": [{"type": "text", "text": "robots"}]}]});
    let error = agent.expect_bad_task(agent_only, "TASK_INVALID").await;
    assert!(error.error_message.contains("role \"user\""), "{error:?}");
    let no_parts = json!({"messages": [{"role": "user", "parts": []}]});
    agent.expect_bad_task(no_parts, "TASK_INVALID").await;
    let empty_id = json!({"id": "", "messages": [{"role": "user", "parts": [{"type": "text", "text": "robots"}]}]});
    agent.expect_bad_task(empty_id, "TASK_INVALID").await;
}

#[tokio::test]
async fn malformed_bodies_and_unknown_routes_answer_json_errors() {
    let agent = Agent::rules().await;
    let task = json!({"messages": [{"role": "user", "parts": [{"type": "text", "text": "robots"}]}]}).to_string();
    let cases = [
        (
            Method::POST,
            TASKS_PATH,
            JSON,
            "{\"messages\": [".to_owned(),
            StatusCode::BAD_REQUEST,
            "REQUEST_MALFORMED_JSON",
        ),
        (
            Method::POST,
            TASKS_PATH,
            "text/plain",
            task.clone(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "REQUEST_UNSUPPORTED_MEDIA_TYPE",
        ),
        (
            Method::POST,
            TASKS_PATH,
            JSON,
            "{\"messages\": 3}".to_owned(),
            StatusCode::UNPROCESSABLE_ENTITY,
            "REQUEST_INVALID_BODY",
        ),
        (Method::POST, "/tasks/nope", JSON, task, StatusCode::NOT_FOUND, "ROUTE_NOT_FOUND"),
        (Method::GET, TASKS_PATH, JSON, String::new(), StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED"),
    ];
    for (method, path, content_type, body, status, code) in cases {
        let error = agent.expect_error(agent.request(method, path, content_type, body), status, code).await;
        if status == StatusCode::NOT_FOUND {
            assert!(error.error_message.contains(path), "{error:?}");
        }
    }
}

// --- card ---

#[tokio::test]
async fn card_names_the_agent_and_its_skill() {
    let agent = Agent::rules().await;
    let card = fetch_card(&agent.http, &agent.url, CALL_TIMEOUT).await.unwrap();
    assert_eq!(card.name, "entity_extraction");
    assert!(card.skills.iter().any(|s| s.id == "entity_extraction"), "{:?}", card.skills);
    assert_eq!(card.url.as_deref(), Some(format!("{}/", agent.url).as_str()));
    let legacy: Value = agent.http.get_json(&format!("{}/agent.json", agent.url), CALL_TIMEOUT).await.unwrap();
    assert_eq!(legacy, serde_json::to_value(&card).unwrap());
}

// --- LLM backend ---

#[tokio::test]
async fn llm_answer_is_used_with_offsets_computed_by_the_agent() {
    let answer = json!({"entities": [{"text": "Tokyo", "type": "LOCATION"}]});
    let LlmRun { llm, response, extraction, .. } = run_with_llm(LlmBehaviour::answer_json(answer), TOKYO_QUERY).await;
    assert_eq!(response.status, ResponseStatus::Success);
    assert!(response.warnings.is_empty());
    let tokyo = Entity {
        text: "Tokyo".into(),
        entity_type: EntityType::Location,
        start: 12,
        end: 17,
        confidence: LLM_ENTITY_CONFIDENCE,
    };
    assert_eq!(
        extraction,
        EntityExtraction {
            entities: vec![tokyo],
            entity_count: 1,
            dominant_types: vec![EntityType::Location],
            method: "llm".into()
        }
    );

    let requests = llm.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0]["model"], "fake");
    assert_eq!(requests[0]["response_format"]["type"], "json_object");
    assert_eq!(requests[0]["messages"][1], json!({"role": "user", "content": TOKYO_QUERY}));
}

#[tokio::test]
async fn llm_offsets_count_characters_and_fenced_json_is_accepted() {
    let answer = json!({"entities": [{"text": "São Paulo", "type": "LOCATION"}, {"text": "Café", "type": "CONCEPT"}]});
    let fenced = LlmBehaviour::answer(format!("```json\n{answer}\n```"));
    let LlmRun { response, extraction, .. } = run_with_llm(fenced, UNICODE_QUERY).await;
    assert_eq!(response.status, ResponseStatus::Success);
    assert_eq!(extraction.method, "llm");
    let spans: Vec<_> = extraction.entities.iter().map(|e| (e.text.as_str(), e.entity_type, e.start, e.end)).collect();
    // In text order, whatever order the model listed them in.
    assert_eq!(spans, [("Café", EntityType::Concept, 0, 4), ("São Paulo", EntityType::Location, 8, 17)]);
    assert_eq!(extraction.entity_count, 2);
}

#[tokio::test]
async fn repeated_llm_entities_get_the_offsets_of_each_mention() {
    let query = "robots versus robots";
    let answer = json!({"entities": [{"text": "robots", "type": "CONCEPT"}, {"text": "robots", "type": "CONCEPT"}]});
    let extraction = run_with_llm(LlmBehaviour::answer_json(answer), query).await.extraction;
    assert_eq!(extraction.method, "llm");
    let spans: Vec<_> = extraction.entities.iter().map(|e| (e.start, e.end)).collect();
    assert_eq!(spans, [(0, 6), (14, 20)]);
}

#[tokio::test]
async fn malformed_llm_content_falls_back_to_the_rules() {
    let run = expect_fallback(LlmBehaviour::answer("Tokyo is a LOCATION."), TOKYO_QUERY, "JSON asked for").await;
    assert_eq!(run.llm.requests().len(), 1);
    // Valid JSON of the wrong shape is as unusable as prose.
    let wrong_shape = LlmBehaviour::answer_json(json!({"entities": [{"text": "Tokyo", "type": "CITY"}]}));
    expect_fallback(wrong_shape, TOKYO_QUERY, "JSON asked for").await;
}

#[tokio::test]
async fn llm_entities_not_in_the_query_are_refused() {
    let invented = json!({"entities": [{"text": "Tokyo", "type": "LOCATION"}, {"text": "Osaka", "type": "LOCATION"}]});
    expect_fallback(LlmBehaviour::answer_json(invented), TOKYO_QUERY, "\"Osaka\" is not a substring").await;
    let blank = json!({"entities": [{"text": " ", "type": "CONCEPT"}]});
    expect_fallback(LlmBehaviour::answer_json(blank), TOKYO_QUERY, "is not a substring").await;
}

#[tokio::test]
async fn slow_llm_is_given_up_on_within_its_timeout() {
    let behaviour = LlmBehaviour { delay: SLOW_LLM_DELAY, ..LlmBehaviour::answer_json(json!({"entities": []})) };
    let run = expect_fallback(behaviour, TOKYO_QUERY, &format!("did not answer within {LLM_TIMEOUT_MS} ms")).await;
    assert!(run.elapsed < SLOW_LLM_TASK_MAX, "the task took {:?}", run.elapsed);
    assert_eq!(run.llm.requests().len(), 1, "the LLM was called");
}

#[tokio::test]
async fn llm_error_status_falls_back_to_the_rules() {
    let behaviour = LlmBehaviour { status: StatusCode::INTERNAL_SERVER_ERROR, ..LlmBehaviour::answer("") };
    expect_fallback(behaviour, SOCCER_QUERY, "HTTP 500: the fake model is overloaded").await;
}

#[tokio::test]
async fn unreachable_llm_falls_back_to_the_rules() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let agent = Agent::with_llm(&format!("http://127.0.0.1:{port}/v1")).await;
    let (response, extraction) = agent.extract(SOCCER_QUERY).await;
    assert_rules_fallback(SOCCER_QUERY, &response, &extraction, "cannot reach the LLM endpoint");
}
