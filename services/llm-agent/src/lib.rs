//! LLM agents that live on the mesh (issue #35): a service that runs the agents of a folder of
//! definitions ([`definition`]: `agent.toml` and `ROLE.md`), each a full kit agent (its own card,
//! endpoints, registration, health, auth, metrics and traces) whose turns run the seed 001 loop
//! on its own bus topic ([`runtime`]) with the mesh's tools ([`tools`]) and a system prompt from
//! seed 004's fragments ([`prompt`]).

pub mod confidence;
pub mod definition;
mod error;
pub mod history;
pub mod model;
mod openai;
pub mod prompt;
pub mod runtime;
pub mod tools;
mod waiters;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use mesh_agent_kit::graph::AgentGraph;
use mesh_agent_kit::{AgentApp, AgentConfig, AgentError, AgentExtras, AgentHandler, AgentReply, TaskInput};
use mesh_client::{CallerSettings, CircuitReport, Discovery, HttpClient, MeshCaller, RegistryClient};
use mesh_protocol::a2a::v1::AgentCard;
use mesh_protocol::seed::Part;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::watch;

pub use definition::{AgentDefinition, ToolName};
pub use error::{LlmAgentError, TurnError};
pub use model::{ChatModel, ModelError, ModelReply, ModelRequest, ToolCall, ToolSpec};
pub use openai::{OpenAiModel, openai_model};
pub use runtime::{AgentRuntime, AgentSetup};
pub use waiters::Answer;

/// Prefix of the environment variables the service reads (`MESH_LLM_AGENT_DEFINITIONS_DIR`...).
pub const ENV_PREFIX: &str = "MESH_LLM_AGENT";
/// Port of the first agent when the configuration sets one; the others follow it.
pub const LLM_AGENT_PORT_DEFAULT: u16 = 8040;
/// The folder of definitions when none is configured.
pub const DEFINITIONS_DIR_DEFAULT: &str = "deploy/llm-agents";
/// How long discovered agents and fetched cards are reused.
pub const DISCOVERY_CACHE_TTL_MS_DEFAULT: u64 = 5_000;

/// The service's configuration: the kit's keys (shared by every agent it runs; each agent takes
/// its own name and port), where the definitions are, and the default model.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct LlmAgentsConfig {
    #[serde(flatten)]
    pub agent: AgentConfig,
    /// The folder of agent definitions: one folder per agent, holding `agent.toml` and `ROLE.md`.
    pub definitions_dir: PathBuf,
    /// Templates replacing the shipped ones; `<definitions_dir>/templates` when absent.
    pub templates_dir: Option<PathBuf>,
    /// The OpenAI-compatible endpoint; its `model` serves the agents whose definition names none.
    pub llm: mesh_llm::LlmConfig,
    /// Milliseconds discovered agents are reused before asking the registry again.
    pub discovery_cache_ttl_ms: u64,
    /// Private networks (CIDR) the agents' MCP servers may be on; public addresses always may.
    /// Empty: only public ones, so a definition cannot point a tool at the cloud's metadata
    /// service or an internal admin port unless the operator says so.
    pub mcp_allowed_networks: Vec<String>,
}

impl Default for LlmAgentsConfig {
    fn default() -> Self {
        Self {
            agent: AgentConfig { port: LLM_AGENT_PORT_DEFAULT, ..AgentConfig::default() },
            definitions_dir: PathBuf::from(DEFINITIONS_DIR_DEFAULT),
            templates_dir: None,
            llm: mesh_llm::LlmConfig::default(),
            discovery_cache_ttl_ms: DISCOVERY_CACHE_TTL_MS_DEFAULT,
            mcp_allowed_networks: Vec::new(),
        }
    }
}

/// Gives an agent (by its name) its model (by the model's name).
pub type ModelFactory<'a> = dyn Fn(&str, &str) -> Result<Arc<dyn ChatModel>, LlmAgentError> + 'a;

/// Answers an agent's A2A and seed tasks through its loop.
#[derive(Debug)]
pub struct LlmAgentHandler {
    runtime: Arc<AgentRuntime>,
    caller: Arc<MeshCaller>,
}

impl AgentHandler for LlmAgentHandler {
    async fn handle(&self, task: TaskInput) -> Result<AgentReply, AgentError> {
        let answer = self.runtime.submit(&task).await?;
        Ok(AgentReply {
            parts: vec![Part::Text { text: answer.text }],
            warnings: answer.warnings,
            confidence: Some(answer.confidence),
        })
    }

    fn circuits(&self) -> Vec<CircuitReport> {
        self.caller.circuits()
    }
}

/// One agent, bound and ready to run.
#[derive(Debug)]
pub struct LlmAgent {
    pub app: AgentApp,
    pub runtime: Arc<AgentRuntime>,
}

/// Every agent of the folder.
#[derive(Debug)]
pub struct LlmAgents {
    pub agents: Vec<LlmAgent>,
}

/// The card of an agent defined by `definition`.
pub fn card(definition: &AgentDefinition) -> Result<AgentCard, serde_json::Error> {
    let file = &definition.file;
    let skills: Vec<_> = file
        .skills
        .iter()
        .map(|s| json!({"id": s.id, "name": s.name, "description": s.description, "tags": s.tags, "examples": s.examples}))
        .collect();
    serde_json::from_value(json!({
        "name": file.name,
        "description": file.description,
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [],
        "capabilities": {"streaming": true, "pushNotifications": false},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": skills,
    }))
}

impl LlmAgents {
    /// Reads the definitions and builds every agent, each bound (port 0 works), on the model
    /// `models` gives for its name and model name.
    pub async fn build(
        config: &LlmAgentsConfig,
        http: HttpClient,
        models: &ModelFactory<'_>,
    ) -> Result<Self, LlmAgentError> {
        let definitions = AgentDefinition::read_all(&config.definitions_dir)?;
        let templates =
            config.templates_dir.clone().unwrap_or_else(|| config.definitions_dir.join(definition::TEMPLATES_FOLDER));
        let prompts = Arc::new(prompt::Prompts::load(Some(&templates))?);
        let bus_config = config.agent.bus.clone().ok_or(LlmAgentError::NoBus)?;
        let (bus, docmem) = mesh_bus::open_bus(&bus_config).await?;
        let mut agents = Vec::with_capacity(definitions.len());
        for (index, definition) in definitions.into_iter().enumerate() {
            let mut agent = config.agent.clone();
            agent.name = Some(definition.file.name.clone());
            agent.port = match (definition.file.port, config.agent.port) {
                (Some(port), _) => port,
                (None, 0) => 0,
                (None, first) => first.saturating_add(u16::try_from(index).unwrap_or(u16::MAX)),
            };
            // The loop consumes the agent's topic; the kit must not answer it a second time.
            agent.bus = None;
            let model_name = definition.file.model.clone().unwrap_or_else(|| config.llm.model.clone());
            if model_name.trim().is_empty() {
                return Err(LlmAgentError::NoModel);
            }
            let model = models(&definition.file.name, &model_name)?;
            let setup = |toolbox, links| AgentSetup {
                name: definition.file.name.clone(),
                bus_id: mesh_bus::agent_id(&definition.file.name, &bus_config.instance_id),
                role: definition.role.clone(),
                model_name: model_name.clone(),
                limits: definition.file.limits.clone(),
                bus: bus.clone(),
                docmem: docmem.clone(),
                model: model.clone(),
                prompts: prompts.clone(),
                toolbox,
                links,
                conversations_max: bus_config.cache_conversations_max,
            };
            agents.push(build_agent(&agent, config, &definition, http.clone(), setup).await?);
        }
        Ok(Self { agents })
    }

    /// Serves every agent and runs its loop until `shutdown`; the loops stop after the agents
    /// have drained their callers.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), LlmAgentError> {
        let (stop_serving, serving) = watch::channel(false);
        let (stop_loops, loops) = watch::channel(false);
        let runs: Vec<_> =
            self.agents.iter().map(|agent| tokio::spawn(agent.runtime.clone().run_until(loops.clone()))).collect();
        let served: Vec<_> = self
            .agents
            .into_iter()
            .map(|agent| {
                let mut serving = serving.clone();
                tokio::spawn(agent.app.run_until_stopped(async move {
                    let _ = serving.wait_for(|stopped| *stopped).await;
                }))
            })
            .collect();
        shutdown.await;
        let _ = stop_serving.send(true);
        let mut outcome = Ok(());
        for served in served {
            match served.await {
                Ok(Err(error)) if outcome.is_ok() => outcome = Err(error.into()),
                Err(error) if outcome.is_ok() => outcome = Err(LlmAgentError::Model(format!("an agent task: {error}"))),
                _ => {}
            }
        }
        let _ = stop_loops.send(true);
        for run in runs {
            let _ = run.await;
        }
        outcome
    }
}

/// One agent: its caller (checked against the links, reported), its tools, its loop, its app.
async fn build_agent(
    agent: &AgentConfig,
    config: &LlmAgentsConfig,
    definition: &AgentDefinition,
    http: HttpClient,
    setup: impl FnOnce(tools::Toolbox, Option<Arc<mesh_graph::LinkCache>>) -> AgentSetup,
) -> Result<LlmAgent, LlmAgentError> {
    let name = definition.file.name.as_str();
    let registry_url = agent.registry_url.as_deref().ok_or(LlmAgentError::NoRegistry)?;
    // Its calls into the mesh carry its own credential.
    let http = mesh_server::with_own_credential(&http, &agent.auth, name)?;
    let registry = RegistryClient::new(registry_url, http.clone())?;
    let discovery =
        Discovery::new(registry.clone(), http.clone(), Duration::from_millis(config.discovery_cache_ttl_ms));
    let graph = AgentGraph::new(agent, http.clone())?.ok_or(LlmAgentError::NoRegistry)?;
    let caller =
        Arc::new(graph.caller(MeshCaller::new(http.clone(), registry, Arc::new(discovery), CallerSettings::default())));
    let shared = tools::MeshTools { caller: caller.clone(), graph: graph.clone() };
    let mut toolbox = tools::Toolbox::default();
    for tool in &definition.file.tools {
        let tool: Arc<dyn tools::Tool> = match tool {
            ToolName::CallAgent => Arc::new(tools::CallAgentTool(shared.clone())),
            ToolName::ListAgents => Arc::new(tools::ListAgentsTool(shared.clone())),
            ToolName::SendAgentMessage => Arc::new(tools::SendAgentMessageTool(shared.clone())),
        };
        toolbox =
            toolbox.with(tool).map_err(|why| LlmAgentError::Definition { path: definition.folder.clone(), why })?;
    }
    toolbox = with_mcp_tools(toolbox, config, definition).await?;
    let runtime = Arc::new(AgentRuntime::new(setup(toolbox, Some(graph.links().clone()))));
    // Turns may arrive before the loop first runs: the topic they go on must be there.
    runtime.ensure_topic().await?;
    let handler = LlmAgentHandler { runtime: runtime.clone(), caller };
    let extras = AgentExtras { graph: Some(graph), ..AgentExtras::default() };
    let card = card(definition)
        .map_err(|e| LlmAgentError::Definition { path: definition.folder.clone(), why: e.to_string() })?;
    let app = AgentApp::build_with(agent, card, handler, http, extras).await?;
    Ok(LlmAgent { app, runtime })
}

/// `toolbox` with the tools of the agent's MCP servers. A server that cannot be reached stops the
/// agent from starting, naming it: an agent without the tools its definition gives would answer
/// less well with no one told. A tool whose name clashes or whose schema does not compile is
/// left out with a warning: the server chose it, not the operator.
async fn with_mcp_tools(
    mut toolbox: tools::Toolbox,
    config: &LlmAgentsConfig,
    definition: &AgentDefinition,
) -> Result<tools::Toolbox, LlmAgentError> {
    if definition.file.mcp_servers.is_empty() {
        return Ok(toolbox);
    }
    let policy = mesh_client::AddressPolicy::public_only(&config.mcp_allowed_networks)
        .map_err(|e| LlmAgentError::Definition { path: "mcp_allowed_networks".into(), why: e.to_string() })?;
    let guard = mesh_client::OutboundGuard::new(policy, Arc::new(mesh_client::SystemLookup));
    for server in &definition.file.mcp_servers {
        let (server, listed) = tools::McpServer::connect(server.clone(), guard.clone()).await?;
        for tool in listed {
            if let Err(why) = toolbox.add(Arc::new(tools::McpServerTool::new(server.clone(), tool))) {
                tracing::warn!(agent = %definition.file.name, server = %server.name(), %why, "an MCP tool is left out");
            }
        }
    }
    Ok(toolbox)
}
