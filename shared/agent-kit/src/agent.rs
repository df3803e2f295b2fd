use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Extension, Json, Router, middleware};
use mesh_client::{CallScope, CircuitReport};
use mesh_protocol::seed::{
    ConfidenceLevel, Message, Part, ResponseMetadata, ResponseStatus, Role, TaskRequest, TaskResponse,
};
use serde_json::{Map, Value};

use crate::call_safety::admit_calls;
use crate::card::CardDocument;
use crate::error::{AgentError, ErrorResponse};
use crate::http::{JsonBody, REQUEST_ID_HEADER};
use crate::metrics::{self, HealthReport, ServiceMetrics};

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
    /// The call being handled (its context and deadline); calls made for it derive from this.
    pub call: CallScope,
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
    card: CardDocument,
    handler: H,
    metrics: Arc<ServiceMetrics>,
}

/// The routes of an agent: `POST /tasks/send`, the card at its well-known path and at the legacy
/// `/agent.json`, and `/health`. Add [`crate::http::with_common_layers`] around it to serve it.
pub fn agent_router<H: AgentHandler>(card: CardDocument, handler: H, metrics: Arc<ServiceMetrics>) -> Router {
    let name: Arc<str> = Arc::from(card.card().name.as_str());
    let state = Arc::new(AgentState { card, handler, metrics: metrics.clone() });
    let tasks = Router::new()
        .route("/tasks/send", post(send_task::<H>))
        .route_layer(middleware::from_fn_with_state(name, admit_calls))
        .route_layer(middleware::from_fn_with_state(metrics, metrics::track))
        .with_state(state.clone());
    let cards = Router::new()
        .route("/.well-known/agent-card.json", get(serve_card::<H>))
        .route("/agent.json", get(serve_card::<H>))
        .route("/health", get(health::<H>))
        .with_state(state);
    tasks.merge(cards)
}

/// `GET /health`: the service counters, and the circuits of the agents this one calls.
async fn health<H: AgentHandler>(State(state): State<Arc<AgentState<H>>>) -> Json<HealthReport> {
    Json(HealthReport { circuits: state.handler.circuits(), ..state.metrics.report() })
}

async fn serve_card<H: AgentHandler>(State(state): State<Arc<AgentState<H>>>, headers: HeaderMap) -> Response {
    state.card.respond(&headers)
}

async fn send_task<H: AgentHandler>(
    State(state): State<Arc<AgentState<H>>>,
    headers: HeaderMap,
    scope: Option<Extension<CallScope>>,
    JsonBody(task): JsonBody<TaskRequest>,
) -> Result<Json<TaskResponse>, ErrorResponse> {
    let started = Instant::now();
    let request_id = headers.get(REQUEST_ID_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let fail = |e: ErrorResponse| e.with_request_id(request_id.clone());
    let message = task
        .last_user_message()
        .map_err(|e| fail(ErrorResponse::new(StatusCode::BAD_REQUEST, "TASK_INVALID", e.to_string())))?;
    let task_id = match task.id.as_deref() {
        Some("") => {
            return Err(fail(ErrorResponse::new(StatusCode::BAD_REQUEST, "TASK_INVALID", "the task id is empty")));
        }
        Some(id) => id.to_owned(),
        None => uuid::Uuid::new_v4().to_string(),
    };
    let input = TaskInput {
        task_id: task_id.clone(),
        request_id: request_id.clone(),
        text: message.text(),
        data: message.data(),
        messages: task.messages.clone(),
        call: scope.map(|Extension(scope)| scope).unwrap_or_else(|| {
            CallScope::received(state.card.card().name.as_str(), mesh_protocol::call::CallContext::default())
        }),
    };
    let reply = state.handler.handle(input).await.map_err(|e: AgentError| fail(e.into()))?;
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
