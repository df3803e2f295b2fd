//! The tools of Model Context Protocol servers, for LLM agents: [`McpClient`] connects to one
//! server over streamable HTTP with rmcp (the official Rust SDK), lists its tools (name,
//! description, input schema) and calls them with JSON arguments.
//!
//! An MCP server is a third party as far as the mesh is concerned, and what the LLM asks of it is
//! untrusted: every call has a timeout, every answer a size cap (a larger text output is cut and
//! marked as cut; a larger protocol message is refused by the transport), and the server's address
//! goes through the outbound address policy ([`mesh_client::OutboundGuard`]) before anything is
//! sent and on every connection after.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use mesh_client::{OutboundGuard, ReqwestTransport};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ContentBlock, Implementation,
    ResourceContents,
};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde::Deserialize;
use serde_json::{Map, Value};

/// Time allowed to connect (the MCP handshake included), to list tools, or for one tool call.
pub const MCP_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Bytes of a tool's text output handed to the LLM; the rest is cut, and the cut said.
pub const MCP_OUTPUT_BYTES_MAX_DEFAULT: usize = 64 * 1024;
/// Most tools one server may list: a server listing more is broken or hostile, and each tool
/// costs prompt tokens.
pub const MCP_TOOLS_MAX: usize = 128;
/// A protocol message may exceed the text it carries this many times (JSON escaping, structured
/// content beside the text), plus [`MESSAGE_BYTES_BASE`]; larger messages are refused unread.
const MESSAGE_OVERHEAD_FACTOR: usize = 4;
const MESSAGE_BYTES_BASE: usize = 64 * 1024;

/// One MCP server an agent may use.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// The name the agent's definition and logs use for it.
    pub name: String,
    /// The server's streamable-HTTP endpoint, e.g. `https://tools.example.com/mcp`.
    pub url: String,
    /// Name of the environment variable holding a bearer token for the server, if it needs one
    /// (the token itself never sits in config).
    #[serde(default)]
    pub bearer_token_env: Option<String>,
    /// See [`MCP_TIMEOUT_MS_DEFAULT`].
    #[serde(default = "timeout_ms_default")]
    pub timeout_ms: u64,
    /// See [`MCP_OUTPUT_BYTES_MAX_DEFAULT`].
    #[serde(default = "output_bytes_max_default")]
    pub output_bytes_max: usize,
    /// The only tools of the server the agent may see and call, by name; every tool the server
    /// lists when absent. A server's tool list may grow without the operator's say: naming the
    /// tools keeps what an agent can do to what its definition says.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
}

fn timeout_ms_default() -> u64 {
    MCP_TIMEOUT_MS_DEFAULT
}

fn output_bytes_max_default() -> usize {
    MCP_OUTPUT_BYTES_MAX_DEFAULT
}

impl McpServerConfig {
    /// A server at `url` with the default timeout and output cap, and no token.
    pub fn new(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            url: url.into(),
            bearer_token_env: None,
            timeout_ms: MCP_TIMEOUT_MS_DEFAULT,
            output_bytes_max: MCP_OUTPUT_BYTES_MAX_DEFAULT,
            tools: None,
        }
    }

    /// Whether the agent may use the server's tool `name`.
    pub fn allows(&self, name: &str) -> bool {
        self.tools.as_ref().is_none_or(|tools| tools.iter().any(|tool| tool == name))
    }
}

/// Why an MCP server could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum McpError {
    #[error("MCP server {server:?}: invalid configuration: {reason}")]
    InvalidConfig { server: String, reason: String },
    /// The outbound address policy refuses the server's address; nothing was sent.
    #[error("MCP server {server:?} is refused by the outbound address policy: {reason}")]
    Refused { server: String, reason: String },
    #[error("MCP server {server:?} did not answer within {timeout_ms} ms")]
    Timeout { server: String, timeout_ms: u64 },
    /// The connection or the MCP handshake failed, or the session ended.
    #[error("cannot reach MCP server {server:?}: {reason}")]
    Unreachable { server: String, reason: String },
    /// The server answered with a protocol error (an unknown tool, invalid arguments) or an
    /// answer this client cannot use.
    #[error("MCP server {server:?} answered with an error: {reason}")]
    Protocol { server: String, reason: String },
}

/// A tool an MCP server offers. Its description and schema come from the server: shown to the
/// LLM as they are, but never trusted to mean what they say.
#[derive(Debug, Clone, PartialEq)]
pub struct McpTool {
    pub name: String,
    pub description: String,
    /// The JSON schema of the arguments (an object schema).
    pub input_schema: Value,
}

/// What a tool call gave back, ready to hand to the LLM.
#[derive(Debug, Clone, PartialEq)]
pub struct McpToolOutput {
    /// The text of the result's content (non-text content is named, not included), or its
    /// structured content as JSON when it has no text; cut at `output_bytes_max`.
    pub text: String,
    /// The tool reported a failure (its text says what): the LLM should see it as such.
    pub is_error: bool,
    /// The text was longer than `output_bytes_max` and was cut.
    pub truncated: bool,
}

/// A session with one MCP server.
pub struct McpClient {
    config: McpServerConfig,
    session: RunningService<RoleClient, ClientConfig>,
}

impl fmt::Debug for McpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpClient").field("config", &self.config).finish_non_exhaustive()
    }
}

impl McpClient {
    /// Connects to the server and completes the MCP handshake, once `guard` allows its address.
    /// The bearer token, if the config names one, is read from the environment now.
    pub async fn connect(config: McpServerConfig, guard: &OutboundGuard) -> Result<Self, McpError> {
        let token = match &config.bearer_token_env {
            Some(var) => Some(std::env::var(var).map_err(|_| McpError::InvalidConfig {
                server: config.name.clone(),
                reason: format!("the bearer token variable {var} is unset"),
            })?),
            None => None,
        };
        Self::connect_with_token(config, guard, token).await
    }

    /// [`Self::connect`] with the bearer token given rather than read from the environment.
    pub async fn connect_with_token(
        config: McpServerConfig,
        guard: &OutboundGuard,
        token: Option<String>,
    ) -> Result<Self, McpError> {
        let invalid = |reason: String| McpError::InvalidConfig { server: config.name.clone(), reason };
        if config.timeout_ms == 0 {
            return Err(invalid("`timeout_ms` is 0, so every call would time out".into()));
        }
        if config.output_bytes_max == 0 {
            return Err(invalid("`output_bytes_max` is 0, so no output would reach the LLM".into()));
        }
        // Literal IPs never reach the policy's resolver, and a refused name is better refused now
        // than at the first call: both are checked before anything is sent.
        guard.vet(&config.url).await.map_err(|refusal| match refusal {
            mesh_client::AddressRefused::Unresolved { .. } => {
                McpError::Unreachable { server: config.name.clone(), reason: refusal.to_string() }
            }
            refused => McpError::Refused { server: config.name.clone(), reason: refused.to_string() },
        })?;
        let http = ReqwestTransport::guarded_builder(guard)
            .build()
            .map_err(|e| invalid(format!("cannot build the HTTP client: {e}")))?;
        let message_bytes_max =
            config.output_bytes_max.saturating_mul(MESSAGE_OVERHEAD_FACTOR).saturating_add(MESSAGE_BYTES_BASE);
        let mut transport_config = StreamableHttpClientTransportConfig::with_uri(config.url.as_str())
            .max_json_response_size(message_bytes_max)
            .max_sse_event_size(message_bytes_max);
        if let Some(token) = token {
            transport_config = transport_config.auth_header(token);
        }
        let transport = StreamableHttpClientTransport::with_client(http, transport_config);
        let identity = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("a2a-mesh", env!("CARGO_PKG_VERSION")),
        );
        let timeout = Duration::from_millis(config.timeout_ms);
        let session = match tokio::time::timeout(timeout, identity.serve(transport)).await {
            Err(_) => return Err(McpError::Timeout { server: config.name.clone(), timeout_ms: config.timeout_ms }),
            Ok(Err(error)) => {
                return Err(McpError::Unreachable { server: config.name.clone(), reason: error.to_string() });
            }
            Ok(Ok(session)) => session,
        };
        tracing::info!(server = %config.name, url = %config.url, "MCP server connected");
        Ok(Self { config, session })
    }

    pub fn config(&self) -> &McpServerConfig {
        &self.config
    }

    /// The server's tools, every page of them, up to [`MCP_TOOLS_MAX`].
    pub async fn list_tools(&self) -> Result<Vec<McpTool>, McpError> {
        let tools = self.within_timeout(self.session.list_all_tools()).await?;
        if tools.len() > MCP_TOOLS_MAX {
            return Err(self.protocol(format!("it lists {} tools, more than {MCP_TOOLS_MAX}", tools.len())));
        }
        Ok(tools
            .into_iter()
            .filter(|tool| self.config.allows(&tool.name))
            .map(|tool| McpTool {
                name: tool.name.into_owned(),
                description: tool.description.map(Cow::into_owned).unwrap_or_default(),
                input_schema: Value::Object((*tool.input_schema).clone()),
            })
            .collect())
    }

    /// Calls tool `name` with `arguments`. A tool that reports a failure is an output with
    /// `is_error`, not an error: the LLM reads what went wrong.
    pub async fn call_tool(&self, name: &str, arguments: Map<String, Value>) -> Result<McpToolOutput, McpError> {
        if !self.config.allows(name) {
            return Err(self.protocol(format!("the tool {name:?} is not among the tools this agent may use")));
        }
        let params = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments);
        let result = self.within_timeout(self.session.call_tool(params)).await?;
        Ok(tool_output(result, self.config.output_bytes_max))
    }

    /// Ends the session (the server may then free it).
    pub async fn close(self) {
        let name = self.config.name;
        if let Err(error) = self.session.cancel().await {
            tracing::debug!(server = %name, %error, "closing the MCP session failed");
        }
    }

    async fn within_timeout<T>(
        &self,
        work: impl Future<Output = Result<T, rmcp::ServiceError>>,
    ) -> Result<T, McpError> {
        let server = self.config.name.clone();
        match tokio::time::timeout(Duration::from_millis(self.config.timeout_ms), work).await {
            Err(_) => Err(McpError::Timeout { server, timeout_ms: self.config.timeout_ms }),
            Ok(Ok(done)) => Ok(done),
            Ok(Err(rmcp::ServiceError::McpError(error))) => {
                Err(McpError::Protocol { server, reason: error.message.into_owned() })
            }
            Ok(Err(error @ (rmcp::ServiceError::TransportSend(_) | rmcp::ServiceError::TransportClosed))) => {
                Err(McpError::Unreachable { server, reason: error.to_string() })
            }
            Ok(Err(error)) => Err(McpError::Protocol { server, reason: error.to_string() }),
        }
    }

    fn protocol(&self, reason: String) -> McpError {
        McpError::Protocol { server: self.config.name.clone(), reason }
    }
}

/// The result as text for the LLM, cut at `bytes_max`.
fn tool_output(result: CallToolResult, bytes_max: usize) -> McpToolOutput {
    let parts: Vec<String> = result.content.iter().map(content_text).collect();
    let mut text = parts.join("\n");
    if text.trim().is_empty()
        && let Some(structured) = &result.structured_content
    {
        text = structured.to_string();
    }
    let truncated = text.len() > bytes_max;
    if truncated {
        let mut cut = bytes_max;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    McpToolOutput { text, is_error: result.is_error == Some(true), truncated }
}

/// A content block's text; other kinds are named, since the LLM reads text only.
fn content_text(block: &ContentBlock) -> String {
    match block {
        ContentBlock::Text(text) => text.text.clone(),
        ContentBlock::Resource(embedded) => match &embedded.resource {
            ResourceContents::TextResourceContents { text, .. } => text.clone(),
            ResourceContents::BlobResourceContents { uri, .. } => format!("[binary resource {uri} omitted]"),
            _ => "[resource of an unknown kind omitted]".to_owned(),
        },
        ContentBlock::Image(image) => format!("[image {} omitted]", image.mime_type),
        ContentBlock::Audio(audio) => format!("[audio {} omitted]", audio.mime_type),
        ContentBlock::ResourceLink(link) => format!("[resource {}]", link.uri),
        // Kinds of content newer than this client.
        _ => "[content of an unknown kind omitted]".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn output_is_the_text_cut_at_a_character_boundary() {
        let result = CallToolResult::success(vec![ContentBlock::text("héllo"), ContentBlock::text("wörld")]);
        assert_eq!(
            tool_output(result.clone(), 100),
            McpToolOutput { text: "héllo\nwörld".into(), is_error: false, truncated: false }
        );
        // "hé" is 3 bytes: a cut at 2 would split the é.
        assert_eq!(tool_output(result, 2), McpToolOutput { text: "h".into(), is_error: false, truncated: true });
        let failed = CallToolResult::error(vec![ContentBlock::text("no such city")]);
        assert!(tool_output(failed, 100).is_error);
    }

    #[test]
    fn structured_content_stands_in_for_missing_text() {
        let mut result = CallToolResult::structured(json!({"temperature": 21}));
        result.content.clear();
        let output = tool_output(result, 100);
        assert!(output.text.contains("\"temperature\":21"), "{output:?}");
    }

    #[test]
    fn configs_take_defaults_and_refuse_unknown_keys() {
        let config: McpServerConfig =
            serde_json::from_value(json!({"name": "weather", "url": "https://tools.example/mcp"})).unwrap();
        assert_eq!(config, McpServerConfig::new("weather", "https://tools.example/mcp"));
        let typo = json!({"name": "w", "url": "https://tools.example/mcp", "timeout": 5});
        assert!(serde_json::from_value::<McpServerConfig>(typo).is_err());
    }
}
