//! A model that fails never hangs a turn: the conversation gets a clear error answer and the A2A
//! caller an ERROR or TIMEOUT; a huge answer is bounded.

mod common;

use common::{Backend, Definition, Mesh, text_of};
use mesh_client::ClientError;
use mesh_protocol::error::FailureStatus;
use mesh_protocol::graph::GraphMode;
use mesh_protocol::seed::ResponseStatus;
use mesh_test_support::llm::{LlmStep, ScriptedLlm, refused_base_url};
use std::time::Duration;

/// The agent's own answers in its conversations, as docmem holds them.
async fn answers(mesh: &Mesh, agent: &str) -> Vec<String> {
    let (_, docmem) = mesh.open().await;
    let me = mesh.bus_id(agent);
    let mut texts = Vec::new();
    for record in mesh.records(agent).await.iter().filter(|d| d.record.agent_id == me) {
        texts.push(docmem.get(&record.record.node_id).await.unwrap().content);
    }
    texts
}

fn failure(result: Result<mesh_protocol::seed::TaskResponse, ClientError>) -> (u16, FailureStatus, String) {
    match result {
        Err(ClientError::Status { status, body: Some(body), .. }) => (status, body.status, body.error_message),
        other => panic!("expected an error answer, got {other:?}"),
    }
}

#[tokio::test]
async fn a_model_that_cannot_be_reached_answers_with_an_error_in_the_conversation_and_over_a2a() {
    let mut mesh = Mesh::start(Vec::new(), GraphMode::Open, Backend::Embedded).await;
    let agents = mesh.llm_agents(&[Definition::new("alpha", &[])], &refused_base_url()).await;
    let (status, kind, message) = failure(mesh.ask(agents.url("alpha"), "hello?").await);
    assert_eq!((status, kind), (503, FailureStatus::Error), "{message}");
    assert!(message.contains("the language model is unavailable"), "{message}");
    let answers = answers(&mesh, "alpha").await;
    assert_eq!(answers.len(), 1);
    assert!(answers[0].starts_with("error: the language model is unavailable"), "{answers:?}");
    agents.stop().await;
}

#[tokio::test]
async fn a_slow_model_times_out_into_a_timeout_answer() {
    let mut mesh = Mesh::start(Vec::new(), GraphMode::Open, Backend::Embedded).await;
    let llm = ScriptedLlm::start([LlmStep::text("too late").delayed(Duration::from_secs(10))]).await;
    let agents = mesh.llm_agents(&[Definition::new("alpha", &[]).limits("llm_timeout_ms = 300")], llm.base_url()).await;
    let (status, kind, message) = failure(mesh.ask(agents.url("alpha"), "hello?").await);
    assert_eq!((status, kind), (504, FailureStatus::Timeout), "{message}");
    assert!(answers(&mesh, "alpha").await[0].contains("did not answer within"));
    agents.stop().await;
}

#[tokio::test]
async fn huge_answers_are_bounded() {
    let mut mesh = Mesh::start(Vec::new(), GraphMode::Open, Backend::Embedded).await;
    let llm = ScriptedLlm::start([LlmStep::huge_text(200_000), LlmStep::huge_text(1_000_000)]).await;
    let agents =
        mesh.llm_agents(&[Definition::new("alpha", &[]).limits("answer_bytes_max = 65536")], llm.base_url()).await;
    // Under the client's cap: kept, cut to the agent's bound, and said so.
    let answer = mesh.ask(agents.url("alpha"), "talk a lot").await.unwrap();
    assert_eq!(answer.status, ResponseStatus::Partial);
    assert_eq!(text_of(&answer).len(), 65_536);
    assert!(answer.warnings[0].contains("cut to 65536 of its 200000 bytes"), "{:?}", answer.warnings);
    // A megabyte: refused by the client unread, an error answer.
    let (status, _, message) = failure(mesh.ask(agents.url("alpha"), "talk even more").await);
    assert_eq!(status, 503, "{message}");
    let answers = answers(&mesh, "alpha").await;
    assert!(answers.iter().all(|a| a.len() <= 65_536), "bounded");
    assert!(answers[1].starts_with("error: the language model answered with something unusable"), "{}", answers[1]);
    agents.stop().await;
}
