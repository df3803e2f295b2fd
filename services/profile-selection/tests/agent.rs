//! The profile-selection agent as a real server on port 0: its rules, its answers to bad input,
//! its card, and its LLM backend against a fake OpenAI-compatible endpoint that answers well,
//! badly, slowly, with an error status, or not at all.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderValue, Method, Request, StatusCode, header};
use axum::routing::post;
use axum::{Json, Router};
use mesh_client::{HttpClient, fetch_card, reply_data, send_task};
use mesh_llm::LlmConfig;
use mesh_protocol::agents::{Complexity, Modality, ProfileScore, ProfileSelection, SearchProfile};
use mesh_protocol::error::{ErrorBody, FailureStatus};
use mesh_protocol::seed::{ResponseStatus, TaskRequest, TaskResponse};
use mesh_query_analysis::select_profile;
use profile_selection::ProfileSelectionConfig;
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
/// Words every fallback warning carries.
const FALLBACK_WARNING: &str = "answered with the rules";
const TASKS_PATH: &str = "/tasks/send";
const JSON: &str = "application/json";

const SOCCER_QUERY: &str = "show me robots playing soccer";

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

// --- profiles ---

fn profile(name: &str, strengths: &[&str]) -> SearchProfile {
    SearchProfile {
        name: name.to_owned(),
        description: format!("the {name} profile"),
        strengths: strengths.iter().map(|s| (*s).to_owned()).collect(),
    }
}

/// The three profiles the search agent advertises.
fn profiles() -> Vec<SearchProfile> {
    vec![
        profile("bm25", &["general", "question", "long_query"]),
        profile("title", &["entity", "short_query", "keyword", "exact_phrase"]),
        profile("tags", &["visual", "audio", "keyword", "short_query"]),
    ]
}

fn profiles_data() -> Value {
    json!({"available_profiles": profiles()})
}

/// A valid LLM answer choosing `selected` with `confidence`.
fn llm_answer(selected: &str, confidence: f64) -> Value {
    json!({
        "selected_profile": selected,
        "confidence": confidence,
        "alternatives": [{"profile": "tags", "score": 0.6}, {"profile": "bm25", "score": 0.2}],
        "intent": "video_search",
        "modality": "video",
        "complexity": "simple",
        "reasoning": "The query names things to look at."
    })
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
        let mut config = ProfileSelectionConfig { llm, ..Default::default() };
        config.agent.port = 0;
        config.agent.registry_url = None;
        let http = HttpClient::with_reqwest().unwrap();
        let app = profile_selection::build(&config, http.clone()).await.unwrap();
        let url = app.url().to_owned();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(app.run_until_stopped(async {
            let _ = stopped.await;
        }));
        Self { url, http, _stop: stop }
    }

    /// Sends `query` with the three profiles and expects a 2xx answer.
    async fn select(&self, query: &str) -> (TaskResponse, ProfileSelection) {
        let task = TaskRequest::from_text(Some("task-1".into()), query, Some(profiles_data()));
        let response = send_task(&self.http, &self.url, &task, CALL_TIMEOUT).await.unwrap();
        assert_eq!(response.id, "task-1");
        assert_eq!(response.metadata.agent, "profile_selection");
        let selection = reply_data(&self.url, &response).unwrap();
        (response, selection)
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

    /// Posts a one-message task with `parts` and expects a 400 `TASK_INVALID_INPUT`.
    async fn expect_invalid_input(&self, parts: Value) -> ErrorBody {
        let body = json!({"messages": [{"role": "user", "parts": parts}]}).to_string();
        self.expect_error(
            self.request(Method::POST, TASKS_PATH, JSON, body),
            StatusCode::BAD_REQUEST,
            "TASK_INVALID_INPUT",
        )
        .await
    }
}

// --- assertions ---

/// The agent answered with the rules after its LLM failed with a warning containing `cause`.
fn assert_rules_fallback(query: &str, response: &TaskResponse, selection: &ProfileSelection, cause: &str) {
    assert_eq!(response.status, ResponseStatus::Partial);
    assert_eq!(response.warnings.len(), 1, "{:?}", response.warnings);
    let warning = &response.warnings[0];
    assert!(warning.contains(FALLBACK_WARNING) && warning.contains(cause), "{warning}");
    assert_eq!(selection, &select_profile(query, &profiles()).unwrap(), "the fallback is the rules' answer");
    assert_eq!(selection.method, "rules");
}

/// One task answered by an agent backed by a fake LLM.
struct LlmRun {
    llm: FakeLlm,
    response: TaskResponse,
    selection: ProfileSelection,
    /// Time the task took, as the caller saw it.
    elapsed: Duration,
}

/// Starts a fake LLM behaving as given and an agent using it, and sends the soccer query.
async fn run_with_llm(behaviour: LlmBehaviour) -> LlmRun {
    let llm = FakeLlm::start(behaviour).await;
    let agent = Agent::with_llm(&llm.base_url).await;
    let started = Instant::now();
    let (response, selection) = agent.select(SOCCER_QUERY).await;
    LlmRun { llm, response, selection, elapsed: started.elapsed() }
}

/// [`run_with_llm`], expecting the rules' answer with a warning containing `cause`.
async fn expect_fallback(behaviour: LlmBehaviour, cause: &str) -> LlmRun {
    let run = run_with_llm(behaviour).await;
    assert_rules_fallback(SOCCER_QUERY, &run.response, &run.selection, cause);
    run
}

// --- rules ---

#[tokio::test]
async fn rules_choose_among_the_given_profiles_with_ranked_alternatives() {
    let agent = Agent::rules().await;
    let (response, selection) = agent.select(SOCCER_QUERY).await;
    assert_eq!(response.status, ResponseStatus::Success);
    assert!(response.warnings.is_empty());
    assert_eq!(selection.method, "rules");
    let names: Vec<String> = profiles().into_iter().map(|p| p.name).collect();
    assert!(names.contains(&selection.selected_profile), "{selection:?}");
    assert!((0.0..=1.0).contains(&selection.confidence), "{selection:?}");

    let mut others: Vec<&str> = selection.alternatives.iter().map(|a| a.profile.as_str()).collect();
    others.sort_unstable();
    let mut expected: Vec<&str> =
        names.iter().map(String::as_str).filter(|n| *n != selection.selected_profile).collect();
    expected.sort_unstable();
    assert_eq!(others, expected, "the alternatives are the other two profiles");
    assert!(selection.alternatives.windows(2).all(|pair| pair[0].score >= pair[1].score), "{selection:?}");
    assert!(selection.alternatives.iter().all(|a| (0.0..=1.0).contains(&a.score)), "{selection:?}");

    // "show me" is a visual cue and the query is a short keyword query: what "tags" claims.
    assert_eq!(selection.selected_profile, "tags");
    assert_eq!(selection.modality, Modality::Video);
    assert_eq!(selection.intent, "video_search");
    assert_eq!(selection.complexity, Complexity::Simple);
    assert!(selection.reasoning.contains("'tags'"), "{}", selection.reasoning);
    assert_eq!(selection, select_profile(SOCCER_QUERY, &profiles()).unwrap());
}

#[tokio::test]
async fn rules_answer_the_same_request_identically() {
    let agent = Agent::rules().await;
    let task = TaskRequest::from_text(Some("same".into()), SOCCER_QUERY, Some(profiles_data()));
    let mut answers = Vec::new();
    for _ in 0..2 {
        let response = send_task(&agent.http, &agent.url, &task, CALL_TIMEOUT).await.unwrap();
        let mut answer = serde_json::to_value(&response).unwrap();
        // Only the timing and the generated request id may differ.
        let metadata = answer["metadata"].as_object_mut().unwrap();
        assert!(metadata.remove("processing_time_ms").is_some_and(|t| t.as_f64().is_some_and(|t| t >= 0.0)));
        metadata.remove("request_id");
        answers.push(answer);
    }
    assert_eq!(answers[0], answers[1]);
    assert_eq!(answers[0]["status"], "SUCCESS");
}

// --- bad input ---

#[tokio::test]
async fn a_missing_or_unusable_profile_list_is_invalid_input() {
    let agent = Agent::rules().await;
    let text = json!({"type": "text", "text": SOCCER_QUERY});
    let error = agent.expect_invalid_input(json!([text])).await;
    assert!(error.error_message.contains("available_profiles"), "{error:?}");

    let error = agent.expect_invalid_input(json!([text, {"type": "data", "data": {"available_profiles": []}}])).await;
    assert!(error.error_message.contains("no search profiles"), "{error:?}");

    for wrong in [
        json!({"available_profiles": "bm25"}),
        json!({"available_profiles": ["bm25", "title"]}),
        json!({"available_profiles": [{"name": "bm25"}]}),
        json!({"available_profiles": [{"name": "bm25", "description": "d", "strengths": "general"}]}),
    ] {
        let error = agent.expect_invalid_input(json!([text, {"type": "data", "data": wrong}])).await;
        assert!(error.error_message.contains("available_profiles"), "{error:?}");
    }
}

#[tokio::test]
async fn a_missing_query_is_invalid_input() {
    let agent = Agent::rules().await;
    let data = json!({"type": "data", "data": profiles_data()});
    for parts in [json!([data]), json!([{"type": "text", "text": "  \n "}, data])] {
        let error = agent.expect_invalid_input(parts).await;
        assert!(error.error_message.contains("no query"), "{error:?}");
    }
}

#[tokio::test]
async fn malformed_bodies_and_unknown_routes_answer_json_errors() {
    let agent = Agent::rules().await;
    let task = serde_json::to_string(&TaskRequest::from_text(None, SOCCER_QUERY, Some(profiles_data()))).unwrap();
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
        (Method::POST, TASKS_PATH, JSON, "{\"messages\": []}".to_owned(), StatusCode::BAD_REQUEST, "TASK_INVALID"),
        (Method::POST, "/select", JSON, task, StatusCode::NOT_FOUND, "ROUTE_NOT_FOUND"),
    ];
    for (method, path, content_type, body, status, code) in cases {
        agent.expect_error(agent.request(method, path, content_type, body), status, code).await;
    }
}

// --- card ---

#[tokio::test]
async fn card_names_the_agent_and_its_skill() {
    let agent = Agent::rules().await;
    let card = fetch_card(&agent.http, &agent.url, CALL_TIMEOUT).await.unwrap();
    assert_eq!(card.name, "profile_selection");
    assert!(card.skills.iter().any(|s| s.id == "profile_selection"), "{:?}", card.skills);
    assert_eq!(card.url.as_deref(), Some(format!("{}/", agent.url).as_str()));
}

// --- LLM backend ---

#[tokio::test]
async fn llm_answer_is_used_when_it_names_a_given_profile() {
    let LlmRun { llm, response, selection, .. } =
        run_with_llm(LlmBehaviour::answer_json(llm_answer("title", 0.8))).await;
    assert_eq!(response.status, ResponseStatus::Success);
    assert!(response.warnings.is_empty());
    assert_eq!(
        selection,
        ProfileSelection {
            selected_profile: "title".into(),
            confidence: 0.8,
            alternatives: vec![
                ProfileScore { profile: "tags".into(), score: 0.6 },
                ProfileScore { profile: "bm25".into(), score: 0.2 }
            ],
            intent: "video_search".into(),
            modality: Modality::Video,
            complexity: Complexity::Simple,
            reasoning: "The query names things to look at.".into(),
            method: "llm".into(),
        }
    );

    let requests = llm.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0]["model"], "fake");
    let user = requests[0]["messages"][1]["content"].as_str().unwrap();
    assert!(user.contains(&format!("Query: {SOCCER_QUERY}")), "{user}");
    assert!(["bm25", "title", "tags", "exact_phrase"].iter().all(|word| user.contains(word)), "{user}");
}

#[tokio::test]
async fn llm_choosing_an_unknown_profile_falls_back_to_the_rules() {
    expect_fallback(LlmBehaviour::answer_json(llm_answer("colpali", 0.9)), "\"colpali\" is not an available profile")
        .await;
    let mut unknown_alternative = llm_answer("title", 0.9);
    unknown_alternative["alternatives"][1]["profile"] = json!("colpali");
    expect_fallback(LlmBehaviour::answer_json(unknown_alternative), "alternative \"colpali\"").await;
}

#[tokio::test]
async fn llm_confidence_outside_the_unit_range_falls_back_to_the_rules() {
    expect_fallback(LlmBehaviour::answer_json(llm_answer("title", 1.7)), "confidence 1.7 is outside 0..1").await;
    expect_fallback(LlmBehaviour::answer_json(llm_answer("title", -0.1)), "outside 0..1").await;
}

#[tokio::test]
async fn llm_alternative_scores_outside_the_unit_range_fall_back_to_the_rules() {
    let mut answer = llm_answer("title", 0.8);
    answer["alternatives"][0]["score"] = json!(3.0);
    expect_fallback(LlmBehaviour::answer_json(answer), "outside 0..1").await;
}

#[tokio::test]
async fn llm_alternatives_are_the_other_profiles_best_first() {
    let mut answer = llm_answer("title", 0.8);
    answer["alternatives"] = json!([{"profile": "bm25", "score": 0.2}, {"profile": "title", "score": 0.9}, {"profile": "tags", "score": 0.6}]);
    let selection = run_with_llm(LlmBehaviour::answer_json(answer)).await.selection;
    assert_eq!(selection.method, "llm");
    let alternatives: Vec<&str> = selection.alternatives.iter().map(|a| a.profile.as_str()).collect();
    assert_eq!(alternatives, ["tags", "bm25"]);
}

#[tokio::test]
async fn malformed_llm_content_falls_back_to_the_rules() {
    let run = expect_fallback(LlmBehaviour::answer("I would pick title."), "JSON asked for").await;
    assert_eq!(run.llm.requests().len(), 1);
    let mut wrong_modality = llm_answer("title", 0.8);
    wrong_modality["modality"] = json!("hologram");
    expect_fallback(LlmBehaviour::answer_json(wrong_modality), "JSON asked for").await;
}

#[tokio::test]
async fn slow_llm_is_given_up_on_within_its_timeout() {
    let behaviour = LlmBehaviour { delay: SLOW_LLM_DELAY, ..LlmBehaviour::answer_json(llm_answer("title", 0.8)) };
    let run = expect_fallback(behaviour, &format!("did not answer within {LLM_TIMEOUT_MS} ms")).await;
    assert!(run.elapsed < SLOW_LLM_TASK_MAX, "the task took {:?}", run.elapsed);
    assert_eq!(run.llm.requests().len(), 1, "the LLM was called");
}

#[tokio::test]
async fn llm_error_status_falls_back_to_the_rules() {
    let behaviour = LlmBehaviour { status: StatusCode::INTERNAL_SERVER_ERROR, ..LlmBehaviour::answer("") };
    expect_fallback(behaviour, "HTTP 500: the fake model is overloaded").await;
}

#[tokio::test]
async fn unreachable_llm_falls_back_to_the_rules() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let agent = Agent::with_llm(&format!("http://127.0.0.1:{port}/v1")).await;
    let (response, selection) = agent.select(SOCCER_QUERY).await;
    assert_rules_fallback(SOCCER_QUERY, &response, &selection, "cannot reach the LLM endpoint");
}
