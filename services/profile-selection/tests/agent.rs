//! The profile-selection agent as a real server on port 0: its rules (against the hand-written
//! oracle of `mesh_query_analysis::oracle`, never against the rules' own output), its answers to
//! bad input, its card, and its LLM backend against a scripted OpenAI-compatible server that
//! answers well, badly, slowly, with an error status, or not at all.

use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use mesh_agent_kit::testing::{JSON, RunningAgent, TASKS_PATH, local_agent_config};
use mesh_client::reply_data;
use mesh_llm::LlmConfig;
use mesh_llm::testing::{TEST_MODEL, assert_rules_fallback_warning, llm_config};
use mesh_protocol::agents::{Complexity, Modality, ProfileScore, ProfileSelection};
use mesh_protocol::error::ErrorBody;
use mesh_protocol::seed::{ResponseStatus, TaskRequest, TaskResponse};
use mesh_query_analysis::oracle::{PROFILE_CASES, example_profiles as profiles};
use mesh_test_support::llm::{LlmStep, SCRIPTED_ERROR_MESSAGE, ScriptedLlm, refused_base_url};
use profile_selection::ProfileSelectionConfig;
use serde_json::{Value, json};

/// The LLM timeout the agents under test use: short, so a slow LLM is given up on quickly.
const LLM_TIMEOUT_MS: u64 = 300;
/// How long the slow fake LLM takes: far beyond [`LLM_TIMEOUT_MS`].
const SLOW_LLM_DELAY: Duration = Duration::from_secs(5);
/// A task whose LLM times out must still be answered well within this.
const SLOW_LLM_TASK_MAX: Duration = Duration::from_secs(2);

const SOCCER_QUERY: &str = "show me robots playing soccer";

// --- profiles ---

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

/// The agent answering by its rules only.
async fn rules_agent() -> RunningAgent {
    start_agent(LlmConfig::default()).await
}

/// The agent backed by the LLM at `base_url`.
async fn llm_agent(base_url: &str) -> RunningAgent {
    start_agent(llm_config(base_url, LLM_TIMEOUT_MS)).await
}

/// The profile-selection agent with `llm` as its LLM config, running in the background until dropped.
async fn start_agent(llm: LlmConfig) -> RunningAgent {
    let config = ProfileSelectionConfig { agent: local_agent_config(), llm };
    RunningAgent::start(|http| profile_selection::build(&config, http)).await
}

/// Sends `query` with the three profiles and expects a 2xx answer.
async fn select(agent: &RunningAgent, query: &str) -> (TaskResponse, ProfileSelection) {
    // A seed task id names one task: each send chooses a fresh one.
    static SENT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let id = format!("task-{}", SENT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let response = agent.send(&TaskRequest::from_text(Some(id.clone()), query, Some(profiles_data()))).await;
    assert_eq!(response.id, id);
    assert_eq!(response.metadata.agent, "profile_selection");
    let selection = reply_data(agent.url(), &response).unwrap();
    (response, selection)
}

/// Posts a one-message task with `parts` and expects a 400 `TASK_INVALID_INPUT`.
async fn expect_invalid_input(agent: &RunningAgent, parts: Value) -> ErrorBody {
    agent.expect_bad_task(json!({"messages": [{"role": "user", "parts": parts}]}), "TASK_INVALID_INPUT").await
}

// --- assertions ---

/// `(selected profile, intent, modality)`, what the oracle writes down for a query.
fn choice(selection: &ProfileSelection) -> (&str, &str, Modality) {
    (selection.selected_profile.as_str(), selection.intent.as_str(), selection.modality)
}

/// The choice the oracle expects for `query`, which must be one of its rows.
fn expected_choice(query: &str) -> (&'static str, &'static str, Modality) {
    let case = PROFILE_CASES.iter().find(|case| case.query == query);
    let case = case.unwrap_or_else(|| panic!("{query:?} is not in the oracle"));
    (case.selected_profile, case.intent, case.modality)
}

/// The agent answered with the rules after its LLM failed with a warning containing `cause`.
fn assert_rules_fallback(query: &str, response: &TaskResponse, selection: &ProfileSelection, cause: &str) {
    assert_eq!(response.status, ResponseStatus::Partial);
    assert_rules_fallback_warning(&response.warnings, cause);
    assert_eq!(choice(selection), expected_choice(query), "the fallback is the rules' answer");
    assert_eq!(selection.method, "rules");
}

/// One task answered by an agent backed by a fake LLM.
struct LlmRun {
    llm: ScriptedLlm,
    response: TaskResponse,
    selection: ProfileSelection,
    /// Time the task took, as the caller saw it.
    elapsed: Duration,
}

/// Starts a fake LLM behaving as given and an agent using it, and sends the soccer query.
async fn run_with_llm(behaviour: LlmStep) -> LlmRun {
    let llm = ScriptedLlm::repeating(behaviour).await;
    let agent = llm_agent(llm.base_url()).await;
    let started = Instant::now();
    let (response, selection) = select(&agent, SOCCER_QUERY).await;
    LlmRun { llm, response, selection, elapsed: started.elapsed() }
}

/// [`run_with_llm`], expecting the rules' answer with a warning containing `cause`.
async fn expect_fallback(behaviour: LlmStep, cause: &str) -> LlmRun {
    let run = run_with_llm(behaviour).await;
    assert_rules_fallback(SOCCER_QUERY, &run.response, &run.selection, cause);
    run
}

// --- rules ---

#[tokio::test]
async fn rules_choose_among_the_given_profiles_with_ranked_alternatives() {
    let agent = rules_agent().await;
    let (response, selection) = select(&agent, SOCCER_QUERY).await;
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
}

#[tokio::test]
async fn rules_pick_the_profile_a_person_would_pick() {
    let agent = rules_agent().await;
    // A blank query is no task at all (see `a_missing_query_is_invalid_input`).
    for case in PROFILE_CASES.iter().filter(|case| !case.query.trim().is_empty()) {
        let (response, selection) = select(&agent, case.query).await;
        assert_eq!(response.status, ResponseStatus::Success, "{:?}", case.query);
        assert_eq!(selection.method, "rules");
        assert_eq!(
            choice(&selection),
            (case.selected_profile, case.intent, case.modality),
            "{:?}: {}",
            case.query,
            selection.reasoning
        );
    }
}

#[tokio::test]
async fn rules_answer_the_same_request_identically() {
    let agent = rules_agent().await;
    // No id: a seed id names one task, so the agent picks a fresh one for each.
    let task = TaskRequest::from_text(None, SOCCER_QUERY, Some(profiles_data()));
    let mut answers = Vec::new();
    for _ in 0..2 {
        let response = agent.send(&task).await;
        let mut answer = serde_json::to_value(&response).unwrap();
        // Only the timing and the generated task and request ids may differ.
        let metadata = answer["metadata"].as_object_mut().unwrap();
        assert!(metadata.remove("processing_time_ms").is_some_and(|t| t.as_f64().is_some_and(|t| t >= 0.0)));
        metadata.remove("request_id");
        answer.as_object_mut().unwrap().remove("request_id");
        assert!(
            answer.as_object_mut().unwrap().remove("id").is_some_and(|id| id.as_str().is_some_and(|id| !id.is_empty()))
        );
        answers.push(answer);
    }
    assert_eq!(answers[0], answers[1]);
    assert_eq!(answers[0]["status"], "SUCCESS");
}

// --- bad input ---

#[tokio::test]
async fn a_missing_or_unusable_profile_list_is_invalid_input() {
    let agent = rules_agent().await;
    let text = json!({"type": "text", "text": SOCCER_QUERY});
    let error = expect_invalid_input(&agent, json!([text])).await;
    assert!(error.error_message.contains("available_profiles"), "{error:?}");

    let error = expect_invalid_input(&agent, json!([text, {"type": "data", "data": {"available_profiles": []}}])).await;
    assert!(error.error_message.contains("no search profiles"), "{error:?}");

    for wrong in [
        json!({"available_profiles": "bm25"}),
        json!({"available_profiles": ["bm25", "title"]}),
        json!({"available_profiles": [{"name": "bm25"}]}),
        json!({"available_profiles": [{"name": "bm25", "description": "d", "strengths": "general"}]}),
    ] {
        let error = expect_invalid_input(&agent, json!([text, {"type": "data", "data": wrong}])).await;
        assert!(error.error_message.contains("available_profiles"), "{error:?}");
    }
}

#[tokio::test]
async fn a_missing_query_is_invalid_input() {
    let agent = rules_agent().await;
    let data = json!({"type": "data", "data": profiles_data()});
    for parts in [json!([data]), json!([{"type": "text", "text": "  \n "}, data])] {
        let error = expect_invalid_input(&agent, parts).await;
        assert!(error.error_message.contains("no query"), "{error:?}");
    }
}

#[tokio::test]
async fn malformed_bodies_and_unknown_routes_answer_json_errors() {
    let agent = rules_agent().await;
    let task = serde_json::to_string(&TaskRequest::from_text(None, SOCCER_QUERY, Some(profiles_data()))).unwrap();
    agent.expect_unparsed_tasks_refused(&task).await;
    let cases = [
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
    let agent = rules_agent().await;
    agent.expect_card("profile_selection", "profile_selection").await;
}

// --- LLM backend ---

#[tokio::test]
async fn llm_answer_is_used_when_it_names_a_given_profile() {
    let LlmRun { llm, response, selection, .. } = run_with_llm(LlmStep::json(llm_answer("title", 0.8))).await;
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
    assert_eq!(requests[0].body["model"], TEST_MODEL);
    let user = requests[0].body["messages"][1]["content"].as_str().unwrap();
    assert!(user.contains(&format!("Query: {SOCCER_QUERY}")), "{user}");
    assert!(["bm25", "title", "tags", "exact_phrase"].iter().all(|word| user.contains(word)), "{user}");
}

#[tokio::test]
async fn llm_choosing_an_unknown_profile_falls_back_to_the_rules() {
    expect_fallback(LlmStep::json(llm_answer("colpali", 0.9)), "\"colpali\" is not an available profile").await;
    let mut unknown_alternative = llm_answer("title", 0.9);
    unknown_alternative["alternatives"][1]["profile"] = json!("colpali");
    expect_fallback(LlmStep::json(unknown_alternative), "alternative \"colpali\"").await;
}

#[tokio::test]
async fn llm_confidence_outside_the_unit_range_falls_back_to_the_rules() {
    expect_fallback(LlmStep::json(llm_answer("title", 1.7)), "confidence 1.7 is outside 0..1").await;
    expect_fallback(LlmStep::json(llm_answer("title", -0.1)), "outside 0..1").await;
}

#[tokio::test]
async fn llm_alternative_scores_outside_the_unit_range_fall_back_to_the_rules() {
    let mut answer = llm_answer("title", 0.8);
    answer["alternatives"][0]["score"] = json!(3.0);
    expect_fallback(LlmStep::json(answer), "outside 0..1").await;
}

#[tokio::test]
async fn llm_alternatives_are_the_other_profiles_best_first() {
    let mut answer = llm_answer("title", 0.8);
    answer["alternatives"] = json!([{"profile": "bm25", "score": 0.2}, {"profile": "title", "score": 0.9}, {"profile": "tags", "score": 0.6}]);
    let selection = run_with_llm(LlmStep::json(answer)).await.selection;
    assert_eq!(selection.method, "llm");
    let alternatives: Vec<&str> = selection.alternatives.iter().map(|a| a.profile.as_str()).collect();
    assert_eq!(alternatives, ["tags", "bm25"]);
}

#[tokio::test]
async fn malformed_llm_content_falls_back_to_the_rules() {
    let run = expect_fallback(LlmStep::text("I would pick title."), "JSON asked for").await;
    assert_eq!(run.llm.requests().len(), 1);
    let mut wrong_modality = llm_answer("title", 0.8);
    wrong_modality["modality"] = json!("hologram");
    expect_fallback(LlmStep::json(wrong_modality), "JSON asked for").await;
}

#[tokio::test]
async fn slow_llm_is_given_up_on_within_its_timeout() {
    let behaviour = LlmStep::json(llm_answer("title", 0.8)).delayed(SLOW_LLM_DELAY);
    let run = expect_fallback(behaviour, &format!("did not answer within {LLM_TIMEOUT_MS} ms")).await;
    assert!(run.elapsed < SLOW_LLM_TASK_MAX, "the task took {:?}", run.elapsed);
    assert_eq!(run.llm.requests().len(), 1, "the LLM was called");
}

#[tokio::test]
async fn llm_error_status_falls_back_to_the_rules() {
    let behaviour = LlmStep::error(500);
    expect_fallback(behaviour, &format!("HTTP 500: {SCRIPTED_ERROR_MESSAGE}")).await;
}

#[tokio::test]
async fn unreachable_llm_falls_back_to_the_rules() {
    let agent = llm_agent(&refused_base_url()).await;
    let (response, selection) = select(&agent, SOCCER_QUERY).await;
    assert_rules_fallback(SOCCER_QUERY, &response, &selection, "cannot reach the LLM endpoint");
}
