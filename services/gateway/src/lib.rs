//! The A2A gateway (issue #36): one public door in front of every agent in the registry,
//! whatever it is written in. For each agent it serves the card (interfaces pointed at the
//! gateway), JSON-RPC at `POST /agents/{name}/` and HTTP+JSON under `/agents/{name}/...`, in A2A
//! 1.0 and 0.3, streams relayed as they come; `GET /agents` lists the agents the caller may see
//! and `POST /skills/{skill}/` routes a JSON-RPC message to an agent offering the skill.
//!
//! Every call gets the mesh's authentication and per-tenant rate limits (mesh-server's layers),
//! the CEL rules of [`policy`], tenant isolation and call chains ([`records`]), the graph's link
//! check, timeouts and a circuit breaker per agent, spans, metrics and a call report to the
//! registry ([`relay`]). Agents are reached only at their registered origin, under the outbound
//! address policy, with the gateway's own credential.

pub mod a2a;
mod directory;
mod error;
pub mod policy;
mod records;
mod relay;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use mesh_auth::{AuthConfig, Role};
use mesh_client::{
    AddressPolicy, CallReportSettings, CallReporter, CircuitBreakers, CircuitSettings, HttpClient, OutboundGuard,
    RegistryClient, ReqwestTransport, SystemLookup, follow_policy,
};
use mesh_graph::LinkCache;
use mesh_protocol::call::AGENT_CALL_DEPTH_MAX;
use mesh_protocol::graph::GraphMode;
use mesh_server::auth::{TASK_ROLES, require};
use mesh_server::http::{
    HttpLimits, RATE_LIMIT_BURST_DEFAULT, RATE_LIMIT_PER_S_DEFAULT, SHUTDOWN_DRAIN_MS_DEFAULT, ServeConfig,
    health_route, reachable_url, serve_draining, turn_unready,
};
use mesh_server::observe::with_observed_layers;
use mesh_server::{ServiceMetrics, own_credential};
use serde::Deserialize;
use tokio::net::TcpListener;

pub use error::{CALL_REFUSED_JSONRPC_CODE, GatewayError, POLICY_DENIED_JSONRPC_CODE, UPSTREAM_FAILED_JSONRPC_CODE};

/// Prefix of the environment variables the gateway reads (`MESH_GATEWAY_PORT`, ...).
pub const ENV_PREFIX: &str = "MESH_GATEWAY";
pub const GATEWAY_PORT_DEFAULT: u16 = 8030;
/// The gateway's name: its service name in traces and metrics, the subject of the token it
/// mints for itself, and the caller its call reports name for calls users make.
pub const GATEWAY_NAME: &str = "gateway";
/// Longest time an agent may take to answer a call (its stream: to start) through the gateway.
pub const UPSTREAM_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Longest a relayed stream stays open.
pub const STREAM_MS_MAX_DEFAULT: u64 = 600_000;
/// Most bytes one relayed stream may carry.
pub const STREAM_BYTES_MAX_DEFAULT: u64 = 64 * 1024 * 1024;
/// Largest answer (not a stream) an agent may give.
pub const RESPONSE_BYTES_MAX_DEFAULT: usize = 8 * 1024 * 1024;
/// How long an agent's registration and card are used before they are asked for again.
pub const AGENT_CACHE_MS_DEFAULT: u64 = 5_000;
/// Tasks and conversations whose tenant the gateway remembers.
pub const OWNED_IDS_MAX_DEFAULT: usize = 100_000;
/// Conversations forwarded to agents whose call chain the gateway remembers.
pub const FORWARDS_MAX_DEFAULT: usize = 10_000;
/// Conversations the link cache remembers (the answer rule of the link policy).
const LINK_CONVERSATIONS_MAX: usize = 10_000;
/// Time a stopping gateway lets open calls and streams finish.
const SHUTDOWN_DRAIN_MS: u64 = SHUTDOWN_DRAIN_MS_DEFAULT;
/// Idle connections to each agent kept open for the next call.
const UPSTREAM_IDLE_CONNECTIONS_PER_AGENT: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    /// Address to listen on.
    pub host: String,
    /// Port to listen on; 0 picks a free one.
    pub port: u16,
    /// The URL callers reach the gateway at, written into the cards it serves; the bound
    /// address when absent.
    pub public_url: Option<String>,
    /// The registry (several replicas: a comma-separated list) whose agents the gateway serves.
    pub registry_url: Option<String>,
    /// How callers authenticate, and the gateway's own credential. The registry must accept
    /// that credential as an admin (call reports name other agents); a token the gateway mints
    /// for itself holds the agent and admin roles.
    pub auth: AuthConfig,
    /// The CEL rules ([`policy`]); without a file every authenticated call is allowed.
    pub policy_file: Option<PathBuf>,
    /// Private networks (CIDR) the agents may be on; public addresses are always allowed, cloud
    /// metadata addresses never.
    pub upstream_allowed_networks: Vec<String>,
    /// Milliseconds an agent may take to answer a call (a stream: to start), shortened to the caller's
    /// deadline.
    pub upstream_timeout_ms: u64,
    /// Milliseconds a relayed stream may stay open.
    pub stream_ms_max: u64,
    /// Bytes one relayed stream may carry, at most.
    pub stream_bytes_max: u64,
    /// Largest answer (not a stream) an agent may give.
    pub response_bytes_max: usize,
    /// Largest request body accepted; a larger one is answered 413.
    pub body_limit_bytes: usize,
    /// Requests handled at once, at most; more are answered 503 at once.
    pub concurrency_max: usize,
    /// Calls per second per tenant (0: no limit) and the burst above it.
    pub rate_limit_per_s: u32,
    /// Calls a tenant may make at once above `rate_limit_per_s`.
    pub rate_limit_burst: u32,
    /// Milliseconds an agent's registration and card are used before they are asked for again.
    pub agent_cache_ms: u64,
    /// Tasks and conversations whose tenant the gateway remembers, at most.
    pub owned_ids_max: usize,
    /// Conversations forwarded to agents whose call chain, tenant and deadline the gateway remembers, at
    /// most.
    pub forwards_max: usize,
    /// A call this many agents deep is refused; at most the mesh's limit.
    pub call_depth_max: u32,
    /// Failed calls in a row to one agent that open its circuit.
    pub circuit_consecutive_failures: usize,
    /// Milliseconds an open circuit refuses calls before letting a probe through.
    pub circuit_open_ms: u64,
    /// How the graph's link policy is applied until the registry's is loaded.
    pub graph_mode_until_loaded: GraphMode,
    /// Milliseconds between polls of the registry's link policy (`GET /api/policy`).
    pub graph_refresh_ms: u64,
    /// Milliseconds a stopping gateway keeps accepting requests while it answers not ready, before the drain
    /// begins.
    pub shutdown_unready_ms: u64,
    /// How connections are timed and capped, and the hosts an open gateway answers to.
    pub serve: ServeConfig,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: GATEWAY_PORT_DEFAULT,
            public_url: None,
            registry_url: None,
            auth: AuthConfig::default(),
            policy_file: None,
            upstream_allowed_networks: Vec::new(),
            upstream_timeout_ms: UPSTREAM_TIMEOUT_MS_DEFAULT,
            stream_ms_max: STREAM_MS_MAX_DEFAULT,
            stream_bytes_max: STREAM_BYTES_MAX_DEFAULT,
            response_bytes_max: RESPONSE_BYTES_MAX_DEFAULT,
            body_limit_bytes: mesh_server::http::BODY_LIMIT_BYTES_DEFAULT,
            concurrency_max: mesh_server::http::CONCURRENCY_MAX_DEFAULT,
            rate_limit_per_s: RATE_LIMIT_PER_S_DEFAULT,
            rate_limit_burst: RATE_LIMIT_BURST_DEFAULT,
            agent_cache_ms: AGENT_CACHE_MS_DEFAULT,
            owned_ids_max: OWNED_IDS_MAX_DEFAULT,
            forwards_max: FORWARDS_MAX_DEFAULT,
            call_depth_max: AGENT_CALL_DEPTH_MAX,
            circuit_consecutive_failures: mesh_client::CIRCUIT_CONSECUTIVE_FAILURES_DEFAULT,
            circuit_open_ms: mesh_client::CIRCUIT_OPEN_MS_DEFAULT,
            graph_mode_until_loaded: GraphMode::Open,
            graph_refresh_ms: mesh_client::GRAPH_REFRESH_MS_DEFAULT,
            shutdown_unready_ms: mesh_server::http::SHUTDOWN_UNREADY_MS_DEFAULT,
            serve: ServeConfig::default(),
        }
    }
}

/// A bound, ready-to-run gateway.
#[derive(Debug)]
pub struct Gateway {
    listener: TcpListener,
    router: Router,
    url: String,
    state: Arc<relay::GatewayState>,
    reports: mesh_client::CallReportFlusher,
    metrics: Arc<ServiceMetrics>,
    shutdown_unready: Duration,
    serve: ServeConfig,
}

impl Gateway {
    pub async fn build(config: &GatewayConfig) -> Result<Self, GatewayError> {
        let access = mesh_server::auth::AccessControl::from_config(&config.auth)?;
        mesh_auth::check_exposure(&config.host, access.enabled(), config.auth.insecure)?;
        let registry_url =
            config.registry_url.as_deref().ok_or_else(|| GatewayError::Config("registry_url is required".into()))?;
        let addr = format!("{}:{}", config.host, config.port);
        let listener = TcpListener::bind(&addr).await.map_err(|source| GatewayError::Bind { addr, source })?;
        let url = reachable_url(listener.local_addr().map_err(GatewayError::Serve)?);
        let public_url = config.public_url.clone().unwrap_or_else(|| url.clone()).trim_end_matches('/').to_owned();

        // The registry is asked as an admin (call reports name other agents); agents get a
        // credential that is only an agent's.
        let registry_bearer = own_credential(&config.auth, GATEWAY_NAME, &[Role::Agent, Role::Admin])?;
        let agents_bearer = own_credential(&config.auth, GATEWAY_NAME, &[Role::Agent])?;
        let plain = HttpClient::with_reqwest().map_err(|e| GatewayError::Config(e.to_string()))?;
        let registry_http = match &registry_bearer {
            Some(bearer) => plain.with_renewable_bearer(bearer),
            None => plain,
        };
        let registry =
            RegistryClient::new(registry_url, registry_http).map_err(|e| GatewayError::Config(e.to_string()))?;

        let policy = AddressPolicy::public_only(&config.upstream_allowed_networks)
            .map_err(|e| GatewayError::Config(format!("upstream_allowed_networks: {e}")))?;
        let guard = OutboundGuard::new(policy.clone(), Arc::new(SystemLookup));
        let cards = HttpClient::guarded(guard.clone()).map_err(|e| GatewayError::Config(e.to_string()))?;
        let cards = match &agents_bearer {
            Some(bearer) => cards.with_renewable_bearer(bearer),
            None => cards,
        };
        let client = ReqwestTransport::guarded_builder(&guard)
            .pool_max_idle_per_host(UPSTREAM_IDLE_CONNECTIONS_PER_AGENT)
            .build()
            .map_err(|e| GatewayError::Config(format!("cannot build the HTTP client: {e}")))?;
        let upstream_timeout = Duration::from_millis(config.upstream_timeout_ms.max(1));
        let directory =
            directory::Directory::new(registry, cards, Duration::from_millis(config.agent_cache_ms), upstream_timeout);
        let (reporter, reports) = CallReporter::new(CallReportSettings::default());
        let rules = Arc::new(policy::Policy::load(config.policy_file.as_deref())?);
        let state = Arc::new(relay::GatewayState {
            public_url,
            directory,
            policy: rules,
            ownership: records::Ownership::new(config.owned_ids_max),
            forwards: records::Forwards::new(config.forwards_max),
            links: Arc::new(LinkCache::new(config.graph_mode_until_loaded, LINK_CONVERSATIONS_MAX)),
            reporter,
            metrics: relay::CallMetrics::new(),
            breakers: CircuitBreakers::new(CircuitSettings {
                consecutive_failures: config.circuit_consecutive_failures,
                open: Duration::from_millis(config.circuit_open_ms),
            }),
            client,
            address_policy: policy,
            agents_bearer,
            upstream_timeout,
            stream_ms_max: Duration::from_millis(config.stream_ms_max.max(1)),
            stream_bytes_max: config.stream_bytes_max,
            response_bytes_max: config.response_bytes_max,
            call_depth_max: config.call_depth_max.min(AGENT_CALL_DEPTH_MAX),
            graph_refresh: Duration::from_millis(config.graph_refresh_ms.max(1)),
        });
        let metrics = ServiceMetrics::new(GATEWAY_NAME);
        let breakers = state.clone();
        metrics.set_circuits(move || breakers.breakers.report());
        let routes = Router::new()
            .route("/agents", get(relay::list_agents))
            .route("/agents/{name}/.well-known/agent-card.json", get(relay::card))
            .route("/agents/{name}/", post(relay::jsonrpc))
            .route("/agents/{name}/{*rest}", axum::routing::any(relay::http_json))
            .route("/skills/{skill}/", post(relay::skill))
            .route("/route/", post(relay::routed));
        let routes = require(routes, TASK_ROLES).with_state(state.clone()).merge(health_route(metrics.clone()));
        let limits = HttpLimits {
            access,
            body_limit_bytes: config.body_limit_bytes,
            concurrency_max: config.concurrency_max,
            rate_limit_per_s: config.rate_limit_per_s,
            rate_limit_burst: config.rate_limit_burst,
            // The gateway's own deadline is past every call's, so an agent's timeout answers.
            request_timeout: upstream_timeout + Duration::from_millis(UPSTREAM_TIMEOUT_MS_DEFAULT),
            allowed_hosts: config.serve.allowed_hosts.clone(),
        };
        let router = with_observed_layers(routes, limits, GATEWAY_NAME);
        Ok(Self {
            listener,
            router,
            url,
            state,
            reports,
            metrics,
            shutdown_unready: Duration::from_millis(config.shutdown_unready_ms),
            serve: config.serve.clone(),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Serves until `shutdown` resolves, reloading the policy on SIGHUP, following the
    /// registry's link policy and posting call reports meanwhile.
    pub async fn run_until_stopped(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), GatewayError> {
        let state = self.state.clone();
        let reload = tokio::spawn(state.policy.clone().reload_on_hangup());
        let (registry, links, every) = (state.directory.registry().clone(), state.links.clone(), state.graph_refresh);
        let feed = tokio::spawn(async move { follow_policy(registry, &links, every).await });
        let registry = state.directory.registry().clone();
        let reports = tokio::spawn(self.reports.run(registry));
        let (metrics, unready) = (self.metrics, self.shutdown_unready);
        let unready_then_drain = async move { turn_unready(shutdown, &metrics, unready, async {}).await };
        let drain = Duration::from_millis(SHUTDOWN_DRAIN_MS);
        let served = serve_draining(self.listener, self.router, unready_then_drain, drain, &self.serve)
            .await
            .map_err(GatewayError::Serve);
        reload.abort();
        feed.abort();
        reports.abort();
        served
    }
}
