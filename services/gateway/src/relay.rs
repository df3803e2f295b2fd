//! The gateway's routes and the relay every call goes through: admission (call context,
//! policy, links, tenant), the call to the agent (its endpoint on its registered origin, the
//! gateway's credential, the call context in `x-mesh-*` headers, a timeout, its circuit), the
//! answer relayed (a stream as it comes, with backpressure and caps), and what is recorded of
//! it (task owners, forwarded chains, a call report, metrics).
//!
//! Call chains: a user starts a chain. An agent calling through the gateway continues the chain
//! its `x-mesh-*` headers carry (kit agents forward them); an agent that forwards none (an
//! official-SDK agent) continues the chain of the call the gateway forwarded to it in the same
//! conversation (the `contextId` of its message), from [`Forwards`]; failing both, the chain
//! starts with it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use http_body_util::BodyExt;
use mesh_auth::{Caller, Role};
use mesh_client::{
    AddressPolicy, CallReporter, CircuitBreakers, ClientError, Passage, RenewableBearer, TransportError,
};
use mesh_graph::{Decision, LinkCache};
use mesh_protocol::call::{CallContext, CallRejection};
use mesh_protocol::graph::{CallReport, OutcomeStatus};
use mesh_protocol::jsonrpc::{A2aErrorCode, is_json_content_type};
use mesh_server::auth::RequestCaller;
use mesh_server::http::PathParam;
use mesh_telemetry::HandleCache;
use metrics::{Counter, Histogram};
use serde_json::{Value, json};

use crate::GATEWAY_NAME;
use crate::a2a::{self, A2aCall, Binding};
use crate::directory::{Directory, Upstream};
use crate::error::GatewayError;
use crate::policy::{Policy, Subject};
use crate::records::{Forwarded, Forwards, Owner, Ownership};

/// Attempts of one call: the agent again (or the next agent offering the skill) only when the
/// connection failed, so the request never reached an agent.
const CALL_ATTEMPTS_MAX: usize = 3;
/// Bytes of a stream's beginning read for the task it creates.
const STREAM_TAP_BYTES_MAX: usize = 64 * 1024;
/// Cards read at once for `GET /agents`.
const CARDS_READ_AT_ONCE: usize = 8;
/// Request headers passed on to the agent: content negotiation and A2A's own.
const FORWARDED_HEADERS: [&str; 4] = ["content-type", "accept", "a2a-version", "a2a-extensions"];
/// Answer headers passed back to the caller.
const RETURNED_HEADERS: [&str; 4] = ["content-type", "cache-control", "a2a-version", "a2a-extensions"];
/// The label sets of each call metric whose handles the gateway keeps: far more than a mesh's
/// agents, methods and statuses make; past it, series are registered per call, as without a cache.
const CALL_SERIES_CACHED_MAX: usize = 4_096;

/// Shared by every route.
#[derive(Debug)]
pub(crate) struct GatewayState {
    pub public_url: String,
    pub directory: Directory,
    pub policy: Arc<Policy>,
    pub ownership: Ownership,
    pub forwards: Forwards,
    pub links: Arc<LinkCache>,
    pub reporter: CallReporter,
    pub metrics: CallMetrics,
    pub breakers: CircuitBreakers<reqwest::Body>,
    /// The client calls to agents go out on: addresses checked after resolution, no redirects.
    pub client: reqwest::Client,
    /// Checks URLs with a literal IP, which never reach the client's resolver.
    pub address_policy: AddressPolicy,
    pub agents_bearer: Option<RenewableBearer>,
    pub upstream_timeout: Duration,
    pub stream_ms_max: Duration,
    pub stream_bytes_max: u64,
    pub response_bytes_max: usize,
    pub call_depth_max: u32,
    pub graph_refresh: Duration,
}

/// Who calls, and in which chain and tenant.
#[derive(Debug, Clone)]
struct Admitted {
    caller: Caller,
    /// The calling agent, when an agent calls.
    agent: Option<String>,
    context: CallContext,
    tenant: String,
    deadline: Option<Instant>,
}

impl Admitted {
    fn is_admin(&self) -> bool {
        self.caller.principal().is_some_and(|p| p.has(Role::Admin))
    }

    fn roles(&self) -> Vec<&str> {
        match &self.caller {
            Caller::Authenticated(principal) => principal.roles.iter().map(|r| r.as_str()).collect(),
            Caller::Open => vec!["open"],
            Caller::Anonymous => Vec::new(),
        }
    }
}

/// The caller's chain, tenant and deadline (see the module's documentation).
fn admit_caller(
    state: &GatewayState,
    caller: Caller,
    headers: &HeaderMap,
    context_id: Option<&str>,
) -> Result<Admitted, GatewayError> {
    let mut context = CallContext::from_headers(|name| headers.get(name).and_then(|v| v.to_str().ok()))
        .map_err(GatewayError::CallRefused)?;
    let agent = match &caller {
        Caller::Authenticated(principal) if principal.has(Role::Agent) => Some(principal.subject.clone()),
        _ => None,
    };
    let mut carried = None;
    let mut deadline = context.deadline_ms.map(|ms| Instant::now() + Duration::from_millis(ms));
    match (&caller, &agent) {
        // A user starts a chain; what its headers say of one does not count.
        (Caller::Authenticated(_), None) => {
            context.chain.clear();
            context.depth = 0;
        }
        (_, Some(me)) if context.chain.is_empty() => {
            if let Some(forwarded) = context_id.and_then(|id| state.forwards.of(me, id)) {
                context.chain = forwarded.chain;
                carried = Some(forwarded.tenant);
                deadline = match (deadline, forwarded.deadline) {
                    (Some(mine), Some(theirs)) => Some(mine.min(theirs)),
                    (mine, theirs) => mine.or(theirs),
                };
                context.correlation_id = context.correlation_id.or(forwarded.correlation_id);
            }
            context.chain.push(me.clone());
        }
        (_, Some(me)) if context.chain.last() != Some(me) => context.chain.push(me.clone()),
        // An open gateway trusts the headers, as every open mesh server does.
        _ => {}
    }
    context.depth = context.depth.max(u32::try_from(context.chain.len()).unwrap_or(u32::MAX));
    let requested = context.tenant.clone().unwrap_or_default();
    let tenant = caller.tenant(&requested, carried.as_deref())?;
    Ok(Admitted { caller, agent, context, tenant, deadline })
}

/// The checks of a call to `agent` before anything is sent: depth and cycles, the rules, the
/// graph's links, and the tenant of the task or conversation it addresses.
fn check_call(
    state: &GatewayState,
    who: &Admitted,
    agent: &str,
    call: &A2aCall,
    skill: &str,
) -> Result<(), GatewayError> {
    who.context.admit(agent).map_err(GatewayError::CallRefused)?;
    if who.context.depth >= state.call_depth_max {
        return Err(GatewayError::CallRefused(CallRejection::DepthExceeded {
            depth: who.context.depth,
            chain: who.context.chain.clone(),
        }));
    }
    let principal = who.caller.principal();
    state.policy.decide(&Subject {
        caller: principal.map_or("", |p| p.subject.as_str()),
        caller_tenant: principal.map_or("", |p| p.tenant.as_str()),
        roles: who.roles(),
        tenant: &who.tenant,
        agent,
        method: &call.method,
        skill,
        binding: call.binding.as_str(),
        version: call.version,
        chain: &who.context.chain,
    })?;
    let caller = who.agent.as_deref().or(who.context.chain.last().map(String::as_str));
    if let Decision::Denied(denial) = state.links.admit(caller, agent, call.context_id.as_deref()) {
        return Err(GatewayError::LinkDenied(denial));
    }
    if who.is_admin() {
        return Ok(());
    }
    // ListTasks goes through; its answer keeps only the caller's tenant's tasks (`own_tasks`).
    // Tasks not created through the gateway are not known to be the caller's: refused too.
    if let Some(task) = &call.task_id
        && state.ownership.owner(agent, task, &who.tenant) != Owner::Same
    {
        return Err(GatewayError::TaskNotFound(task.clone()));
    }
    if let Some(context_id) = &call.context_id
        && state.ownership.owner(agent, context_id, &who.tenant) == Owner::Other
    {
        return Err(GatewayError::TaskNotFound(format!("of conversation {context_id}")));
    }
    Ok(())
}

/// What goes to the agent.
struct Outbound {
    method: http::Method,
    /// Below the binding's URL: the HTTP+JSON path and query; empty for JSON-RPC.
    suffix: String,
    headers: HeaderMap,
    body: Bytes,
}

/// How a refusal is answered: a JSON-RPC error with the request's id, in the request's A2A
/// version (1.0 when `v1`), or on HTTP+JSON.
#[derive(Debug, Clone)]
enum Answer {
    JsonRpc { id: Value, v1: bool },
    Rest,
}

impl Answer {
    fn jsonrpc(id: Value, call: &A2aCall) -> Self {
        Self::JsonRpc { id, v1: call.version == a2a::VERSION_1_0 }
    }

    fn refuse(&self, error: &GatewayError) -> Response {
        match self {
            Self::JsonRpc { id, v1 } => error.jsonrpc(id.clone(), *v1),
            Self::Rest => error.rest(),
        }
    }
}

/// Relays `call` to the first of `agents` that takes it: the next one only when the call could
/// not reach the previous (its connection failed, or its circuit is open).
async fn relay(
    state: &Arc<GatewayState>,
    who: &Admitted,
    agents: &[String],
    skill: &str,
    call: &A2aCall,
    outbound: Outbound,
    answer: &Answer,
) -> Response {
    mesh_server::observe::record_a2a_method(&call.method);
    if let Some(task) = &call.task_id {
        mesh_server::observe::record_task(task, call.context_id.as_deref());
    }
    let mut last = GatewayError::NoAgentForSkill(skill.to_owned());
    let mut attempts = 0;
    for agent in agents {
        if let Err(error) = check_call(state, who, agent, call, skill) {
            // A refusal for one agent of a skill may not hold for the next; for one agent it is final.
            last = error;
            continue;
        }
        let upstream = match state.directory.agent(agent).await {
            Ok(upstream) => upstream,
            Err(error) => {
                last = error;
                continue;
            }
        };
        while attempts < CALL_ATTEMPTS_MAX {
            attempts += 1;
            let started = Instant::now();
            match send(state, who, &upstream, call, &outbound).await {
                Ok(response) => {
                    let status = response.status();
                    let relayed = answer_of(state, who, &upstream.name, call, response).await;
                    report(state, who, &upstream.name, skill, &call.method, outcome_of(status), started);
                    return relayed.unwrap_or_else(|error| answer.refuse(&error));
                }
                Err(Unsent::NotReached(error)) => {
                    report(state, who, &upstream.name, skill, &call.method, OutcomeStatus::Error, started);
                    last = error;
                    // Another agent of the skill if there is one, else this one again.
                    if agents.len() > 1 {
                        break;
                    }
                }
                Err(Unsent::Failed(error)) => {
                    let status = if matches!(error, GatewayError::Timeout { .. }) {
                        OutcomeStatus::Timeout
                    } else {
                        OutcomeStatus::Error
                    };
                    report(state, who, &upstream.name, skill, &call.method, status, started);
                    count(state, &upstream.name, &call.method, error_label(&error));
                    return answer.refuse(&error);
                }
            }
        }
    }
    count(state, agents.first().map_or("", String::as_str), &call.method, error_label(&last));
    answer.refuse(&last)
}

/// Why a call got no answer.
enum Unsent {
    /// Nothing reached the agent: another attempt is safe.
    NotReached(GatewayError),
    /// The call may have reached the agent: it is not repeated.
    Failed(GatewayError),
}

/// Sends the call to `upstream` through its circuit; the answer's head, its body to follow.
async fn send(
    state: &GatewayState,
    who: &Admitted,
    upstream: &Upstream,
    call: &A2aCall,
    outbound: &Outbound,
) -> Result<http::Response<reqwest::Body>, Unsent> {
    let left = who.deadline.map(|deadline| deadline.saturating_duration_since(Instant::now()));
    let timeout = left.map_or(state.upstream_timeout, |left| left.min(state.upstream_timeout));
    let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    if timeout.is_zero() {
        return Err(Unsent::Failed(GatewayError::DeadlinePassed(0)));
    }
    let endpoint = upstream.endpoint(call.binding, call.version);
    let url = match call.binding {
        Binding::JsonRpc => endpoint.to_owned(),
        Binding::HttpJson => format!("{}{}", endpoint.trim_end_matches('/'), outbound.suffix),
    };
    let refused = |reason: String| GatewayError::AddressRefused { agent: upstream.name.clone(), reason };
    // Parsed once, for the check and for the request (a reqwest request built from a string
    // parses it again).
    let parsed = url::Url::parse(&url)
        .map_err(|_| Unsent::Failed(refused(mesh_client::AddressRefused::InvalidUrl(url.clone()).to_string())))?;
    state.address_policy.check_parsed_url(&parsed).map_err(|e| Unsent::Failed(refused(e.to_string())))?;
    let mut headers = HeaderMap::with_capacity(16);
    for name in FORWARDED_HEADERS {
        if let Some(value) = outbound.headers.get(name) {
            headers.insert(HeaderName::from_static(name), value.clone());
        }
    }
    // The gateway's own credential, never the caller's.
    if let Some(bearer) = &state.agents_bearer {
        headers.insert(header::AUTHORIZATION, bearer.header());
    }
    let onward = CallContext {
        deadline_ms: Some(timeout_ms),
        tenant: Some(who.tenant.clone()).filter(|t| !t.is_empty()),
        context_id: call.context_id.clone(),
        ..who.context.clone()
    };
    for (name, value) in onward.to_headers() {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    mesh_telemetry::inject_current(&mut headers);
    if let Some(context_id) = &call.context_id {
        remember_forward(state, who, &upstream.name, context_id, timeout);
    }
    let mut request = reqwest::Request::new(outbound.method.clone(), parsed);
    *request.headers_mut() = headers;
    *request.body_mut() = Some(outbound.body.clone().into());
    let client = state.client.clone();
    let exchange_url = url.clone();
    let exchange = Box::pin(async move {
        match tokio::time::timeout(timeout, client.execute(request)).await {
            Ok(Ok(response)) => Ok(http::Response::<reqwest::Body>::from(response)),
            Ok(Err(error)) => Err(ClientError::Transport { url: exchange_url, source: transport_error(&error) }),
            Err(_) => Err(ClientError::Transport { url: exchange_url, source: TransportError::Timeout { timeout_ms } }),
        }
    });
    let unavailable = |reason: String| GatewayError::Unavailable { agent: upstream.name.clone(), reason };
    match state.breakers.pass(&upstream.name, &upstream.url, exchange).await {
        Passage::Answered(response) => Ok(response),
        Passage::Refused => Err(Unsent::NotReached(GatewayError::CircuitOpen(upstream.name.clone()))),
        Passage::Failed(ClientError::Transport { source: TransportError::Connect(reason), .. }) => {
            Err(Unsent::NotReached(unavailable(reason)))
        }
        Passage::Failed(ClientError::Transport { source: TransportError::Refused(reason), .. }) => {
            Err(Unsent::Failed(refused(reason)))
        }
        Passage::Failed(ClientError::Transport { source: TransportError::Timeout { timeout_ms }, .. }) => {
            Err(Unsent::Failed(GatewayError::Timeout { agent: upstream.name.clone(), timeout_ms }))
        }
        Passage::Failed(error) => Err(Unsent::Failed(unavailable(error.to_string()))),
    }
}

/// A reqwest failure as the mesh's transport errors: a connection that failed (nothing sent)
/// apart from the rest, the address policy's refusal (through the resolver) apart again.
fn transport_error(error: &reqwest::Error) -> TransportError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = source {
        if let Some(refusal) = cause.downcast_ref::<mesh_client::AddressRefused>() {
            return TransportError::Refused(refusal.to_string());
        }
        source = cause.source();
    }
    if error.is_connect() {
        TransportError::Connect(error.to_string())
    } else {
        TransportError::Other(error.to_string())
    }
}

/// Remembers that `agent` was called in conversation `context_id` with the caller's chain.
fn remember_forward(state: &GatewayState, who: &Admitted, agent: &str, context_id: &str, timeout: Duration) {
    let forwarded = Forwarded {
        chain: who.context.chain.clone(),
        tenant: who.tenant.clone(),
        deadline: Some(Instant::now() + timeout),
        correlation_id: who.context.correlation_id.clone().or_else(|| who.context.request_id.clone()),
    };
    state.forwards.record(agent, context_id, forwarded);
}

/// Records the task and conversation an answer names (`named`, from [`a2a::answered_task`]) as
/// the caller's tenant's, and the chain of a conversation the agent started.
fn remember_answer(state: &GatewayState, who: &Admitted, agent: &str, named: (Option<String>, Option<String>)) {
    let (task, context_id) = named;
    if let Some(task) = &task {
        state.ownership.record(agent, task, &who.tenant);
        // The call's span names the task its answer created: a SendMessage's request names none.
        mesh_server::observe::record_task(task, context_id.as_deref());
    }
    if let Some(context_id) = &context_id {
        state.ownership.record(agent, context_id, &who.tenant);
        if state.forwards.of(agent, context_id).is_none() {
            remember_forward(state, who, agent, context_id, state.upstream_timeout);
        }
    }
}

/// Keeps in a ListTasks answer (JSON-RPC `result` or the HTTP+JSON body) only the tasks created
/// through the gateway for the caller's tenant: the agent lists every tenant's tasks, and tasks
/// the gateway did not see created are not known to be the caller's. `totalSize` drops by as
/// many as were left out of this page.
fn own_tasks(ownership: &Ownership, agent: &str, tenant: &str, answer: &mut Value) {
    let page = match answer.get_mut("result") {
        Some(result) => result,
        None => answer,
    };
    let Some(tasks) = page.get_mut("tasks").and_then(Value::as_array_mut) else {
        return;
    };
    let listed = tasks.len();
    tasks.retain(|task| {
        task.get("id").and_then(Value::as_str).is_some_and(|id| ownership.owner(agent, id, tenant) == Owner::Same)
    });
    let left_out = listed - tasks.len();
    if let Some(total) = page.get_mut("totalSize")
        && let Some(n) = total.as_u64()
    {
        *total = Value::from(n.saturating_sub(u64::try_from(left_out).unwrap_or(u64::MAX)));
    }
}

/// The answer relayed to the caller: a stream as it comes (its beginning read for the task it
/// creates), anything else read whole (bounded) and its task recorded.
async fn answer_of(
    state: &Arc<GatewayState>,
    who: &Admitted,
    agent: &str,
    call: &A2aCall,
    response: http::Response<reqwest::Body>,
) -> Result<Response, GatewayError> {
    let (parts, body) = response.into_parts();
    count(state, agent, &call.method, parts.status.as_str());
    let mut builder = Response::builder().status(parts.status);
    for name in RETURNED_HEADERS {
        if let Some(value) = parts.headers.get(name) {
            builder = builder.header(name, value);
        }
    }
    let is_stream = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let body = if is_stream {
        Body::from_stream(relay_stream(state.clone(), who.clone(), agent.to_owned(), body))
    } else {
        let limit = state.response_bytes_max;
        let unavailable = |reason: String| GatewayError::Unavailable { agent: agent.to_owned(), reason };
        let collected =
            tokio::time::timeout(state.upstream_timeout, http_body_util::Limited::new(body, limit).collect())
                .await
                .map_err(|_| GatewayError::Timeout {
                    agent: agent.to_owned(),
                    timeout_ms: u64::try_from(state.upstream_timeout.as_millis()).unwrap_or(u64::MAX),
                })?
                .map_err(|e| unavailable(format!("its answer: {e}")))?
                .to_bytes();
        if !parts.status.is_success() {
            Body::from(collected)
        } else if call.method == "ListTasks" && !who.is_admin() {
            match serde_json::from_slice::<Value>(&collected) {
                Ok(mut answer) => {
                    own_tasks(&state.ownership, agent, &who.tenant, &mut answer);
                    Body::from(serde_json::to_vec(&answer).map_err(|e| GatewayError::Invalid(e.to_string()))?)
                }
                Err(_) => Body::from(collected),
            }
        } else {
            if let Some(named) = a2a::answered_task(&collected) {
                remember_answer(state, who, agent, named);
            }
            Body::from(collected)
        }
    };
    builder.body(body).map_err(|e| GatewayError::Invalid(e.to_string()))
}

/// Why a relayed stream was cut.
#[derive(Debug, thiserror::Error)]
enum StreamCut {
    #[error("the stream passed {0} bytes, the most the gateway relays")]
    TooLarge(u64),
    #[error("the stream stayed open past {0} ms, the longest the gateway relays")]
    TooLong(u128),
    #[error("the agent's stream failed: {0}")]
    Upstream(String),
}

/// The agent's stream, frame by frame as the caller reads it (each frame is read from the agent
/// only once the caller took the previous: backpressure), cut past its size or time caps; its
/// first events are read for the task it creates.
fn relay_stream(
    state: Arc<GatewayState>,
    who: Admitted,
    agent: String,
    body: reqwest::Body,
) -> impl futures::Stream<Item = Result<Bytes, StreamCut>> + Send + 'static {
    let ends = tokio::time::Instant::now() + state.stream_ms_max;
    let tap = Some(Vec::<u8>::new());
    futures::stream::unfold((body, 0_u64, tap, false), move |(mut body, mut relayed, mut tap, done)| {
        let (state, who, agent) = (state.clone(), who.clone(), agent.clone());
        async move {
            if done {
                return None;
            }
            loop {
                let frame = match tokio::time::timeout_at(ends, body.frame()).await {
                    Err(_) => {
                        let cut = StreamCut::TooLong(state.stream_ms_max.as_millis());
                        return Some((Err(cut), (body, relayed, tap, true)));
                    }
                    Ok(None) => return None,
                    Ok(Some(Err(error))) => {
                        return Some((Err(StreamCut::Upstream(error.to_string())), (body, relayed, tap, true)));
                    }
                    Ok(Some(Ok(frame))) => frame,
                };
                let Ok(data) = frame.into_data() else { continue };
                relayed += data.len() as u64;
                if relayed > state.stream_bytes_max {
                    return Some((Err(StreamCut::TooLarge(state.stream_bytes_max)), (body, relayed, tap, true)));
                }
                if let Some(seen) = &mut tap {
                    seen.extend_from_slice(&data);
                    if tap_events(&state, &who, &agent, seen) || seen.len() > STREAM_TAP_BYTES_MAX {
                        tap = None;
                    }
                }
                return Some((Ok(data), (body, relayed, tap, false)));
            }
        }
    })
}

/// Reads the complete `data:` lines of a stream's beginning for the task they name; true once
/// one was found (and recorded).
fn tap_events(state: &GatewayState, who: &Admitted, agent: &str, seen: &[u8]) -> bool {
    let text = String::from_utf8_lossy(seen);
    let complete = text.rfind('\n').map_or("", |end| &text[..end]);
    for line in complete.lines() {
        let Some(data) = line.strip_prefix("data:") else { continue };
        if let Some(named @ (Some(_), _)) = a2a::answered_task(data.trim().as_bytes()) {
            remember_answer(state, who, agent, named);
            return true;
        }
    }
    false
}

/// A call report for the registry: the calling agent (or the gateway, for a user) to `agent`.
fn report(
    state: &GatewayState,
    who: &Admitted,
    agent: &str,
    skill: &str,
    method: &str,
    status: OutcomeStatus,
    started: Instant,
) {
    let elapsed = started.elapsed();
    let latency_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
    let from = who.agent.clone().unwrap_or_else(|| GATEWAY_NAME.to_owned());
    state.metrics.durations.get((agent.to_owned(), method.to_owned()), |(agent, method)| {
        metrics::histogram!("gateway_call_duration_seconds", "agent" => agent.clone(), "method" => method.clone())
    })
    .record(elapsed.as_secs_f64());
    state.reporter.report(CallReport {
        from,
        to: agent.to_owned(),
        capability: Some(skill.to_owned()).filter(|s| !s.is_empty()),
        status,
        latency_ms,
        at: None,
        tenant: Some(who.tenant.clone()).filter(|t| !t.is_empty()),
    });
}

fn outcome_of(status: StatusCode) -> OutcomeStatus {
    match status {
        StatusCode::GATEWAY_TIMEOUT => OutcomeStatus::Timeout,
        status if status.is_success() => OutcomeStatus::Success,
        _ => OutcomeStatus::Error,
    }
}

/// The gateway's call metrics, their handles kept rather than registered on every call (which
/// builds, hashes and looks up the labels in the recorder behind its locks).
#[derive(Debug)]
pub(crate) struct CallMetrics {
    /// `gateway_calls_total{agent, method, status}`.
    calls: HandleCache<(String, String, String), Counter>,
    /// `gateway_call_duration_seconds{agent, method}`.
    durations: HandleCache<(String, String), Histogram>,
}

impl CallMetrics {
    pub(crate) fn new() -> Self {
        Self { calls: HandleCache::new(CALL_SERIES_CACHED_MAX), durations: HandleCache::new(CALL_SERIES_CACHED_MAX) }
    }
}

/// `gateway_calls_total{agent, method, status}`: the agent's HTTP status, or the gateway's
/// refusal code.
fn count(state: &GatewayState, agent: &str, method: &str, status: &str) {
    let key = (agent.to_owned(), method.to_owned(), status.to_owned());
    state
        .metrics
        .calls
        .get(key, |(agent, method, status)| {
            metrics::counter!("gateway_calls_total", "agent" => agent.clone(), "method" => method.clone(), "status" => status.clone())
        })
        .increment(1);
}

fn error_label(error: &GatewayError) -> &'static str {
    match error {
        GatewayError::PolicyDenied(_) => "policy_denied",
        GatewayError::CallRefused(_) | GatewayError::DeadlinePassed(_) => "call_refused",
        GatewayError::LinkDenied(_) => "link_denied",
        GatewayError::TaskNotFound(_) => "task_not_found",
        GatewayError::CircuitOpen(_) => "circuit_open",
        GatewayError::Timeout { .. } => "timeout",
        _ => "unavailable",
    }
}

/// A JSON-RPC request's method, parameters and id; a body that is not one is refused as an
/// agent refuses it: not declared JSON, not JSON, or no request (answered in 1.0's shape, as the
/// version is not known yet).
fn read_jsonrpc(headers: &HeaderMap, body: &Bytes) -> Result<(A2aCall, Value), Box<Response>> {
    let refuse =
        |code, message: String, id: Value| Box::new(GatewayError::Protocol { code, message }.jsonrpc(id, true));
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !is_json_content_type(content_type) {
        let message = format!("content type {content_type:?} is not JSON: send application/json");
        return Err(refuse(A2aErrorCode::ContentTypeNotSupported, message, Value::Null));
    }
    let request: Value = serde_json::from_slice(body)
        .map_err(|e| refuse(A2aErrorCode::ParseError, format!("the body is not JSON: {e}"), Value::Null))?;
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let Some(method) = request.get("method").and_then(Value::as_str) else {
        let message = "a JSON-RPC request (one object with a method) is expected".to_owned();
        return Err(refuse(A2aErrorCode::InvalidRequest, message, id));
    };
    Ok((a2a::jsonrpc_call(method, request.get("params")), id))
}

/// `POST /agents/{name}/`: JSON-RPC, either version.
pub(crate) async fn jsonrpc(
    State(state): State<Arc<GatewayState>>,
    RequestCaller(caller): RequestCaller,
    PathParam(name): PathParam<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (call, id) = match read_jsonrpc(&headers, &body) {
        Ok(read) => read,
        Err(refusal) => return *refusal,
    };
    let answer = Answer::jsonrpc(id, &call);
    let who = match admit_caller(&state, caller, &headers, call.context_id.as_deref()) {
        Ok(who) => who,
        Err(error) => return answer.refuse(&error),
    };
    let outbound = Outbound { method: http::Method::POST, suffix: String::new(), headers, body };
    relay(&state, &who, &[name], "", &call, outbound, &answer).await
}

/// `POST /skills/{skill}/`: a JSON-RPC message to an agent offering `skill`.
pub(crate) async fn skill(
    State(state): State<Arc<GatewayState>>,
    RequestCaller(caller): RequestCaller,
    PathParam(skill): PathParam<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    relay_message(&state, caller, headers, body, Destination::Skill(skill)).await
}

/// `POST /route/`: a JSON-RPC message to the healthy agent whose skill best fits its text, as the
/// registry's `POST /route` ranks them for the caller's tenant; failing over, before the message
/// reaches an agent, to the next agents the registry ranks for the same skill.
pub(crate) async fn routed(
    State(state): State<Arc<GatewayState>>,
    RequestCaller(caller): RequestCaller,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    relay_message(&state, caller, headers, body, Destination::Request).await
}

/// Where a message addressed by what it asks for goes.
enum Destination {
    /// To an agent offering this skill.
    Skill(String),
    /// To the agent whose skill best fits the message's text.
    Request,
}

/// A JSON-RPC message to the agents `destination` names, in order (the next one only when the
/// message did not reach the one before).
async fn relay_message(
    state: &Arc<GatewayState>,
    caller: Caller,
    headers: HeaderMap,
    body: Bytes,
    destination: Destination,
) -> Response {
    let (call, id) = match read_jsonrpc(&headers, &body) {
        Ok(read) => read,
        Err(refusal) => return *refusal,
    };
    let answer = Answer::jsonrpc(id, &call);
    if !matches!(call.method.as_str(), "SendMessage" | "SendStreamingMessage") {
        let on = match destination {
            Destination::Skill(_) => "a skill",
            Destination::Request => "a route",
        };
        return answer.refuse(&GatewayError::NotOffered(format!(
            "{} on {on} (only messages are routed; address the agent for its tasks)",
            call.method
        )));
    }
    let who = match admit_caller(state, caller, &headers, call.context_id.as_deref()) {
        Ok(who) => who,
        Err(error) => return answer.refuse(&error),
    };
    let chosen = match destination {
        Destination::Skill(skill) => state.directory.offering(&skill).await.map(|agents| (agents, skill)),
        Destination::Request => state.directory.routed(&body, &who.tenant).await,
    };
    let (agents, skill) = match chosen {
        Ok(chosen) => chosen,
        Err(error) => return answer.refuse(&error),
    };
    let outbound = Outbound { method: http::Method::POST, suffix: String::new(), headers, body };
    relay(state, &who, &agents, &skill, &call, outbound, &answer).await
}

/// `/agents/{name}/...`: HTTP+JSON, either version (0.3 under `/v1`).
pub(crate) async fn http_json(
    State(state): State<Arc<GatewayState>>,
    RequestCaller(caller): RequestCaller,
    PathParam((name, rest)): PathParam<(String, String)>,
    request: Request,
) -> Response {
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(body) => body,
        Err(error) => return GatewayError::Invalid(format!("the body cannot be read: {error}")).rest(),
    };
    let json = if body.is_empty() { None } else { serde_json::from_slice::<Value>(&body).ok() };
    let path = format!("/{rest}");
    let Some(call) = a2a::http_json_call(&parts.method, &path, json.as_ref()) else {
        return GatewayError::NotOffered(format!("{} {path}", parts.method)).rest();
    };
    let who = match admit_caller(&state, caller, &parts.headers, call.context_id.as_deref()) {
        Ok(who) => who,
        Err(error) => return error.rest(),
    };
    let suffix = match parts.uri.query() {
        Some(query) => format!("{path}?{query}"),
        None => path,
    };
    let outbound = Outbound { method: parts.method, suffix, headers: parts.headers, body };
    relay(&state, &who, &[name], "", &call, outbound, &Answer::Rest).await
}

/// `GET /agents/{name}/.well-known/agent-card.json`: the agent's card, pointed at the gateway.
pub(crate) async fn card(
    State(state): State<Arc<GatewayState>>,
    RequestCaller(caller): RequestCaller,
    PathParam(name): PathParam<String>,
    headers: HeaderMap,
) -> Response {
    let call = A2aCall {
        binding: Binding::HttpJson,
        version: a2a::VERSION_1_0,
        method: "GetAgentCard".into(),
        streaming: false,
        task_id: None,
        context_id: None,
    };
    let served = async {
        let who = admit_caller(&state, caller, &headers, None)?;
        check_call(&state, &who, &name, &call, "")?;
        let upstream = state.directory.agent(&name).await?;
        Ok::<_, GatewayError>(a2a::rewrite_card(&upstream.card, &agent_base(&state, &name)))
    };
    match served.await {
        Ok(card) => axum::Json(card).into_response(),
        Err(error) => error.rest(),
    }
}

/// The agent's route on the gateway, its name percent-encoded as a path segment.
fn agent_base(state: &GatewayState, name: &str) -> String {
    let mut url = format!("{}/agents/", state.public_url);
    url.extend(url::form_urlencoded::byte_serialize(name.as_bytes()).map(|s| s.replace('+', "%20")));
    url
}

/// `GET /agents`: every agent the caller may see (the rules allow it `GetAgentCard`), with its
/// skills (from its card; its registered capabilities when the card cannot be read) and health.
pub(crate) async fn list_agents(
    State(state): State<Arc<GatewayState>>,
    RequestCaller(caller): RequestCaller,
    headers: HeaderMap,
) -> Response {
    let listed = async {
        let who = admit_caller(&state, caller, &headers, None)?;
        let call = A2aCall {
            binding: Binding::HttpJson,
            version: a2a::VERSION_1_0,
            method: "GetAgentCard".into(),
            streaming: false,
            task_id: None,
            context_id: None,
        };
        let records = state.directory.records().await?;
        let visible: Vec<_> =
            records.into_iter().filter(|record| check_call(&state, &who, &record.name, &call, "").is_ok()).collect();
        let agents: Vec<Value> = futures::stream::iter(visible)
            .map(|record| {
                let state = state.clone();
                async move {
                    let base = agent_base(&state, &record.name);
                    let health = record.health_status;
                    let (name, capabilities) = (record.name.clone(), record.capabilities.clone());
                    let skills = match state.directory.of_record(record).await {
                        Ok(upstream) => a2a::skills(&upstream.card),
                        Err(_) => capabilities,
                    };
                    json!({
                        "name": name,
                        "url": format!("{base}/"),
                        "card_url": format!("{base}/.well-known/agent-card.json"),
                        "skills": skills,
                        "health_status": health,
                    })
                }
            })
            .buffered(CARDS_READ_AT_ONCE)
            .collect()
            .await;
        Ok::<_, GatewayError>(json!({"total": agents.len(), "agents": agents}))
    };
    match listed.await {
        Ok(list) => axum::Json(list).into_response(),
        Err(error) => error.rest(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_listing_keeps_only_the_callers_tenants_tasks() {
        let ownership = Ownership::new(16);
        ownership.record("echo", "mine", "acme");
        ownership.record("echo", "theirs", "globex");
        let tasks = json!([{"id": "mine"}, {"id": "theirs"}, {"id": "unseen"}, {"status": {}}]);
        // JSON-RPC: the page is the result.
        let mut rpc = json!({"jsonrpc": "2.0", "id": 1, "result": {"tasks": tasks, "totalSize": 4, "pageSize": 50}});
        own_tasks(&ownership, "echo", "acme", &mut rpc);
        assert_eq!(rpc["result"]["tasks"], json!([{"id": "mine"}]));
        assert_eq!(rpc["result"]["totalSize"], 1);
        assert_eq!(rpc["result"]["pageSize"], 50, "the rest of the page is the agent's");
        // HTTP+JSON: the page is the body.
        let mut rest = json!({"tasks": tasks, "nextPageToken": ""});
        own_tasks(&ownership, "echo", "globex", &mut rest);
        assert_eq!(rest["tasks"], json!([{"id": "theirs"}]));
        assert_eq!(rest["nextPageToken"], "");
        // Task ids are per agent: another agent's "mine" is not acme's.
        let mut other = json!({"tasks": [{"id": "mine"}]});
        own_tasks(&ownership, "other", "acme", &mut other);
        assert_eq!(other["tasks"], json!([]));
    }
}
