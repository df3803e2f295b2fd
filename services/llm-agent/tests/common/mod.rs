//! A small mesh for the LLM agents' end-to-end tests: a real registry on port 0 holding the
//! test's links, LLM agents defined in a temporary folder and answering through the scripted
//! OpenAI-compatible server, kit agents to call, and the bus and docmem to look into.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use llm_agent::{LlmAgents, LlmAgentsConfig, openai_model};
use mesh_agent_kit::{AgentApp, AgentConfig, AgentError, AgentHandler, AgentReply, TaskInput};
use mesh_bus::{BusConfig, Delivered, SharedBus};
use mesh_client::{ClientError, HttpClient, RegistryClient, send_task};
use mesh_docmem::Docmem;
use mesh_llm::LlmConfig;
use mesh_protocol::graph::{GraphMode, LinkDirection, LinkRelationship};
use mesh_protocol::seed::{Part, TaskRequest, TaskResponse};
use registry::{Application, LinkDef, RegistryConfig};
use serde_json::json;
use tokio::sync::{Notify, oneshot};

/// Longest wait for a condition, and the polling period.
pub const DEADLINE: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(20);
/// Time a test's task call may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Agents poll the registry's policy this often, so tests see links quickly.
const GRAPH_REFRESH_MS: u64 = 50;

/// Polls `check` until it holds, failing the test with `what` after [`DEADLINE`].
pub async fn eventually<F: AsyncFnMut() -> bool>(what: &str, mut check: F) {
    let deadline = Instant::now() + DEADLINE;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(POLL).await;
    }
}

/// A link of the registry's configuration.
pub fn link(from: &str, to: &str, direction: LinkDirection, relationship: LinkRelationship) -> LinkDef {
    LinkDef { from: from.into(), to: to.into(), direction, relationship, enabled: true }
}

/// Where conversations live in a test.
#[derive(Debug, Clone)]
pub enum Backend {
    /// The embedded log and docmem in one SQLite file.
    Embedded,
    /// Kafka for the bus, docmem on SQLite.
    Kafka(String),
    /// The embedded log and docmem on PostgreSQL.
    Postgres(String),
}

/// The mesh of one test.
#[derive(Debug)]
pub struct Mesh {
    pub dir: tempfile::TempDir,
    pub registry_url: String,
    pub http: HttpClient,
    pub bus: BusConfig,
    /// The private networks the agents' MCP servers may be on: loopback, where tests run them.
    pub mcp_allowed_networks: Vec<String>,
    stops: Vec<oneshot::Sender<()>>,
}

/// One LLM agent to define: its name, tools, role, and `[limits]` lines.
#[derive(Debug, Clone)]
pub struct Definition {
    pub name: &'static str,
    pub tools: &'static [&'static str],
    pub role: String,
    pub limits: &'static str,
    /// TOML tables after `[limits]` (`[[mcp_servers]]`).
    pub tables: String,
}

impl Definition {
    pub fn new(name: &'static str, tools: &'static [&'static str]) -> Self {
        Self {
            name,
            tools,
            role: format!("You are {name}, the test agent. ROLE-MARKER-{name}."),
            limits: "",
            tables: String::new(),
        }
    }

    /// With the MCP server `name` at `url`, limited to `tools`.
    pub fn mcp_server(mut self, name: &str, url: &str, tools: &[&str]) -> Self {
        self.tables += &format!("[[mcp_servers]]\nname = {name:?}\nurl = {url:?}\ntools = {tools:?}\n");
        self
    }

    pub fn limits(self, limits: &'static str) -> Self {
        Self { limits, ..self }
    }
}

/// LLM agents running in the background.
#[derive(Debug)]
pub struct RunningLlmAgents {
    pub urls: HashMap<String, String>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningLlmAgents {
    pub fn url(&self, name: &str) -> &str {
        &self.urls[name]
    }

    /// Stops them as a signal would: the agents drain, then the loops stop.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.task).await;
    }
}

impl Mesh {
    /// A registry on port 0 with `links`, in `mode`, and the bus of `backend`.
    pub async fn start(links: Vec<LinkDef>, mode: GraphMode, backend: Backend) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = RegistryConfig {
            port: 0,
            database_url: format!("sqlite://{}", dir.path().join("registry.db").display()),
            links,
            graph_mode: mode,
            ..RegistryConfig::default()
        };
        let registry = Application::build(&config).await.unwrap();
        let registry_url = registry.url();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(registry.run_until_stopped(async {
            let _ = stopped.await;
        }));
        let sqlite = format!("sqlite://{}", dir.path().join("bus.db").display());
        let bus = match backend {
            Backend::Embedded => BusConfig { database_url: sqlite, ..BusConfig::default() },
            Backend::Kafka(brokers) => {
                // Topics of their own: the broker outlives the test.
                let instance = uuid::Uuid::new_v4().simple().to_string();
                BusConfig {
                    database_url: sqlite,
                    kafka_brokers: Some(brokers),
                    instance_id: instance,
                    ..BusConfig::default()
                }
            }
            Backend::Postgres(url) => BusConfig { database_url: url, ..BusConfig::default() },
        };
        Self {
            dir,
            registry_url,
            http: HttpClient::with_reqwest().unwrap(),
            bus,
            mcp_allowed_networks: vec!["127.0.0.0/8".into()],
            stops: vec![stop],
        }
    }

    /// The kit keys of an agent of this mesh.
    pub fn agent_config(&self) -> AgentConfig {
        AgentConfig {
            port: 0,
            registry_url: Some(self.registry_url.clone()),
            task_store_url: Some(format!("sqlite://{}", self.dir.path().join("tasks.db").display())),
            graph_refresh_ms: GRAPH_REFRESH_MS,
            shutdown_unready_ms: 0,
            shutdown_drain_ms: 2_000,
            ..AgentConfig::default()
        }
    }

    /// Writes the definitions in the mesh's folder.
    pub fn define(&self, definitions: &[Definition]) -> PathBuf {
        let folder = self.dir.path().join("agents");
        for definition in definitions {
            let agent = folder.join(definition.name);
            std::fs::create_dir_all(&agent).unwrap();
            let tools: Vec<String> = definition.tools.iter().map(|t| format!("{t:?}")).collect();
            let toml = format!(
                "name = {:?}\ndescription = \"{} of the test\"\ntools = [{}]\n[[skills]]\nid = \"{}_skill\"\nname = \"n\"\ndescription = \"d\"\n[limits]\n{}\n{}",
                definition.name,
                definition.name,
                tools.join(", "),
                definition.name,
                definition.limits,
                definition.tables
            );
            std::fs::write(agent.join("agent.toml"), toml).unwrap();
            std::fs::write(agent.join("ROLE.md"), &definition.role).unwrap();
        }
        folder
    }

    /// Runs the LLM agents of `definitions` on the OpenAI-compatible endpoint at `llm_base_url`
    /// (the scripted server), once each is registered.
    pub async fn llm_agents(&mut self, definitions: &[Definition], llm_base_url: &str) -> RunningLlmAgents {
        self.try_llm_agents(definitions, llm_base_url).await.unwrap()
    }

    /// [`Self::llm_agents`], or why they could not be built.
    pub async fn try_llm_agents(
        &mut self,
        definitions: &[Definition],
        llm_base_url: &str,
    ) -> Result<RunningLlmAgents, llm_agent::LlmAgentError> {
        let folder = self.define(definitions);
        let llm = LlmConfig {
            base_url: llm_base_url.into(),
            model: "scripted".into(),
            retries_max: 0,
            ..LlmConfig::default()
        };
        let config = LlmAgentsConfig {
            agent: AgentConfig { bus: Some(self.bus.clone()), ..self.agent_config() },
            definitions_dir: folder,
            llm: llm.clone(),
            mcp_allowed_networks: self.mcp_allowed_networks.clone(),
            ..LlmAgentsConfig::default()
        };
        let models = |agent: &str, model: &str| openai_model(&llm, agent, model);
        let agents = LlmAgents::build(&config, self.http.clone(), &models).await?;
        let urls: HashMap<String, String> =
            agents.agents.iter().map(|a| (a.runtime.name().to_owned(), a.app.url().to_owned())).collect();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            agents
                .run_until_stopped(async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        let names: Vec<&str> = definitions.iter().map(|d| d.name).collect();
        self.registered(&names).await;
        Ok(RunningLlmAgents { urls, stop: Some(stop), task })
    }

    /// Runs a kit agent `name` offering `skill`, answering with `handler`.
    pub async fn kit_agent<H: AgentHandler>(&mut self, name: &str, skill: &str, handler: H) -> String {
        let card = serde_json::from_value(json!({
            "name": name, "description": "a kit agent of the test", "version": "1",
            "supportedInterfaces": [], "capabilities": {}, "defaultInputModes": ["text/plain"],
            "defaultOutputModes": ["text/plain"],
            "skills": [{"id": skill, "name": skill, "description": format!("{skill} things"), "tags": []}]
        }))
        .unwrap();
        let app = AgentApp::build(&self.agent_config(), card, handler, self.http.clone()).await.unwrap();
        let url = app.url().to_owned();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(app.run_until_stopped(async {
            let _ = stopped.await;
        }));
        self.stops.push(stop);
        self.registered(&[name]).await;
        url
    }

    /// Waits until the registry lists every agent of `names`.
    pub async fn registered(&self, names: &[&str]) {
        let registry = RegistryClient::new(&self.registry_url, self.http.clone()).unwrap();
        eventually("the agents' registration", async || {
            let listed = registry.agents().await.map(|list| list.agents).unwrap_or_default();
            names.iter().all(|name| listed.iter().any(|a| a.name == *name))
        })
        .await;
    }

    /// Waits until the agent at `url` holds a policy of `links` links.
    pub async fn policy_loaded(&self, url: &str, links: usize) {
        eventually("the agent's link policy", async || {
            let health: serde_json::Value =
                self.http.get_json(&format!("{url}/health"), CALL_TIMEOUT).await.unwrap_or_default();
            health["components"]["graph"]["links"]["links"] == links
        })
        .await;
    }

    /// Sends `text` as a seed task to the agent at `url`.
    pub async fn ask(&self, url: &str, text: &str) -> Result<TaskResponse, ClientError> {
        send_task(&self.http, url, &TaskRequest::from_text(None, text.to_owned(), None), CALL_TIMEOUT).await
    }

    /// The records of `agent`'s topic, in order.
    pub async fn records(&self, agent: &str) -> Vec<Delivered> {
        let (bus, _) = self.open().await;
        let topic = mesh_bus::agent_topic(&mesh_bus::agent_id(agent, &self.bus.instance_id));
        let mut replay = bus.replay(&topic).await.unwrap();
        let mut records = Vec::new();
        while let Some(batch) = replay.next_batch().await.unwrap() {
            records.extend(batch);
        }
        records
    }

    /// The bus and docmem of this mesh, opened anew.
    pub async fn open(&self) -> (SharedBus, Docmem) {
        mesh_bus::open_bus(&self.bus).await.unwrap()
    }

    /// `agent`'s id on the bus.
    pub fn bus_id(&self, agent: &str) -> String {
        mesh_bus::agent_id(agent, &self.bus.instance_id)
    }
}

/// The text of a task response's parts.
pub fn text_of(response: &TaskResponse) -> String {
    response
        .messages
        .iter()
        .flat_map(|m| &m.parts)
        .filter_map(|part| match part {
            Part::Text { text } => Some(text.clone()),
            Part::Data { .. } => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A kit agent that echoes, counting calls; with `hold`, each call waits until released.
#[derive(Debug, Default, Clone)]
pub struct Echo {
    pub calls: Arc<AtomicUsize>,
    pub release: Option<Arc<Notify>>,
}

impl Echo {
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl AgentHandler for Echo {
    async fn handle(&self, task: TaskInput) -> Result<AgentReply, AgentError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if let Some(release) = &self.release {
            release.notified().await;
        }
        Ok(AgentReply { parts: vec![Part::Text { text: format!("echo: {}", task.text) }], ..AgentReply::default() })
    }
}
