//! The entity-extraction agent as a real server on port 0: its rules (against the hand-written
//! oracle of `mesh_query_analysis::oracle`, never against the rules' own output), its answers to
//! bad input, its card, and its LLM backend against a scripted OpenAI-compatible server that
//! answers well, badly, slowly, with an error status, or not at all.

use std::time::{Duration, Instant};

use entity_extraction::EntityExtractionConfig;
use http::{Method, StatusCode};
use mesh_agent_kit::testing::{CALL_TIMEOUT, JSON, RunningAgent, TASKS_PATH, local_agent_config};
use mesh_client::reply_data;
use mesh_llm::LlmConfig;
use mesh_llm::testing::{TEST_MODEL, assert_rules_fallback_warning, llm_config};
use mesh_protocol::agents::{Entity, EntityExtraction, EntityType};
use mesh_protocol::seed::{ResponseStatus, TaskRequest, TaskResponse};
use mesh_query_analysis::oracle::ENTITY_CASES;
use mesh_test_support::llm::{LlmStep, SCRIPTED_ERROR_MESSAGE, ScriptedLlm, refused_base_url};
use serde_json::{Value, json};

/// The LLM timeout the agents under test use: short, so a slow LLM is given up on quickly.
const LLM_TIMEOUT_MS: u64 = 300;
/// How long the slow fake LLM takes: far beyond [`LLM_TIMEOUT_MS`].
const SLOW_LLM_DELAY: Duration = Duration::from_secs(5);
/// A task whose LLM times out must still be answered well within this.
const SLOW_LLM_TASK_MAX: Duration = Duration::from_secs(2);
/// Confidence the agent gives every entity an LLM names.
const LLM_ENTITY_CONFIDENCE: f64 = 0.8;

const SOCCER_QUERY: &str = "show me robots playing soccer";
const TOKYO_QUERY: &str = "Marathon in Tokyo on 3 March 2024";
const UNICODE_QUERY: &str = "Café in São Paulo 🤖";

// --- agent under test ---

/// The agent answering by its rules only.
async fn rules_agent() -> RunningAgent {
    start_agent(LlmConfig::default()).await
}

/// The agent backed by the LLM at `base_url`.
async fn llm_agent(base_url: &str) -> RunningAgent {
    start_agent(llm_config(base_url, LLM_TIMEOUT_MS)).await
}

/// The entity-extraction agent with `llm` as its LLM config, running in the background until dropped.
async fn start_agent(llm: LlmConfig) -> RunningAgent {
    let config = EntityExtractionConfig { agent: local_agent_config(), llm };
    RunningAgent::start(|http| entity_extraction::build(&config, http)).await
}

/// Sends a one-message task holding `query` and expects a 2xx answer.
async fn extract(agent: &RunningAgent, query: &str) -> (TaskResponse, EntityExtraction) {
    // A seed task id names one task: each send chooses a fresh one.
    static SENT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let id = format!("task-{}", SENT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let response = agent.send(&TaskRequest::from_text(Some(id.clone()), query, None)).await;
    assert_eq!(response.id, id);
    assert_eq!(response.metadata.agent, "entity_extraction");
    let extraction = reply_data(agent.url(), &response).unwrap();
    (response, extraction)
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

/// `(text, type, start, end)` of each entity, as the oracle writes them.
fn spans(extraction: &EntityExtraction) -> Vec<(&str, EntityType, usize, usize)> {
    extraction.entities.iter().map(|e| (e.text.as_str(), e.entity_type, e.start, e.end)).collect()
}

/// The entities the oracle expects for `query`, which must be one of its rows.
fn expected_spans(query: &str) -> Vec<(&'static str, EntityType, usize, usize)> {
    let case = ENTITY_CASES.iter().find(|case| case.query == query);
    case.unwrap_or_else(|| panic!("{query:?} is not in the oracle")).entities.to_vec()
}

fn find<'a>(extraction: &'a EntityExtraction, text: &str) -> &'a Entity {
    extraction.entities.iter().find(|e| e.text == text).unwrap_or_else(|| panic!("no {text:?} in {extraction:?}"))
}

/// The agent answered with the rules after its LLM failed with a warning containing `cause`.
fn assert_rules_fallback(query: &str, response: &TaskResponse, extraction: &EntityExtraction, cause: &str) {
    assert_eq!(response.status, ResponseStatus::Partial);
    assert_rules_fallback_warning(&response.warnings, cause);
    assert_eq!(spans(extraction), expected_spans(query), "the fallback is the rules' answer");
    assert_eq!(extraction.method, "rules");
}

/// One task answered by an agent backed by a fake LLM.
struct LlmRun {
    llm: ScriptedLlm,
    response: TaskResponse,
    extraction: EntityExtraction,
    /// Time the task took, as the caller saw it.
    elapsed: Duration,
}

/// Starts a fake LLM behaving as given and an agent using it, and sends `query`.
async fn run_with_llm(behaviour: LlmStep, query: &str) -> LlmRun {
    let llm = ScriptedLlm::repeating(behaviour).await;
    let agent = llm_agent(llm.base_url()).await;
    let started = Instant::now();
    let (response, extraction) = extract(&agent, query).await;
    LlmRun { llm, response, extraction, elapsed: started.elapsed() }
}

/// [`run_with_llm`], expecting the rules' answer with a warning containing `cause`.
async fn expect_fallback(behaviour: LlmStep, query: &str, cause: &str) -> LlmRun {
    let run = run_with_llm(behaviour, query).await;
    assert_rules_fallback(query, &run.response, &run.extraction, cause);
    run
}

// --- rules ---

#[tokio::test]
async fn rules_answer_the_entities_a_person_would_mark() {
    let agent = rules_agent().await;
    // A blank query is no task at all (see `tasks_without_text_are_invalid_input`).
    for case in ENTITY_CASES.iter().filter(|case| !case.query.trim().is_empty()) {
        let (response, extraction) = extract(&agent, case.query).await;
        assert_eq!(response.status, ResponseStatus::Success, "{:?}", case.query);
        assert!(response.warnings.is_empty(), "{:?}: {:?}", case.query, response.warnings);
        assert_eq!(extraction.method, "rules");
        assert_eq!(spans(&extraction), case.entities, "{:?}", case.query);
        assert_consistent(case.query, &extraction);
    }
}

#[tokio::test]
async fn dominant_types_are_the_most_frequent_then_in_type_order() {
    let agent = rules_agent().await;
    let (_, extraction) = extract(&agent, SOCCER_QUERY).await;
    assert_eq!(extraction.dominant_types, [EntityType::Concept]);
    // One each of CONCEPT, LOCATION and DATE: a tie, so PERSON > ... > CONCEPT order.
    let (_, extraction) = extract(&agent, TOKYO_QUERY).await;
    assert_eq!(extraction.dominant_types, [EntityType::Location, EntityType::Date, EntityType::Concept]);
    // Three concepts outnumber one place.
    let (_, extraction) = extract(&agent, "robots playing soccer in Tokyo").await;
    assert_eq!(extraction.dominant_types, [EntityType::Concept, EntityType::Location]);
}

#[tokio::test]
async fn unicode_queries_never_fail_and_offsets_count_characters() {
    let agent = rules_agent().await;
    let (response, extraction) = extract(&agent, UNICODE_QUERY).await;
    assert_eq!(response.status, ResponseStatus::Success);
    assert_consistent(UNICODE_QUERY, &extraction);
    // "Café " is 5 characters but 6 bytes: byte offsets would put São Paulo at 9.
    let place = find(&extraction, "São Paulo");
    assert_eq!((place.entity_type, place.start, place.end), (EntityType::Location, 8, 17));

    for query in
        ["🤖🤖🤖", "東京 2024年 マラソン", "Sa\u{0303}o Paulo", "\u{0301}", "\u{200D}\u{FE0F} ¿qué?", "ÉCOLE à Zürich"]
    {
        let (response, extraction) = extract(&agent, query).await;
        assert_eq!(response.status, ResponseStatus::Success, "{query:?}");
        assert_consistent(query, &extraction);
    }
}

#[tokio::test]
async fn offsets_index_the_text_as_sent_even_with_surrounding_whitespace() {
    let agent = rules_agent().await;
    let query = "   Marathon in Tokyo";
    let (_, extraction) = extract(&agent, query).await;
    assert_consistent(query, &extraction);
    let tokyo = find(&extraction, "Tokyo");
    assert_eq!((tokyo.start, tokyo.end), (15, 20));
}

// --- bad input ---

#[tokio::test]
async fn tasks_without_text_are_invalid_input() {
    let agent = rules_agent().await;
    let data_only = json!({"messages": [{"role": "user", "parts": [{"type": "data", "data": {"q": "robots"}}]}]});
    let whitespace = json!({"messages": [{"role": "user", "parts": [{"type": "text", "text": " \n\t "}]}]});
    for body in [data_only, whitespace] {
        let error = agent.expect_bad_task(body, "TASK_INVALID_INPUT").await;
        assert!(error.error_message.contains("no text"), "{error:?}");
    }
}

#[tokio::test]
async fn tasks_of_the_wrong_shape_are_refused() {
    let agent = rules_agent().await;
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
    let agent = rules_agent().await;
    let task = json!({"messages": [{"role": "user", "parts": [{"type": "text", "text": "robots"}]}]}).to_string();
    agent.expect_unparsed_tasks_refused(&task).await;
    let cases = [
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
    let agent = rules_agent().await;
    let card = agent.expect_card("entity_extraction", "entity_extraction").await;
    let legacy: Value = agent.http().get_json(&format!("{}/agent.json", agent.url()), CALL_TIMEOUT).await.unwrap();
    assert_eq!(legacy, serde_json::to_value(&card).unwrap());
}

// --- LLM backend ---

#[tokio::test]
async fn llm_answer_is_used_with_offsets_computed_by_the_agent() {
    let answer = json!({"entities": [{"text": "Tokyo", "type": "LOCATION"}]});
    let LlmRun { llm, response, extraction, .. } = run_with_llm(LlmStep::json(answer), TOKYO_QUERY).await;
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
    assert_eq!(requests[0].body["model"], TEST_MODEL);
    assert_eq!(requests[0].body["response_format"]["type"], "json_object");
    assert_eq!(requests[0].body["messages"][1], json!({"role": "user", "content": TOKYO_QUERY}));
}

#[tokio::test]
async fn llm_offsets_count_characters_and_fenced_json_is_accepted() {
    let answer = json!({"entities": [{"text": "São Paulo", "type": "LOCATION"}, {"text": "Café", "type": "CONCEPT"}]});
    let fenced = LlmStep::text(format!("```json\n{answer}\n```"));
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
    let extraction = run_with_llm(LlmStep::json(answer), query).await.extraction;
    assert_eq!(extraction.method, "llm");
    let spans: Vec<_> = extraction.entities.iter().map(|e| (e.start, e.end)).collect();
    assert_eq!(spans, [(0, 6), (14, 20)]);
}

#[tokio::test]
async fn malformed_llm_content_falls_back_to_the_rules() {
    let run = expect_fallback(LlmStep::text("Tokyo is a LOCATION."), TOKYO_QUERY, "JSON asked for").await;
    assert_eq!(run.llm.requests().len(), 1);
    // Valid JSON of the wrong shape is as unusable as prose.
    let wrong_shape = LlmStep::json(json!({"entities": [{"text": "Tokyo", "type": "CITY"}]}));
    expect_fallback(wrong_shape, TOKYO_QUERY, "JSON asked for").await;
}

#[tokio::test]
async fn llm_entities_not_in_the_query_are_refused() {
    let invented = json!({"entities": [{"text": "Tokyo", "type": "LOCATION"}, {"text": "Osaka", "type": "LOCATION"}]});
    expect_fallback(LlmStep::json(invented), TOKYO_QUERY, "\"Osaka\" is not a substring").await;
    let blank = json!({"entities": [{"text": " ", "type": "CONCEPT"}]});
    expect_fallback(LlmStep::json(blank), TOKYO_QUERY, "is not a substring").await;
}

#[tokio::test]
async fn slow_llm_is_given_up_on_within_its_timeout() {
    let behaviour = LlmStep::json(json!({"entities": []})).delayed(SLOW_LLM_DELAY);
    let run = expect_fallback(behaviour, TOKYO_QUERY, &format!("did not answer within {LLM_TIMEOUT_MS} ms")).await;
    assert!(run.elapsed < SLOW_LLM_TASK_MAX, "the task took {:?}", run.elapsed);
    assert_eq!(run.llm.requests().len(), 1, "the LLM was called");
}

#[tokio::test]
async fn llm_error_status_falls_back_to_the_rules() {
    let behaviour = LlmStep::error(500);
    expect_fallback(behaviour, SOCCER_QUERY, &format!("HTTP 500: {SCRIPTED_ERROR_MESSAGE}")).await;
}

#[tokio::test]
async fn unreachable_llm_falls_back_to_the_rules() {
    let agent = llm_agent(&refused_base_url()).await;
    let (response, extraction) = extract(&agent, SOCCER_QUERY).await;
    assert_rules_fallback(SOCCER_QUERY, &response, &extraction, "cannot reach the LLM endpoint");
}
