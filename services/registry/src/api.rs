//! The registry's HTTP API, and the OpenAPI document describing it (served at `/openapi.json`;
//! the answers every operation shares are added in [`crate::openapi`]).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use mesh_client::HttpClient;
use mesh_protocol::error::ErrorBody;
use mesh_protocol::graph::{
    CallReport, CallReports, CallReportsAccepted, EventBody, EventStats, GraphMode, GraphPolicy, Link, LinkDirection,
    LinkList, LinkMessage, LinkMessages, LinkRelationship, LinkSource, LinkUpdate, MeshEvent, NewLink, NewLinkMessage,
    OrgChart, OutcomeStatus, Topology, TopologyAgent, TopologyLink,
};
use mesh_protocol::registry::{
    AgentPick, AgentRecord, AgentSummary, CapabilityAgents, HealthStatus, MatchedSkill, RegistryStats, RouteRequest,
    StatusMessage, Success,
};
use mesh_server::ServiceMetrics;
use mesh_server::auth::{AGENT_ROLES, ANY_ROLE, RequestCaller, require};
use mesh_server::http::{JsonBody, PathParam, QueryParams, health_route};
use serde::Deserialize;
use tracing::Instrument;
use utoipa::{IntoParams, OpenApi};

use crate::card::AgentInterfaceRecord;
use crate::catalog::{
    self, AI_CATALOG_MEDIA_TYPE, AiCatalog, AiCatalogEntry, AiCatalogExtensions, ArdCatalog, ArdEntry, ArdMetadata,
    CatalogHost, MeshAgentMetadata,
};
use crate::directory::{Directory, RegisteredAgent, RegisteredAgents, health_word};
use crate::discovery::DiscoveryIndex;
use crate::discovery_api::{self, AgentMatch, AgentMatches, AgentQuery, AgentsAnswer, Route, RouteChoice};
use crate::error::RegistryError;
use crate::events::EventHub;
use crate::graph_api;
use crate::health::HealthProbe;
use crate::health::{Checker, now_rfc3339};
use crate::intake::{
    IntakePolicy, RegisterRequest, RegistrationForm, admit_registration, card_agent, seed_agent, verify_card,
    vet_address,
};
use crate::links::LinkStore;
use crate::mirror::Mirrors;
use crate::openapi::SharedAnswers;
use crate::ownership;
use crate::store::{AgentStore, StoredAgent};
use crate::tenancy::TenantView;
use mesh_protocol::registry::SkillProfile;
use mesh_storage::StorageError;

/// What the handlers share.
#[derive(Debug)]
pub struct RegistryState {
    pub directory: Arc<Directory>,
    pub store: AgentStore,
    pub links: LinkStore,
    pub events: Arc<EventHub>,
    /// Reloadable (SIGHUP), hence behind a lock.
    pub graph_mode: RwLock<GraphMode>,
    pub http: HttpClient,
    /// How long the dashboard's card fetch through the registry may take.
    pub health_check_timeout: Duration,
    /// Checks agents' health, sharing the checks with the other replicas.
    pub checker: Arc<Checker>,
    /// What a registration must pass.
    pub intake: IntakePolicy,
    /// The search index over the agents' cards.
    pub discovery: Arc<DiscoveryIndex>,
    /// The agents of the registries this one mirrors.
    pub mirrors: Arc<Mirrors>,
}

impl RegistryState {
    pub fn graph_mode(&self) -> GraphMode {
        *self.graph_mode.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_graph_mode(&self, mode: GraphMode) {
        *self.graph_mode.write().unwrap_or_else(|e| e.into_inner()) = mode;
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "A2A mesh registry",
        description = "Agent registration, discovery by capability, round-robin picks among healthy agents, health polling; the communication graph of links between agents, its policy feed and live events."
    ),
    paths(
        register,
        deregister,
        report_failure,
        list_agents,
        route,
        get_agent,
        discover,
        pick,
        stats,
        ai_catalog,
        ard_catalog,
        graph_api::list_links,
        graph_api::create_link,
        graph_api::get_link,
        graph_api::update_link,
        graph_api::delete_link,
        graph_api::agent_links,
        graph_api::org_chart,
        graph_api::topology,
        graph_api::policy,
        graph_api::link_messages,
        graph_api::record_link_message,
        graph_api::record_link_receipt,
        graph_api::report_calls,
        graph_api::events,
        graph_api::event_stats
    ),
    components(schemas(
        Link,
        LinkDirection,
        LinkRelationship,
        LinkSource,
        LinkList,
        NewLink,
        LinkUpdate,
        OrgChart,
        Topology,
        TopologyAgent,
        TopologyLink,
        GraphMode,
        GraphPolicy,
        LinkMessage,
        LinkMessages,
        NewLinkMessage,
        mesh_graph::LinkReceipt,
        OutcomeStatus,
        CallReport,
        CallReports,
        CallReportsAccepted,
        MeshEvent,
        EventBody,
        EventStats,
        RegisterRequest,
        StatusMessage,
        AgentsAnswer,
        RegisteredAgents,
        RegisteredAgent,
        SkillProfile,
        AgentMatches,
        AgentMatch,
        MatchedSkill,
        RouteRequest,
        Route,
        RouteChoice,
        AgentRecord,
        AgentInterfaceRecord,
        HealthProbe,
        AgentSummary,
        CapabilityAgents,
        AgentPick,
        RegistryStats,
        ErrorBody,
        Success,
        AiCatalog,
        AiCatalogEntry,
        AiCatalogExtensions,
        MeshAgentMetadata,
        ArdCatalog,
        ArdEntry,
        ArdMetadata,
        CatalogHost
    )),
    modifiers(&SharedAnswers)
)]
struct ApiDoc;

/// The OpenAPI document served at `/openapi.json` (also rendered into the docs by `tests/docs.rs`).
pub fn openapi_document() -> String {
    ApiDoc::openapi().to_pretty_json().unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// The registry's routes (without the shared layers).
pub fn router(state: Arc<RegistryState>, metrics: Arc<ServiceMetrics>) -> Router {
    let openapi = openapi_document();
    // Agents register, leave and report failures as themselves; anyone authenticated reads.
    let agents = require(
        Router::new()
            .route("/register", post(register))
            .route("/agents/{name}", delete(deregister))
            .route("/agents/{name}/failures", post(report_failure)),
        AGENT_ROLES,
    );
    let reads = require(
        Router::new()
            .route("/agents", get(list_agents))
            .route("/route", post(route))
            .route("/agents/{name}", get(get_agent))
            .route("/capabilities/{capability}", get(discover))
            .route("/capabilities/{capability}/next", get(pick))
            .route("/stats", get(stats))
            .route(catalog::AI_CATALOG_PATH, get(ai_catalog))
            .route(catalog::ARD_CATALOG_PATH, get(ard_catalog)),
        ANY_ROLE,
    );
    let api = agents
        .merge(reads)
        .merge(graph_api::routes())
        .route_layer(mesh_server::http::track_requests(metrics.clone()))
        .with_state(state);
    let docs = Router::new().route(
        "/openapi.json",
        get(move || async move { ([(header::CONTENT_TYPE, "application/json")], openapi).into_response() }),
    );
    api.merge(docs).merge(health_route(metrics))
}

/// Register an agent, or update its registration: the seed's form (`name`, `url`,
/// `capabilities`, endpoints), or `agent_card_url` alone for a standard A2A agent, which the
/// registry reads from its card (name, capabilities from its skills, endpoints from its
/// interfaces) and polls on its card.
#[utoipa::path(post, path = "/register", request_body = RegisterRequest, responses(
    (status = 200, description = "Registered (or updated)", body = StatusMessage),
    (status = 400, description = "Invalid registration (REGISTRATION_INVALID): neither form, a bad URL, name, capability or path", body = ErrorBody),
    (status = 403, description = "The caller holds neither the agent nor the admin role (AUTH_FORBIDDEN), or, as an agent, names an agent other than itself (NAME_FORBIDDEN)", body = ErrorBody),
    (status = 409, description = "The name is registered by another identity (NAME_TAKEN), its path is another agent's (AGENT_PATH_TAKEN), or the registry or this identity holds as many registrations as it may (REGISTRATIONS_FULL, IDENTITY_REGISTRATIONS_FULL)", body = ErrorBody),
    (status = 422, description = "The agent's address is refused by the outbound address policy (AGENT_ADDRESS_REFUSED), or its card cannot be fetched (AGENT_CARD_UNREACHABLE), is not JSON, too large, not a card, has no name or an interface off its origin (AGENT_CARD_INVALID), or names another agent (AGENT_CARD_MISMATCH)", body = ErrorBody),
))]
async fn register(
    State(state): State<Arc<RegistryState>>,
    RequestCaller(caller): RequestCaller,
    JsonBody(request): JsonBody<RegisterRequest>,
) -> Result<Json<StatusMessage>, RegistryError> {
    let now = now_rfc3339();
    let mut agent = match request.form()? {
        RegistrationForm::Seed(registration) => {
            let mut agent = seed_agent(&request, &registration, &now)?;
            // Before any fetch: a name held by another identity is refused without touching its URL.
            claim(&state, &caller, &mut agent)?;
            vet_address(&state.http, &agent).await?;
            if state.intake.verify_cards {
                verify_card(&state.http, &mut agent, &state.intake).await?;
            }
            agent
        }
        // The name is the card's: known only once it is fetched (through the address policy).
        RegistrationForm::Card(card_url) => {
            let mut agent = card_agent(&state.http, &request, &card_url, &state.intake, &now).await?;
            claim(&state, &caller, &mut agent)?;
            agent
        }
    };
    if let Some(holder) = state.directory.path_holder(&agent.path, &agent.name) {
        return Err(RegistryError::PathTaken { path: agent.path, holder });
    }
    if let Ok(existing) = state.directory.get(&agent.name) {
        agent.registered_at = existing.registered_at;
    }
    // Durable first: an acknowledged registration survives a crash right after. The database's
    // unique path is the last word when replicas register two agents under one path at once.
    let changed = match state.store.upsert(&agent).await {
        Err(StorageError::Query(sqlx::Error::Database(error))) if error.is_unique_violation() => {
            return Err(RegistryError::PathTaken { path: agent.path, holder: "another agent".into() });
        }
        written => written?,
    };
    let (name, url) = (agent.name.clone(), agent.url.clone());
    let previous_url = state.directory.get(&name).ok().map(|a| a.url);
    let is_new = state.directory.upsert(agent);
    // A periodic re-registration of the same instance (every 30 s per agent) is not news: DEBUG.
    let moved = previous_url.as_deref() != Some(url.as_str());
    if is_new || moved {
        tracing::info!(agent = %name, %url, new = is_new, "registered");
    } else {
        tracing::debug!(agent = %name, "registration refreshed");
    }
    if moved {
        state.events.publish(EventBody::AgentRegistered { agent_id: name.clone(), url });
    }
    // A new instance's (or a changed one's) health is learnt now rather than at the next poll, so
    // it joins the rotation at once; so is that of an instance not known to be healthy, which is
    // how an agent restarted at the same address comes back (it re-registers unchanged). A
    // refresh of a healthy instance waits for its turn (one check per interval across replicas).
    let not_healthy = state.directory.get(&name).is_ok_and(|record| record.health_status != HealthStatus::Healthy);
    if (changed || not_healthy)
        && let Some(target) = state.directory.poll_target(&name)
    {
        let checker = state.checker.clone();
        tokio::spawn(async move { checker.check_now(target).await }.instrument(tracing::Span::current()));
    }
    Ok(Json(StatusMessage::new("registered")))
}

/// Records the owner of `agent`'s name (refusing a caller who may not hold it), and checks the
/// registry's capacity for it.
fn claim(state: &RegistryState, caller: &mesh_auth::Caller, agent: &mut StoredAgent) -> Result<(), RegistryError> {
    let current_owner = state.directory.owner(&agent.name).flatten();
    agent.owner = ownership::claim(caller, &agent.name, current_owner.as_deref())?;
    agent.tenant = TenantView::registering(caller);
    admit_registration(&state.directory, agent, &state.intake)
}

/// Which instance of a name a request is about.
#[derive(Debug, Deserialize, IntoParams)]
struct InstanceQuery {
    /// The URL the instance is registered at: the request applies only while the name is still
    /// registered there, so a stopping instance never removes a replacement that took over its
    /// name, and a failure report about a replaced instance checks nothing.
    url: Option<String>,
}

/// Remove an agent.
#[utoipa::path(delete, path = "/agents/{name}", params(("name" = String, Path, description = "Agent name"), InstanceQuery), responses(
    (status = 200, description = "Deregistered", body = StatusMessage),
    (status = 403, description = "The caller holds neither the agent nor the admin role (AUTH_FORBIDDEN), or is an agent other than the name's owner (NAME_FORBIDDEN)", body = ErrorBody),
    (status = 404, description = "No such agent", body = ErrorBody),
    (status = 409, description = "The name is registered at another URL now; nothing was removed", body = ErrorBody),
))]
async fn deregister(
    State(state): State<Arc<RegistryState>>,
    RequestCaller(caller): RequestCaller,
    PathParam(name): PathParam<String>,
    QueryParams(instance): QueryParams<InstanceQuery>,
) -> Result<Json<StatusMessage>, RegistryError> {
    if let Some(owner) = state.directory.owner(&name) {
        ownership::may_remove(&caller, &name, owner.as_deref())?;
    }
    let url = instance.url.as_deref().map(|u| u.trim_end_matches('/'));
    let known_url = state.directory.get(&name).ok().map(|a| a.url);
    let stored = state.store.delete(&name, url).await?;
    let known = state.directory.remove(&name, url);
    if !stored && !known {
        return Err(match (url, state.directory.get(&name)) {
            (Some(url), Ok(current)) => {
                RegistryError::InstanceReplaced { name, url: url.to_owned(), current: current.url }
            }
            _ => RegistryError::AgentNotFound(name),
        });
    }
    tracing::info!(agent = %name, "deregistered");
    let url = url.map(str::to_owned).or(known_url).unwrap_or_default();
    state.events.publish(EventBody::AgentDeregistered { agent_id: name, url });
    Ok(Json(StatusMessage::new("deregistered")))
}

/// Report that calls to an agent are failing: the registry checks its health at once (rather
/// than at the next poll), so a dead instance leaves the rotation now and a live one stays.
#[utoipa::path(post, path = "/agents/{name}/failures", params(("name" = String, Path, description = "Agent name"), InstanceQuery), responses(
    (status = 200, description = "Health checked; the message says the result", body = StatusMessage),
    (status = 403, description = "The caller holds neither the agent nor the admin role (AUTH_FORBIDDEN)", body = ErrorBody),
    (status = 404, description = "No such agent", body = ErrorBody),
    (status = 409, description = "The name is registered at another URL now; nothing was checked", body = ErrorBody),
))]
async fn report_failure(
    State(state): State<Arc<RegistryState>>,
    PathParam(name): PathParam<String>,
    QueryParams(instance): QueryParams<InstanceQuery>,
) -> Result<Json<StatusMessage>, RegistryError> {
    let target = state.directory.poll_target(&name).ok_or_else(|| RegistryError::AgentNotFound(name.clone()))?;
    if let Some(url) = instance.url.as_deref().map(|u| u.trim_end_matches('/'))
        && url != target.url
    {
        return Err(RegistryError::ReportStale { name, url: url.to_owned(), current: target.url });
    }
    tracing::info!(agent = %name, "failure reported; checking health now");
    let health = state.checker.check_now(target).await;
    Ok(Json(StatusMessage::new(format!("health checked: {}", health_word(health)))))
}

/// Every registered agent the caller sees, with its health, path, interfaces and card, and the
/// agents of the registries this one mirrors (each with its `origin`); or, with
/// `q`, the agents whose cards best match `q`, best first, each with the skills that matched.
/// `capability` and `health` filter both.
#[utoipa::path(get, path = "/agents", params(AgentQuery), responses(
    (status = 200, description = "Without `q`: every agent in name order (RegisteredAgents). With `q`: the best matches (AgentMatches)", body = AgentsAnswer),
    (status = 400, description = "An empty or too long `q`, or a `limit` out of range (QUERY_INVALID)", body = ErrorBody),
))]
async fn list_agents(
    State(state): State<Arc<RegistryState>>,
    RequestCaller(caller): RequestCaller,
    QueryParams(query): QueryParams<AgentQuery>,
) -> Result<Json<AgentsAnswer>, RegistryError> {
    if query.q.is_some() {
        return Ok(Json(AgentsAnswer::Found(discovery_api::search(&state, &caller, query).await?)));
    }
    let view = TenantView::of(&caller, None)?;
    let mut agents = state.directory.list_registered(&view);
    agents.extend(state.mirrors.listed(&state.directory));
    agents.sort_by(|a, b| a.record.name.cmp(&b.record.name));
    agents.retain(|agent| {
        query.capability.as_ref().is_none_or(|c| agent.record.capabilities.contains(c))
            && query.health.is_none_or(|h| agent.record.health_status == h)
    });
    Ok(Json(AgentsAnswer::Listed(RegisteredAgents { status: Success::Success, total: agents.len(), agents })))
}

/// The healthy agent, and its skill, that best fit an A2A message (by its text parts), with the
/// next best as alternatives: what a gateway or an LLM agent asks when it holds a request rather
/// than a skill name.
#[utoipa::path(post, path = "/route", request_body = RouteRequest, responses(
    (status = 200, body = Route),
    (status = 400, description = "The message has no text, or too much (QUERY_INVALID)", body = ErrorBody),
    (status = 404, description = "No healthy agent the caller sees matches (NO_AGENT_FOR_REQUEST)", body = ErrorBody),
))]
async fn route(
    State(state): State<Arc<RegistryState>>,
    RequestCaller(caller): RequestCaller,
    JsonBody(request): JsonBody<RouteRequest>,
) -> Result<Json<Route>, RegistryError> {
    Ok(Json(discovery_api::route(&state, &caller, request).await?))
}

/// One agent: registered here, or else mirrored from another registry (with its `origin`).
#[utoipa::path(get, path = "/agents/{name}", params(("name" = String, Path, description = "Agent name")), responses(
    (status = 200, body = RegisteredAgent),
    (status = 404, description = "No such agent", body = ErrorBody),
))]
async fn get_agent(
    State(state): State<Arc<RegistryState>>,
    RequestCaller(caller): RequestCaller,
    PathParam(name): PathParam<String>,
) -> Result<Json<RegisteredAgent>, RegistryError> {
    match state.directory.registered(&name, &TenantView::of(&caller, None)?) {
        Err(RegistryError::AgentNotFound(_)) => {
            state.mirrors.get(&name, &state.directory).map(Json).ok_or(RegistryError::AgentNotFound(name))
        }
        found => found.map(Json),
    }
}

/// Every agent offering a capability.
#[utoipa::path(get, path = "/capabilities/{capability}", params(("capability" = String, Path)), responses(
    (status = 200, body = CapabilityAgents),
    (status = 404, description = "No agent offers it", body = ErrorBody),
))]
async fn discover(
    State(state): State<Arc<RegistryState>>,
    PathParam(capability): PathParam<String>,
) -> Result<Json<CapabilityAgents>, RegistryError> {
    let agents = lookup_span("registry.discover", &capability).in_scope(|| state.directory.discover(&capability))?;
    Ok(Json(CapabilityAgents { status: Success::Success, capability, agents }))
}

/// One agent for a capability: round-robin among the healthy ones; when none is healthy, any
/// registered one with `fallback: true` and a warning.
#[utoipa::path(get, path = "/capabilities/{capability}/next", params(("capability" = String, Path)), responses(
    (status = 200, body = AgentPick),
    (status = 404, description = "No agent offers it", body = ErrorBody),
))]
async fn pick(
    State(state): State<Arc<RegistryState>>,
    PathParam(capability): PathParam<String>,
) -> Result<Json<AgentPick>, RegistryError> {
    Ok(Json(lookup_span("registry.pick", &capability).in_scope(|| state.directory.pick(&capability))?))
}

/// The internal span of a directory lookup by capability.
fn lookup_span(name: &'static str, capability: &str) -> tracing::Span {
    if !mesh_telemetry::recording() {
        return tracing::Span::none();
    }
    tracing::info_span!("lookup", otel.name = name, mesh.capability = capability)
}

/// Counts of agents by health.
#[utoipa::path(get, path = "/stats", responses((status = 200, body = RegistryStats)))]
async fn stats(State(state): State<Arc<RegistryState>>) -> Json<RegistryStats> {
    Json(state.directory.stats())
}

/// The agents `GET /agents` lists as an AI Catalog (`specVersion` 1.0), each entry an A2A agent
/// card by URL (`urn:air:<card host>:a2a-mesh:<path>`), the registry's view of it under the
/// `https://ai-catalog.org/extensions/metadata` extension. Carries an `ETag`; a request whose
/// `If-None-Match` names it is answered 304.
#[utoipa::path(get, path = "/.well-known/ai-catalog.json", params(
    ("If-None-Match" = Option<String>, Header, description = "ETags of copies the caller holds"),
), responses(
    (status = 200, description = "The catalog", body = AiCatalog, content_type = "application/ai-catalog+json", headers(
        ("ETag" = String, description = "A digest of the body"),
        ("Cache-Control" = String, description = "private, max-age=10"),
    )),
    (status = 304, description = "Unchanged: If-None-Match names the current ETag", headers(
        ("ETag" = String, description = "A digest of the body"),
        ("Cache-Control" = String, description = "private, max-age=10"),
    )),
))]
async fn ai_catalog(
    State(state): State<Arc<RegistryState>>,
    RequestCaller(caller): RequestCaller,
    request: HeaderMap,
) -> Result<Response, RegistryError> {
    let document = catalog::ai_catalog(&state.directory.list_registered(&TenantView::of(&caller, None)?));
    catalog::respond(&document, AI_CATALOG_MEDIA_TYPE, &request)
}

/// The agents `GET /agents` lists as an Agentic Resource Discovery (v0.9) manifest: the same
/// entries with ARD's `capabilities` and scalar `metadata` (`path`, `health`). Carries an
/// `ETag`; a request whose `If-None-Match` names it is answered 304.
#[utoipa::path(get, path = "/.well-known/ard.json", params(
    ("If-None-Match" = Option<String>, Header, description = "ETags of copies the caller holds"),
), responses(
    (status = 200, description = "The manifest", body = ArdCatalog, headers(
        ("ETag" = String, description = "A digest of the body"),
        ("Cache-Control" = String, description = "private, max-age=10"),
    )),
    (status = 304, description = "Unchanged: If-None-Match names the current ETag", headers(
        ("ETag" = String, description = "A digest of the body"),
        ("Cache-Control" = String, description = "private, max-age=10"),
    )),
))]
async fn ard_catalog(
    State(state): State<Arc<RegistryState>>,
    RequestCaller(caller): RequestCaller,
    request: HeaderMap,
) -> Result<Response, RegistryError> {
    let document = catalog::ard_catalog(&state.directory.list_registered(&TenantView::of(&caller, None)?));
    catalog::respond(&document, catalog::ARD_MEDIA_TYPE, &request)
}
