//! Calls from one agent to another that cannot hang, loop or cascade (seeds 000 and 003).
//!
//! [`MeshCaller::call`] carries the [`CallContext`] in headers, gives the callee no more time
//! than the caller has left (30 s by default, 300 s at most), refuses a cycle or a call past
//! the depth limit before sending, bounds this agent's outbound calls (a bulkhead: a full one
//! answers busy at once), retries transient failures with exponential backoff and jitter on the
//! next healthy replica, keeps a circuit breaker per instance, and tells the registry when an
//! instance's circuit opens so it checks that instance's health at once. A call that is safe to
//! repeat (the capability's skill is tagged [`IDEMPOTENT_SKILL_TAG`] on the callee's card) and
//! that times out is tried once more on each other healthy instance, within the deadline (seed
//! 002 §7): each attempt then gets a share of the time left. With a link cache it
//! also refuses, before sending, a call no link allows ([`MeshCaller::with_links`]), and with a
//! reporter it reports every call it sent to the registry ([`MeshCaller::with_call_reports`]).

use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use http::{HeaderName, HeaderValue, Method};
use mesh_graph::{Decision, Denial, LinkCache};
use mesh_protocol::a2a::v1::{AgentCard, SendMessageRequest, SendMessageResponse, TaskState};
use mesh_protocol::a2a::{PROTOCOL_VERSION_1_0, VERSION_HEADER};
use mesh_protocol::call::{CallContext, CallRejection, call_timeout_ms};
use mesh_protocol::error::ErrorBody;
use mesh_protocol::graph::{CallReport, OutcomeStatus};
use mesh_protocol::handoff::Handoff;
use mesh_protocol::registry::{AgentSummary, HealthStatus};
use mesh_protocol::seed::{ResponseStatus, TaskRequest, TaskResponse};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tracing::Instrument;

use crate::call_reports::CallReporter;

use crate::circuits::{CircuitReport, CircuitSettings, Circuits, Passage};
use crate::discovery::{Discovery, DiscoveryError};
use crate::http_client::{ClientError, HttpClient, decode_json, json_request};
use crate::registry::RegistryClient;
use crate::transport::TransportError;

/// Outbound agent calls one agent may have in flight at once.
pub const OUTBOUND_CALLS_MAX_DEFAULT: usize = 64;
/// Attempts per call, the first included, across replicas.
pub const CALL_ATTEMPTS_MAX_DEFAULT: usize = 3;
/// First wait before a retry; it doubles each time, with jitter.
pub const RETRY_DELAY_MIN_MS_DEFAULT: u64 = 20;
/// Longest wait before a retry.
pub const RETRY_DELAY_MAX_MS_DEFAULT: u64 = 500;
/// The tag on a card's skill saying a call to it may be repeated on another agent after a
/// timeout: it has no effect a second call would add to (a search, a lookup, a pure function).
pub const IDEMPOTENT_SKILL_TAG: &str = "idempotent";
/// The error code of a callee that stopped at the deadline its caller gave it.
const DEADLINE_EXCEEDED_CODE: &str = "CALL_DEADLINE_EXCEEDED";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallerSettings {
    pub outbound_calls_max: usize,
    pub attempts_max: usize,
    pub retry_delay_min: Duration,
    pub retry_delay_max: Duration,
    pub circuits: CircuitSettings,
    /// Seed of the retry jitter; `None` draws one (the simulation fixes it to replay a run).
    pub jitter_seed: Option<u64>,
}

impl Default for CallerSettings {
    fn default() -> Self {
        Self {
            outbound_calls_max: OUTBOUND_CALLS_MAX_DEFAULT,
            attempts_max: CALL_ATTEMPTS_MAX_DEFAULT,
            retry_delay_min: Duration::from_millis(RETRY_DELAY_MIN_MS_DEFAULT),
            retry_delay_max: Duration::from_millis(RETRY_DELAY_MAX_MS_DEFAULT),
            circuits: CircuitSettings::default(),
            jitter_seed: None,
        }
    }
}

/// The call an agent is handling: who it is, the context the call came with, when its caller
/// stops waiting, and the handoff context of the work (seed 003) when there is one. Every call it
/// makes while handling it derives from this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallScope {
    agent: String,
    context: CallContext,
    deadline: Option<Instant>,
    handoff: Option<Arc<Handoff>>,
}

impl CallScope {
    /// The scope of a call `agent` received with `context`, starting now.
    pub fn received(agent: impl Into<String>, context: CallContext) -> Self {
        let deadline = context.deadline_ms.map(|ms| Instant::now() + Duration::from_millis(ms));
        Self { agent: agent.into(), context, deadline, handoff: None }
    }

    /// The same scope, working on the workflow `handoff` describes.
    pub fn with_handoff(mut self, handoff: Option<Handoff>) -> Self {
        self.handoff = handoff.map(Arc::new);
        self
    }

    /// The handoff context of the work (what the caller passed on, or what this agent knows).
    pub fn handoff(&self) -> Option<&Handoff> {
        self.handoff.as_deref()
    }

    pub fn agent(&self) -> &str {
        &self.agent
    }

    pub fn context(&self) -> &CallContext {
        &self.context
    }

    /// Time left before the caller stops waiting; `None` when it set no deadline.
    pub fn time_left(&self) -> Option<Duration> {
        self.deadline.map(|d| d.saturating_duration_since(Instant::now()))
    }

    fn left_ms(&self) -> Option<u64> {
        self.time_left().map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX))
    }
}

/// Whom to call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The agent registered under this name.
    Agent(String),
    /// Any agent offering this capability, `prefer` first when it is one of them.
    Capability { capability: String, prefer: Option<String> },
}

impl Target {
    pub fn capability(capability: impl Into<String>) -> Self {
        Self::Capability { capability: capability.into(), prefer: None }
    }
}

/// An answer (a seed task response, or an A2A `SendMessage` result), and the instance that gave it.
#[derive(Debug, Clone, PartialEq)]
pub struct Answered<R = TaskResponse> {
    pub agent: AgentSummary,
    pub response: R,
    /// Attempts made, the successful one included.
    pub attempts: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Refused before sending: the target is already in the chain, or the call would be too deep.
    #[error("{0}")]
    Rejected(CallRejection),
    /// Refused before sending: no enabled link lets this agent call the target.
    #[error("{0}")]
    LinkDenied(Denial),
    /// This agent already has its maximum of outbound calls in flight.
    #[error("busy: {limit} outbound calls already in flight")]
    Busy { limit: usize },
    /// The caller's deadline leaves no time for this call.
    #[error("no time left for the call (the caller's deadline has passed)")]
    NoTimeLeft,
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// Every instance's circuit is open.
    #[error("every instance of {target} is failing (circuits open)")]
    CircuitOpen { target: String },
    /// The last attempt's failure, after `attempts` attempts (boxed: it is large).
    #[error("{source} (after {attempts} attempts)")]
    Failed { agent: String, attempts: usize, source: Box<ClientError> },
}

impl CallError {
    /// True when the call ran out of time, as opposed to failing.
    pub fn is_timeout(&self) -> bool {
        match self {
            Self::NoTimeLeft => true,
            Self::Failed { source, .. } => {
                source.is_timeout() || matches!(**source, ClientError::Status { status: 504, .. })
            }
            _ => false,
        }
    }

    /// The `CATEGORY_SPECIFIC_ERROR` code of seed 003 for this failure.
    pub fn error_code(&self) -> &str {
        match self {
            Self::Rejected(rejection) => rejection.error_code(),
            Self::LinkDenied(_) => Denial::ERROR_CODE,
            Self::Busy { .. } => "CALL_BUSY",
            Self::NoTimeLeft => "CALL_DEADLINE_EXCEEDED",
            Self::Discovery(DiscoveryError::Registry { .. }) => "REGISTRY_UNAVAILABLE",
            Self::Discovery(_) => "AGENT_NOT_FOUND",
            Self::CircuitOpen { .. } => "AGENT_CIRCUIT_OPEN",
            Self::Failed { .. } => match self.callee_error() {
                Some((_, body)) => &body.error_code,
                None if self.is_timeout() => "AGENT_TIMEOUT",
                None => "AGENT_UNAVAILABLE",
            },
        }
    }

    /// A low-cardinality name of the failure, for metrics and spans (`error.type`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Rejected(_) => "rejected",
            Self::LinkDenied(_) => "link_denied",
            Self::Busy { .. } => "busy",
            Self::NoTimeLeft => "timeout",
            Self::Discovery(_) => "not_found",
            Self::CircuitOpen { .. } => "circuit_open",
            Self::Failed { .. } if self.is_timeout() => "timeout",
            Self::Failed { .. } => "error",
        }
    }

    /// The status and error body the called agent answered with, when it answered with one.
    pub fn callee_error(&self) -> Option<(u16, &ErrorBody)> {
        match self {
            Self::Failed { source, .. } => match source.as_ref() {
                ClientError::Status { status, body: Some(body), .. } => Some((*status, body)),
                _ => None,
            },
            _ => None,
        }
    }
}

/// Calls other agents on behalf of one agent; cheap to share (`Arc`), one per agent.
#[derive(Debug)]
pub struct MeshCaller {
    discovery: Arc<Discovery>,
    registry: RegistryClient,
    circuits: Circuits,
    bulkhead: Arc<Semaphore>,
    settings: CallerSettings,
    links: Option<Arc<LinkCache>>,
    reports: Option<CallReporter>,
}

/// Which endpoint of an agent a call goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Binding {
    /// `POST {process_endpoint}` with a seed task.
    Seed,
    /// `POST {url}/message:send` (A2A 1.0 HTTP+JSON) with a `SendMessageRequest`.
    Message,
}

impl Binding {
    fn endpoint(self, agent: &AgentSummary) -> String {
        match self {
            Self::Seed => agent.process_endpoint.clone(),
            Self::Message => format!("{}/message:send", agent.url.trim_end_matches('/')),
        }
    }
}

impl MeshCaller {
    pub fn new(
        http: HttpClient,
        registry: RegistryClient,
        discovery: Arc<Discovery>,
        settings: CallerSettings,
    ) -> Self {
        Self {
            discovery,
            registry,
            circuits: Circuits::new(http, settings.circuits),
            bulkhead: Arc::new(Semaphore::new(settings.outbound_calls_max.max(1))),
            settings,
            links: None,
            reports: None,
        }
    }

    /// Checks every call against `links` before sending it: a call no link allows never leaves.
    pub fn with_links(mut self, links: Arc<LinkCache>) -> Self {
        self.links = Some(links);
        self
    }

    /// Reports every call sent (from, to, capability, outcome, latency) through `reports`.
    pub fn with_call_reports(mut self, reports: CallReporter) -> Self {
        self.reports = Some(reports);
        self
    }

    pub fn discovery(&self) -> &Discovery {
        &self.discovery
    }

    /// Every called instance's circuit, for `/health`.
    pub fn circuits(&self) -> Vec<CircuitReport> {
        self.circuits.report()
    }

    /// Sends `task` to `target` on behalf of the call `scope` handles, within `timeout_ms` (the
    /// default when `None`), capped by what the caller has left.
    pub async fn call(
        &self,
        scope: &CallScope,
        target: &Target,
        task: &TaskRequest,
        timeout_ms: Option<u64>,
    ) -> Result<Answered, CallError> {
        let started = Instant::now();
        let span = call_span(scope, target, "send_task", None);
        let answered =
            self.exchange(scope, target, Binding::Seed, task, None, timeout_ms).instrument(span.clone()).await;
        if let Ok(answered) = &answered {
            span.record("mesh.callee", answered.agent.name.as_str());
            span.record("mesh.attempts", i64::try_from(answered.attempts).unwrap_or(i64::MAX));
        }
        let outcome = self.report(scope, target, started, &answered, |response: &TaskResponse| match response.status {
            ResponseStatus::Success => OutcomeStatus::Success,
            ResponseStatus::Partial => OutcomeStatus::Partial,
        });
        if let Ok(Answered { response, .. }) = &answered
            && response.status == ResponseStatus::Partial
        {
            let warnings = response.warnings.join("; ");
            mesh_telemetry::span_event(&span, "partial_answer", &[("mesh.warnings", warnings)]);
        }
        observe_call(&span, scope, target, started, outcome);
        answered
    }

    /// Sends an A2A message (`SendMessage`, HTTP+JSON binding) to `target` like [`Self::call`]
    /// sends a seed task; the message's `contextId` is the conversation the link policy sees.
    pub async fn send_message(
        &self,
        scope: &CallScope,
        target: &Target,
        request: &SendMessageRequest,
        timeout_ms: Option<u64>,
    ) -> Result<Answered<SendMessageResponse>, CallError> {
        let started = Instant::now();
        let context_id = request.message.context_id.as_deref();
        let span = call_span(scope, target, "SendMessage", context_id);
        let answered = self
            .exchange(scope, target, Binding::Message, request, context_id, timeout_ms)
            .instrument(span.clone())
            .await;
        if let Ok(answered) = &answered {
            span.record("mesh.callee", answered.agent.name.as_str());
            span.record("mesh.attempts", i64::try_from(answered.attempts).unwrap_or(i64::MAX));
        }
        let outcome = self.report(scope, target, started, &answered, |response: &SendMessageResponse| match response {
            SendMessageResponse::Task(task) if matches!(task.status.state, TaskState::Failed | TaskState::Rejected) => {
                OutcomeStatus::Error
            }
            _ => OutcomeStatus::Success,
        });
        observe_call(&span, scope, target, started, outcome);
        answered
    }

    /// Reports a call that was sent (at least one attempt); a call refused before sending is not
    /// one. Returns the call's outcome word for metrics: its status when sent, else why not.
    fn report<R>(
        &self,
        scope: &CallScope,
        target: &Target,
        started: Instant,
        answered: &Result<Answered<R>, CallError>,
        status: impl Fn(&R) -> OutcomeStatus,
    ) -> &'static str {
        let (to, status) = match answered {
            Ok(answered) => (&answered.agent.name, status(&answered.response)),
            Err(error @ CallError::Failed { agent, attempts: 1.., .. }) => {
                (agent, if error.is_timeout() { OutcomeStatus::Timeout } else { OutcomeStatus::Error })
            }
            Err(error) => return error.kind(),
        };
        let word = outcome_word(status);
        let Some(reports) = &self.reports else { return word };
        reports.report(CallReport {
            from: scope.agent().to_owned(),
            to: to.clone(),
            capability: match target {
                Target::Capability { capability, .. } => Some(capability.clone()),
                Target::Agent(_) => None,
            },
            status,
            latency_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            at: None,
            // The call was made for this tenant: only readers acting for it see the report.
            tenant: scope.context().tenant.clone(),
        });
        word
    }

    /// One call over `binding`, in conversation `context_id`: discovery, the checks the callee
    /// would make, then attempts across replicas until one answers or the deadline passes.
    async fn exchange<B: Serialize, R: DeserializeOwned>(
        &self,
        scope: &CallScope,
        target: &Target,
        binding: Binding,
        body: &B,
        context_id: Option<&str>,
        timeout_ms: Option<u64>,
    ) -> Result<Answered<R>, CallError> {
        let _permit = self.bulkhead.clone().try_acquire_owned().map_err(|_| {
            metrics::counter!(
                "mesh_outbound_bulkhead_rejections_total",
                mesh_telemetry::SERVICE_LABEL => scope.agent().to_owned(),
                "capability" => capability_label(target),
            )
            .increment(1);
            CallError::Busy { limit: self.settings.outbound_calls_max }
        })?;
        let budget_ms = call_timeout_ms(timeout_ms, scope.left_ms());
        if budget_ms == 0 {
            return Err(CallError::NoTimeLeft);
        }
        let deadline = Instant::now() + Duration::from_millis(budget_ms);
        let candidates =
            tokio::time::timeout_at(deadline, self.candidates(target)).await.map_err(|_| CallError::NoTimeLeft)??;
        for candidate in &candidates {
            // The checks the callee would make, made here so a doomed call is never sent.
            scope.context().next_hop(scope.agent(), budget_ms).admit(&candidate.name).map_err(CallError::Rejected)?;
        }
        let candidates = self.permitted(scope, candidates, context_id)?;
        let repeatable = self.repeatable(target, &candidates, deadline).await;
        let mut delays = self.backoff().build();
        let mut last_failure: Option<(String, ClientError)> = None;
        let mut attempts = 0;
        let mut turn = 0;
        // Instances tried, and those whose attempt timed out (never tried again).
        let mut tried: Vec<&str> = Vec::new();
        let mut timed_out: Vec<&str> = Vec::new();
        loop {
            // The next instance whose circuit lets the call through; open ones are skipped at once.
            let mut sent = None;
            for _ in 0..candidates.len() {
                let agent = &candidates[turn % candidates.len()];
                turn += 1;
                if timed_out.contains(&agent.name.as_str()) {
                    continue;
                }
                let mut left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(out_of_time(last_failure, attempts));
                }
                if repeatable {
                    // A share of the time left for each healthy instance not tried yet, this one
                    // included: a hanging one leaves the others time to answer.
                    let untried = candidates
                        .iter()
                        .filter(|a| a.health_status == HealthStatus::Healthy && !tried.contains(&a.name.as_str()))
                        .count();
                    left /= u32::try_from(untried.max(1)).unwrap_or(u32::MAX);
                }
                tried.push(&agent.name);
                let endpoint = binding.endpoint(agent);
                let request = self.request(scope, binding, body, &endpoint, context_id, left)?;
                let was_open = self.circuits.is_open(&agent.process_endpoint);
                let outcome = match self.circuits.send(&agent.name, &agent.process_endpoint, request, left).await {
                    Passage::Refused => continue,
                    Passage::Answered(response) => decode_json::<R>(&endpoint, &response),
                    Passage::Failed(error) => Err(error),
                };
                let is_open = self.circuits.is_open(&agent.process_endpoint);
                if was_open != is_open {
                    metrics::gauge!(
                        "mesh_circuit_open",
                        mesh_telemetry::SERVICE_LABEL => scope.agent().to_owned(),
                        "callee" => agent.name.clone(),
                        "endpoint" => agent.process_endpoint.clone(),
                    )
                    .set(if is_open { 1.0 } else { 0.0 });
                }
                if !was_open && is_open {
                    mesh_telemetry::span_event(
                        &tracing::Span::current(),
                        "circuit_open",
                        &[("mesh.callee", agent.name.clone()), ("url.full", agent.process_endpoint.clone())],
                    );
                    self.report_failure(agent);
                }
                sent = Some((agent, outcome));
                break;
            }
            let Some((agent, outcome)) = sent else {
                return Err(match last_failure {
                    Some((agent, source)) => CallError::Failed { agent, attempts, source: Box::new(source) },
                    None => CallError::CircuitOpen { target: describe(target) },
                });
            };
            attempts += 1;
            let another_healthy = |timed_out: &[&str]| {
                candidates.iter().any(|a| {
                    a.health_status == HealthStatus::Healthy
                        && a.name != agent.name
                        && !timed_out.contains(&a.name.as_str())
                })
            };
            match outcome {
                Ok(response) => return Ok(Answered { agent: agent.clone(), response, attempts }),
                Err(source)
                    if repeatable
                        && attempt_timed_out(&source)
                        && attempts < self.settings.attempts_max.max(1)
                        && another_healthy(&timed_out) =>
                {
                    // Seed 002 §7: the instance is reported (the registry checks its health at
                    // once) and the call goes to another at once, with the time that is left.
                    observe_retry(scope, target, &agent.name, attempts, &source);
                    self.report_failure(agent);
                    timed_out.push(&agent.name);
                    last_failure = Some((agent.name.clone(), source));
                }
                Err(source) if !is_transient(&source) || attempts >= self.settings.attempts_max.max(1) => {
                    return Err(CallError::Failed { agent: agent.name.clone(), attempts, source: Box::new(source) });
                }
                Err(error) => {
                    observe_retry(scope, target, &agent.name, attempts, &error);
                    last_failure = Some((agent.name.clone(), error));
                    let pause = delays.next().unwrap_or(self.settings.retry_delay_max);
                    if Instant::now() + pause >= deadline {
                        return Err(out_of_time(last_failure, attempts));
                    }
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }

    /// Whether a call to `target` that times out may be repeated on another of `candidates`: it
    /// names a capability at least two healthy instances offer, and a card of theirs (the first
    /// to answer, from the discovery cache when fresh) tags that skill [`IDEMPOTENT_SKILL_TAG`].
    /// Any doubt (no card in time, no such skill) says no.
    async fn repeatable(&self, target: &Target, candidates: &[AgentSummary], deadline: Instant) -> bool {
        let Target::Capability { capability, .. } = target else { return false };
        let healthy: Vec<&AgentSummary> =
            candidates.iter().filter(|a| a.health_status == HealthStatus::Healthy).collect();
        if healthy.len() < 2 {
            return false;
        }
        let cards = healthy.into_iter().map(|agent| Box::pin(self.discovery.card(agent)));
        match tokio::time::timeout_at(deadline, futures::future::select_ok(cards)).await {
            Ok(Ok((card, _))) => is_idempotent(&card, capability),
            _ => false,
        }
    }

    /// The candidates a link lets this agent call; when none, the first one's denial.
    fn permitted(
        &self,
        scope: &CallScope,
        candidates: Vec<AgentSummary>,
        context_id: Option<&str>,
    ) -> Result<Vec<AgentSummary>, CallError> {
        let Some(links) = &self.links else { return Ok(candidates) };
        let mut denied = None;
        let allowed: Vec<AgentSummary> = candidates
            .into_iter()
            .filter(|candidate| match links.permit(scope.agent(), &candidate.name, context_id) {
                Decision::Allowed(_) => true,
                Decision::Denied(denial) => {
                    denied.get_or_insert(denial);
                    false
                }
            })
            .collect();
        match denied {
            Some(denial) if allowed.is_empty() => Err(CallError::LinkDenied(denial)),
            _ => Ok(allowed),
        }
    }

    async fn candidates(&self, target: &Target) -> Result<Vec<AgentSummary>, CallError> {
        let (capability, prefer) = match target {
            Target::Agent(name) => return Ok(vec![self.discovery.named(name).await?]),
            Target::Capability { capability, prefer } => (capability, prefer),
        };
        let agents = match prefer {
            None => self.discovery.candidates(capability).await?,
            Some(preferred) => {
                // The preferred agent was picked in turn already: no second turn is taken.
                let (healthy, others) = self.discovery.listed(capability).await?;
                let mut agents: Vec<AgentSummary> = healthy.into_iter().chain(others).collect();
                if let Some(at) = agents.iter().position(|a| &a.name == preferred) {
                    let preferred = agents.remove(at);
                    agents.insert(0, preferred);
                }
                agents
            }
        };
        if agents.is_empty() {
            return Err(DiscoveryError::NoAgent(capability.clone()).into());
        }
        Ok(agents)
    }

    fn backoff(&self) -> ExponentialBuilder {
        let builder = ExponentialBuilder::default()
            .with_min_delay(self.settings.retry_delay_min)
            .with_max_delay(self.settings.retry_delay_max)
            .with_jitter()
            .without_max_times();
        match self.settings.jitter_seed {
            Some(seed) => builder.with_jitter_seed(seed),
            None => builder,
        }
    }

    /// `body` as a request to `endpoint`, carrying the next hop's context with `left` as its
    /// deadline and `context_id` as its conversation.
    fn request<B: Serialize>(
        &self,
        scope: &CallScope,
        binding: Binding,
        body: &B,
        endpoint: &str,
        context_id: Option<&str>,
        left: Duration,
    ) -> Result<http::Request<bytes::Bytes>, CallError> {
        let left_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
        let mut context = scope.context().next_hop(scope.agent(), left_ms);
        context.context_id = context_id.map(str::to_owned);
        let mut request = json_request(Method::POST, endpoint, Some(body)).map_err(|source| CallError::Failed {
            agent: endpoint.to_owned(),
            attempts: 0,
            source: Box::new(source),
        })?;
        for (name, value) in context.to_headers() {
            if let Ok(value) = HeaderValue::from_str(&value) {
                request.headers_mut().insert(HeaderName::from_static(name), value);
            }
        }
        if let (Binding::Message, Ok(name)) = (binding, HeaderName::from_bytes(VERSION_HEADER.as_bytes())) {
            request.headers_mut().insert(name, HeaderValue::from_static(PROTOCOL_VERSION_1_0));
        }
        Ok(request)
    }

    /// Asks the registry to check `agent` now, in the background: the call does not wait for it.
    fn report_failure(&self, agent: &AgentSummary) {
        let registry = self.registry.clone();
        let (name, url) = (agent.name.clone(), agent.url.clone());
        tracing::warn!(agent = %name, %url, "circuit opened; reporting the instance to the registry");
        tokio::spawn(async move {
            if let Err(error) = registry.report_failure(&name, &url).await {
                tracing::debug!(agent = %name, %error, "the failure report did not reach the registry");
            }
        });
    }
}

/// Failures another attempt (on another instance, or later) may not meet: no answer at all, or
/// an instance saying it is failing or overloaded. A refusal of the call itself is final.
fn is_transient(error: &ClientError) -> bool {
    match error {
        ClientError::Transport { source, .. } => !matches!(source, TransportError::Timeout { .. }),
        ClientError::Status { status, body, .. } => {
            let refused_call =
                body.as_ref().is_some_and(|b| b.error_code.starts_with("CALL_") && b.error_code != "CALL_BUSY");
            !refused_call && matches!(status, 429 | 500 | 502 | 503)
        }
        ClientError::Decode { .. } | ClientError::InvalidUrl { .. } | ClientError::InvalidCredential => false,
    }
}

/// A retry after `attempts` attempts, the last on `agent` failing with `error`: logged, an event
/// on the call's span, and counted.
fn observe_retry(scope: &CallScope, target: &Target, agent: &str, attempts: usize, error: &ClientError) {
    tracing::debug!(agent, %error, attempts, "call failed; retrying elsewhere");
    mesh_telemetry::span_event(
        &tracing::Span::current(),
        "retry",
        &[
            ("mesh.callee", agent.to_owned()),
            ("mesh.attempt", attempts.to_string()),
            ("error.message", error.to_string()),
        ],
    );
    metrics::counter!(
        "mesh_outbound_retries_total",
        mesh_telemetry::SERVICE_LABEL => scope.agent().to_owned(),
        "capability" => capability_label(target),
    )
    .increment(1);
}

/// Whether `card` tags its skill `capability` as safe to repeat.
fn is_idempotent(card: &AgentCard, capability: &str) -> bool {
    card.skills.iter().any(|skill| skill.id == capability && skill.tags.iter().any(|tag| tag == IDEMPOTENT_SKILL_TAG))
}

/// An attempt that ran out of its time: no answer within it, or the callee saying it stopped at
/// the deadline it was given. Any other answer (an error included) is the callee's answer.
fn attempt_timed_out(error: &ClientError) -> bool {
    match error {
        ClientError::Transport { source: TransportError::Timeout { .. }, .. } => true,
        ClientError::Status { status: 504, body: Some(body), .. } => body.error_code == DEADLINE_EXCEEDED_CODE,
        _ => false,
    }
}

/// The internal span of one call to another agent (its attempts' client spans are its children).
fn call_span(scope: &CallScope, target: &Target, method: &'static str, context_id: Option<&str>) -> tracing::Span {
    if !mesh_telemetry::tracing_enabled() || mesh_telemetry::sampled_out() {
        return tracing::Span::none();
    }
    let context = scope.context();
    let capability = capability_label(target);
    tracing::info_span!(
        "call",
        otel.name = ["call", capability.as_str()].join(" "),
        otel.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
        mesh.caller = scope.agent(),
        mesh.capability = capability.as_str(),
        mesh.callee = tracing::field::Empty,
        mesh.attempts = tracing::field::Empty,
        mesh.call_depth = i64::from(context.depth) + 1,
        mesh.request_id = context.request_id.as_deref(),
        mesh.correlation_id = context.correlation_id.as_deref(),
        mesh.tenant = context.tenant.as_deref(),
        a2a.method = method,
        a2a.context_id = context_id,
        gen_ai.operation.name = "invoke_agent",
    )
}

/// Records a call's outcome on its span and in the outbound metrics of the calling agent.
fn observe_call(span: &tracing::Span, scope: &CallScope, target: &Target, started: Instant, outcome: &'static str) {
    metrics::histogram!(
        "mesh_outbound_call_duration_seconds",
        mesh_telemetry::SERVICE_LABEL => scope.agent().to_owned(),
        "capability" => capability_label(target),
        "status" => outcome,
    )
    .record(started.elapsed().as_secs_f64());
    if !matches!(outcome, "success" | "partial") {
        span.record("error.type", outcome);
        span.record("otel.status_code", "ERROR");
    }
}

/// The bounded label naming a call's target: the capability, or the agent's name.
fn capability_label(target: &Target) -> String {
    match target {
        Target::Capability { capability, .. } => capability.clone(),
        Target::Agent(name) => name.clone(),
    }
}

fn outcome_word(status: OutcomeStatus) -> &'static str {
    match status {
        OutcomeStatus::Success => "success",
        OutcomeStatus::Partial => "partial",
        OutcomeStatus::Error => "error",
        OutcomeStatus::Timeout => "timeout",
    }
}

fn describe(target: &Target) -> String {
    match target {
        Target::Agent(name) => format!("agent {name:?}"),
        Target::Capability { capability, .. } => format!("capability {capability:?}"),
    }
}

/// The deadline came: the last failure tells why, or there was no time for any attempt.
fn out_of_time(last_failure: Option<(String, ClientError)>, attempts: usize) -> CallError {
    match last_failure {
        Some((agent, source)) => CallError::Failed { agent, attempts, source: Box::new(source) },
        None => CallError::NoTimeLeft,
    }
}

#[cfg(test)]
mod tests {
    use mesh_protocol::error::FailureStatus;

    use super::*;

    fn status(status: u16, code: Option<&str>) -> ClientError {
        let body = code.map(|code| ErrorBody::new(FailureStatus::Error, code, "why"));
        ClientError::Status { url: "http://w1/tasks/send".into(), status, body }
    }

    fn transport(source: TransportError) -> ClientError {
        ClientError::Transport { url: "http://w1/tasks/send".into(), source }
    }

    fn failed(source: ClientError) -> CallError {
        CallError::Failed { agent: "w1".into(), attempts: 1, source: Box::new(source) }
    }

    #[test]
    fn what_is_retried_is_what_another_attempt_may_not_meet() {
        let table = [
            (transport(TransportError::Connect("refused".into())), true),
            (transport(TransportError::Other("reset".into())), true),
            // The callee had the whole budget: another attempt has less.
            (transport(TransportError::Timeout { timeout_ms: 10 }), false),
            (status(503, None), true),
            (status(502, None), true),
            (status(500, Some("INTERNAL_ERROR")), true),
            (status(429, Some("RATE_LIMITED")), true),
            // An overloaded callee is worth another instance; a refused call is refused anywhere.
            (status(503, Some("CALL_BUSY")), true),
            (status(503, Some("CALL_DEPTH_EXCEEDED")), false),
            (status(429, Some("CALL_CYCLE_DETECTED")), false),
            (status(404, None), false),
            (status(400, Some("INVALID_INPUT")), false),
            (status(504, None), false),
            (ClientError::Decode { url: "u".into(), reason: "not JSON".into() }, false),
            (ClientError::InvalidCredential, false),
        ];
        for (error, transient) in table {
            assert_eq!(is_transient(&error), transient, "{error}");
        }
    }

    #[test]
    fn only_an_attempt_that_ran_out_of_time_is_repeated_after_a_timeout() {
        assert!(attempt_timed_out(&transport(TransportError::Timeout { timeout_ms: 10 })));
        let mut stopped = ErrorBody::new(FailureStatus::Timeout, DEADLINE_EXCEEDED_CODE, "deadline");
        assert!(attempt_timed_out(&ClientError::Status { url: "u".into(), status: 504, body: Some(stopped.clone()) }));
        // The callee answered: its own callee timed out, or it failed.
        stopped.error_code = "AGENT_TIMEOUT".into();
        assert!(!attempt_timed_out(&ClientError::Status { url: "u".into(), status: 504, body: Some(stopped) }));
        assert!(!attempt_timed_out(&status(504, None)));
        assert!(!attempt_timed_out(&status(500, Some("INTERNAL_ERROR"))));
        assert!(!attempt_timed_out(&transport(TransportError::Connect("refused".into()))));
    }

    #[test]
    fn a_skill_is_safe_to_repeat_when_its_card_tags_it() {
        let card = |tags: serde_json::Value| -> AgentCard {
            serde_json::from_value(serde_json::json!({
                "name": "w", "description": "d", "version": "1", "capabilities": {},
                "defaultInputModes": [], "defaultOutputModes": [],
                "skills": [{"id": "work", "name": "w", "description": "d", "tags": tags}]
            }))
            .unwrap()
        };
        assert!(is_idempotent(&card(serde_json::json!(["search", IDEMPOTENT_SKILL_TAG])), "work"));
        assert!(!is_idempotent(&card(serde_json::json!(["search"])), "work"));
        assert!(!is_idempotent(&card(serde_json::json!([IDEMPOTENT_SKILL_TAG])), "other"), "another skill's tag");
    }

    #[test]
    fn each_failure_has_its_kind() {
        let rejection = CallContext { chain: vec!["me".into()], depth: 1, ..CallContext::default() }
            .next_hop("x", 1_000)
            .admit("me")
            .unwrap_err();
        let table = [
            (CallError::Rejected(rejection), "rejected"),
            (CallError::Busy { limit: 1 }, "busy"),
            (CallError::NoTimeLeft, "timeout"),
            (CallError::Discovery(DiscoveryError::NoAgent("work".into())), "not_found"),
            (CallError::CircuitOpen { target: "capability \"work\"".into() }, "circuit_open"),
            (failed(transport(TransportError::Timeout { timeout_ms: 10 })), "timeout"),
            (failed(status(504, None)), "timeout"),
            (failed(status(503, None)), "error"),
            (failed(transport(TransportError::Connect("refused".into()))), "error"),
        ];
        for (error, kind) in table {
            assert_eq!(error.kind(), kind, "{error}");
        }
    }

    #[test]
    fn targets_are_labelled_and_described_by_what_they_name() {
        let capability = Target::capability("work");
        let agent = Target::Agent("w1".into());
        assert_eq!((capability_label(&capability), capability_label(&agent)), ("work".into(), "w1".into()));
        assert_eq!((describe(&capability), describe(&agent)), ("capability \"work\"".into(), "agent \"w1\"".into()));
        let words = [OutcomeStatus::Success, OutcomeStatus::Partial, OutcomeStatus::Error, OutcomeStatus::Timeout]
            .map(outcome_word);
        assert_eq!(words, ["success", "partial", "error", "timeout"]);
    }
}
