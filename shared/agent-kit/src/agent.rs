use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use mesh_client::{CallScope, CircuitReport};
use mesh_graph::LinkContext;
use mesh_protocol::handoff::Handoff;
use mesh_protocol::seed::{
    ConfidenceLevel, Message, Part, ResponseMetadata, ResponseStatus, Role, TaskRequest, TaskResponse,
};
use serde_json::{Map, Value};

use mesh_a2a_server::{EngineSettings, Inbound, Surface, TaskEngine, TaskHandler, a2a_router};

use crate::seed::{SeedTasks, seed_task};
use mesh_a2a_server::card::CardDocument;
use mesh_server::ErrorResponse;
use mesh_server::call_safety::AdmitCalls;

use crate::error::AgentError;
use mesh_protocol::a2a::v1::Task;
use mesh_server::http::track_requests;
use mesh_server::http::{JsonBody, REQUEST_ID_HEADER};
use mesh_server::metrics::ServiceMetrics;
use mesh_server::middleware::layer;
use mesh_tasks::TaskStore;

/// A task as a handler sees it: the query text and data of the last user message, already
/// validated, plus the whole conversation for agents that need it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskInput {
    pub task_id: String,
    pub request_id: Option<String>,
    /// Text parts of the last user message, joined by newlines.
    pub text: String,
    /// Data parts of the last user message that are JSON objects, merged.
    pub data: Map<String, Value>,
    pub messages: Vec<Message>,
    /// The call being handled (its context, deadline, and the handoff context its caller passed
    /// on, [`CallScope::handoff`]); calls made for it derive from this.
    pub call: CallScope,
    /// The link an agent message came over (who sent it, in which relationship), when it is one
    /// (an A2A message in the conversation `link:{link_id}`, see [`crate::agent_message`]).
    pub link: Option<LinkContext>,
}

/// What a handler answers: the reply parts, and warnings when the answer is partial.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgentReply {
    pub parts: Vec<Part>,
    /// Non-empty makes the answer `PARTIAL` (seed 003): what was limited or degraded.
    pub warnings: Vec<String>,
    /// How sure the agent is; `HIGH` for a complete answer and `MEDIUM` for a partial one when absent.
    pub confidence: Option<ConfidenceLevel>,
}

impl AgentReply {
    /// A complete answer carrying one JSON value.
    pub fn data(data: Value) -> Self {
        Self { parts: vec![Part::Data { data }], warnings: Vec::new(), confidence: None }
    }
}

/// The one thing an agent implements; the kit does the HTTP.
pub trait AgentHandler: Send + Sync + 'static {
    fn handle(&self, task: TaskInput) -> impl Future<Output = Result<AgentReply, AgentError>> + Send;

    /// The circuit breakers of the agents this one calls, shown in `/health`.
    fn circuits(&self) -> Vec<CircuitReport> {
        Vec::new()
    }
}

struct AgentState<H> {
    card: Arc<CardDocument>,
    handler: Arc<H>,
    engine: TaskEngine<SeedTasks<H>>,
}

impl<H: AgentHandler> AgentState<H> {
    /// Claims a caller-chosen id for a new seed task by storing the task (`working`) before it is
    /// handled. A caller-chosen id names one task: an id that a task of the tenant holds already
    /// is refused, so no caller ever overwrites another's record. The task store's key decides,
    /// so neither two requests here nor two replicas sharing the store can both take one id.
    async fn claim_seed_id(&self, tenant: &str, working: &Task) -> Result<(), ErrorResponse> {
        match self.engine.create(tenant, working).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(ErrorResponse::new(
                StatusCode::CONFLICT,
                "TASK_ID_TAKEN",
                format!(
                    "a task with id {:?} exists already: choose another id, or send none and one is chosen",
                    working.id
                ),
            )),
            // The id cannot be promised free.
            Err(error) => Err(AgentError::Unavailable(format!("the task store does not answer: {error}")).into()),
        }
    }
}

/// The routes of an agent answering seed tasks: `POST /tasks/send`, the A2A bindings over the
/// same handler and the same task store, the card and `/health`. `surface` is the public card
/// (a [`CardDocument`] alone) or a [`Surface`] with an extended card. With `join`, A2A turns in a
/// conversation of the agent's bus topic share its history. With `graph`, a link message the
/// handler processed is reported to the registry. Add [`mesh_server::http::with_common_layers`]
/// around it to serve it.
pub fn agent_router<H: AgentHandler>(
    surface: impl Into<Surface>,
    handler: H,
    metrics: Arc<ServiceMetrics>,
    store: TaskStore,
    join: Option<mesh_bus::ConversationJoin>,
    graph: Option<Arc<crate::graph::AgentGraph>>,
    settings: impl Into<EngineSettings>,
) -> Router {
    let surface = Arc::new(surface.into());
    let card = surface.card().clone();
    let handler = Arc::new(handler);
    let engine =
        TaskEngine::with_settings(store, Arc::new(SeedTasks::new(handler.clone(), join, graph)), settings.into());
    let state = Arc::new(AgentState { card: card.clone(), handler: handler.clone(), engine: engine.clone() });
    let seed = Router::new().route("/tasks/send", post(send_task::<H>)).with_state(state);
    metrics.set_circuits(move || handler.circuits());
    task_routes(seed.merge(a2a_router(engine, surface)), &card, metrics.clone())
        .merge(card_and_health_routes(card, metrics))
}

/// The routes of an agent built on the task model directly ([`TaskHandler`]): the A2A bindings,
/// the card and `/health`. `surface` as for [`agent_router`].
pub fn task_agent_router<T: TaskHandler>(
    surface: impl Into<Surface>,
    handler: T,
    metrics: Arc<ServiceMetrics>,
    store: TaskStore,
    settings: impl Into<EngineSettings>,
) -> Router {
    let surface = Arc::new(surface.into());
    let card = surface.card().clone();
    let engine = TaskEngine::with_settings(store, Arc::new(handler), settings.into());
    task_routes(a2a_router(engine, surface), &card, metrics.clone()).merge(card_and_health_routes(card, metrics))
}

/// Task calls are open to users, agents and admins, admitted by their call context (cycles,
/// depth, deadline) and counted.
fn task_routes(routes: Router, card: &CardDocument, metrics: Arc<ServiceMetrics>) -> Router {
    let name: Arc<str> = Arc::from(card.card().name.as_str());
    let routes = routes.route_layer(layer(AdmitCalls(name))).route_layer(track_requests(metrics));
    mesh_server::auth::require(routes, mesh_server::auth::TASK_ROLES)
}

fn card_and_health_routes(card: Arc<CardDocument>, metrics: Arc<ServiceMetrics>) -> Router {
    let serve_card = move |headers: HeaderMap| {
        let card = card.clone();
        async move { card.respond(&headers) }
    };
    // `GET /health`: the service's status and counters, and the circuits of the agents it calls.
    Router::new()
        .route("/.well-known/agent-card.json", get(serve_card.clone()))
        .route("/agent.json", get(serve_card))
        .merge(mesh_server::http::health_route(metrics))
}

async fn send_task<H: AgentHandler>(
    State(state): State<Arc<AgentState<H>>>,
    headers: HeaderMap,
    inbound: Inbound,
    JsonBody(task): JsonBody<TaskRequest>,
) -> Result<Json<TaskResponse>, ErrorResponse> {
    let started = Instant::now();
    let request_id = headers.get(REQUEST_ID_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let fail = |e: ErrorResponse| e.with_request_id(request_id.clone());
    // The task's record lives in the caller's tenant: a user's own, an agent's forwarded one.
    let tenant = inbound.caller_tenant("").map_err(|e| fail(mesh_server::auth::auth_error_response(&e)))?;
    let message = task
        .last_user_message()
        .map_err(|e| fail(ErrorResponse::new(StatusCode::BAD_REQUEST, "TASK_INVALID", e.to_string())))?;
    // Seed 003's handoff: malformed is refused before any work, oversized trimmed.
    let handoff =
        Handoff::from_metadata(&task.metadata).map_err(|e| fail(AgentError::InvalidInput(e.to_string()).into()))?;
    let call = inbound.scope().with_handoff(handoff);
    let context_id = call.context().context_id.clone();
    // The record's conversation: the one the call names, else a new one.
    let record_context = context_id.clone().unwrap_or_else(mesh_tasks::model::new_id);
    let task_id = match task.id.as_deref() {
        Some("") => {
            return Err(fail(ErrorResponse::new(StatusCode::BAD_REQUEST, "TASK_INVALID", "the task id is empty")));
        }
        Some(id) => {
            let working = seed_task(id, &record_context, &task.messages, None);
            state.claim_seed_id(&tenant, &working).await.map_err(fail)?;
            id.to_owned()
        }
        None => mesh_tasks::model::new_id(),
    };
    let input = TaskInput {
        task_id: task_id.clone(),
        request_id: request_id.clone(),
        text: message.text(),
        data: message.data(),
        messages: task.messages.clone(),
        call,
        // Agent messages travel as A2A messages, whose metadata names their link; a seed task has none.
        link: None,
    };
    mesh_server::observe::record_task(&task_id, context_id.as_deref());
    let outcome = state.handler.handle(input).await.map_err(|e: AgentError| fail(e.into()));
    let record = seed_task(&task_id, &record_context, &task.messages, Some(outcome.as_ref()));
    if let Err(error) = state.engine.record(&tenant, record).await {
        // The answer stands; only its record is missing from the task store.
        tracing::error!(task = %task_id, %error, "could not record the seed task");
    }
    let reply = outcome?;
    let status = if reply.warnings.is_empty() { ResponseStatus::Success } else { ResponseStatus::Partial };
    Ok(Json(TaskResponse {
        id: task_id,
        status,
        confidence_level: Some(reply.confidence.unwrap_or_else(|| ConfidenceLevel::for_status(status))),
        request_id: request_id.clone(),
        messages: vec![Message { role: Role::Agent, parts: reply.parts }],
        warnings: reply.warnings,
        metadata: ResponseMetadata {
            agent: state.card.card().name.clone(),
            processing_time_ms: started.elapsed().as_secs_f64() * 1000.0,
            request_id,
        },
    }))
}
