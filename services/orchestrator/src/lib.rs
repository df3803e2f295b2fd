//! The orchestrator agent: takes a user query, discovers the planning and search agents by
//! capability, runs the planners in parallel, searches with the chosen profiles, and answers
//! with the fused results and what every agent did.

pub mod config;
mod flow;
pub mod followup;

use std::sync::Arc;
use std::time::Duration;

use mesh_agent_kit::agent_message::{WithAgentMessages, send_agent_message_skill};
use mesh_agent_kit::call_agent::{WithCallAgent, call_agent_skill};
use mesh_agent_kit::graph::AgentGraph;
use mesh_agent_kit::{AgentApp, AgentExtras, KitError};
use mesh_client::{CallerSettings, ClientError, Discovery, HttpClient, MeshCaller, RegistryClient};
use mesh_protocol::a2a::v1::AgentCard;

pub use config::OrchestratorConfig;
pub use flow::{
    Answered, CAPABILITY_ENTITY_EXTRACTION, CAPABILITY_PROFILE_SELECTION, CAPABILITY_SEARCH, FlowSettings, Orchestrator,
};

/// The orchestrator's card as shipped in `agent-cards/`.
const CARD_JSON: &str = include_str!("../../../agent-cards/orchestrator.json");

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("the orchestrator needs a registry to discover agents: set --registry-url")]
    NoRegistry,
    #[error("invalid registry URL: {0}")]
    Registry(#[from] ClientError),
    #[error(transparent)]
    Kit(#[from] KitError),
    #[error("the bundled agent card is invalid: {0}")]
    Card(#[from] serde_json::Error),
    #[error("{0}")]
    Auth(#[from] mesh_auth::AuthError),
    #[error("{0}")]
    Server(#[from] mesh_server::ServerError),
}

pub fn card() -> Result<AgentCard, serde_json::Error> {
    serde_json::from_str(CARD_JSON)
}

/// Builds the agent, bound and ready to run.
pub async fn build(config: &OrchestratorConfig, http: HttpClient) -> Result<AgentApp, StartError> {
    let registry_url = config.agent.registry_url.as_deref().ok_or(StartError::NoRegistry)?;
    // Its calls into the mesh carry its own credential.
    let mut card = card()?;
    let name = config.agent.name.clone().unwrap_or_else(|| card.name.clone());
    let http = mesh_server::with_own_credential(&http, &config.agent.auth, &name)?;
    let registry = RegistryClient::new(registry_url, http.clone())?;
    let discovery =
        Discovery::new(registry.clone(), http.clone(), Duration::from_millis(config.discovery_cache_ttl_ms));
    // Its calls are checked against the links and reported, like the calls it admits.
    let graph = AgentGraph::new(&config.agent, http.clone())?.ok_or(StartError::NoRegistry)?;
    let caller = MeshCaller::new(http.clone(), registry, Arc::new(discovery), CallerSettings::default());
    let caller = Arc::new(graph.caller(caller));
    let settings = FlowSettings {
        planning_timeout: Duration::from_millis(config.planning_timeout_ms),
        search_timeout: Duration::from_millis(config.search_timeout_ms),
        top_k_default: config.top_k_default,
        ensemble_below_confidence: config.ensemble_below_confidence,
        ensemble_profiles_max: config.ensemble_profiles_max,
    };
    let orchestrator = Orchestrator::new(caller.clone(), settings);
    // Its caller also serves the kit's `call_agent` and `send_agent_message` skills: the same
    // path the query flow takes.
    card.skills.extend([call_agent_skill(), send_agent_message_skill()]);
    let handler = WithAgentMessages::new(WithCallAgent::new(orchestrator, caller.clone()), caller, graph.clone());
    let extras = AgentExtras { graph: Some(graph), ..AgentExtras::default() };
    Ok(AgentApp::build_with(&config.agent, card, handler, http, extras).await?)
}
