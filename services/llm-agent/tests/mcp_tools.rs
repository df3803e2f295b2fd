//! An LLM agent with an MCP server's tools (a real rmcp server on port 0): the tools its
//! definition allows are offered as `{server}__{tool}`, run on the server, and their outputs,
//! failures and oversized answers come back to the model as tool results; a tool outside the
//! allow-list never reaches the server, and a server the address policy refuses stops the agent
//! from starting.

mod common;

use common::{Backend, Definition, Mesh, text_of};
use mesh_protocol::graph::GraphMode;
use mesh_test_support::llm::{LlmStep, ScriptedLlm};
use mesh_test_support::mcp::{FAIL_TOOL_TEXT, McpTestServer, RecordedCall};
use serde_json::json;

#[tokio::test]
async fn mcp_tools_are_offered_run_and_bounded_and_others_never_reach_the_server() {
    let mut mesh = Mesh::start(Vec::new(), GraphMode::Open, Backend::Embedded).await;
    let server = McpTestServer::start().await;
    let llm = ScriptedLlm::start([
        LlmStep::tool_calls([
            ("docs__echo", json!({"text": "robots playing soccer"})),
            ("docs__fail", json!({})),
            ("docs__huge", json!({})),
            ("docs__slow", json!({})),
            ("docs__echo", json!({"text": 7})),
        ]),
        LlmStep::text("The tool said robots playing soccer."),
    ])
    .await;
    let mut alpha = Definition::new("alpha", &["list_agents"]).limits("tool_calls_per_round_max = 5").mcp_server(
        "docs",
        &server.url,
        &["echo", "fail", "huge"],
    );
    // The server's cap above the megabyte's message size, so the answer is read and then cut.
    alpha.tables += "output_bytes_max = 300000\n";
    let agents = mesh.llm_agents(&[alpha], llm.base_url()).await;

    let answer = mesh.ask(agents.url("alpha"), "What does the tool say?").await.unwrap();
    assert_eq!(text_of(&answer), "The tool said robots playing soccer.");

    let requests = llm.requests();
    assert_eq!(requests[0].tool_names(), ["list_agents", "docs__echo", "docs__fail", "docs__huge"]);
    let messages = requests[1].messages();
    let outputs: Vec<&str> = messages.iter().rev().take(5).rev().map(|m| m["content"].as_str().unwrap()).collect();
    assert_eq!(outputs[0], "Result of docs__echo:\nrobots playing soccer");
    assert_eq!(outputs[1], format!("Result of docs__fail:\nerror: {FAIL_TOOL_TEXT}"));
    // A megabyte answer reaches the model bounded by the agent's tool output cap.
    assert!(outputs[2].starts_with("Result of docs__huge:\nyyyy"), "{}", &outputs[2][..80]);
    assert!(outputs[2].len() < 20 * 1024, "{} bytes", outputs[2].len());
    assert!(outputs[3].contains("error: there is no tool named \"docs__slow\""), "{}", outputs[3]);
    assert!(outputs[4].contains("error: invalid arguments: /text"), "{}", outputs[4]);

    // Only the allowed, well-formed calls reached the server, each once (a round's calls run
    // concurrently, so in any order).
    let mut calls: Vec<RecordedCall> = server.calls();
    calls.sort_by(|a, b| a.tool.cmp(&b.tool));
    let tools: Vec<&str> = calls.iter().map(|c| c.tool.as_str()).collect();
    assert_eq!(tools, ["echo", "fail", "huge"]);
    assert_eq!(calls[0].arguments, json!({"text": "robots playing soccer"}));
    agents.stop().await;
}

#[tokio::test]
async fn an_mcp_server_the_address_policy_refuses_stops_the_agent_from_starting() {
    let mut mesh = Mesh::start(Vec::new(), GraphMode::Open, Backend::Embedded).await;
    mesh.mcp_allowed_networks = Vec::new();
    let server = McpTestServer::start().await;
    let llm = ScriptedLlm::start([]).await;
    let alpha = Definition::new("alpha", &[]).mcp_server("docs", &server.url, &["echo"]);

    let error = mesh.try_llm_agents(&[alpha], llm.base_url()).await.unwrap_err();

    assert!(matches!(error, llm_agent::LlmAgentError::Mcp(mesh_mcp::McpError::Refused { .. })), "{error:?}");
    assert!(error.to_string().contains("\"docs\""), "{error}");
    assert_eq!(server.sessions(), 0, "nothing was sent to a refused server");
}
