use std::path::PathBuf;

use mesh_agent_kit::{AgentError, KitError};

/// What running LLM agents fails with.
#[derive(Debug, thiserror::Error)]
pub enum LlmAgentError {
    #[error("{path}: {why}")]
    Definition { path: PathBuf, why: String },
    #[error("prompt template: {0}")]
    Template(String),
    #[error("the LLM agents need the conversation bus: configure the `bus` section (MESH_LLM_AGENT_AGENT__BUS__*)")]
    NoBus,
    #[error("the LLM agents need a registry (registry_url) to call and list agents")]
    NoRegistry,
    #[error("no language model is configured: set llm.base_url and llm.model (MESH_LLM_BASE_URL, MESH_LLM_MODEL)")]
    NoModel,
    #[error("the language model client: {0}")]
    Model(String),
    /// An MCP server an agent's definition names could not be used.
    #[error(transparent)]
    Mcp(#[from] mesh_mcp::McpError),
    #[error(transparent)]
    Bus(#[from] mesh_bus::BusError),
    #[error(transparent)]
    Docmem(#[from] mesh_docmem::DocmemError),
    #[error(transparent)]
    Kit(#[from] KitError),
    #[error(transparent)]
    Client(#[from] mesh_client::ClientError),
    #[error(transparent)]
    Auth(#[from] mesh_auth::AuthError),
    #[error(transparent)]
    Server(#[from] mesh_server::ServerError),
    #[error("{0}")]
    Config(#[from] mesh_config::ConfigError),
}

/// Why a turn had no answer for its A2A caller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TurnError {
    /// The model failed; the conversation holds the error answer.
    #[error("{0}")]
    Model(String),
    /// The model timed out; the conversation holds the error answer.
    #[error("{0}")]
    ModelTimeout(String),
    /// The whole turn outlasted what the caller waits.
    #[error("no answer within {timeout_ms} ms")]
    Timeout { timeout_ms: u64 },
    /// The conversation could not be read or written.
    #[error("{0}")]
    Conversation(String),
}

impl From<TurnError> for AgentError {
    fn from(error: TurnError) -> Self {
        match error {
            TurnError::Model(why) => AgentError::Unavailable(why),
            TurnError::ModelTimeout(why) => AgentError::Timeout(why),
            error @ TurnError::Timeout { .. } => AgentError::Timeout(error.to_string()),
            TurnError::Conversation(why) => AgentError::Unavailable(why),
        }
    }
}
