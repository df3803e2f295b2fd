//! What the planning agents (entity extraction, profile selection) share: an agent configuration
//! with an optional LLM backend, and the assembly of the agent from its card and its handler.

use mesh_agent_kit::{AgentApp, AgentConfig, AgentHandler, KitError};
use mesh_client::HttpClient;
use mesh_llm::{LlmClient, LlmConfig, LlmError};
use mesh_protocol::a2a::v1::AgentCard;
use serde::Deserialize;

/// A planner's configuration: the agent keys, and an `[llm]` section (environment
/// `<PREFIX>_LLM__BASE_URL`, `..._LLM__MODEL`, ...) that switches the LLM backend on when both
/// `base_url` and `model` are set.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default)]
pub struct PlannerConfig {
    #[serde(flatten)]
    pub agent: AgentConfig,
    /// The OpenAI-compatible endpoint the planner asks instead of its rules, when both `base_url` and `model`
    /// are set; the rules answer when it fails.
    pub llm: LlmConfig,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Kit(#[from] KitError),
    #[error("the bundled agent card is invalid: {0}")]
    Card(#[from] serde_json::Error),
    #[error("LLM backend: {0}")]
    Llm(#[from] LlmError),
}

/// Builds a planner from its card (JSON) and a handler made from the LLM client, if configured.
pub async fn build<H: AgentHandler>(
    config: &PlannerConfig,
    card_json: &str,
    handler: impl FnOnce(Option<LlmClient>) -> H,
    http: HttpClient,
) -> Result<AgentApp, StartError> {
    let card: AgentCard = serde_json::from_str(card_json)?;
    // The agent's metrics carry its name: the configured one, or the card's.
    let service = config.agent.name.as_deref().unwrap_or(&card.name);
    let llm = if config.llm.is_configured() { Some(LlmClient::new(config.llm.clone(), service)?) } else { None };
    tracing::info!(method = if llm.is_some() { "llm" } else { "rules" }, "planner ready");
    Ok(AgentApp::build(&config.agent, card, handler(llm), http).await?)
}
