//! The whole mesh in one process: the registry, the four agents and the A2A gateway in front of
//! every registered agent, each on its own port, wired
//! to the registry, which holds the suite's links (`deploy/links.toml`) so the suite also runs
//! with the graph enforced, and the UI agent with every agent on the conversation bus (its
//! sockets may name the agents registered with the suite's registry).
//! `a2a-mesh up` runs it; the end-to-end tests start it on port 0.

pub mod catalog;
pub mod chat;

use std::future::Future;
use std::path::Path;

use entity_extraction::EntityExtractionConfig;
use gateway::{Gateway, GatewayConfig};
use llm_agent::{LlmAgents, LlmAgentsConfig};
use mesh_agent_kit::{AgentArgs, AgentConfig};
use mesh_auth::AuthConfig;
use mesh_bus::BusConfig;
use mesh_client::HttpClient;
use mesh_protocol::graph::GraphMode;
use orchestrator::OrchestratorConfig;
use profile_selection::ProfileSelectionConfig;
use registry::{Application, LinkDef, RegistryConfig};
use search::SearchConfig;
use serde::Deserialize;
use tokio::sync::watch;
use tokio::task::JoinSet;
use ui_agent::{UiAgent, UiAgentConfig};

/// Prefix of the suite-wide conversation bus variables, e.g. `MESH_BUS_KAFKA_BROKERS`.
pub const BUS_ENV_PREFIX: &str = "MESH_BUS";

/// The configuration of every service of the suite.
#[derive(Debug, Clone, PartialEq)]
pub struct SuiteConfig {
    pub registry: RegistryConfig,
    pub orchestrator: OrchestratorConfig,
    pub search: SearchConfig,
    pub entity_extraction: EntityExtractionConfig,
    pub profile_selection: ProfileSelectionConfig,
    pub ui_agent: UiAgentConfig,
    /// The A2A gateway in front of the registry's agents.
    pub gateway: GatewayConfig,
    /// The example organisation of LLM agents (`deploy/llm-agents/`): run only when a model is
    /// configured ([`LLM_BASE_URL_ENV`] and [`LLM_MODEL_ENV`]).
    pub llm_agents: Option<LlmAgentsConfig>,
}

/// The OpenAI-compatible endpoint `up` gives its LLM agents, e.g. `https://openrouter.ai/api/v1`
/// or `http://127.0.0.1:11434/v1` (Ollama).
pub const LLM_BASE_URL_ENV: &str = "MESH_LLM_BASE_URL";
/// The model they ask.
pub const LLM_MODEL_ENV: &str = "MESH_LLM_MODEL";
/// The API key, when the endpoint needs one; sent to that endpoint only.
pub const LLM_API_KEY_ENV: &str = "MESH_LLM_API_KEY";
/// What `up` prints when no model is configured.
pub const LLM_AGENTS_OFF_HINT: &str = "LLM agents (concierge, analyst) are off: set MESH_LLM_BASE_URL and MESH_LLM_MODEL \
     (MESH_LLM_API_KEY if the endpoint needs one) to run them";

impl SuiteConfig {
    /// Every service on a free port (port 0), the registry's SQLite file, the agents' task store
    /// (one file: its table holds every agent's tasks) and the search index in `data_dir`,
    /// nothing read from the environment: for tests and benchmarks.
    pub fn ephemeral(data_dir: &Path) -> Self {
        let tasks = format!("sqlite://{}", data_dir.join("tasks.db").display());
        let bus = BusConfig {
            database_url: format!("sqlite://{}", data_dir.join("bus.db").display()),
            ..BusConfig::default()
        };
        let agent =
            AgentConfig { port: 0, task_store_url: Some(tasks), bus: Some(bus.clone()), ..AgentConfig::default() };
        Self {
            registry: RegistryConfig {
                port: 0,
                database_url: format!("sqlite://{}", data_dir.join("registry.db").display()),
                graph_mode: SUITE_GRAPH_MODE,
                ..RegistryConfig::default()
            },
            orchestrator: OrchestratorConfig { agent: agent.clone(), ..OrchestratorConfig::default() },
            search: SearchConfig {
                agent: agent.clone(),
                data_dir: Some(data_dir.join("search")),
                ..SearchConfig::default()
            },
            entity_extraction: EntityExtractionConfig { agent: agent.clone(), ..EntityExtractionConfig::default() },
            profile_selection: ProfileSelectionConfig { agent, ..ProfileSelectionConfig::default() },
            ui_agent: UiAgentConfig { port: 0, bus, ..UiAgentConfig::default() },
            gateway: GatewayConfig { port: 0, ..GatewayConfig::default() },
            llm_agents: None,
        }
    }

    /// Each service's defaults (its own port), overridden by its `MESH_<SERVICE>_*` variables;
    /// every agent on the conversation bus of `MESH_BUS_*` (the embedded log by default, Kafka
    /// with `MESH_BUS_KAFKA_BROKERS`) unless its own `MESH_<SERVICE>_BUS__*` says otherwise.
    /// Authentication as `MESH_AUTH_*` says, with `local_keys` too when given (`up --auth`).
    pub fn from_env(local_keys: Option<&mesh_auth::LocalKeys>) -> anyhow::Result<Self> {
        let agent = AgentArgs::default();
        let bus: BusConfig = mesh_config::ConfigLoader::new(BUS_ENV_PREFIX, None).load()?;
        let mut registry: RegistryConfig = mesh_config::ConfigLoader::new(registry::config::ENV_PREFIX, None).load()?;
        if std::env::var_os(format!("{}_GRAPH_MODE", registry::config::ENV_PREFIX)).is_none() {
            registry.graph_mode = SUITE_GRAPH_MODE;
        }
        let search: SearchConfig = agent.load(search::config::ENV_PREFIX, search::config::SEARCH_PORT_DEFAULT)?;
        // The registry ranks agents by meaning with the search agent's model, unless told otherwise.
        if std::env::var_os(format!("{}_DENSE__ENABLED", registry::config::ENV_PREFIX)).is_none() {
            registry.dense = search.dense.clone();
        }
        let mut suite = Self {
            registry,
            orchestrator: agent
                .load(orchestrator::config::ENV_PREFIX, orchestrator::config::ORCHESTRATOR_PORT_DEFAULT)?,
            search,
            entity_extraction: agent
                .load(entity_extraction::ENV_PREFIX, entity_extraction::ENTITY_EXTRACTION_PORT_DEFAULT)?,
            profile_selection: agent
                .load(profile_selection::ENV_PREFIX, profile_selection::PROFILE_SELECTION_PORT_DEFAULT)?,
            ui_agent: mesh_config::ConfigLoader::new(ui_agent::ENV_PREFIX, None).load()?,
            gateway: mesh_config::ConfigLoader::new(gateway::ENV_PREFIX, None).load()?,
            llm_agents: llm_agents_from_env(&agent)?,
        };
        for agent in suite.agents_mut() {
            agent.bus.get_or_insert_with(|| bus.clone());
        }
        suite.ui_agent.bus = bus;
        let auth: AuthConfig = mesh_config::ConfigLoader::new(AUTH_ENV_PREFIX, None).load()?;
        match local_keys {
            Some(keys) => suite.use_local_keys(keys, &auth)?,
            None => suite.share_auth(&auth)?,
        }
        Ok(suite)
    }

    /// Every service verifies callers as `auth` says (`MESH_AUTH_*`), unless its own `auth`
    /// section configures a way already. With an HS256 secret, each agent that presents no
    /// credential of its own mints its own token, naming it with the `agent` role, valid for
    /// [`SUITE_AGENT_TOKEN_TTL_S`] and renewed halfway: the suite's services then call each
    /// other as themselves. An agent that verifies callers its own way must then name its own
    /// credential.
    pub fn share_auth(&mut self, auth: &AuthConfig) -> Result<(), mesh_auth::AuthError> {
        if !auth.verifies_callers() {
            return Ok(());
        }
        if !self.registry.auth.verifies_callers() {
            self.registry.auth = AuthConfig { insecure: self.registry.auth.insecure, ..auth.clone() };
        }
        if !self.ui_agent.auth.verifies_callers() {
            self.ui_agent.auth = AuthConfig { insecure: self.ui_agent.auth.insecure, ..auth.clone() };
        }
        let mints = auth.hs256_secret()?.is_some();
        // The gateway reports other agents' calls to the registry: the token it mints for itself
        // is an admin's (see gateway::GatewayConfig::auth).
        let gateway = &mut self.gateway.auth;
        if !gateway.verifies_callers() {
            *gateway = AuthConfig { insecure: gateway.insecure, ..auth.clone() };
        }
        if gateway.credential.is_none() && gateway.credential_file.is_none() && mints {
            gateway.credential_self_issued_ttl_s = Some(SUITE_AGENT_TOKEN_TTL_S);
        }
        // The UI agent asks the registry which agents its sockets may name, as itself.
        let ui = &mut self.ui_agent.auth;
        if ui.credential.is_none() && ui.credential_file.is_none() && mints {
            ui.credential_self_issued_ttl_s = Some(SUITE_AGENT_TOKEN_TTL_S);
        }
        let mut agents = vec![
            ("orchestrator", &mut self.orchestrator.agent),
            ("search", &mut self.search.agent),
            ("entity_extraction", &mut self.entity_extraction.agent),
            ("profile_selection", &mut self.profile_selection.agent),
        ];
        agents.extend(self.llm_agents.as_mut().map(|llm| ("llm_agents", &mut llm.agent)));
        for (name, agent) in agents {
            let has_credential = agent.auth.credential.is_some() || agent.auth.credential_file.is_some();
            if !agent.auth.verifies_callers() {
                agent.auth = AuthConfig {
                    insecure: agent.auth.insecure,
                    credential: agent.auth.credential.take(),
                    credential_file: agent.auth.credential_file.take(),
                    ..auth.clone()
                };
            } else if !has_credential && mints {
                return Err(mesh_auth::AuthError::Config(format!(
                    "agent {name} verifies callers with its own auth settings: give it its own credential \
                     (credential or credential_file) to call the other agents with"
                )));
            }
            if !has_credential && mints {
                agent.auth.credential_self_issued_ttl_s = Some(SUITE_AGENT_TOKEN_TTL_S);
            }
        }
        Ok(())
    }

    /// `up --auth`: authentication on with the keys `up` generates on this machine (see
    /// [`mesh_auth::LocalKeys`]), besides what `configured` says. Every service verifies tokens
    /// signed with the local secret, unless `configured` or its own section names a secret
    /// already (the configured one wins); every agent signs its card with the local key, and the registry requires cards
    /// signed by it (or by a key it was configured to trust).
    pub fn use_local_keys(&mut self, keys: &mesh_auth::LocalKeys, configured: &AuthConfig) -> anyhow::Result<()> {
        let mut auth = configured.clone();
        if auth.jwt_hs256_secret.is_none() && auth.jwt_hs256_secret_file.is_none() {
            auth.jwt_hs256_secret_file = keys.auth_config().jwt_hs256_secret_file;
        }
        self.share_auth(&auth)?;
        self.registry.trusted_card_keys.push(keys.card_public_key());
        self.registry.require_signed_cards = true;
        for agent in self.agents_mut() {
            agent.auth.card_signing_key.get_or_insert_with(|| keys.card_signing_key());
        }
        Ok(())
    }

    fn agents_mut(&mut self) -> Vec<&mut AgentConfig> {
        let mut agents = vec![
            &mut self.orchestrator.agent,
            &mut self.search.agent,
            &mut self.entity_extraction.agent,
            &mut self.profile_selection.agent,
        ];
        agents.extend(self.llm_agents.as_mut().map(|llm| &mut llm.agent));
        agents
    }
}

/// The LLM agents' configuration when [`LLM_BASE_URL_ENV`] and [`LLM_MODEL_ENV`] are set (their
/// own `MESH_LLM_AGENT_*` variables apply too); `None` otherwise.
fn llm_agents_from_env(agent: &AgentArgs) -> anyhow::Result<Option<LlmAgentsConfig>> {
    let set = |name: &str| std::env::var(name).ok().filter(|value| !value.trim().is_empty());
    let (Some(base_url), Some(model)) = (set(LLM_BASE_URL_ENV), set(LLM_MODEL_ENV)) else { return Ok(None) };
    let mut config: LlmAgentsConfig = agent.load(llm_agent::ENV_PREFIX, llm_agent::LLM_AGENT_PORT_DEFAULT)?;
    config.llm = mesh_llm::LlmConfig {
        base_url,
        model,
        api_key_env: LLM_API_KEY_ENV.into(),
        timeout_ms: config.llm.timeout_ms.max(LLM_AGENT_LLM_TIMEOUT_MS),
        ..config.llm
    };
    Ok(Some(config))
}

/// Time one model call of `up`'s LLM agents may take: they talk at length, unlike the planners.
const LLM_AGENT_LLM_TIMEOUT_MS: u64 = 60_000;

/// Where `up --auth` keeps the keys it generates, and where the command line finds them: beside
/// the services' other data (`data/`, relative to where `up` runs).
pub const LOCAL_AUTH_DIR: &str = "data/auth";

/// Prefix of the suite-wide authentication settings (`MESH_AUTH_API_KEYS_FILE`, ...).
pub const AUTH_ENV_PREFIX: &str = "MESH_AUTH";

/// How long the tokens the suite's agents mint for themselves stay valid; each renews its own
/// halfway, so a token copied out of a request is of use for minutes, not a year.
pub const SUITE_AGENT_TOKEN_TTL_S: u64 = 15 * 60;

/// The networks the suite's gateway reaches agents on: the suite runs them on loopback.
const SUITE_AGENT_NETWORKS: [&str; 2] = ["127.0.0.0/8", "::1/128"];

/// The suite's graph mode unless `MESH_REGISTRY_GRAPH_MODE` says otherwise: its links
/// (`deploy/links.toml`) allow every call its agents make, so no other call is let through.
pub const SUITE_GRAPH_MODE: GraphMode = GraphMode::Enforced;

/// The links of the bundled suite: the orchestrator is superior to the agents it calls.
const SUITE_LINKS_TOML: &str = include_str!("../deploy/links.toml");

/// The `[[links]]` of `deploy/links.toml`.
pub fn suite_links() -> Result<Vec<LinkDef>, toml::de::Error> {
    #[derive(Deserialize)]
    struct LinksFile {
        links: Vec<LinkDef>,
    }
    Ok(toml::from_str::<LinksFile>(SUITE_LINKS_TOML)?.links)
}

/// URLs of the running services.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SuiteUrls {
    pub registry: String,
    pub orchestrator: String,
    pub search: String,
    pub entity_extraction: String,
    pub profile_selection: String,
    pub ui_agent: String,
    pub gateway: String,
    /// Each LLM agent's name and URL (none when they are off).
    pub llm_agents: Vec<(String, String)>,
}

/// A running suite; [`RunningSuite::stop`] shuts it down in order.
#[derive(Debug)]
pub struct RunningSuite {
    pub urls: SuiteUrls,
    stop_agents: watch::Sender<bool>,
    stop_registry: watch::Sender<bool>,
    agents: JoinSet<anyhow::Result<()>>,
    registry: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// Starts the registry (with the suite's links, unless its configuration names links of its
/// own), then the agents pointed at it (they register themselves).
pub async fn start(mut config: SuiteConfig) -> anyhow::Result<RunningSuite> {
    if config.registry.links.is_empty() {
        config.registry.links = suite_links()?;
    }
    let http = HttpClient::with_reqwest()?;
    let registry = Application::build(&config.registry).await?;
    let registry_url = registry.url();
    for agent in [
        &mut config.orchestrator.agent,
        &mut config.search.agent,
        &mut config.entity_extraction.agent,
        &mut config.profile_selection.agent,
    ] {
        agent.registry_url.get_or_insert_with(|| registry_url.clone());
    }
    let orchestrator = orchestrator::build(&config.orchestrator, http.clone()).await?;
    let search = search::build(&config.search, http.clone()).await?;
    let entity_extraction = entity_extraction::build(&config.entity_extraction, http.clone()).await?;
    let profile_selection = profile_selection::build(&config.profile_selection, http.clone()).await?;
    let llm_agents = match &mut config.llm_agents {
        Some(llm) => {
            llm.agent.registry_url.get_or_insert_with(|| registry_url.clone());
            let endpoint = llm.llm.clone();
            let models = |agent: &str, model: &str| llm_agent::openai_model(&endpoint, agent, model);
            Some(LlmAgents::build(llm, http, &models).await?)
        }
        None => None,
    };
    // The UI agent's sockets name agents registered here, and the registry's dashboard is a page
    // of the suite that may open them.
    config.ui_agent.registry_url.get_or_insert_with(|| registry_url.clone());
    config.ui_agent.ws_allowed_origins.push(registry_url.clone());
    let ui_agent = UiAgent::build(&config.ui_agent).await?;
    config.gateway.registry_url.get_or_insert_with(|| registry_url.clone());
    if config.gateway.upstream_allowed_networks.is_empty() {
        // The suite's agents listen on loopback.
        config.gateway.upstream_allowed_networks = SUITE_AGENT_NETWORKS.iter().map(|n| (*n).to_owned()).collect();
    }
    let gateway = Gateway::build(&config.gateway).await?;
    let urls = SuiteUrls {
        registry: registry_url,
        orchestrator: orchestrator.url().to_owned(),
        search: search.url().to_owned(),
        entity_extraction: entity_extraction.url().to_owned(),
        profile_selection: profile_selection.url().to_owned(),
        ui_agent: ui_agent.url().to_owned(),
        gateway: gateway.url().to_owned(),
        llm_agents: llm_agents
            .iter()
            .flat_map(|llm| &llm.agents)
            .map(|agent| (agent.runtime.name().to_owned(), agent.app.url().to_owned()))
            .collect(),
    };

    let (stop_registry, registry_stopped) = watch::channel(false);
    let registry = tokio::spawn(async move { Ok(registry.run_until_stopped(signalled(registry_stopped)).await?) });
    let (stop_agents, agents_stopped) = watch::channel(false);
    let mut agents = JoinSet::new();
    for app in [orchestrator, search, entity_extraction, profile_selection] {
        let stopped = agents_stopped.clone();
        agents.spawn(async move { Ok(app.run_until_stopped(signalled(stopped)).await?) });
    }
    if let Some(llm_agents) = llm_agents {
        let stopped = agents_stopped.clone();
        agents.spawn(async move { Ok(llm_agents.run_until_stopped(signalled(stopped)).await?) });
    }
    let stopped = agents_stopped.clone();
    agents.spawn(async move { Ok(gateway.run_until_stopped(signalled(stopped)).await?) });
    agents.spawn(async move { Ok(ui_agent.run_until_stopped(signalled(agents_stopped)).await?) });
    Ok(RunningSuite { urls, stop_agents, stop_registry, agents, registry })
}

impl RunningSuite {
    /// Runs until `shutdown` resolves or a service (the registry included) stops on its own,
    /// then stops everything.
    pub async fn run_until(mut self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let failed = tokio::select! {
            () = shutdown => None,
            Some(result) = self.agents.join_next() => Some(result),
            result = &mut self.registry => {
                let _ = self.stop_agents.send(true);
                while self.agents.join_next().await.is_some() {}
                return match result {
                    Ok(Ok(())) => Err(anyhow::anyhow!("the registry stopped")),
                    Ok(Err(error)) => Err(error),
                    Err(panic) => Err(anyhow::anyhow!("the registry task failed: {panic}")),
                };
            }
        };
        let stopped = self.stop().await;
        match failed {
            Some(Ok(Err(error))) => Err(error),
            Some(Err(panic)) => Err(anyhow::anyhow!("a service task failed: {panic}")),
            _ => stopped,
        }
    }

    /// Stops the agents first (they deregister from the registry), then the registry.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let _ = self.stop_agents.send(true);
        let mut outcome = Ok(());
        while let Some(result) = self.agents.join_next().await {
            if let Ok(Err(error)) = result {
                outcome = Err(error);
            }
        }
        let _ = self.stop_registry.send(true);
        self.registry.await??;
        outcome
    }
}

async fn signalled(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}
