//! Seed 003's contract on LLM agents: the handoff context travels with `call_agent` (the callee's
//! handler sees it; an LLM callee has it in its prompt and passes it on), a malformed one is
//! refused, and an answer's confidence is the one its model stated (or the fallback).

mod common;

use std::sync::{Arc, Mutex};

use common::{Backend, CALL_TIMEOUT, Definition, Mesh, text_of};
use mesh_agent_kit::{AgentError, AgentHandler, AgentReply, TaskInput};
use mesh_client::{ClientError, send_task};
use mesh_protocol::graph::GraphMode;
use mesh_protocol::handoff::{HANDOFF_METADATA_KEY, Handoff};
use mesh_protocol::seed::{ConfidenceLevel, Part, TaskRequest};
use mesh_test_support::llm::{LlmStep, ScriptedLlm};
use serde_json::json;

/// A kit agent keeping the handoff context of every call it handles.
#[derive(Debug, Default, Clone)]
struct Recorder {
    seen: Arc<Mutex<Vec<Option<Handoff>>>>,
}

impl AgentHandler for Recorder {
    async fn handle(&self, task: TaskInput) -> Result<AgentReply, AgentError> {
        self.seen.lock().unwrap().push(task.call.handoff().cloned());
        Ok(AgentReply { parts: vec![Part::Text { text: "three robot leagues".into() }], ..AgentReply::default() })
    }
}

#[tokio::test]
async fn the_callee_sees_the_handoff_of_its_caller_and_the_confidence_is_the_models() {
    let mut mesh = Mesh::start(Vec::new(), GraphMode::Open, Backend::Embedded).await;
    let recorder = Recorder::default();
    mesh.kit_agent("recorder", "records", recorder.clone()).await;
    let llm = ScriptedLlm::start([
        LlmStep::tool_call("call_agent", json!({"agent_id": "recorder", "message": "look up robot soccer"})),
        LlmStep::text("There are three robot leagues.\nConfidence: low"),
    ])
    .await;
    let agents = mesh.llm_agents(&[Definition::new("alpha", &["call_agent"])], llm.base_url()).await;

    let answer = mesh.ask(agents.url("alpha"), "robots playing soccer").await.unwrap();
    assert_eq!(text_of(&answer), "There are three robot leagues.", "the confidence line is taken off");
    assert_eq!(answer.confidence_level, Some(ConfidenceLevel::Low), "the model's, not the status's");
    let system = llm.requests()[0].system_prompt().unwrap();
    assert!(system.contains("`Confidence: HIGH`"), "the prompt asks for it: {system}");
    assert!(!system.contains("## Handoff Context"), "a user's own request was handed over by no agent");

    let seen = recorder.seen.lock().unwrap().clone();
    let handoff = seen[0].clone().expect("the call carried a handoff");
    assert_eq!(handoff.prior_agents, ["alpha"]);
    assert_eq!(handoff.original_request.as_deref(), Some("robots playing soccer"), "the user's words");
    assert!(handoff.session_id.is_some_and(|id| !id.is_empty()), "the conversation");
    agents.stop().await;
}

#[tokio::test]
async fn an_llm_callee_has_the_handoff_in_its_prompt_and_passes_it_on() {
    let mut mesh = Mesh::start(Vec::new(), GraphMode::Open, Backend::Embedded).await;
    let recorder = Recorder::default();
    let recorder_url = mesh.kit_agent("recorder", "records", recorder.clone()).await;
    let llm = ScriptedLlm::start([
        LlmStep::tool_call("call_agent", json!({"agent_id": "recorder", "message": "details please"})),
        LlmStep::text("Three leagues, as the analyst found."),
    ])
    .await;
    let agents = mesh.llm_agents(&[Definition::new("beta", &["call_agent"])], llm.base_url()).await;

    // As the concierge would hand work to beta, with what the analyst found.
    let mut task = TaskRequest::from_text(None, "how many leagues are there?", None);
    task.metadata.insert(
        HANDOFF_METADATA_KEY.into(),
        json!({"session_id": "sess-789", "original_request": "robots playing soccer",
               "prior_agents": ["concierge", "analyst"],
               "prior_outputs": [{"agent": "analyst", "output": "leagues: RoboCup, FIRA, Drone Soccer"}],
               "constraints": {"language": "en"}}),
    );
    let answer = send_task(&mesh.http, agents.url("beta"), &task, CALL_TIMEOUT).await.unwrap();
    assert_eq!(text_of(&answer), "Three leagues, as the analyst found.");
    assert_eq!(answer.confidence_level, Some(ConfidenceLevel::Medium), "no confidence line: the fallback");

    let requests = llm.requests();
    let system = requests[0].system_prompt().unwrap();
    for expected in [
        "## Handoff Context",
        "- **Original request:** robots playing soccer\n",
        "- **Agents involved so far:** concierge, analyst\n",
        "- **analyst:** leagues: RoboCup, FIRA, Drone Soccer",
        "- language: \"en\"",
    ] {
        assert!(system.contains(expected), "{expected:?} missing from the callee's prompt:\n{system}");
    }
    // The next round (after the tool output came back through the topic) still has it.
    assert!(requests[1].system_prompt().unwrap().contains("## Handoff Context"));

    let handoff = recorder.seen.lock().unwrap()[0].clone().unwrap();
    assert_eq!(handoff.prior_agents, ["concierge", "analyst", "beta"]);
    assert_eq!(handoff.session_id.as_deref(), Some("sess-789"));
    assert_eq!(handoff.original_request.as_deref(), Some("robots playing soccer"));
    assert_eq!(handoff.prior_outputs.len(), 1);
    assert_eq!(handoff.constraints["language"], "en");

    // A handoff of another shape is refused before any work; an oversized one is trimmed.
    let mut bad = TaskRequest::from_text(None, "hello", None);
    bad.metadata.insert(HANDOFF_METADATA_KEY.into(), json!({"prior_agents": "concierge"}));
    let refused = send_task(&mesh.http, &recorder_url, &bad, CALL_TIMEOUT).await.unwrap_err();
    let ClientError::Status { status: 400, body: Some(body), .. } = refused else { panic!("{refused:?}") };
    assert_eq!(body.error_code, "TASK_INVALID_INPUT");
    assert!(body.error_message.contains(HANDOFF_METADATA_KEY), "{}", body.error_message);
    let mut big = TaskRequest::from_text(None, "hello", None);
    let many_agents = vec!["x"; 100];
    big.metadata.insert(HANDOFF_METADATA_KEY.into(), json!({"prior_agents": many_agents}));
    send_task(&mesh.http, &recorder_url, &big, CALL_TIMEOUT).await.unwrap();
    let trimmed = recorder.seen.lock().unwrap().last().cloned().flatten().unwrap();
    assert_eq!(trimmed.prior_agents.len(), mesh_protocol::handoff::HANDOFF_PRIOR_AGENTS_MAX);
    assert_eq!(recorder.seen.lock().unwrap().len(), 2, "the refused call never reached the handler");
    agents.stop().await;
}
