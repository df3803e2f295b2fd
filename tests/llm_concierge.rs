//! `up`'s example organisation of LLM agents, end to end: a WebSocket conversation (as
//! `a2a-mesh chat concierge` holds it) with the concierge of `deploy/llm-agents/`, whose model
//! (the scripted OpenAI-compatible server) calls the orchestrator for each question; the second
//! question is asked with the first turn in the history, and the answers are the model's text.

mod common;

use std::time::{Duration, Instant};

use a2a_mesh::SuiteConfig;
use futures::{SinkExt, StreamExt};
use llm_agent::LlmAgentsConfig;
use mesh_client::{HttpClient, RegistryClient};
use mesh_test_support::llm::{LlmStep, ScriptedLlm};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

/// Longest one answer may take.
const ANSWER_DEADLINE_MS: u64 = 30_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_with_the_concierge_calls_the_orchestrator_and_keeps_its_history() {
    let llm = ScriptedLlm::start([
        LlmStep::tool_call("call_agent", json!({"agent_id": "orchestrator", "message": "robots playing soccer"})),
        LlmStep::text("The documents describe robot soccer leagues."),
        LlmStep::tool_call("call_agent", json!({"agent_id": "orchestrator", "message": "drones playing soccer"})),
        LlmStep::text("Drone soccer comes up too."),
    ])
    .await;
    let data = tempfile::tempdir().unwrap();
    let mut config = SuiteConfig::ephemeral(data.path());
    let agent = config.orchestrator.agent.clone();
    config.llm_agents = Some(LlmAgentsConfig {
        agent,
        definitions_dir: std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/llm-agents"),
        llm: mesh_llm::LlmConfig {
            base_url: llm.base_url().into(),
            model: "scripted".into(),
            retries_max: 0,
            ..mesh_llm::LlmConfig::default()
        },
        ..LlmAgentsConfig::default()
    });
    let suite = common::start_healthy(config, None).await;
    assert!(suite.urls.llm_agents.iter().any(|(name, _)| name == "concierge"), "{:?}", suite.urls.llm_agents);
    let registry = RegistryClient::new(&suite.urls.registry, HttpClient::with_reqwest().unwrap()).unwrap();
    let deadline = Instant::now() + Duration::from_millis(common::WAIT_DEADLINE_MS);
    while registry.agent("concierge").await.is_err() {
        assert!(Instant::now() < deadline, "the concierge never registered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let ws_url = format!("{}/ws?agent=concierge", suite.urls.ui_agent.replacen("http://", "ws://", 1));
    let (mut socket, _) = tokio_tungstenite::connect_async(ws_url.as_str()).await.unwrap();
    for (question, expected) in [
        ("robots playing soccer", "The documents describe robot soccer leagues."),
        ("and what about drones", "Drone soccer comes up too."),
    ] {
        socket.send(Message::Text(question.into())).await.unwrap();
        let answer = tokio::time::timeout(Duration::from_millis(ANSWER_DEADLINE_MS), socket.next())
            .await
            .unwrap_or_else(|_| panic!("no answer to {question:?}"))
            .unwrap()
            .unwrap();
        assert_eq!(answer.to_text().unwrap(), expected, "only the answer, as text: no tool output");
    }

    let requests = llm.requests();
    assert_eq!(requests.len(), 4);
    let system = requests[0].system_prompt().unwrap();
    assert!(system.contains("You are the concierge"), "{system}");
    assert!(system.contains("**Direct reports:**") && system.contains("- **orchestrator**"), "{system}");
    let results = requests[1].last_content().unwrap();
    // The orchestrator's answer as people read it (its text part), with its confidence.
    assert!(results.contains("orchestrator answered (SUCCESS, confidence "), "{results}");
    assert!(results.contains("Query: robots playing soccer\n") && results.contains(" 1. ["), "{results}");
    // The second question comes with the whole first turn.
    assert_eq!(requests[2].roles(), ["system", "user", "assistant", "user", "assistant", "user"]);
    assert_eq!(requests[2].last_content().as_deref(), Some("and what about drones"));
    suite.stop().await.unwrap();
}
