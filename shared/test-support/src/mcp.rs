//! A real MCP server for tests (rmcp's streamable-HTTP server on axum, 127.0.0.1:0) with four
//! tools: `echo` (says its `text` back), `fail` (a tool failure), `slow` (answers after
//! [`SLOW_TOOL_DELAY`]) and `huge` (answers [`HUGE_OUTPUT_BYTES`]). It counts the sessions opened
//! and records every call, so a test can check what reached the server and how often.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};

/// How long the `slow` tool takes: far beyond the short timeouts tests give.
pub const SLOW_TOOL_DELAY: Duration = Duration::from_secs(10);
/// Bytes the `huge` tool answers.
pub const HUGE_OUTPUT_BYTES: usize = 1_000_000;
/// What the `fail` tool says.
pub const FAIL_TOOL_TEXT: &str = "the city is unknown";
/// Calls recorded at most; later ones are counted in [`McpTestServer::calls`] but not kept.
const CALLS_RECORDED_MAX: usize = 1024;

/// One call that reached the server.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedCall {
    pub tool: String,
    pub arguments: Value,
}

#[derive(Debug, Default)]
struct Record {
    sessions: AtomicUsize,
    calls: Mutex<Vec<RecordedCall>>,
}

#[derive(Debug, Clone)]
struct TestTools(Arc<Record>);

fn object_schema(properties: Value, required: &[&str]) -> Arc<Map<String, Value>> {
    let schema = json!({"type": "object", "properties": properties, "required": required});
    Arc::new(schema.as_object().cloned().unwrap_or_default())
}

impl ServerHandler for TestTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = vec![
            Tool::new("echo", "Says the text back.", object_schema(json!({"text": {"type": "string"}}), &["text"])),
            Tool::new("fail", "Always fails.", object_schema(json!({}), &[])),
            Tool::new("slow", "Takes its time.", object_schema(json!({}), &[])),
            Tool::new("huge", "Answers a megabyte.", object_schema(json!({}), &[])),
        ];
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.unwrap_or_default();
        {
            let mut calls = self.0.calls.lock().unwrap_or_else(PoisonError::into_inner);
            if calls.len() < CALLS_RECORDED_MAX {
                calls
                    .push(RecordedCall { tool: request.name.to_string(), arguments: Value::Object(arguments.clone()) });
            }
        }
        let result = match request.name.as_ref() {
            "echo" => CallToolResult::success(vec![ContentBlock::text(
                arguments.get("text").and_then(Value::as_str).unwrap_or_default().to_owned(),
            )]),
            "fail" => CallToolResult::error(vec![ContentBlock::text(FAIL_TOOL_TEXT)]),
            "slow" => {
                tokio::time::sleep(SLOW_TOOL_DELAY).await;
                CallToolResult::success(vec![ContentBlock::text("finally")])
            }
            "huge" => CallToolResult::success(vec![ContentBlock::text("y".repeat(HUGE_OUTPUT_BYTES))]),
            other => return Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        };
        Ok(result.into())
    }
}

/// The running server; it stops with the test's runtime.
#[derive(Debug, Clone)]
pub struct McpTestServer {
    /// The streamable-HTTP endpoint, `http://127.0.0.1:{port}/mcp`.
    pub url: String,
    record: Arc<Record>,
}

impl McpTestServer {
    /// Starts the server on 127.0.0.1:0.
    pub async fn start() -> Self {
        let record = Arc::new(Record::default());
        let handler = TestTools(record.clone());
        let service: StreamableHttpService<TestTools, LocalSessionManager> = StreamableHttpService::new(
            move || {
                handler.0.sessions.fetch_add(1, Ordering::SeqCst);
                Ok(handler.clone())
            },
            Default::default(),
            StreamableHttpServerConfig::default().with_sse_keep_alive(None),
        );
        let router = axum::Router::new().nest_service("/mcp", service);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the MCP server");
        let addr = listener.local_addr().expect("the MCP server's address");
        tokio::spawn(async move { axum::serve(listener, router).await });
        Self { url: format!("http://{addr}/mcp"), record }
    }

    /// MCP sessions opened so far.
    pub fn sessions(&self) -> usize {
        self.record.sessions.load(Ordering::SeqCst)
    }

    /// The calls that reached the server, in order.
    pub fn calls(&self) -> Vec<RecordedCall> {
        self.record.calls.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}
