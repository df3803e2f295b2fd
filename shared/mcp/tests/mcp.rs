//! [`McpClient`] against a real MCP server (rmcp's streamable-HTTP server on axum, port 0): tools
//! listed and called, a tool's failure, a slow tool, a huge output, the address policy.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mesh_client::{AddressPolicy, OutboundGuard, SystemLookup};
use mesh_mcp::{McpClient, McpError, McpServerConfig};
use mesh_test_support::mcp::{FAIL_TOOL_TEXT, McpTestServer};
use serde_json::{Map, Value, json};

const SHORT_TIMEOUT_MS: u64 = 300;
/// A call that timed out must return well before the slow tool would have answered.
const GIVE_UP_MAX: Duration = Duration::from_secs(3);

/// The policy of a mesh on one machine: loopback allowed.
fn loopback_guard() -> OutboundGuard {
    OutboundGuard::new(AddressPolicy::from_networks(&["127.0.0.0/8"]).unwrap(), Arc::new(SystemLookup))
}

async fn connect(server: &McpTestServer, config: impl FnOnce(McpServerConfig) -> McpServerConfig) -> McpClient {
    let config = config(McpServerConfig::new("tools", &server.url));
    McpClient::connect(config, &loopback_guard()).await.expect("connected")
}

fn arguments(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

#[tokio::test]
async fn tools_are_listed_with_their_schema_and_called_with_json_arguments() {
    let server = McpTestServer::start().await;
    let client = connect(&server, |c| c).await;

    let tools = client.list_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["echo", "fail", "slow", "huge"]);
    assert_eq!(tools[0].description, "Says the text back.");
    assert_eq!(tools[0].input_schema["properties"]["text"]["type"], "string");

    let echoed = client.call_tool("echo", arguments(json!({"text": "robots playing soccer"}))).await.unwrap();
    assert_eq!((echoed.text.as_str(), echoed.is_error, echoed.truncated), ("robots playing soccer", false, false));

    let failed = client.call_tool("fail", Map::new()).await.unwrap();
    assert!(failed.is_error, "a tool's failure is output the LLM reads");
    assert_eq!(failed.text, FAIL_TOOL_TEXT);

    let unknown = client.call_tool("teleport", Map::new()).await.unwrap_err();
    assert!(
        matches!(&unknown, McpError::Protocol { reason, .. } if reason.contains("no tool teleport")),
        "{unknown:?}"
    );
    client.close().await;
}

#[tokio::test]
async fn a_slow_tool_times_out_and_the_session_stays_usable() {
    let server = McpTestServer::start().await;
    let client = connect(&server, |c| McpServerConfig { timeout_ms: SHORT_TIMEOUT_MS, ..c }).await;

    let started = Instant::now();
    let error = client.call_tool("slow", Map::new()).await.unwrap_err();

    assert_eq!(error, McpError::Timeout { server: "tools".into(), timeout_ms: SHORT_TIMEOUT_MS });
    assert!(started.elapsed() < GIVE_UP_MAX, "took {:?}", started.elapsed());
    let echoed = client.call_tool("echo", arguments(json!({"text": "still here"}))).await.unwrap();
    assert_eq!(echoed.text, "still here");
}

#[tokio::test]
async fn a_huge_output_is_cut_at_the_cap_or_refused_past_the_message_limit() {
    let server = McpTestServer::start().await;
    let capped = connect(&server, |c| McpServerConfig { output_bytes_max: 300_000, ..c }).await;

    let output = capped.call_tool("huge", Map::new()).await.unwrap();
    assert!(output.truncated);
    assert_eq!(output.text.len(), 300_000);

    // A cap far below the message's size refuses the message itself, unread.
    let small = connect(&server, |c| McpServerConfig { output_bytes_max: 1_000, ..c }).await;
    let refused = small.call_tool("huge", Map::new()).await;
    assert!(refused.is_err(), "a megabyte message is not read for a 1 kB cap: {refused:?}");
}

#[tokio::test]
async fn a_server_outside_the_allowed_networks_is_refused_before_anything_is_sent() {
    let server = McpTestServer::start().await;
    let public_only = OutboundGuard::new(AddressPolicy::public_only::<&str>(&[]).unwrap(), Arc::new(SystemLookup));
    let elsewhere = OutboundGuard::new(AddressPolicy::from_networks(&["10.0.0.0/8"]).unwrap(), Arc::new(SystemLookup));

    for (guard, url) in [
        (&public_only, server.url.clone()),
        (&elsewhere, server.url.clone()),
        (&public_only, server.url.replace("127.0.0.1", "localhost")),
    ] {
        let error = McpClient::connect(McpServerConfig::new("tools", &url), guard).await.unwrap_err();
        assert!(matches!(error, McpError::Refused { .. }), "{url}: {error:?}");
    }
    assert_eq!(server.sessions(), 0, "no session was opened");

    let metadata = McpServerConfig::new("metadata", "http://169.254.169.254/mcp");
    let error = McpClient::connect(metadata, &loopback_guard()).await.unwrap_err();
    assert!(matches!(error, McpError::Refused { .. }), "{error:?}");
}

#[tokio::test]
async fn an_unreachable_server_or_an_unusable_config_fails_clearly() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let down = McpServerConfig::new("down", format!("http://127.0.0.1:{port}/mcp"));
    let error = McpClient::connect(down, &loopback_guard()).await.unwrap_err();
    assert!(matches!(error, McpError::Unreachable { .. }), "{error:?}");

    let server = McpTestServer::start().await;
    for config in [
        McpServerConfig { timeout_ms: 0, ..McpServerConfig::new("tools", &server.url) },
        McpServerConfig { output_bytes_max: 0, ..McpServerConfig::new("tools", &server.url) },
        McpServerConfig {
            bearer_token_env: Some("MESH_MCP_TEST_TOKEN_NEVER_SET".into()),
            ..McpServerConfig::new("tools", &server.url)
        },
    ] {
        let error = McpClient::connect(config.clone(), &loopback_guard()).await.unwrap_err();
        assert!(matches!(error, McpError::InvalidConfig { .. }), "{config:?}: {error:?}");
    }
}

#[tokio::test]
async fn an_allow_list_hides_and_refuses_the_other_tools_before_anything_is_sent() {
    let server = McpTestServer::start().await;
    let client = connect(&server, |c| McpServerConfig { tools: Some(vec!["echo".into()]), ..c }).await;

    let names: Vec<String> = client.list_tools().await.unwrap().into_iter().map(|t| t.name).collect();
    assert_eq!(names, ["echo"]);
    let refused = client.call_tool("fail", Map::new()).await.unwrap_err();
    assert!(matches!(&refused, McpError::Protocol { reason, .. } if reason.contains("not among")), "{refused:?}");
    assert!(server.calls().is_empty(), "the refused call never reached the server: {:?}", server.calls());
    assert_eq!(client.call_tool("echo", arguments(json!({"text": "ok"}))).await.unwrap().text, "ok");
}
