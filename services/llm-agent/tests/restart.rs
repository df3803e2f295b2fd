//! Replayable turns: an agent stopped in the middle of a tool round (its tool's output written,
//! the next model call under way) resumes from its topic when it starts again, without running
//! the tool a second time and with one answer. On the embedded log, and on Kafka and PostgreSQL
//! when they are there.

mod common;

use std::time::Duration;

use common::{Backend, Definition, Echo, Mesh};
use mesh_protocol::graph::GraphMode;
use mesh_test_support::llm::{LlmStep, ScriptedLlm};
use serde_json::json;

async fn a_restart_in_the_middle_of_a_tool_round(backend: Backend) {
    let mut mesh = Mesh::start(Vec::new(), GraphMode::Open, backend).await;
    let echo = Echo::default();
    mesh.kit_agent("echo", "echoing", echo.clone()).await;
    let llm = ScriptedLlm::start([
        LlmStep::tool_call("call_agent", json!({"agent_id": "echo", "message": "ping"})),
        // Never answered before the stop.
        LlmStep::text("the answer before the stop").delayed(Duration::from_secs(60)),
        LlmStep::text("the answer after the restart"),
    ])
    .await;
    let definitions = [Definition::new("alpha", &["call_agent"])];
    let agents = mesh.llm_agents(&definitions, llm.base_url()).await;
    let url = agents.url("alpha").to_owned();
    let http = mesh.http.clone();
    let asked = tokio::spawn(async move {
        let task = mesh_protocol::seed::TaskRequest::from_text(None, "ping the echo agent", None);
        mesh_client::send_task(&http, &url, &task, common::CALL_TIMEOUT).await
    });
    // The tool ran, its output came back through the topic, and the model is being asked again.
    llm.wait_for_requests(2, common::DEADLINE).await;
    assert_eq!(echo.calls(), 1);
    agents.stop().await;
    let _ = asked.await;

    let agents = mesh.llm_agents(&definitions, llm.base_url()).await;
    let requests = llm.wait_for_requests(3, common::DEADLINE).await;
    assert_eq!(requests[2].messages(), requests[1].messages(), "the same round, asked again");
    let me = mesh.bus_id("alpha");
    common::eventually("the answer after the restart", async || {
        mesh.records("alpha").await.iter().any(|d| d.record.agent_id == me && d.record.action == "append")
    })
    .await;
    assert_eq!(echo.calls(), 1, "the tool did not run again");
    let (_, docmem) = mesh.open().await;
    let mut answers = Vec::new();
    for record in mesh.records("alpha").await.iter().filter(|d| d.record.agent_id == me && d.record.action == "append")
    {
        answers.push(docmem.get(&record.record.node_id).await.unwrap().content);
    }
    assert_eq!(answers, ["the answer after the restart"]);
    let tool_outputs =
        mesh.records("alpha").await.iter().filter(|d| d.record.agent_id == mesh_bus::TOOL_AGENT_ID).count();
    assert_eq!(tool_outputs, 1);
    agents.stop().await;
}

#[tokio::test]
async fn a_restart_in_the_middle_of_a_tool_round_resumes_without_running_the_tool_again() {
    a_restart_in_the_middle_of_a_tool_round(Backend::Embedded).await;
}

#[tokio::test]
async fn a_restart_in_the_middle_of_a_tool_round_resumes_on_kafka() {
    if let Some(brokers) = mesh_test_support::kafka_brokers() {
        a_restart_in_the_middle_of_a_tool_round(Backend::Kafka(brokers)).await;
    }
}

#[tokio::test]
async fn a_restart_in_the_middle_of_a_tool_round_resumes_on_postgresql() {
    if let Some(database) = mesh_test_support::ScratchDatabase::create("llm_agent_restart").await {
        a_restart_in_the_middle_of_a_tool_round(Backend::Postgres(database.url.clone())).await;
        database.drop_database().await;
    }
}
