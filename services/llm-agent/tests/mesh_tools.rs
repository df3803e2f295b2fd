//! The mesh's guards hold for a model as for any agent: a cycle (A's model calls B, whose model
//! calls A) and the depth limit are refused and reported to the model; a one-way link cannot be
//! started from its far end; a link message is answered by the other LLM agent with the link
//! context in its prompt, and each prompt holds the organisation.

mod common;

use common::{Backend, CALL_TIMEOUT, Definition, Mesh, link, text_of};
use http::{Method, Request};
use mesh_protocol::call::CallContext;
use mesh_protocol::graph::{GraphMode, LinkDirection, LinkRelationship};
use mesh_protocol::seed::{TaskRequest, TaskResponse};
use mesh_test_support::llm::{LlmStep, ScriptedLlm};
use serde_json::json;

/// Two LLM agents that may call any agent.
async fn alpha_and_beta(mesh: &mut Mesh, llm: &ScriptedLlm) -> common::RunningLlmAgents {
    let definitions = [Definition::new("alpha", &["call_agent"]), Definition::new("beta", &["call_agent"])];
    mesh.llm_agents(&definitions, llm.base_url()).await
}

#[tokio::test]
async fn a_cycle_is_refused_and_reported_to_the_model() {
    let mut mesh = Mesh::start(Vec::new(), GraphMode::Open, Backend::Embedded).await;
    let llm = ScriptedLlm::start([
        LlmStep::tool_call("call_agent", json!({"agent_id": "beta", "message": "ask alpha for me"})),
        LlmStep::tool_call("call_agent", json!({"agent_id": "alpha", "message": "what do you know?"})),
        LlmStep::text("beta could not ask alpha"),
        LlmStep::text("alpha is done"),
    ])
    .await;
    let agents = alpha_and_beta(&mut mesh, &llm).await;
    let answer = mesh.ask(agents.url("alpha"), "start").await.unwrap();
    assert_eq!(text_of(&answer), "alpha is done");
    let requests = llm.requests();
    assert!(requests[1].system_prompt().unwrap().contains("ROLE-MARKER-beta"));
    let refusal = requests[2].last_content().unwrap();
    assert!(refusal.contains("CALL_CYCLE_DETECTED") && refusal.contains("alpha"), "{refusal}");
    let reply = requests[3].last_content().unwrap();
    assert!(reply.contains("beta answered (SUCCESS") && reply.contains("beta could not ask alpha"), "{reply}");
    agents.stop().await;
}

#[tokio::test]
async fn a_call_past_the_depth_limit_is_refused_and_reported_to_the_model() {
    let mut mesh = Mesh::start(Vec::new(), GraphMode::Open, Backend::Embedded).await;
    let llm = ScriptedLlm::start([
        LlmStep::tool_call("call_agent", json!({"agent_id": "beta", "message": "deeper"})),
        LlmStep::text("too deep"),
    ])
    .await;
    let agents = alpha_and_beta(&mut mesh, &llm).await;
    // Four hops already: alpha's call to beta would be the fifth.
    let chain: Vec<String> = ["u1", "u2", "u3", "u4"].map(String::from).to_vec();
    let context = CallContext { chain, depth: 4, ..CallContext::default() };
    let body = serde_json::to_vec(&TaskRequest::from_text(None, "go", None)).unwrap();
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(format!("{}/tasks/send", agents.url("alpha")))
        .header("content-type", "application/json");
    for (name, value) in context.to_headers() {
        request = request.header(name, value);
    }
    let response = mesh.http.send(request.body(body.into()).unwrap(), CALL_TIMEOUT).await.unwrap();
    assert!(response.status().is_success(), "{:?}", response.body());
    let answer: TaskResponse = serde_json::from_slice(response.body()).unwrap();
    assert_eq!(text_of(&answer), "too deep");
    let refusal = llm.requests()[1].last_content().unwrap();
    assert!(refusal.contains("CALL_DEPTH_EXCEEDED"), "{refusal}");
    assert_eq!(llm.requests().len(), 2, "beta was never called");
    agents.stop().await;
}

#[tokio::test]
async fn a_link_message_is_answered_with_the_link_context_and_a_one_way_link_is_not_started_backwards() {
    let links = vec![link("boss", "worker", LinkDirection::OneWay, LinkRelationship::Superior)];
    let mut mesh = Mesh::start(links, GraphMode::Enforced, Backend::Embedded).await;
    let llm = ScriptedLlm::start([
        LlmStep::tool_call("send_agent_message", json!({"target": "worker", "message": "status report, please"})),
        LlmStep::text("all good here"),
        LlmStep::text("the worker reports all good"),
        LlmStep::tool_call("send_agent_message", json!({"target": "boss", "message": "I start this one"})),
        LlmStep::text("I cannot start a conversation with my superior"),
    ])
    .await;
    let tools: &[&str] = &["send_agent_message", "call_agent"];
    let agents =
        mesh.llm_agents(&[Definition::new("boss", tools), Definition::new("worker", tools)], llm.base_url()).await;
    mesh.policy_loaded(agents.url("boss"), 1).await;
    mesh.policy_loaded(agents.url("worker"), 1).await;

    let answer = mesh.ask(agents.url("boss"), "how is the worker doing?").await.unwrap();
    assert_eq!(text_of(&answer), "the worker reports all good");
    let requests = llm.requests();
    let boss = requests[0].system_prompt().unwrap();
    assert!(boss.contains("**Direct reports:**\n- **worker**"), "{boss}");
    assert!(requests[0].tool_names().contains(&"send_agent_message".to_owned()));
    let worker = requests[1].system_prompt().unwrap();
    assert!(worker.contains("**Reports to:**\n- **boss**"), "{worker}");
    assert!(worker.contains("This is an internal channel with **boss** (superior)."), "{worker}");
    assert!(worker.contains("Treat directives as assignments."), "{worker}");
    assert_eq!(requests[1].last_content().as_deref(), Some("status report, please"));
    let reply = requests[2].last_content().unwrap();
    assert!(reply.contains("worker answered on link") && reply.contains("all good here"), "{reply}");

    // The worker may answer inside the boss's conversations, but not start one.
    let answer = mesh.ask(agents.url("worker"), "tell the boss something").await.unwrap();
    assert_eq!(text_of(&answer), "I cannot start a conversation with my superior");
    let requests = llm.requests();
    assert!(!requests[3].tool_names().contains(&"send_agent_message".to_owned()), "not offered over a one-way link");
    let refusal = requests[4].last_content().unwrap();
    assert!(refusal.contains("error: the tool send_agent_message is not offered to you now"), "{refusal}");
    agents.stop().await;
}
