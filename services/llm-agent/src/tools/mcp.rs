//! The tools of the MCP servers an agent's definition names (`[[mcp_servers]]`), offered to the
//! model as `{server}__{tool}`. The server is a third party: its tool names, descriptions and
//! schemas are shown to the model only once made safe (names reduced to what models accept,
//! descriptions cut, schemas that do not compile left out), and every call goes through
//! [`McpClient`] with its timeout, output cap, allow-list and the outbound address policy.

use std::sync::Arc;

use mesh_client::{CallScope, OutboundGuard};
use mesh_mcp::{McpClient, McpError, McpServerConfig, McpTool};
use serde_json::Value;
use tokio::sync::Mutex;

use super::Tool;
use crate::model::ToolSpec;

/// Longest tool name models take (OpenAI's limit, which compatible servers share).
pub const TOOL_NAME_CHARS_MAX: usize = 64;
/// Characters of a server's tool description shown to the model: it costs prompt tokens in
/// every round, and the server writes it.
pub const TOOL_DESCRIPTION_CHARS_MAX: usize = 1024;
/// Between a server's name and its tool's in the name the model sees.
const NAME_SEPARATOR: &str = "__";

/// One MCP server's session, opened again after it was lost.
pub struct McpServer {
    config: McpServerConfig,
    guard: OutboundGuard,
    session: Mutex<Option<Arc<McpClient>>>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer").field("name", &self.config.name).field("url", &self.config.url).finish()
    }
}

impl McpServer {
    /// Connects to the server and lists the tools the agent may use.
    pub async fn connect(config: McpServerConfig, guard: OutboundGuard) -> Result<(Arc<Self>, Vec<McpTool>), McpError> {
        let client = Arc::new(McpClient::connect(config.clone(), &guard).await?);
        let tools = client.list_tools().await?;
        Ok((Arc::new(Self { config, guard, session: Mutex::new(Some(client)) }), tools))
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The session, opened again if the last one was lost.
    async fn client(&self) -> Result<Arc<McpClient>, McpError> {
        let mut session = self.session.lock().await;
        if let Some(client) = session.as_ref() {
            return Ok(client.clone());
        }
        let client = Arc::new(McpClient::connect(self.config.clone(), &self.guard).await?);
        *session = Some(client.clone());
        Ok(client)
    }

    /// Calls `tool`. A lost session is dropped so that the next call opens a new one; the call
    /// itself is not repeated, since a tool may not be safe to run twice.
    async fn call(&self, tool: &str, arguments: serde_json::Map<String, Value>) -> Result<String, String> {
        let client = self.client().await.map_err(|e| e.to_string())?;
        match client.call_tool(tool, arguments).await {
            Ok(output) if output.is_error => Err(output.text),
            Ok(output) if output.truncated => {
                Ok(format!("{}\n[the output was cut at {} bytes]", output.text, self.config.output_bytes_max))
            }
            Ok(output) => Ok(output.text),
            Err(error) => {
                if matches!(error, McpError::Unreachable { .. }) {
                    self.session.lock().await.take();
                }
                Err(error.to_string())
            }
        }
    }
}

/// The name the model sees for `server`'s `tool`: only ASCII letters, digits, '_' and '-', at
/// most [`TOOL_NAME_CHARS_MAX`] characters.
pub fn exposed_name(server: &str, tool: &str) -> String {
    format!("{server}{NAME_SEPARATOR}{tool}")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
        .take(TOOL_NAME_CHARS_MAX)
        .collect()
}

/// One tool of an MCP server.
#[derive(Debug)]
pub struct McpServerTool {
    server: Arc<McpServer>,
    /// The tool's own name, as its server knows it.
    tool: String,
    spec: ToolSpec,
}

impl McpServerTool {
    pub fn new(server: Arc<McpServer>, tool: McpTool) -> Self {
        let description: String = tool.description.chars().take(TOOL_DESCRIPTION_CHARS_MAX).collect();
        let spec = ToolSpec {
            name: exposed_name(server.name(), &tool.name),
            description: format!("(a tool of the MCP server {}) {description}", server.name()),
            parameters: tool.input_schema,
        };
        Self { server, tool: tool.name, spec }
    }
}

#[async_trait::async_trait]
impl Tool for McpServerTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    async fn run(&self, _scope: &CallScope, arguments: Value) -> Result<String, String> {
        let Value::Object(arguments) = arguments else {
            return Err("the arguments must be a JSON object".into());
        };
        self.server.call(&self.tool, arguments).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposed_names_are_what_models_accept() {
        assert_eq!(exposed_name("docs", "search"), "docs__search");
        assert_eq!(exposed_name("docs", "files/read.v2"), "docs__files_read_v2");
        assert_eq!(exposed_name("docs", "ünïcode tool"), "docs___n_code_tool");
        assert_eq!(exposed_name("docs", &"x".repeat(200)).len(), TOOL_NAME_CHARS_MAX);
    }
}
