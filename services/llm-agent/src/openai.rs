//! The model of production: any OpenAI-compatible endpoint through `mesh-llm`.

use std::sync::Arc;

use crate::error::LlmAgentError;
use crate::model::{ChatModel, ModelError, ModelReply, ModelRequest, ToolCall};

/// Any OpenAI-compatible chat-completions endpoint, through `mesh-llm` (timeouts, retries on 429
/// and 5xx, answer size cap, GenAI spans and token metrics are its).
#[derive(Debug)]
pub struct OpenAiModel(pub mesh_llm::LlmClient);

#[async_trait::async_trait]
impl ChatModel for OpenAiModel {
    async fn complete(&self, request: ModelRequest) -> Result<ModelReply, ModelError> {
        use mesh_llm::{ChatMessage as Wire, ChatRequest, LlmError};
        let mut messages = Vec::with_capacity(request.messages.len() + 1);
        messages.push(Wire::system(request.system));
        messages.extend(request.messages.into_iter().map(|message| match message.role {
            mesh_bus::Role::User => Wire::user(message.content),
            mesh_bus::Role::Assistant => Wire::assistant(message.content),
        }));
        let tools = request
            .tools
            .into_iter()
            .map(|tool| mesh_llm::ToolSpec {
                name: tool.name,
                description: tool.description,
                parameters: tool.parameters,
            })
            .collect();
        let answer = self.0.chat(&ChatRequest::new(messages).with_tools(tools)).await.map_err(|error| match error {
            LlmError::Timeout { timeout_ms } => ModelError::Timeout { timeout_ms },
            LlmError::AnswerTooLarge { .. }
            | LlmError::BadResponse(_)
            | LlmError::InvalidJson(_)
            | LlmError::Rejected(_) => ModelError::Invalid(error.to_string()),
            other => ModelError::Unavailable(other.to_string()),
        })?;
        Ok(ModelReply {
            text: answer.content.unwrap_or_default(),
            tool_calls: answer
                .tool_calls
                .into_iter()
                .map(|call| ToolCall { id: call.id, name: call.name, arguments: call.arguments })
                .collect(),
        })
    }
}

/// The OpenAI-compatible client of `llm` for `model`, observed as `agent`'s.
pub fn openai_model(llm: &mesh_llm::LlmConfig, agent: &str, model: &str) -> Result<Arc<dyn ChatModel>, LlmAgentError> {
    let config = mesh_llm::LlmConfig { model: model.to_owned(), ..llm.clone() };
    let client = mesh_llm::LlmClient::new(config, agent).map_err(|e| LlmAgentError::Model(e.to_string()))?;
    Ok(Arc::new(OpenAiModel(client)))
}
