//! What the loop needs from a language model: one chat completion over a system prompt, the
//! role-relative message list and the tools offered, answered with text or tool calls. The
//! OpenAI-compatible client of `mesh-llm` is one ([`crate::OpenAiModel`]); the tests use
//! the scripted server of `mesh-test-support` through that same client.

use mesh_bus::ChatMessage;
use serde::Serialize;
use serde_json::Value;

/// A tool as the model is offered it: its name, what it does, and its arguments' JSON schema.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// One chat completion to make.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    pub system: String,
    /// Role-relative (seed 001): the agent's own messages `assistant`, everyone else's `user`.
    pub messages: Vec<ChatMessage>,
    /// Empty when no tool may be called (the last round of a turn).
    pub tools: Vec<ToolSpec>,
}

/// A tool call as the model wrote it: untrusted until its arguments pass the tool's schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments' JSON text, as the model wrote it (it may not even be JSON).
    pub arguments: String,
}

/// What the model answered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ModelReply {
    /// The answer's text (may be empty beside tool calls).
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
}

/// Why a completion failed; each becomes a clear error answer in the conversation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    #[error("the language model did not answer within {timeout_ms} ms")]
    Timeout { timeout_ms: u64 },
    #[error("the language model is unavailable: {0}")]
    Unavailable(String),
    #[error("the language model answered with something unusable: {0}")]
    Invalid(String),
}

/// A chat-completions endpoint.
#[async_trait::async_trait]
pub trait ChatModel: Send + Sync + std::fmt::Debug + 'static {
    async fn complete(&self, request: ModelRequest) -> Result<ModelReply, ModelError>;
}
