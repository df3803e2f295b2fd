//! The seed 001 loop end to end, through the bus: an A2A task becomes a message on the agent's
//! topic; the scripted model asks for tools; each output is a `text:agent:tool` node with an
//! `append` record from `tool` on the agent's own topic, and the next model request carries it
//! as `user`. On the embedded log, and on Kafka and PostgreSQL when they are there.

mod common;

use common::{Backend, Definition, Echo, Mesh, text_of};
use mesh_bus::TOOL_AGENT_ID;
use mesh_protocol::graph::GraphMode;
use mesh_test_support::llm::{LlmStep, ScriptedLlm};
use serde_json::json;

/// One tool round and a final answer; what the model was sent, and what the topic holds.
async fn a_tool_round_trip(backend: Backend) {
    let mut mesh = Mesh::start(Vec::new(), GraphMode::Open, backend).await;
    mesh.kit_agent("echo", "echoing", Echo::default()).await;
    let llm = ScriptedLlm::start([
        LlmStep::tool_call("call_agent", json!({"agent_id": "echo", "message": "ping"})),
        LlmStep::text("The echo agent said ping back."),
    ])
    .await;
    let agents = mesh.llm_agents(&[Definition::new("alpha", &["call_agent", "list_agents"])], llm.base_url()).await;

    let answer = mesh.ask(agents.url("alpha"), "Is the echo agent there?").await.unwrap();
    assert_eq!(text_of(&answer), "The echo agent said ping back.");

    let requests = llm.requests();
    assert_eq!(requests.len(), 2, "one tool round, one answer");
    assert_eq!(requests[0].roles(), ["system", "user"]);
    assert_eq!(requests[0].tool_names(), ["call_agent", "list_agents"]);
    let system = requests[0].system_prompt().unwrap();
    assert!(system.contains("ROLE-MARKER-alpha") && system.contains("`call_agent`"), "{system}");
    // The tool's output comes back as a user message, after the agent's own call.
    assert_eq!(requests[1].roles(), ["system", "user", "assistant", "user"]);
    let output = requests[1].last_content().unwrap();
    assert!(output.starts_with("Result of call_agent:") && output.contains("echo: ping"), "{output}");

    // On the agent's own topic: the message, the call, the tool output from `tool`, the answer.
    let me = mesh.bus_id("alpha");
    let records = mesh.records("alpha").await;
    let seen: Vec<(&str, &str)> =
        records.iter().map(|d| (d.record.agent_id.as_str(), d.record.action.as_str())).collect();
    let expected =
        [("a2a-client", "create"), (me.as_str(), "tool_invoke"), (TOOL_AGENT_ID, "append"), (me.as_str(), "append")];
    assert_eq!(seen, expected);
    let (_, docmem) = mesh.open().await;
    let tool = docmem.get(&records[2].record.node_id).await.unwrap();
    assert_eq!(tool.context.to_string(), "text:agent:tool");
    assert!(tool.content.contains("echo: ping"));
    assert_eq!(records[2].record.correlation_id.as_deref(), Some(records[1].record.node_id.as_str()));
    agents.stop().await;
}

#[tokio::test]
async fn a_tool_round_trip_on_the_embedded_log() {
    a_tool_round_trip(Backend::Embedded).await;
}

#[tokio::test]
async fn a_tool_round_trip_on_kafka() {
    if let Some(brokers) = mesh_test_support::kafka_brokers() {
        a_tool_round_trip(Backend::Kafka(brokers)).await;
    }
}

#[tokio::test]
async fn a_tool_round_trip_on_postgresql() {
    if let Some(database) = mesh_test_support::ScratchDatabase::create("llm_agent_round_trip").await {
        a_tool_round_trip(Backend::Postgres(database.url.clone())).await;
        database.drop_database().await;
    }
}

#[tokio::test]
async fn call_agent_resolves_a_capability_and_list_agents_shows_skills() {
    let mut mesh = Mesh::start(Vec::new(), GraphMode::Open, Backend::Embedded).await;
    let echo = Echo::default();
    mesh.kit_agent("echo", "echoing", echo.clone()).await;
    let llm = ScriptedLlm::start([
        LlmStep::tool_calls([
            ("list_agents", json!({"capability": "echoing"})),
            ("call_agent", json!({"agent_id": "echoing", "message": "by capability"})),
            ("call_agent", json!({"agent_id": "nobody", "message": "hello?"})),
        ]),
        LlmStep::text("done"),
    ])
    .await;
    let agents = mesh.llm_agents(&[Definition::new("alpha", &["call_agent", "list_agents"])], llm.base_url()).await;
    mesh.ask(agents.url("alpha"), "go").await.unwrap();
    let requests = llm.requests();
    let messages = requests[1].messages();
    let outputs: Vec<&str> = messages.iter().rev().take(3).rev().map(|m| m["content"].as_str().unwrap()).collect();
    assert!(outputs[0].contains("- echo [healthy]") || outputs[0].contains("- echo ["), "{}", outputs[0]);
    assert!(outputs[0].contains("echoing (echoing things)"), "{}", outputs[0]);
    assert!(outputs[1].contains("echo: by capability"), "{}", outputs[1]);
    assert!(
        outputs[2].starts_with("Result of call_agent:\nerror: no agent is registered as \"nobody\""),
        "{}",
        outputs[2]
    );
    assert_eq!(echo.calls(), 1);
    agents.stop().await;
}

#[tokio::test]
async fn list_agents_given_a_request_lists_the_agents_whose_skills_fit_it_best_first() {
    let mut mesh = Mesh::start(Vec::new(), GraphMode::Open, Backend::Embedded).await;
    mesh.kit_agent("echo", "echoing", Echo::default()).await;
    mesh.kit_agent("counter", "counting", Echo::default()).await;
    let llm = ScriptedLlm::start([
        LlmStep::tool_calls([
            ("list_agents", json!({"request": "who can do some counting for me?"})),
            ("list_agents", json!({"request": "qqzz xyzzy"})),
        ]),
        LlmStep::text("done"),
    ])
    .await;
    let agents = mesh.llm_agents(&[Definition::new("alpha", &["list_agents"])], llm.base_url()).await;
    mesh.ask(agents.url("alpha"), "go").await.unwrap();
    let messages = llm.requests()[1].messages();
    let outputs: Vec<&str> = messages.iter().rev().take(2).rev().map(|m| m["content"].as_str().unwrap()).collect();
    let first_line = outputs[0].lines().find(|line| line.starts_with("- ")).unwrap_or_default();
    assert!(first_line.starts_with("- counter ["), "the best fit first: {}", outputs[0]);
    assert!(first_line.contains("counting (counting things)"), "its matched skill: {}", outputs[0]);
    assert!(!outputs[0].contains("- echo ["), "an agent no word of the request fits is not listed: {}", outputs[0]);
    assert!(outputs[1].contains("no agent has a skill matching \"qqzz xyzzy\""), "{}", outputs[1]);
    agents.stop().await;
}

#[tokio::test]
async fn malformed_and_unknown_tool_calls_answer_the_model_with_tool_errors() {
    let mut mesh = Mesh::start(Vec::new(), GraphMode::Open, Backend::Embedded).await;
    let llm = ScriptedLlm::start([
        LlmStep::malformed_tool_call("call_agent"),
        LlmStep::tool_calls([
            ("shell", json!({"command": "rm -rf /"})),
            ("call_agent", json!({"agent_id": "x"})),
            ("call_agent", json!({"agent_id": "x", "message": "m", "sudo": true})),
        ]),
        LlmStep::text("I could not call anything."),
    ])
    .await;
    let agents = mesh.llm_agents(&[Definition::new("alpha", &["call_agent"])], llm.base_url()).await;
    let answer = mesh.ask(agents.url("alpha"), "go").await.unwrap();
    assert_eq!(text_of(&answer), "I could not call anything.");
    let requests = llm.requests();
    assert!(requests[1].last_content().unwrap().contains("error: the arguments are not JSON"));
    let messages = requests[2].messages();
    let outputs: Vec<&str> = messages.iter().rev().take(3).rev().map(|m| m["content"].as_str().unwrap()).collect();
    assert!(outputs[0].contains("error: there is no tool named \"shell\""), "{}", outputs[0]);
    assert!(outputs[1].contains("\"message\" is a required property"), "{}", outputs[1]);
    assert!(outputs[2].contains("Additional properties"), "{}", outputs[2]);
    agents.stop().await;
}

#[tokio::test]
async fn fifty_tool_calls_run_at_most_the_bound_and_rounds_end_with_an_answer() {
    let mut mesh = Mesh::start(Vec::new(), GraphMode::Open, Backend::Embedded).await;
    let fifty = (0..50).map(|_| ("list_agents", json!({})));
    let llm = ScriptedLlm::repeating(LlmStep::tool_calls(fifty)).await;
    let agents = mesh
        .llm_agents(
            &[Definition::new("alpha", &["list_agents"]).limits("tool_rounds_max = 2\ntool_calls_per_round_max = 4")],
            llm.base_url(),
        )
        .await;
    let answer = mesh.ask(agents.url("alpha"), "go").await.unwrap();
    assert_eq!(answer.status, mesh_protocol::seed::ResponseStatus::Partial);
    assert!(answer.warnings[0].contains("stopped after 2 tool rounds"), "{:?}", answer.warnings);
    let requests = llm.requests();
    assert_eq!(requests.len(), 3, "two tool rounds, then one without tools");
    assert!(requests[2].tool_names().is_empty(), "the last round offers no tool");
    // 4 calls run and one note for the other 46, per round.
    let roles = requests[1].roles();
    assert_eq!(roles.len(), 1 + 1 + 1 + 5, "{roles:?}");
    assert!(requests[1].last_content().unwrap().contains("46 further tool calls were not run"));
    let tool_records = mesh.records("alpha").await.iter().filter(|d| d.record.agent_id == TOOL_AGENT_ID).count();
    assert_eq!(tool_records, 10);
    agents.stop().await;
}
