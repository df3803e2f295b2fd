//! The UI agent (seed 001): WebSocket clients talk plain text with any agent of the mesh; the UI
//! agent turns each text into a docmem node and a record on the target agent's topic, and
//! streams that agent's answers back as plain text. No docmem concept reaches the socket.
//!
//! It also serves the conversations API for the whole mesh (one place holding docmem and the
//! bus, so agents keep only their A2A surface): `GET /conversations`, `GET /conversations/{id}`,
//! `GET /conversations/{id}/messages?as=AGENT_ID` and `POST /conversations/{id}/replay`.
//!
//! Every conversation belongs to the tenant of whoever opened it (the credential's, see
//! [`visible_tenant`]); a user sees and resumes only its own tenant's, and another tenant's
//! answers "not found" as if it did not exist.
//!
//! Everything a socket makes is bounded: it names an agent the registry knows, on this agent's
//! own instance or one running already ([`admission`]); sockets are capped per tenant and in all, and the sockets
//! of one topic share one bus participant, which ends with the last of them ([`sockets`]);
//! messages are capped in size and read no faster than a rate; a conversation is written at its
//! first message.

mod admission;
mod api;
mod sockets;
mod ws;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use mesh_auth::Caller;
use mesh_bus::{BusConfig, BusError, ConversationBus};
use mesh_docmem::{Docmem, DocmemError, Node};
use mesh_server::auth::{ADMIN_ROLES, AccessControl, TASK_ROLES, require};
use mesh_server::http::{
    HttpLimits, SHUTDOWN_DRAIN_MS_DEFAULT, ServeConfig, health_route, reachable_url, serve_draining, turn_unready,
};
use mesh_server::observe::with_observed_layers;
use mesh_server::{DatabaseProbe, ErrorResponse, ServiceMetrics};
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::admission::Admission;
use crate::sockets::{OpenSockets, SocketCaps};
use crate::ws::SocketLimits;

pub use ws::WS_CONVERSATION_HEADER;

/// Prefix of the environment variables the UI agent reads.
pub const ENV_PREFIX: &str = "MESH_UI_AGENT";
pub const UI_AGENT_PORT_DEFAULT: u16 = 8020;
/// The UI agent's type: its id is `ui-{instance_id}`.
pub const UI_AGENT_TYPE: &str = "ui";
/// The service name in traces and metrics.
const SERVICE_NAME: &str = "ui-agent";
/// Answers queued for one socket before the bus consumer waits for it (back-pressure).
const SESSION_QUEUE_MESSAGES: usize = 64;
/// Time between retention sweeps of docmem.
const RETENTION_SWEEP_INTERVAL_MS: u64 = 3_600_000;
const SECONDS_PER_DAY: u64 = 86_400;
/// Sockets open at once, at most, whoever opens them.
pub const WS_SOCKETS_MAX_DEFAULT: usize = 1_024;
/// Sockets one tenant may hold open at once (with authentication off, every caller naming no
/// tenant is one tenant).
pub const WS_SOCKETS_PER_TENANT_MAX_DEFAULT: usize = 64;
/// Largest message, and frame, a socket may send: a line of chat, not a document.
pub const WS_MESSAGE_BYTES_MAX_DEFAULT: usize = 64 * 1024;
/// Messages a socket may send per second, sustained, and the burst above it.
pub const WS_MESSAGES_PER_S_DEFAULT: u32 = 5;
pub const WS_MESSAGES_BURST_DEFAULT: u32 = 20;
/// Seconds a client refused for want of a socket place is told to wait (`Retry-After`).
const SOCKETS_FULL_RETRY_AFTER_S: u64 = 5;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct UiAgentConfig {
    /// Address to listen on.
    pub host: String,
    /// Port to listen on; 0 picks a free one.
    pub port: u16,
    /// The conversation bus the sockets' conversations live on.
    pub bus: BusConfig,
    /// Conversations untouched this many days are deleted from docmem; kept forever when absent.
    pub retention_days: Option<u64>,
    /// How callers authenticate (users, agents, admins may converse); open when empty.
    pub auth: mesh_auth::AuthConfig,
    /// Milliseconds the agent answers not ready while still serving, once told to stop, so load
    /// balancers stop sending it new sockets before it closes.
    pub shutdown_unready_ms: u64,
    /// The registry (several replicas: a comma-separated list) whose agents a socket may talk
    /// to: `agent=` must be registered there, and `instance=`, unless it is this agent's own
    /// `bus.instance_id`, must have its topic on the bus already. The registry is asked with
    /// `auth`'s credential. Without one, every socket is refused (503): no name can be checked.
    pub registry_url: Option<String>,
    /// Origins (`scheme://host[:port]`) whose web pages may open sockets, besides this agent's
    /// own; a loopback origin stands for its port under every loopback name. A client sending no
    /// `Origin` (not a browser: `a2a-mesh chat`) is always let in.
    pub ws_allowed_origins: Vec<String>,
    /// Sockets open at once, at most: past it a handshake is refused 503.
    pub ws_sockets_max: usize,
    /// Sockets one tenant may hold open at once: past it a handshake is refused 429.
    pub ws_sockets_per_tenant_max: usize,
    /// Largest message (and frame) a socket may send; a bigger one closes the socket (1009).
    pub ws_message_bytes_max: usize,
    /// Messages a socket may send per second (0: no limit) and the burst above it; a faster
    /// sender is read no faster, so it waits on its own connection rather than being dropped.
    pub ws_messages_per_s: u32,
    /// Messages a socket may send at once above `ws_messages_per_s`.
    pub ws_messages_burst: u32,
    /// How connections are timed and capped, and the hosts an open UI agent answers to.
    pub serve: ServeConfig,
}

impl Default for UiAgentConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: UI_AGENT_PORT_DEFAULT,
            bus: BusConfig::default(),
            retention_days: None,
            auth: mesh_auth::AuthConfig::default(),
            shutdown_unready_ms: mesh_server::http::SHUTDOWN_UNREADY_MS_DEFAULT,
            registry_url: None,
            ws_allowed_origins: Vec::new(),
            ws_sockets_max: WS_SOCKETS_MAX_DEFAULT,
            ws_sockets_per_tenant_max: WS_SOCKETS_PER_TENANT_MAX_DEFAULT,
            ws_message_bytes_max: WS_MESSAGE_BYTES_MAX_DEFAULT,
            ws_messages_per_s: WS_MESSAGES_PER_S_DEFAULT,
            ws_messages_burst: WS_MESSAGES_BURST_DEFAULT,
            serve: ServeConfig::default(),
        }
    }
}

/// What the UI agent's API fails with.
#[derive(Debug, thiserror::Error)]
pub enum UiError {
    #[error(transparent)]
    Docmem(#[from] DocmemError),
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
    #[error("server failed: {0}")]
    Serve(#[source] std::io::Error),
    #[error("{0}")]
    Auth(#[from] mesh_auth::AuthError),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("{0}")]
    InvalidParameter(String),
    #[error("{0}")]
    UnknownAgent(String),
    #[error("the agents cannot be checked: {0}")]
    Registry(String),
    #[error("web pages of {0} may not open sockets here")]
    OriginNotAllowed(String),
    #[error("tenant {tenant:?} has {max} sockets open already, the most it may; close one first")]
    TenantSocketsFull { tenant: String, max: usize },
    #[error("{0} sockets are open already, the most this UI agent takes; try again later")]
    SocketsFull(usize),
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        let (status, code) = match &self {
            Self::Auth(error) => return mesh_server::auth::auth_error_response(error).into_response(),
            Self::Docmem(DocmemError::NotFound(_)) => (StatusCode::NOT_FOUND, "CONVERSATION_NOT_FOUND"),
            Self::Docmem(DocmemError::Conflict { .. }) => (StatusCode::CONFLICT, "VERSION_CONFLICT"),
            Self::Docmem(DocmemError::Invalid(_))
            | Self::Bus(BusError::InvalidRecord(_))
            | Self::InvalidParameter(_) => (StatusCode::BAD_REQUEST, "REQUEST_INVALID"),
            Self::Docmem(DocmemError::Timeout(_)) | Self::Bus(BusError::Timeout { .. }) => {
                (StatusCode::GATEWAY_TIMEOUT, "BUS_TIMEOUT")
            }
            Self::Bus(BusError::UnknownTopic(_)) => (StatusCode::NOT_FOUND, "TOPIC_NOT_FOUND"),
            Self::UnknownAgent(_) => (StatusCode::NOT_FOUND, "AGENT_NOT_FOUND"),
            Self::Registry(_) => (StatusCode::SERVICE_UNAVAILABLE, "REGISTRY_UNAVAILABLE"),
            Self::OriginNotAllowed(_) => (StatusCode::FORBIDDEN, "ORIGIN_NOT_ALLOWED"),
            Self::TenantSocketsFull { .. } => (StatusCode::TOO_MANY_REQUESTS, "TENANT_SOCKETS_FULL"),
            Self::SocketsFull(_) => (StatusCode::SERVICE_UNAVAILABLE, "SOCKETS_FULL"),
            _ => (StatusCode::SERVICE_UNAVAILABLE, "BUS_UNAVAILABLE"),
        };
        let retry = matches!(self, Self::TenantSocketsFull { .. } | Self::SocketsFull(_));
        let mut response = ErrorResponse::new(status, code, self.to_string()).into_response();
        if retry {
            response.headers_mut().insert(axum::http::header::RETRY_AFTER, SOCKETS_FULL_RETRY_AFTER_S.into());
        }
        response
    }
}

/// Shared by every route and socket.
#[derive(Debug)]
pub(crate) struct UiState {
    agent_id: String,
    bus: Arc<dyn ConversationBus>,
    docmem: Docmem,
    /// Open sockets by conversation id: where that conversation's answers go.
    sessions: Mutex<HashMap<String, mpsc::Sender<String>>>,
    /// Which sockets may open.
    admission: Admission,
    socket_caps: SocketCaps,
    /// What each socket may send.
    socket_limits: SocketLimits,
    /// The sockets open, and the participant of each topic they talk on.
    open_sockets: Mutex<OpenSockets>,
    stop: watch::Receiver<bool>,
}

impl UiState {
    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, mpsc::Sender<String>>> {
        // Each change is one insert or remove: the map is consistent whatever panicked.
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn open_sockets(&self) -> std::sync::MutexGuard<'_, OpenSockets> {
        // Each change is made whole under the lock, without a call that could panic midway.
        self.open_sockets.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A bound, ready-to-run UI agent.
#[derive(Debug)]
pub struct UiAgent {
    listener: TcpListener,
    router: Router,
    url: String,
    state: Arc<UiState>,
    stop: watch::Sender<bool>,
    retention_days: Option<u64>,
    /// Whether docmem's database answers, for `/health`.
    database: DatabaseProbe,
    /// Readiness, turned off first when the agent stops.
    metrics: Arc<ServiceMetrics>,
    shutdown_unready: Duration,
    serve: ServeConfig,
}

impl UiAgent {
    pub async fn build(config: &UiAgentConfig) -> Result<Self, UiError> {
        let access = AccessControl::from_config(&config.auth)?;
        mesh_auth::check_exposure(&config.host, access.enabled(), config.auth.insecure)?;
        let (bus, docmem) = mesh_bus::open_bus(&config.bus).await?;
        let addr = format!("{}:{}", config.host, config.port);
        let listener = TcpListener::bind(&addr).await.map_err(|source| UiError::Bind { addr, source })?;
        let url = reachable_url(listener.local_addr().map_err(UiError::Serve)?);
        let admission = Admission::new(config, &url)?;
        let socket_limits = SocketLimits::new(config)?;
        let (stop, stopped) = watch::channel(false);
        let state = Arc::new(UiState {
            agent_id: mesh_bus::agent_id(UI_AGENT_TYPE, &config.bus.instance_id),
            bus,
            docmem,
            sessions: Mutex::default(),
            admission,
            socket_caps: SocketCaps { total: config.ws_sockets_max, per_tenant: config.ws_sockets_per_tenant_max },
            socket_limits,
            open_sockets: Mutex::default(),
            stop: stopped,
        });
        let metrics = ServiceMetrics::new(SERVICE_NAME);
        let bus_state = state.clone();
        metrics.add_component("bus", move || {
            let (open_sockets, participants) = bus_state.open_sockets().counts();
            serde_json::json!({
                "status": "ok",
                "backend": bus_state.bus.backend(),
                "agent_id": bus_state.agent_id,
                "open_conversations": bus_state.sessions().len(),
                "open_sockets": open_sockets,
                "participants": participants,
            })
        });
        // Without docmem the agent can neither show nor continue a conversation: it cannot serve.
        let database = DatabaseProbe::register(&metrics);
        // Conversing and reading conversations is for users, agents and admins; replay is the
        // operators' (admin).
        let conversations = Router::new()
            .route("/ws", get(ws::open))
            .route("/conversations", get(api::list))
            .route("/conversations/{id}", get(api::tree))
            .route("/conversations/{id}/messages", get(api::messages));
        let replay = Router::new().route("/conversations/{id}/replay", post(api::replay));
        let routes = require(conversations, TASK_ROLES)
            .merge(require(replay, ADMIN_ROLES))
            .with_state(state.clone())
            .merge(health_route(metrics.clone()));
        let router = with_observed_layers(
            routes,
            HttpLimits { access, allowed_hosts: config.serve.allowed_hosts.clone(), ..HttpLimits::default() },
            SERVICE_NAME,
        );
        Ok(Self {
            listener,
            router,
            url,
            state,
            stop,
            retention_days: config.retention_days,
            database,
            metrics,
            shutdown_unready: Duration::from_millis(config.shutdown_unready_ms),
            serve: config.serve.clone(),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn port(&self) -> u16 {
        self.listener.local_addr().map(|a| a.port()).unwrap_or_default()
    }

    /// This agent's id on the bus, `ui-{instance_id}`.
    pub fn agent_id(&self) -> &str {
        &self.state.agent_id
    }

    /// Serves until `shutdown` resolves; then answers not ready while still serving for
    /// `shutdown_unready_ms`, lets open requests and sockets finish (within the drain deadline),
    /// and stops consuming.
    pub async fn run_until_stopped(self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), UiError> {
        let sweeper = self.retention_days.map(|days| tokio::spawn(sweep_retention(self.state.docmem.clone(), days)));
        let (database, docmem) = (self.database, self.state.docmem.clone());
        let probe = tokio::spawn(async move { database.run(SERVICE_NAME, || docmem.ping()).await });
        let (metrics, unready) = (self.metrics, self.shutdown_unready);
        let unready_then_drain = async move { turn_unready(shutdown, &metrics, unready, async {}).await };
        let drain = Duration::from_millis(SHUTDOWN_DRAIN_MS_DEFAULT);
        let served = serve_draining(self.listener, self.router, unready_then_drain, drain, &self.serve)
            .await
            .map_err(UiError::Serve);
        probe.abort();
        let _ = self.stop.send(true);
        if let Some(sweeper) = sweeper {
            sweeper.abort();
        }
        served
    }
}

/// Deletes conversations untouched for `days`, every [`RETENTION_SWEEP_INTERVAL_MS`].
async fn sweep_retention(docmem: Docmem, days: u64) {
    let mut interval = tokio::time::interval(Duration::from_millis(RETENTION_SWEEP_INTERVAL_MS));
    loop {
        interval.tick().await;
        let age = Duration::from_secs(days.saturating_mul(SECONDS_PER_DAY));
        let cutoff = mesh_docmem::timestamp(std::time::SystemTime::now() - age);
        match docmem.prune_roots_older_than(&cutoff).await {
            Ok(deleted) => tracing::info!(deleted, %cutoff, "docmem retention"),
            Err(error) => tracing::warn!(%error, "docmem retention failed"),
        }
    }
}

/// The tenants whose conversations a caller sees: those of the tenant it names, or every
/// tenant's, for an operator (admin) or on an open service; otherwise only its own tenant's
/// (an agent's: the one it names for its user, as for tasks). `None`: every tenant's.
pub(crate) fn visible_tenant(caller: &Caller, named: Option<&str>) -> Result<Option<String>, UiError> {
    if caller.holds_any(ADMIN_ROLES) {
        return Ok(named.map(str::to_owned));
    }
    Ok(Some(caller.tenant(named.unwrap_or_default(), None)?))
}

/// The conversation `id`, when `visible` (see [`visible_tenant`]) lets the caller see it.
/// Another tenant's is "not found", exactly like one that does not exist.
pub(crate) async fn visible_root(state: &UiState, id: &str, visible: Option<&str>) -> Result<Node, UiError> {
    let root = state.docmem.get(id).await?;
    // The tenant first: another tenant's message must not show as one.
    if visible.is_some_and(|tenant| tenant != root.tenant) {
        return Err(DocmemError::NotFound(id.to_owned()).into());
    }
    if root.parent_id.is_some() {
        return Err(DocmemError::Invalid(format!("{id} is a message, not a conversation")).into());
    }
    Ok(root)
}

pub(crate) fn session_channel() -> (mpsc::Sender<String>, mpsc::Receiver<String>) {
    mpsc::channel(SESSION_QUEUE_MESSAGES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_answer_with_their_status() {
        let cases = [
            (UiError::Docmem(DocmemError::NotFound("c1".into())), StatusCode::NOT_FOUND),
            (UiError::Docmem(DocmemError::Conflict { id: "n".into(), expected: 1, actual: 2 }), StatusCode::CONFLICT),
            (UiError::Docmem(DocmemError::Invalid("x".into())), StatusCode::BAD_REQUEST),
            (UiError::Bus(BusError::Timeout { operation: "producing", timeout_ms: 1 }), StatusCode::GATEWAY_TIMEOUT),
            (UiError::Bus(BusError::Kafka("down".into())), StatusCode::SERVICE_UNAVAILABLE),
            (UiError::InvalidParameter("x".into()), StatusCode::BAD_REQUEST),
            (UiError::UnknownAgent("x".into()), StatusCode::NOT_FOUND),
            (UiError::Registry("down".into()), StatusCode::SERVICE_UNAVAILABLE),
            (UiError::OriginNotAllowed("http://evil.example".into()), StatusCode::FORBIDDEN),
        ];
        for (error, status) in cases {
            assert_eq!(error.into_response().status(), status);
        }
    }

    #[test]
    fn a_client_refused_a_socket_place_is_told_when_to_try_again() {
        let cases = [
            (UiError::TenantSocketsFull { tenant: "acme".into(), max: 2 }, StatusCode::TOO_MANY_REQUESTS),
            (UiError::SocketsFull(3), StatusCode::SERVICE_UNAVAILABLE),
        ];
        for (error, status) in cases {
            let response = error.into_response();
            assert_eq!(response.status(), status);
            assert_eq!(response.headers()[axum::http::header::RETRY_AFTER], SOCKETS_FULL_RETRY_AFTER_S.to_string());
        }
    }
}
