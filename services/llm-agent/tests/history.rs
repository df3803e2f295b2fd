//! A conversation longer than the agent's token budget: the messages that no longer fit are
//! summarised by the model into a `summary` node (seed 001), and the next request carries the
//! summary in their place; a model that cannot summarise leaves them dropped, never a failed turn.

mod common;

use common::{Backend, Definition, Mesh, text_of};
use mesh_protocol::graph::GraphMode;
use mesh_test_support::llm::{LlmStep, ScriptedLlm};
use serde_json::json;

const SUMMARY: &str = "The user asked about robots playing soccer.";

/// A first message too long to stay in a 60-token budget beside one tool round.
fn long_question() -> String {
    format!("Tell me everything about robots playing soccer. {}", "Details matter here. ".repeat(8))
}

/// Alpha, on a 60-token budget, asked the long question: one tool round, then `summary_step`
/// (what the model says when asked to summarise), then the answer.
async fn ask_the_long_question(summary_step: LlmStep) -> (Mesh, ScriptedLlm, common::RunningLlmAgents) {
    let mut mesh = Mesh::start(Vec::new(), GraphMode::Open, Backend::Embedded).await;
    let llm = ScriptedLlm::start([
        LlmStep::tool_call("list_agents", json!({})),
        summary_step,
        LlmStep::text("Robots play soccer in RoboCup."),
    ])
    .await;
    let alpha = Definition::new("alpha", &["list_agents"]).limits("history_tokens_max = 60");
    let agents = mesh.llm_agents(&[alpha], llm.base_url()).await;
    let answer = mesh.ask(agents.url("alpha"), &long_question()).await.unwrap();
    assert_eq!(text_of(&answer), "Robots play soccer in RoboCup.");
    (mesh, llm, agents)
}

#[tokio::test]
async fn older_messages_are_summarised_into_a_summary_node_the_next_request_carries() {
    let (mesh, llm, agents) = ask_the_long_question(LlmStep::text(SUMMARY)).await;

    let requests = llm.requests();
    assert_eq!(requests.len(), 3, "a round, the summary, the answer");
    let summariser = &requests[1];
    assert!(summariser.system_prompt().unwrap().contains("running summary"), "{:?}", summariser.system_prompt());
    assert!(summariser.tool_names().is_empty());
    let transcript = summariser.last_content().unwrap();
    assert!(transcript.starts_with("Messages:\n- a2a-client: Tell me everything about robots"), "{transcript}");

    let messages = requests[2].messages();
    assert_eq!(messages[1]["content"], format!("Summary of the earlier conversation:\n{SUMMARY}"));
    assert!(
        messages.iter().all(|m| !m["content"].as_str().unwrap_or_default().contains("Details matter here.")),
        "the summarised message itself is gone: {messages:?}"
    );

    let records = mesh.records("alpha").await;
    let (_, docmem) = mesh.open().await;
    let nodes = docmem.read_conversation(&records[0].record.conversation_id).await.unwrap();
    let summaries: Vec<(String, &str)> = nodes
        .iter()
        .filter(|n| n.context.kind == llm_agent::history::SUMMARY_CONTEXT_TYPE)
        .map(|n| (n.context.to_string(), n.content.as_str()))
        .collect();
    assert_eq!(summaries, [(format!("summary:agent:{}", mesh.bus_id("alpha")), SUMMARY)]);
    agents.stop().await;
}

#[tokio::test]
async fn a_model_that_cannot_summarise_leaves_the_older_messages_dropped_and_answers() {
    let (_mesh, llm, agents) = ask_the_long_question(LlmStep::error(503)).await;

    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    let messages = requests[2].messages();
    assert!(
        messages.iter().all(|m| !m["content"].as_str().unwrap_or_default().starts_with("Summary of")),
        "{messages:?}"
    );
    assert!(messages.iter().all(|m| !m["content"].as_str().unwrap_or_default().contains("Details matter here.")));
    agents.stop().await;
}
