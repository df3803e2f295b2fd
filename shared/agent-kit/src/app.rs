use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use mesh_client::{
    CALL_REPORT_BATCH_MAX_DEFAULT, CALL_REPORT_FLUSH_MS_DEFAULT, CALL_REPORT_QUEUE_MAX_DEFAULT, ClientError,
    GRAPH_REFRESH_MS_DEFAULT, HttpClient, RegistryClient,
};
use mesh_graph::CONVERSATIONS_MAX_DEFAULT;
use mesh_protocol::a2a::v1::{AgentCard, AgentExtension, AgentSkill};
use mesh_protocol::graph::GraphMode;
use mesh_protocol::registry::{AGENT_CARD_PATH, DEFAULT_HEALTH_PATH, DEFAULT_PROCESS_PATH, Registration};
use serde::Deserialize;
use tokio::net::TcpListener;

use mesh_tasks::{Lease, Retention, TaskStore};

use crate::agent::{AgentHandler, agent_router, task_agent_router};
use crate::graph::AgentGraph;
use crate::registration::{deregister, register_until_accepted};
use mesh_a2a_server::card::{CardDocument, extended_card, sign_card};
use mesh_a2a_server::push::{
    PUSH_CIRCUIT_FAILURES_DEFAULT, PUSH_CIRCUIT_OPEN_MS_DEFAULT, PUSH_DELIVERIES_MAX_DEFAULT,
    PUSH_DELIVERIES_PER_TENANT_MAX_DEFAULT, PUSH_DELIVERY_ATTEMPTS_MAX_DEFAULT, PUSH_DELIVERY_TIMEOUT_MS_DEFAULT,
    PUSH_RETRY_DELAY_MAX_MS_DEFAULT, PUSH_RETRY_DELAY_MIN_MS_DEFAULT, PushDelivery, PushSettings,
};
use mesh_a2a_server::{
    EngineSettings, Surface, TaskHandler, TaskLimits, describe_extended_card_token, describe_interfaces,
    describe_security,
};
use mesh_server::auth::AccessControl;
use mesh_server::http::{
    BODY_LIMIT_BYTES_DEFAULT, HttpLimits, REQUEST_TIMEOUT_MS_DEFAULT, ServeConfig, reachable_url, serve_draining,
    turn_unready,
};
use mesh_server::metrics::{DatabaseProbe, RegistrationState, ServiceMetrics};
use mesh_server::observe::with_observed_layers;

/// Why a task left submitted or working by a previous run is failed at start.
const INTERRUPTED_TASK_REASON: &str =
    "the agent stopped while working on this task (crash or restart); send the message again";

/// Default time between re-registrations.
pub const REGISTRATION_REFRESH_MS_DEFAULT: u64 = 30_000;

/// How an agent serves and where it registers; every agent binary flattens these keys into its
/// own configuration (which is why unknown keys cannot be refused here: serde's `flatten` and
/// `deny_unknown_fields` do not mix).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct AgentConfig {
    /// Address to listen on.
    pub host: String,
    /// Port to listen on; 0 picks a free one.
    pub port: u16,
    /// URL other agents reach this one at; derived from host and the bound port when absent.
    pub public_url: Option<String>,
    /// Registry to register with (several replicas: a comma-separated list); no registration
    /// when absent.
    pub registry_url: Option<String>,
    /// Name to register and serve in the card, for replicas of one agent; the card's name when absent.
    pub name: Option<String>,
    /// The name replicas of one agent share: their A2A tasks are kept under it (and the search
    /// agent's document log), so any replica reads, follows and cancels the others' tasks, and
    /// fails those of a replica that died. The card's own name when absent, whatever `name` each
    /// replica registers under (a pod's): replicas of one agent share without being told.
    pub replica_group: Option<String>,
    /// Milliseconds between re-registrations once registered, so a registry that lost the entry
    /// (a wiped database, a name taken over and released) gets it back without a restart.
    pub registration_refresh_ms: u64,
    /// Milliseconds a request may take before the agent answers 504 itself.
    pub request_timeout_ms: u64,
    /// Largest request body accepted; a larger one is answered 413.
    pub body_limit_bytes: usize,
    /// Where the agent's A2A tasks are kept: `sqlite://PATH`, `postgres://...`, or
    /// `sqlite::memory:` (gone at exit). Default: `sqlite://data/tasks/<agent name>.db` under the
    /// working directory. Unused with `task_durability = "memory"`.
    pub task_store_url: Option<String>,
    /// What an answered task survives (`tasks.durability` in issue #17's words): `durable` (the
    /// default: committed to the task store before its answer is sent, it survives SIGKILL),
    /// `buffered` (answered once queued, committed within `task_flush_interval_ms`: SIGKILL loses
    /// at most that span's writes, a graceful stop none), or `memory` (no database: kept in this
    /// process alone, lost at exit, at most `memory_tasks_max`).
    pub task_durability: TaskDurability,
    /// With `buffered`, milliseconds the task writer gathers writes before it commits them.
    pub task_flush_interval_ms: u64,
    /// With `memory`, tasks kept at most: a new one past it evicts the oldest finished one, and
    /// is refused when none is finished.
    pub memory_tasks_max: usize,
    /// Also write the A2A 0.3 top-level card fields (`url`, `preferredTransport`,
    /// `protocolVersion`, `additionalInterfaces`) for 0.3 clients. On by default; strict 1.0
    /// validators (the conformance kit) reject them.
    pub legacy_card_fields: bool,
    /// Milliseconds between polls of the registry's link policy (`GET /api/policy`).
    pub graph_refresh_ms: u64,
    /// The graph mode assumed until the registry's policy first loads: `open` (calls pass, as in
    /// a mesh without links) or `enforced` (every agent-to-agent call is denied until links arrive:
    /// for an agent that must never take an unchecked call).
    pub graph_mode_until_loaded: GraphMode,
    /// One-way conversations remembered for the answer rule; the oldest are forgotten first.
    pub graph_conversations_max: usize,
    /// Call reports waiting for the registry, at most; more are dropped and counted in `/health`.
    pub call_report_queue_max: usize,
    /// Call reports per POST to the registry (at most 1,000).
    pub call_report_batch_max: usize,
    /// Milliseconds between posts of call reports that do not fill a batch.
    pub call_report_flush_ms: u64,
    /// The conversation bus: with it the agent also answers conversations on its own topic.
    pub bus: Option<mesh_bus::BusConfig>,
    /// Requests handled at once, at most; more are answered 503 at once.
    pub concurrency_max: usize,
    /// Requests per second each tenant may make (sustained; 0 turns the limit off), and the
    /// burst above it.
    pub rate_limit_per_s: u32,
    /// Requests a tenant may make at once above `rate_limit_per_s`.
    pub rate_limit_burst: u32,
    /// Milliseconds shutdown waits for open requests and streams before closing them.
    pub shutdown_drain_ms: u64,
    /// How connections are timed and capped, and the hosts an open agent answers to.
    pub serve: ServeConfig,
    /// Milliseconds a stopping agent keeps accepting requests while it answers not ready and
    /// leaves the registry, before the drain begins (the time its callers take to notice).
    pub shutdown_unready_ms: u64,
    /// Milliseconds a finished task is kept after its last change (default 7 days), and between
    /// two purges of older ones.
    pub finished_task_ttl_ms: u64,
    /// Milliseconds between two purges of finished tasks older than `finished_task_ttl_ms`.
    pub task_purge_interval_ms: u64,
    /// Unfinished tasks kept in memory at once, at most.
    pub live_tasks_max: usize,
    /// Milliseconds a live task may go without a change: a running one is then failed, one
    /// waiting for the user leaves memory (it stays stored).
    pub live_task_ttl_ms: u64,
    /// `SubscribeToTask` streams open on one task, at most.
    pub task_subscribers_max: usize,
    /// Largest size of one task's artifacts, as stored JSON; a task growing past it fails.
    pub task_artifact_bytes_max: usize,
    /// Fail the tasks left submitted or working by a process that no longer runs: at start and,
    /// on PostgreSQL, at every lease renewal (the running tasks of live replicas are left alone).
    pub fail_interrupted_tasks_at_start: bool,
    /// On PostgreSQL, milliseconds after which a replica that stopped renewing its task lease is
    /// taken for dead (its running tasks are then failed), and between two renewals.
    pub task_lease_ttl_ms: u64,
    /// Milliseconds between two renewals of this process's task lease (and sweeps of dead processes' tasks).
    pub task_lease_renew_ms: u64,
    /// How callers authenticate, and the credential this agent presents (see [`mesh_server::auth`]).
    pub auth: mesh_auth::AuthConfig,
    /// Offer A2A push notifications (webhooks clients set on their tasks; see
    /// [`mesh_a2a_server::push`]): on by default, and the card says so.
    pub push_notifications: bool,
    /// The non-public networks (CIDR) webhooks may be in besides the public internet: private,
    /// loopback, shared (CGNAT) and reserved addresses are refused unless listed here (e.g.
    /// `127.0.0.0/8` for webhooks on this machine); link-local and metadata addresses always are.
    pub push_allowed_networks: Vec<String>,
    /// Milliseconds a webhook has to answer one notification.
    pub push_delivery_timeout_ms: u64,
    /// Attempts at one notification, the first included, before delivery gives up.
    pub push_delivery_attempts_max: u32,
    /// Milliseconds before the first retry of a notification, doubling (plus jitter) up to the max.
    pub push_retry_delay_min_ms: u64,
    /// Longest wait, in milliseconds, between two retries of a notification.
    pub push_retry_delay_max_ms: u64,
    /// Notifications in delivery at once, at most, and of one tenant.
    pub push_deliveries_max: usize,
    /// Notifications of one tenant in delivery at once, at most.
    pub push_deliveries_per_tenant_max: usize,
    /// Notifications waiting for delivery, at most, and of one tenant (its share): past either,
    /// new ones are refused and recorded on their task.
    pub push_outbox_rows_max: usize,
    /// Notifications of one tenant waiting for delivery, at most.
    pub push_outbox_tenant_rows_max: usize,
    /// Failed attempts in a row at one webhook destination that open its circuit, and the
    /// milliseconds it then refuses attempts before letting one through.
    pub push_circuit_failures: usize,
    /// Milliseconds an open webhook circuit refuses attempts before letting one through.
    pub push_circuit_open_ms: u64,
    /// Extensions the agent declares on its card (`capabilities.extensions`, after the card's
    /// own), in the card's shape: `uri`, `description`, `required`, `params`. A call that does not
    /// activate every `required` one in its `A2A-Extensions` header is refused, in every binding.
    pub extensions: Vec<AgentExtension>,
    /// Skills only authenticated callers see, in the card's shape (`id`, `name`, `description`,
    /// `tags`, ...). With any, the card announces the authenticated extended card
    /// (`capabilities.extendedAgentCard`): the public card plus these skills.
    pub extended_skills: Vec<AgentSkill>,
    /// The credential that opens the extended card when access control is off, sent as
    /// `Authorization: Bearer <token>`. With access control on, callers open it with their mesh
    /// credentials, and a token here is refused at start.
    pub extended_card_token: Option<String>,
}

/// What an agent's answered tasks survive (see [`AgentConfig::task_durability`]). Read from the
/// lowercase names; any other value is refused, naming the key and the accepted ones.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum TaskDurability {
    #[default]
    Durable,
    Buffered,
    Memory,
}

impl TaskDurability {
    /// Each durability by the name the configuration gives it.
    const NAMES: [(&str, Self); 3] =
        [("durable", Self::Durable), ("buffered", Self::Buffered), ("memory", Self::Memory)];
}

impl TryFrom<String> for TaskDurability {
    type Error = String;

    // A message of its own: serde's would not name the key, which agents' flattened
    // configurations lose.
    fn try_from(value: String) -> Result<Self, String> {
        Self::NAMES
            .iter()
            .find(|(name, _)| *name == value)
            .map(|(_, durability)| *durability)
            .ok_or_else(|| format!("task_durability must be one of durable, buffered or memory, not {value:?}"))
    }
}

impl AgentConfig {
    /// The replica group of an agent whose card is named `card_name`: `replica_group`, else that name.
    pub fn replica_group_or(&self, card_name: &str) -> String {
        self.replica_group.clone().unwrap_or_else(|| card_name.to_owned())
    }
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 0,
            public_url: None,
            registry_url: None,
            name: None,
            replica_group: None,
            registration_refresh_ms: REGISTRATION_REFRESH_MS_DEFAULT,
            request_timeout_ms: REQUEST_TIMEOUT_MS_DEFAULT,
            body_limit_bytes: BODY_LIMIT_BYTES_DEFAULT,
            task_store_url: None,
            task_durability: TaskDurability::Durable,
            task_flush_interval_ms: mesh_tasks::TASK_FLUSH_INTERVAL_MS_DEFAULT,
            memory_tasks_max: mesh_tasks::MEMORY_TASKS_MAX_DEFAULT,
            legacy_card_fields: true,
            graph_refresh_ms: GRAPH_REFRESH_MS_DEFAULT,
            graph_mode_until_loaded: GraphMode::Open,
            graph_conversations_max: CONVERSATIONS_MAX_DEFAULT,
            call_report_queue_max: CALL_REPORT_QUEUE_MAX_DEFAULT,
            call_report_batch_max: CALL_REPORT_BATCH_MAX_DEFAULT,
            call_report_flush_ms: CALL_REPORT_FLUSH_MS_DEFAULT,
            bus: None,
            concurrency_max: mesh_server::http::CONCURRENCY_MAX_DEFAULT,
            rate_limit_per_s: mesh_server::http::RATE_LIMIT_PER_S_DEFAULT,
            rate_limit_burst: mesh_server::http::RATE_LIMIT_BURST_DEFAULT,
            shutdown_drain_ms: mesh_server::http::SHUTDOWN_DRAIN_MS_DEFAULT,
            serve: ServeConfig::default(),
            shutdown_unready_ms: mesh_server::http::SHUTDOWN_UNREADY_MS_DEFAULT,
            finished_task_ttl_ms: mesh_tasks::FINISHED_TASK_TTL_MS_DEFAULT,
            task_purge_interval_ms: mesh_tasks::TASK_PURGE_INTERVAL_MS_DEFAULT,
            live_tasks_max: mesh_a2a_server::LIVE_TASKS_MAX_DEFAULT,
            live_task_ttl_ms: mesh_a2a_server::LIVE_TASK_TTL_MS_DEFAULT,
            task_subscribers_max: mesh_a2a_server::TASK_SUBSCRIBERS_MAX_DEFAULT,
            task_artifact_bytes_max: mesh_a2a_server::TASK_ARTIFACT_BYTES_MAX_DEFAULT,
            fail_interrupted_tasks_at_start: true,
            task_lease_ttl_ms: mesh_tasks::TASK_LEASE_TTL_MS_DEFAULT,
            task_lease_renew_ms: mesh_tasks::TASK_LEASE_RENEW_MS_DEFAULT,
            auth: mesh_auth::AuthConfig::default(),
            push_notifications: true,
            push_allowed_networks: Vec::new(),
            push_delivery_timeout_ms: PUSH_DELIVERY_TIMEOUT_MS_DEFAULT,
            push_delivery_attempts_max: PUSH_DELIVERY_ATTEMPTS_MAX_DEFAULT,
            push_retry_delay_min_ms: PUSH_RETRY_DELAY_MIN_MS_DEFAULT,
            push_retry_delay_max_ms: PUSH_RETRY_DELAY_MAX_MS_DEFAULT,
            push_deliveries_max: PUSH_DELIVERIES_MAX_DEFAULT,
            push_deliveries_per_tenant_max: PUSH_DELIVERIES_PER_TENANT_MAX_DEFAULT,
            push_outbox_rows_max: mesh_tasks::PUSH_OUTBOX_ROWS_MAX_DEFAULT,
            push_outbox_tenant_rows_max: mesh_tasks::PUSH_OUTBOX_TENANT_ROWS_MAX_DEFAULT,
            push_circuit_failures: PUSH_CIRCUIT_FAILURES_DEFAULT,
            push_circuit_open_ms: PUSH_CIRCUIT_OPEN_MS_DEFAULT,
            extensions: Vec::new(),
            extended_skills: Vec::new(),
            extended_card_token: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KitError {
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
    #[error("invalid agent card: {0}")]
    Card(#[from] serde_json::Error),
    #[error("invalid agent card configuration: {0}")]
    CardConfig(String),
    #[error("invalid registry URL: {0}")]
    Registry(#[from] ClientError),
    #[error("server failed: {0}")]
    Serve(#[source] std::io::Error),
    #[error("cannot open the task store: {0}")]
    TaskStore(#[from] mesh_tasks::TaskError),
    #[error("cannot open the conversation bus: {0}")]
    Bus(#[from] mesh_bus::BusError),
    #[error("{0}")]
    Auth(#[from] mesh_auth::AuthError),
    #[error("{0}")]
    Server(#[from] mesh_server::ServerError),
    #[error("push_allowed_networks: {0}")]
    PushNetworks(#[from] mesh_client::address_policy::InvalidNetwork),
    #[error("cannot build the push notification client: {0}")]
    PushClient(#[from] mesh_client::TransportError),
}

/// What an agent adds to the kit's routes and health report.
#[derive(Default)]
pub struct AgentExtras {
    /// The agent's own routes, beside `/tasks/send`, the card and `/health`.
    pub routes: axum::Router,
    /// Health components: `(name, probe)`, the probe read at every `/health`.
    pub components: Vec<(String, Box<dyn Fn() -> serde_json::Value + Send + Sync>)>,
    /// The agent's graph, when the agent built it first to give its caller ([`AgentGraph::caller`]);
    /// otherwise the kit builds one from the configuration.
    pub graph: Option<Arc<AgentGraph>>,
}

impl std::fmt::Debug for AgentExtras {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.components.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("AgentExtras").field("components", &names).finish_non_exhaustive()
    }
}

/// A bound, ready-to-run agent.
#[derive(Debug)]
pub struct AgentApp {
    listener: TcpListener,
    router: axum::Router,
    url: String,
    registration: Option<(RegistryClient, Registration)>,
    registration_refresh: Duration,
    metrics: Arc<ServiceMetrics>,
    graph: Option<Arc<AgentGraph>>,
    bus: Option<crate::bus::BusRunner>,
    /// The task store's retention job, stopped with the agent.
    purger: tokio::task::JoinHandle<()>,
    /// Renews this replica's task lease (PostgreSQL), stopped with the agent.
    lease: Option<tokio::task::JoinHandle<()>>,
    /// Checks that the task store's database answers, for `/health` (none in memory).
    database_probe: Option<tokio::task::JoinHandle<()>>,
    /// Flushed when the agent stops, so a buffered store loses nothing to a graceful stop.
    store: TaskStore,
    /// Delivers push notifications while the agent runs.
    push: Option<PushDelivery>,
    shutdown_drain: Duration,
    serve: ServeConfig,
    shutdown_unready: Duration,
}

impl AgentApp {
    /// Binds the listener and builds the routes; nothing is served until [`Self::run_until_stopped`].
    pub async fn build<H: AgentHandler>(
        config: &AgentConfig,
        card: AgentCard,
        handler: H,
        http: HttpClient,
    ) -> Result<Self, KitError> {
        Self::build_with(config, card, handler, http, AgentExtras::default()).await
    }

    /// [`Self::build`] plus an agent's own routes (served with the same limits, request ids and
    /// error bodies, and counted in `/health`) and health components.
    pub async fn build_with<H: AgentHandler>(
        config: &AgentConfig,
        card: AgentCard,
        handler: H,
        http: HttpClient,
        extras: AgentExtras,
    ) -> Result<Self, KitError> {
        let handler = Arc::new(handler);
        let name = config.name.clone().unwrap_or_else(|| card.name.clone());
        let bus = match &config.bus {
            Some(bus) => Some(crate::bus::BusRunner::open(bus, &name, handler.clone()).await?),
            None => None,
        };
        let join = bus.as_ref().map(crate::bus::BusRunner::join);
        let app = Self::assemble(config, card, http, extras, |card, metrics, store, limits, graph| {
            agent_router(card, handler, metrics, store, join, graph, limits)
        });
        Ok(Self { bus, ..app.await? })
    }

    /// An agent built on the task model directly: a [`TaskHandler`] reports each turn of a task
    /// (status changes, artifacts, questions back to the user) as it goes. It serves the A2A
    /// bindings, the card and `/health`, but not the seed `POST /tasks/send`.
    pub async fn build_tasks<T: TaskHandler>(
        config: &AgentConfig,
        card: AgentCard,
        handler: T,
        http: HttpClient,
    ) -> Result<Self, KitError> {
        Self::assemble(config, card, http, AgentExtras::default(), |card, metrics, store, limits, _graph| {
            task_agent_router(card, handler, metrics, store, limits)
        })
        .await
    }

    async fn assemble(
        config: &AgentConfig,
        mut card: AgentCard,
        http: HttpClient,
        extras: AgentExtras,
        routes: impl FnOnce(
            Surface,
            Arc<ServiceMetrics>,
            TaskStore,
            EngineSettings,
            Option<Arc<AgentGraph>>,
        ) -> axum::Router,
    ) -> Result<Self, KitError> {
        let access = AccessControl::from_config(&config.auth)?;
        mesh_auth::check_exposure(&config.host, access.enabled(), config.auth.insecure)?;
        // Calls to the registry and to other agents carry this agent's own credential.
        let http = mesh_server::with_own_credential(&http, &config.auth, config.name.as_deref().unwrap_or(&card.name))?;
        let addr = format!("{}:{}", config.host, config.port);
        let listener = TcpListener::bind(&addr).await.map_err(|source| KitError::Bind { addr, source })?;
        let local = listener.local_addr().map_err(KitError::Serve)?;
        let url = config.public_url.clone().unwrap_or_else(|| reachable_url(local)).trim_end_matches('/').to_owned();
        let replica_group = config.replica_group_or(&card.name);
        if let Some(name) = &config.name {
            card.name = name.clone();
        }
        describe_interfaces(&mut card, &url, config.legacy_card_fields);
        card.capabilities.push_notifications = Some(config.push_notifications);
        declare_extensions(&mut card, &config.extensions)?;
        let extended_card_token = extended_card_token(config, access.enabled())?;
        check_extended_skills(&card, &config.extended_skills)?;
        let offers_extended_card = !config.extended_skills.is_empty();
        if offers_extended_card {
            card.capabilities.extended_agent_card = Some(true);
            card.supports_authenticated_extended_card = config.legacy_card_fields.then_some(true);
        }
        if access.enabled() {
            describe_security(&mut card, config.legacy_card_fields);
        } else if extended_card_token.is_some() {
            describe_extended_card_token(&mut card, config.legacy_card_fields);
        }
        let mut extended = offers_extended_card.then(|| extended_card(&card, &config.extended_skills));
        // Last: the signature covers the card as served, its addresses and schemes included.
        if let Some(key) = &config.auth.card_signing_key {
            let signer = mesh_auth::CardSigner::load(key)?;
            card = sign_card(card, &signer)?;
            extended = extended.map(|extended| sign_card(extended, &signer)).transpose()?;
        }
        let store_url = || config.task_store_url.clone().unwrap_or_else(|| default_task_store_url(&card.name));
        let store = match config.task_durability {
            TaskDurability::Durable => TaskStore::open(&store_url(), &replica_group).await?,
            TaskDurability::Buffered => {
                let flush_interval = Duration::from_millis(config.task_flush_interval_ms);
                TaskStore::open_buffered(&store_url(), &replica_group, flush_interval).await?
            }
            TaskDurability::Memory => TaskStore::in_memory(&replica_group, config.memory_tasks_max),
        };
        let store = store.with_push_limits(mesh_tasks::PushLimits {
            outbox_rows_max: config.push_outbox_rows_max,
            outbox_tenant_rows_max: config.push_outbox_tenant_rows_max,
        });
        let push = match config.push_notifications {
            true => Some(push_delivery(config, &store)?),
            false => None,
        };
        let lease = Lease {
            ttl: Duration::from_millis(config.task_lease_ttl_ms),
            renew_interval: Duration::from_millis(config.task_lease_renew_ms),
        };
        let lease =
            store.start_lease(lease, config.fail_interrupted_tasks_at_start.then_some(INTERRUPTED_TASK_REASON)).await?;
        let purger = store.spawn_purger(Retention {
            finished_task_ttl: Duration::from_millis(config.finished_task_ttl_ms),
            purge_interval: Duration::from_millis(config.task_purge_interval_ms),
        });
        let task_limits = TaskLimits {
            live_tasks_max: config.live_tasks_max,
            live_task_ttl: Duration::from_millis(config.live_task_ttl_ms),
            subscribers_per_task_max: config.task_subscribers_max,
            artifact_bytes_max: config.task_artifact_bytes_max,
        };
        let graph = match extras.graph {
            Some(graph) => Some(graph),
            None => AgentGraph::new(config, http.clone())?,
        };
        let registration = match &config.registry_url {
            Some(registry_url) => Some((RegistryClient::new(registry_url, http)?, registration_for(&card, &url))),
            None => None,
        };
        let metrics = ServiceMetrics::new(card.name.clone());
        let limits = HttpLimits {
            request_timeout: Duration::from_millis(config.request_timeout_ms),
            body_limit_bytes: config.body_limit_bytes,
            concurrency_max: config.concurrency_max,
            rate_limit_per_s: config.rate_limit_per_s,
            rate_limit_burst: config.rate_limit_burst,
            access,
            allowed_hosts: config.serve.allowed_hosts.clone(),
        };
        if registration.is_some() {
            metrics.set_registration(RegistrationState::Pending);
        }
        for (name, probe) in extras.components {
            metrics.add_component(name, probe);
        }
        let database_probe = match store.memory_occupancy() {
            // No database to claim: the component says where the tasks are, and how full it is.
            Some(_) => {
                let kept = store.clone();
                metrics.add_component("task_store", move || {
                    let (tasks, tasks_max) = kept.memory_occupancy().unwrap_or_default();
                    serde_json::json!({ "status": "ok", "durability": "memory", "tasks": tasks, "tasks_max": tasks_max })
                });
                None
            }
            // Every answer waits for the task store (its commit, or its queue the writer empties
            // into the database): without its database the agent cannot serve.
            None => {
                let database = DatabaseProbe::register(&metrics);
                let probed = store.clone();
                let probe_name = metrics.name().to_owned();
                Some(tokio::spawn(async move { database.run(&probe_name, || probed.ping()).await }))
            }
        };
        let engine = EngineSettings { limits: task_limits, push: push.clone() };
        let mut surface = Surface::new(CardDocument::new(card)?);
        if let Some(extended) = extended {
            surface = surface.with_extended_card(CardDocument::private(extended)?, extended_card_token);
        }
        let mut router = routes(surface, metrics.clone(), store.clone(), engine, graph.clone());
        if extras.routes.has_routes() {
            router = router.merge(extras.routes.route_layer(mesh_server::http::track_requests(metrics.clone())));
        }
        if let Some(graph) = &graph {
            // The admission layer of the task routes finds the link cache here.
            router = router.layer(Extension(graph.links().clone()));
            let probe = graph.clone();
            metrics.add_component("graph", move || probe.report());
        }
        let router = with_observed_layers(router, limits, metrics.name());
        let registration_refresh = Duration::from_millis(config.registration_refresh_ms.max(1));
        let shutdown_drain = Duration::from_millis(config.shutdown_drain_ms);
        let shutdown_unready = Duration::from_millis(config.shutdown_unready_ms);
        Ok(Self {
            listener,
            router,
            url,
            registration,
            registration_refresh,
            metrics,
            graph,
            bus: None,
            purger,
            lease,
            database_probe,
            store,
            push,
            shutdown_drain,
            serve: config.serve.clone(),
            shutdown_unready,
        })
    }

    pub fn port(&self) -> u16 {
        self.listener.local_addr().map(|a| a.port()).unwrap_or_default()
    }

    /// Base URL the agent is reachable at.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Serves until Ctrl-C or SIGTERM: the end of every agent binary's `main`.
    pub async fn run_until_signalled(self) -> Result<(), KitError> {
        tracing::info!(url = self.url(), "agent listening");
        self.run_until_stopped(mesh_server::http::shutdown_signal()).await
    }

    /// Serves until `shutdown` resolves. Registration runs beside serving, so an agent answers
    /// even while the registry is down. On shutdown the agent first turns not ready and leaves
    /// the registry, still answering for `shutdown_unready_ms`, so callers stop being sent to
    /// it, and then finishes in-flight requests (for at most `shutdown_drain_ms`).
    pub async fn run_until_stopped(self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), KitError> {
        let registration = self.registration;
        let refresh = self.registration_refresh;
        let metrics = self.metrics.clone();
        let graph_tasks = self.graph.map(|graph| graph.start()).unwrap_or_default();
        let bus = self.bus.map(crate::bus::BusRunner::spawn);
        // Notifications left pending by an earlier run of the agent go out now too.
        let pushing = self.push.as_ref().map(PushDelivery::start);
        let registering = registration.clone().map(|(registry, registration)| {
            tokio::spawn(async move {
                let mut announced = false;
                loop {
                    match register_until_accepted(&registry, &registration).await {
                        Ok(()) => {
                            if !announced {
                                tracing::info!(agent = %registration.name, registry = registry.base_url(), "registered");
                                announced = true;
                            }
                            metrics.set_registration(RegistrationState::Registered);
                        }
                        Err(error) => {
                            metrics.set_registration(RegistrationState::Refused);
                            tracing::error!(agent = %registration.name, %error, "the registry refused this agent");
                            return;
                        }
                    }
                    tokio::time::sleep(refresh).await;
                }
            })
        });
        let (unready, metrics) = (self.shutdown_unready, self.metrics);
        let leave_then_drain = async move {
            let leave = async move {
                if let Some(task) = registering {
                    task.abort();
                }
                // Reports not yet posted (at most one flush interval's) are lost with the process anyway.
                for task in graph_tasks {
                    task.abort();
                }
                if let Some((registry, registration)) = &registration {
                    deregister(registry, &registration.name, &registration.url).await;
                }
            };
            turn_unready(shutdown, &metrics, unready, leave).await;
        };
        let served = serve_draining(self.listener, self.router, leave_then_drain, self.shutdown_drain, &self.serve)
            .await
            .map_err(KitError::Serve);
        // The answered tasks' writes still queued (a buffered store's last interval, background
        // saves) are committed before the process may exit.
        if let Err(error) = self.store.flush().await {
            tracing::error!(%error, "could not save the queued tasks before stopping");
        }
        self.purger.abort();
        if let Some(pushing) = &pushing {
            // What is under way finishes on its own; what is pending waits in the outbox.
            pushing.abort();
        }
        if let Some(lease) = &self.lease {
            lease.abort();
        }
        if let Some(probe) = &self.database_probe {
            probe.abort();
        }
        if let Some(bus) = bus {
            bus.stop().await;
        }
        served
    }
}

/// The delivery of the agent's push notifications, under the public-only outbound address policy.
fn push_delivery(config: &AgentConfig, store: &TaskStore) -> Result<PushDelivery, KitError> {
    let policy = mesh_client::AddressPolicy::public_only(&config.push_allowed_networks)?;
    let guard = mesh_client::OutboundGuard::new(policy, Arc::new(mesh_client::SystemLookup));
    let settings = PushSettings {
        delivery_timeout: Duration::from_millis(config.push_delivery_timeout_ms),
        attempts_max: config.push_delivery_attempts_max.max(1),
        retry_delay_min: Duration::from_millis(config.push_retry_delay_min_ms),
        retry_delay_max: Duration::from_millis(config.push_retry_delay_max_ms),
        deliveries_max: config.push_deliveries_max,
        deliveries_per_tenant_max: config.push_deliveries_per_tenant_max,
        circuit: mesh_client::CircuitSettings {
            consecutive_failures: config.push_circuit_failures,
            open: Duration::from_millis(config.push_circuit_open_ms),
        },
    };
    Ok(PushDelivery::new(store.clone(), HttpClient::guarded(guard)?, settings))
}

/// Adds the configured `extensions` to the card's, each URI once.
fn declare_extensions(card: &mut AgentCard, extensions: &[AgentExtension]) -> Result<(), KitError> {
    for extension in extensions {
        if extension.uri.trim().is_empty() {
            return Err(KitError::CardConfig("every entry of extensions needs a uri".into()));
        }
        if card.capabilities.extensions.iter().any(|declared| declared.uri == extension.uri) {
            return Err(KitError::CardConfig(format!("extension {:?} is declared twice", extension.uri)));
        }
        card.capabilities.extensions.push(extension.clone());
    }
    Ok(())
}

/// The token that opens the extended card, when the configuration calls for one: someone must be
/// able to open a configured extended card (a caller the trust layer authenticates, or one with
/// the token), and a token is refused where it would never be asked for.
fn extended_card_token(config: &AgentConfig, access_control: bool) -> Result<Option<&str>, KitError> {
    let refuse = |why: &str| Err(KitError::CardConfig(why.to_owned()));
    match (config.extended_card_token.as_deref(), config.extended_skills.is_empty(), access_control) {
        (None, true, _) | (None, false, true) => Ok(None),
        (None, false, false) => refuse(
            "extended_skills are served to authenticated callers only: configure auth (access control) or \
             extended_card_token",
        ),
        (Some(token), _, _) if token.trim().is_empty() => refuse("extended_card_token is empty"),
        (Some(_), true, _) => {
            refuse("extended_card_token is set but extended_skills is empty: there is no extended card")
        }
        (Some(_), false, true) => refuse(
            "extended_card_token is for agents without access control: with auth configured, callers open the \
             extended card with their mesh credentials",
        ),
        (Some(token), false, false) => Ok(Some(token)),
    }
}

/// Checks that each extended skill adds to the public card: an id of its own.
fn check_extended_skills(card: &AgentCard, skills: &[AgentSkill]) -> Result<(), KitError> {
    let mut ids: Vec<&str> = card.skills.iter().map(|skill| skill.id.as_str()).collect();
    for skill in skills {
        if ids.contains(&skill.id.as_str()) {
            return Err(KitError::CardConfig(format!("extended skill {:?} has the id of another skill", skill.id)));
        }
        ids.push(&skill.id);
    }
    Ok(())
}

/// The default task store: a SQLite file per agent under `data/tasks/`.
fn default_task_store_url(agent: &str) -> String {
    let file: String = agent.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
    format!("sqlite://data/tasks/{file}.db")
}

/// The registration an agent sends: its card's name, and its skill ids as capabilities.
fn registration_for(card: &AgentCard, url: &str) -> Registration {
    Registration {
        name: card.name.clone(),
        url: url.to_owned(),
        capabilities: card.skills.iter().map(|s| s.id.clone()).collect(),
        health_endpoint: DEFAULT_HEALTH_PATH.to_owned(),
        process_endpoint: DEFAULT_PROCESS_PATH.to_owned(),
        agent_card_url: Some(format!("{url}{AGENT_CARD_PATH}")),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// An agent binary's configuration: its own keys beside the kit's, flattened.
    #[derive(Debug, Deserialize)]
    struct Binary {
        #[serde(flatten)]
        agent: AgentConfig,
    }

    fn load(durability: &str) -> Result<Binary, mesh_config::ConfigError> {
        let env = HashMap::from([("MESH_SEARCH_TASK_DURABILITY".to_owned(), durability.to_owned())]);
        mesh_config::ConfigLoader::new("MESH_SEARCH", None).with_env(env).load()
    }

    #[test]
    fn the_default_task_store_is_a_file_named_after_the_agent_in_safe_characters() {
        assert_eq!(default_task_store_url("search-2"), "sqlite://data/tasks/search-2.db");
        // Anything but ASCII letters, digits and dashes becomes `_`: no path or URL syntax.
        assert_eq!(default_task_store_url("Héllo agent/../x?y"), "sqlite://data/tasks/H_llo_agent____x_y.db");
    }

    #[test]
    fn extras_show_their_components_by_name() {
        let probe: Box<dyn Fn() -> serde_json::Value + Send + Sync> = Box::new(|| serde_json::json!({"ok": true}));
        let extras = AgentExtras { components: vec![("bus".to_owned(), probe)], ..AgentExtras::default() };
        assert_eq!(format!("{extras:?}"), r#"AgentExtras { components: ["bus"], .. }"#);
    }

    #[test]
    fn each_task_durability_is_read_by_its_name() {
        assert_eq!(AgentConfig::default().task_durability, TaskDurability::Durable);
        for (name, durability) in [
            ("durable", TaskDurability::Durable),
            ("buffered", TaskDurability::Buffered),
            ("memory", TaskDurability::Memory),
        ] {
            assert_eq!(load(name).unwrap().agent.task_durability, durability, "{name}");
        }
    }

    #[test]
    fn an_unknown_task_durability_is_refused_naming_the_key_and_the_choices() {
        let error = load("fast").unwrap_err().to_string();
        for expected in ["task_durability", "durable, buffered or memory", "\"fast\""] {
            assert!(error.contains(expected), "{expected:?} missing from: {error}");
        }
    }

    #[test]
    fn extensions_and_extended_skills_are_read_in_the_cards_shape() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.toml");
        let toml = r#"
            extended_card_token = "t0ken"
            [[extensions]]
            uri = "urn:example:geo/v1"
            required = true
            params = { precision = 3 }
            [[extended_skills]]
            id = "internal"
            name = "Internal search"
            description = "Only for authenticated callers"
            tags = ["internal"]
            inputModes = ["text/plain"]
        "#;
        std::fs::write(&path, toml).unwrap();
        let loaded: Binary =
            mesh_config::ConfigLoader::new("MESH_TEST", Some(&path)).with_env(HashMap::new()).load().unwrap();
        let config = loaded.agent;
        assert_eq!(config.extended_card_token.as_deref(), Some("t0ken"));
        assert_eq!(config.extensions[0].uri, "urn:example:geo/v1");
        assert!(config.extensions[0].required);
        assert_eq!(config.extensions[0].params.as_ref().unwrap()["precision"], 3);
        assert_eq!(config.extended_skills[0].id, "internal");
        assert_eq!(config.extended_skills[0].input_modes, ["text/plain"]);
    }

    #[test]
    fn an_extended_card_token_is_taken_only_where_it_opens_a_card() {
        let skill: AgentSkill =
            serde_json::from_value(serde_json::json!({"id": "x", "name": "x", "description": "x", "tags": []}))
                .unwrap();
        let config = |token: Option<&str>, skills: bool| AgentConfig {
            extended_card_token: token.map(str::to_owned),
            extended_skills: if skills { vec![skill.clone()] } else { Vec::new() },
            ..AgentConfig::default()
        };
        let accepted = |config: &AgentConfig, access_control| extended_card_token(config, access_control).is_ok();
        assert_eq!(extended_card_token(&config(Some("t"), true), false).unwrap(), Some("t"));
        assert!(accepted(&config(None, false), false) && accepted(&config(None, false), true));
        assert!(accepted(&config(None, true), true), "the trust layer authenticates");
        assert!(!accepted(&config(None, true), false), "nobody could open it");
        assert!(!accepted(&config(Some("t"), true), true), "a token the trust layer would refuse");
        assert!(!accepted(&config(Some("t"), false), false), "no extended card to open");
        assert!(!accepted(&config(Some(" "), true), false), "an empty token");
    }

    #[test]
    fn extensions_and_extended_skills_add_to_the_card_without_repeating_it() {
        let mut card: AgentCard = serde_json::from_value(serde_json::json!({
            "name": "a", "description": "d", "version": "1", "capabilities": {"extensions": [{"uri": "urn:a"}]},
            "defaultInputModes": [], "defaultOutputModes": [],
            "skills": [{"id": "s", "name": "s", "description": "s", "tags": []}]
        }))
        .unwrap();
        let extension = |uri: &str| AgentExtension { uri: uri.into(), description: None, required: true, params: None };
        assert!(declare_extensions(&mut card, &[extension("urn:a")]).is_err());
        assert!(declare_extensions(&mut card, &[extension(" ")]).is_err());
        declare_extensions(&mut card, &[extension("urn:b")]).unwrap();
        assert_eq!(card.capabilities.extensions.len(), 2);
        let skill = |id: &str| AgentSkill { id: id.into(), ..card.skills[0].clone() };
        assert!(check_extended_skills(&card, &[skill("s")]).is_err());
        assert!(check_extended_skills(&card, &[skill("t"), skill("t")]).is_err());
        assert!(check_extended_skills(&card, &[skill("t")]).is_ok());
    }
}
