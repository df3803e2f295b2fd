//! The communication graph's API (seed 004): link CRUD, an agent's links and place in the
//! organisation, the topology, the policy feed the agents cache, link messages, call reports and
//! the live event stream.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use futures::StreamExt;
use mesh_protocol::graph::{
    CallReports, CallReportsAccepted, EventBody, EventStats, GraphPolicy, Link, LinkList, LinkMessage, LinkMessages,
    LinkSource, LinkUpdate, NewLink, NewLinkMessage, OrgChart, Topology, TopologyAgent, TopologyLink,
};
use mesh_protocol::registry::StatusMessage;
use mesh_server::auth::{ADMIN_ROLES, AGENT_ROLES, ANY_ROLE, RequestCaller, require};
use mesh_server::http::{JsonBody, PathParam, QueryParams};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::api::RegistryState;
use crate::error::RegistryError;
use crate::events::SubscribeRefused;
use crate::health::now_rfc3339;
use crate::links::{LINK_MESSAGES_PAGE_MAX, LinkDef, check_receipt};
use crate::tenancy::{TenantView, check_sender};
use mesh_graph::LinkReceipt;

/// Call reports one `POST /api/events/calls` may carry.
pub const CALL_REPORTS_PER_BATCH_MAX: usize = 1_000;
/// Messages a history request returns when it names no limit.
pub const LINK_MESSAGES_PAGE_DEFAULT: usize = 100;
/// A comment line on idle event streams, so proxies and browsers keep them open.
const EVENTS_KEEP_ALIVE_MS: u64 = 15_000;

pub fn routes() -> Router<Arc<RegistryState>> {
    // Links are the admin's; agents report calls and record link messages as themselves;
    // anyone authenticated reads the graph and its events.
    let admin = require(
        Router::new()
            .route("/api/links", post(create_link))
            .route("/api/links/{id}", put(update_link).delete(delete_link)),
        ADMIN_ROLES,
    );
    let agents = require(
        Router::new()
            .route("/api/links/{id}/messages", post(record_link_message))
            .route("/api/links/{id}/receipts", post(record_link_receipt))
            .route("/api/events/calls", post(report_calls)),
        AGENT_ROLES,
    );
    let reads = require(
        Router::new()
            .route("/api/links", get(list_links))
            .route("/api/links/{id}", get(get_link))
            .route("/api/links/{id}/messages", get(link_messages))
            .route("/api/agents/{id}/links", get(agent_links))
            .route("/api/agents/{id}/org", get(org_chart))
            .route("/api/topology", get(topology))
            .route("/api/policy", get(policy))
            .route("/api/events", get(events))
            .route("/api/events/stats", get(event_stats)),
        ANY_ROLE,
    );
    admin.merge(agents).merge(reads)
}

/// Every link.
#[utoipa::path(get, path = "/api/links", responses((status = 200, body = LinkList)))]
pub(crate) async fn list_links(State(state): State<Arc<RegistryState>>) -> Result<Json<LinkList>, RegistryError> {
    Ok(Json(LinkList { agent_id: None, links: state.links.list().await? }))
}

/// Create a link between two registered agents.
#[utoipa::path(post, path = "/api/links", request_body = NewLink, responses(
    (status = 201, body = Link),
    (status = 400, description = "A self-link or an invalid agent id", body = mesh_protocol::error::ErrorBody),
    (status = 403, description = "The caller does not hold the admin role (AUTH_FORBIDDEN)", body = mesh_protocol::error::ErrorBody),
    (status = 404, description = "An agent is not registered", body = mesh_protocol::error::ErrorBody),
    (status = 409, description = "A link between these agents in this direction exists", body = mesh_protocol::error::ErrorBody),
    (status = 422, description = "Unknown direction, relationship or field", body = mesh_protocol::error::ErrorBody),
))]
pub(crate) async fn create_link(
    State(state): State<Arc<RegistryState>>,
    JsonBody(new): JsonBody<NewLink>,
) -> Result<(StatusCode, Json<Link>), RegistryError> {
    if new.from_agent_id != new.to_agent_id {
        for agent in [&new.from_agent_id, &new.to_agent_id] {
            state.directory.get(agent)?;
        }
    }
    let link = state.links.create(&new, LinkSource::Api, &now_rfc3339()).await?;
    tracing::info!(link = %link.id, from = %link.from_agent_id, to = %link.to_agent_id, "link created");
    state.events.publish(EventBody::LinkCreated { link: link.clone() });
    Ok((StatusCode::CREATED, Json(link)))
}

/// One link.
#[utoipa::path(get, path = "/api/links/{id}", params(("id" = String, Path)), responses(
    (status = 200, body = Link),
    (status = 404, body = mesh_protocol::error::ErrorBody),
))]
pub(crate) async fn get_link(
    State(state): State<Arc<RegistryState>>,
    PathParam(id): PathParam<String>,
) -> Result<Json<Link>, RegistryError> {
    Ok(Json(state.links.get(&id).await?))
}

/// Change a link's direction, relationship or enabled flag. A link from the configuration
/// takes its configured properties back at the next reload.
#[utoipa::path(put, path = "/api/links/{id}", params(("id" = String, Path)), request_body = LinkUpdate, responses(
    (status = 200, body = Link),
    (status = 403, description = "The caller does not hold the admin role (AUTH_FORBIDDEN)", body = mesh_protocol::error::ErrorBody),
    (status = 404, body = mesh_protocol::error::ErrorBody),
    (status = 422, description = "Unknown value or field", body = mesh_protocol::error::ErrorBody),
))]
pub(crate) async fn update_link(
    State(state): State<Arc<RegistryState>>,
    PathParam(id): PathParam<String>,
    JsonBody(change): JsonBody<LinkUpdate>,
) -> Result<Json<Link>, RegistryError> {
    let (link, changed) = state.links.update(&id, &change, &now_rfc3339()).await?;
    if changed {
        tracing::info!(link = %link.id, "link updated");
        state.events.publish(EventBody::LinkUpdated { link: link.clone() });
    }
    Ok(Json(link))
}

/// Delete a link and its message history.
#[utoipa::path(delete, path = "/api/links/{id}", params(("id" = String, Path)), responses(
    (status = 200, body = StatusMessage),
    (status = 403, description = "The caller does not hold the admin role (AUTH_FORBIDDEN)", body = mesh_protocol::error::ErrorBody),
    (status = 404, body = mesh_protocol::error::ErrorBody),
))]
pub(crate) async fn delete_link(
    State(state): State<Arc<RegistryState>>,
    PathParam(id): PathParam<String>,
) -> Result<Json<StatusMessage>, RegistryError> {
    let link = state.links.delete(&id).await?;
    tracing::info!(link = %link.id, "link deleted");
    publish_deleted(&state, &link);
    Ok(Json(StatusMessage::new("deleted")))
}

fn publish_deleted(state: &RegistryState, link: &Link) {
    state.events.publish(EventBody::LinkDeleted {
        link_id: link.id.clone(),
        from_agent_id: link.from_agent_id.clone(),
        to_agent_id: link.to_agent_id.clone(),
    });
}

/// The links with an agent at either end.
#[utoipa::path(get, path = "/api/agents/{id}/links", params(("id" = String, Path)), responses((status = 200, body = LinkList)))]
pub(crate) async fn agent_links(
    State(state): State<Arc<RegistryState>>,
    PathParam(id): PathParam<String>,
) -> Result<Json<LinkList>, RegistryError> {
    let links = state.links.for_agent(&id).await?;
    Ok(Json(LinkList { agent_id: Some(id), links }))
}

/// An agent's superiors, subordinates and peers, from its enabled links (a `subordinate` link
/// reads the other way round: its target is the superior).
#[utoipa::path(get, path = "/api/agents/{id}/org", params(("id" = String, Path)), responses((status = 200, body = OrgChart)))]
pub(crate) async fn org_chart(
    State(state): State<Arc<RegistryState>>,
    PathParam(id): PathParam<String>,
) -> Result<Json<OrgChart>, RegistryError> {
    let links = state.links.for_agent(&id).await?;
    Ok(Json(org_of(&id, &links)))
}

fn org_of(agent: &str, links: &[Link]) -> OrgChart {
    OrgChart::of(agent, links)
}

/// The whole graph: agents with their health and capabilities, and the links.
#[utoipa::path(get, path = "/api/topology", responses((status = 200, body = Topology)))]
pub(crate) async fn topology(State(state): State<Arc<RegistryState>>) -> Result<Json<Topology>, RegistryError> {
    let links = state.links.list().await?;
    let agents = state
        .directory
        .list()
        .into_iter()
        .map(|a| TopologyAgent {
            id: a.name.clone(),
            name: a.name,
            url: a.url,
            health_status: a.health_status,
            capabilities: a.capabilities,
            last_health_check: a.last_health_check,
        })
        .collect();
    let links = links
        .into_iter()
        .map(|l| TopologyLink {
            id: l.id,
            from: l.from_agent_id,
            to: l.to_agent_id,
            direction: l.direction,
            relationship: l.relationship,
            enabled: l.enabled,
        })
        .collect();
    Ok(Json(Topology { mode: state.graph_mode(), agents, links }))
}

/// The graph mode and every link: what agents cache to check calls. Answers `ETag`, and
/// `304 Not Modified` to a matching `If-None-Match`, so polling it costs little.
#[utoipa::path(get, path = "/api/policy", params(
    ("If-None-Match" = Option<String>, Header, description = "ETags (or `*`) of a policy the caller holds")
), responses(
    (status = 200, body = GraphPolicy, headers(("ETag" = String, description = "The policy's digest"))),
    (status = 304, description = "Unchanged since the ETag sent in If-None-Match", headers(("ETag" = String))),
))]
pub(crate) async fn policy(
    State(state): State<Arc<RegistryState>>,
    headers: HeaderMap,
) -> Result<Response, RegistryError> {
    let policy = GraphPolicy { mode: state.graph_mode(), links: state.links.list().await? };
    let body = serde_json::to_vec(&policy).map_err(|e| RegistryError::Startup(e.to_string()))?;
    // A digest of the body, so every replica sharing the database gives the same tag.
    let etag = format!("\"{:016x}\"", fnv1a(&body));
    let unchanged = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    if unchanged {
        return Ok((StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]).into_response());
    }
    Ok(([(header::ETAG, etag), (header::CONTENT_TYPE, "application/json".to_owned())], body).into_response())
}

/// FNV-1a, 64 bits: a stable digest for ETags (not for security).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct MessagesQuery {
    /// The newest messages to return, 1 to 500 (default 100).
    limit: Option<usize>,
    /// Only this tenant's messages (an admin's or a mesh agent's choice; a user reads its own
    /// tenant's only, and naming another is refused).
    tenant: Option<String>,
}

/// A link's message history (its internal channel `link:{id}`), oldest first: the messages of
/// the tenants the caller acts for (a user its own; admins and agents of no tenant every one).
#[utoipa::path(get, path = "/api/links/{id}/messages", params(("id" = String, Path), MessagesQuery), responses(
    (status = 200, body = LinkMessages),
    (status = 400, body = mesh_protocol::error::ErrorBody),
    (status = 403, description = "The caller names a tenant it does not act for (TENANT_FORBIDDEN)", body = mesh_protocol::error::ErrorBody),
    (status = 404, body = mesh_protocol::error::ErrorBody),
))]
pub(crate) async fn link_messages(
    State(state): State<Arc<RegistryState>>,
    RequestCaller(caller): RequestCaller,
    PathParam(id): PathParam<String>,
    QueryParams(query): QueryParams<MessagesQuery>,
) -> Result<Json<LinkMessages>, RegistryError> {
    let limit = query.limit.unwrap_or(LINK_MESSAGES_PAGE_DEFAULT);
    if !(1..=LINK_MESSAGES_PAGE_MAX).contains(&limit) {
        return Err(RegistryError::InvalidLink(format!("limit must be 1 to {LINK_MESSAGES_PAGE_MAX}")));
    }
    let view = TenantView::of(&caller, query.tenant.as_deref())?;
    let link = state.links.get(&id).await?;
    let messages = state.links.messages(&link.id, view.only(), limit).await?;
    Ok(Json(LinkMessages { link_id: link.id, messages }))
}

/// Record a message an agent sent over the link (the sender reports it once delivered), for the
/// tenant of the call it was sent for. An agent records only as itself (`from_agent_id` is the
/// authenticated agent), over an enabled link it is an end of, for a tenant it acts for.
#[utoipa::path(post, path = "/api/links/{id}/messages", params(("id" = String, Path)), request_body = NewLinkMessage, responses(
    (status = 201, body = LinkMessage),
    (status = 400, description = "The agents are not the link's ends, the text is too long, or the tenant is malformed", body = mesh_protocol::error::ErrorBody),
    (status = 403, description = "The caller holds neither the agent nor the admin role (AUTH_FORBIDDEN), records in another agent's name or over a link it is not an end of (LINK_SENDER_FORBIDDEN), or for a tenant it does not act for (TENANT_FORBIDDEN)", body = mesh_protocol::error::ErrorBody),
    (status = 404, body = mesh_protocol::error::ErrorBody),
    (status = 409, description = "The link is disabled (LINK_DISABLED)", body = mesh_protocol::error::ErrorBody),
))]
pub(crate) async fn record_link_message(
    State(state): State<Arc<RegistryState>>,
    RequestCaller(caller): RequestCaller,
    PathParam(id): PathParam<String>,
    JsonBody(message): JsonBody<NewLinkMessage>,
) -> Result<(StatusCode, Json<LinkMessage>), RegistryError> {
    check_sender(&caller, &message.from_agent_id)?;
    let tenant = TenantView::for_write(&caller, message.tenant.as_deref())?;
    let link = state.links.get(&id).await?;
    let stored = state.links.record_message(&link, &message, &tenant, &now_rfc3339()).await?;
    // Received is the receiver's word, not the sender's: its receipt publishes that.
    state.events.publish(EventBody::AgentMessageSent {
        link_id: stored.link_id.clone(),
        from_agent_id: stored.from_agent_id.clone(),
        to_agent_id: stored.to_agent_id.clone(),
        context_id: stored.context_id.clone(),
        message_id: stored.id.clone(),
        tenant: stored.tenant.clone(),
    });
    Ok((StatusCode::CREATED, Json(stored)))
}

/// Report that this agent processed a message sent to it over the link (the kit posts it once
/// the message's task has ended): the registry publishes `agent_message_received`, for the tenant
/// of the call that carried it. Only the receiving end posts it (`to_agent_id` is the
/// authenticated agent, `from_agent_id` the link's other end, the link enabled), for a tenant it
/// acts for.
#[utoipa::path(post, path = "/api/links/{id}/receipts", params(("id" = String, Path)), request_body = LinkReceipt, responses(
    (status = 202, description = "Published as agent_message_received", body = StatusMessage),
    (status = 400, description = "The agents are not the link's ends, the conversation is not the link's, an id is too long (LINK_INVALID), or the tenant is malformed (TENANT_INVALID)", body = mesh_protocol::error::ErrorBody),
    (status = 403, description = "The caller holds neither the agent nor the admin role (AUTH_FORBIDDEN), posts in another agent's name (LINK_SENDER_FORBIDDEN), or names a tenant it does not act for (TENANT_FORBIDDEN)", body = mesh_protocol::error::ErrorBody),
    (status = 404, body = mesh_protocol::error::ErrorBody),
    (status = 409, description = "The link is disabled (LINK_DISABLED)", body = mesh_protocol::error::ErrorBody),
))]
pub(crate) async fn record_link_receipt(
    State(state): State<Arc<RegistryState>>,
    RequestCaller(caller): RequestCaller,
    PathParam(id): PathParam<String>,
    JsonBody(receipt): JsonBody<LinkReceipt>,
) -> Result<(StatusCode, Json<StatusMessage>), RegistryError> {
    check_sender(&caller, &receipt.to_agent_id)?;
    let tenant = TenantView::for_write(&caller, receipt.tenant.as_deref())?;
    let link = state.links.get(&id).await?;
    check_receipt(&link, &receipt)?;
    state.events.publish(EventBody::AgentMessageReceived {
        link_id: link.id,
        from_agent_id: receipt.from_agent_id,
        to_agent_id: receipt.to_agent_id,
        context_id: receipt.context_id,
        message_id: receipt.message_id,
        tenant,
    });
    Ok((StatusCode::ACCEPTED, Json(StatusMessage::new("received"))))
}

/// Calls agents made, reported in batches: each becomes a `call` event of the tenant it was made
/// for. An agent reports only its own calls (`from` is the authenticated agent), for tenants it
/// acts for; one report that is not refuses the whole batch.
#[utoipa::path(post, path = "/api/events/calls", request_body = CallReports, responses(
    (status = 202, body = CallReportsAccepted),
    (status = 400, description = "More than 1000 reports, or a report whose ends are not 1 to 128 characters (LINK_INVALID), or whose tenant is malformed (TENANT_INVALID)", body = mesh_protocol::error::ErrorBody),
    (status = 403, description = "The caller holds neither the agent nor the admin role (AUTH_FORBIDDEN), reports another agent's call (LINK_SENDER_FORBIDDEN), or one for a tenant it does not act for (TENANT_FORBIDDEN)", body = mesh_protocol::error::ErrorBody),
))]
pub(crate) async fn report_calls(
    State(state): State<Arc<RegistryState>>,
    RequestCaller(caller): RequestCaller,
    JsonBody(reports): JsonBody<CallReports>,
) -> Result<(StatusCode, Json<CallReportsAccepted>), RegistryError> {
    if reports.calls.len() > CALL_REPORTS_PER_BATCH_MAX {
        return Err(RegistryError::InvalidLink(format!(
            "a batch carries at most {CALL_REPORTS_PER_BATCH_MAX} call reports, not {}",
            reports.calls.len()
        )));
    }
    let max = crate::links::AGENT_ID_CHARS_MAX;
    let bad_name = |s: &str| s.is_empty() || s.chars().count() > max;
    if let Some(bad) = reports.calls.iter().find(|c| bad_name(&c.from) || bad_name(&c.to)) {
        return Err(RegistryError::InvalidLink(format!(
            "call report {} -> {}: agent ids must be 1 to {max} characters",
            bad.from, bad.to
        )));
    }
    let mut tenants = Vec::with_capacity(reports.calls.len());
    for call in &reports.calls {
        check_sender(&caller, &call.from)?;
        tenants.push(TenantView::for_write(&caller, call.tenant.as_deref())?);
    }
    let accepted = reports.calls.len();
    for (call, tenant) in reports.calls.into_iter().zip(tenants) {
        state.events.publish(EventBody::Call {
            from: call.from,
            to: call.to,
            capability: call.capability,
            status: call.status,
            latency_ms: call.latency_ms,
            tenant,
        });
    }
    Ok((StatusCode::ACCEPTED, Json(CallReportsAccepted { accepted })))
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    /// Only this tenant's message and call events (an admin's or a mesh agent's choice; a user
    /// sees its own tenant's only, and naming another is refused).
    tenant: Option<String>,
}

/// The live events as Server-Sent Events; `Last-Event-ID` resumes after that event. Link
/// message and call events reach only readers acting for their tenant; the graph's own events
/// (registrations, health, links) reach every reader.
#[utoipa::path(get, path = "/api/events", params(
    ("Last-Event-ID" = Option<String>, Header, description = "The id of the last event seen: the stream resumes after it while the registry still holds the events after it"),
    EventsQuery,
), responses(
    (status = 200, description = "Server-Sent Events, each a MeshEvent in JSON, the SSE event name being its kind", content_type = "text/event-stream", body = mesh_protocol::graph::MeshEvent),
    (status = 400, description = "A malformed tenant (TENANT_INVALID)", body = mesh_protocol::error::ErrorBody),
    (status = 403, description = "The caller names a tenant it does not act for (TENANT_FORBIDDEN)", body = mesh_protocol::error::ErrorBody),
    (status = 429, description = "The caller's tenant holds its share of the streams (EVENT_SUBSCRIBERS_TENANT_FULL)", body = mesh_protocol::error::ErrorBody),
    (status = 503, description = "Too many streams open (EVENT_SUBSCRIBERS_FULL)", body = mesh_protocol::error::ErrorBody),
))]
pub(crate) async fn events(
    State(state): State<Arc<RegistryState>>,
    RequestCaller(caller): RequestCaller,
    QueryParams(query): QueryParams<EventsQuery>,
    headers: HeaderMap,
) -> Result<Response, RegistryError> {
    let last_seen = headers.get("last-event-id").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse().ok());
    let view = TenantView::of(&caller, query.tenant.as_deref())?;
    // Streams count against the tenant the caller acts in, so one tenant cannot hold them all.
    let holder = TenantView::for_write(&caller, query.tenant.as_deref())?;
    let stream = state.events.subscribe(last_seen, &holder).map_err(|refused| match refused {
        SubscribeRefused::Full(max) => RegistryError::SubscribersFull(max),
        SubscribeRefused::TenantFull(max) => RegistryError::TenantSubscribersFull(max),
    })?;
    // Filtered after the hub's reader, which still sees every id and so tells gaps right.
    let stream = stream.filter(move |event| std::future::ready(event.body.tenant().is_none_or(|t| view.sees(t))));
    let stream = stream.map(|event| {
        let sse = Event::default().id(event.id.to_string()).event(event.body.kind());
        Ok::<_, Infallible>(sse.json_data(&*event).unwrap_or_else(|_| Event::default().comment("unserializable")))
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_millis(EVENTS_KEEP_ALIVE_MS)))
        .into_response())
}

/// How the event stream is doing: open streams, events published, events slow readers missed.
#[utoipa::path(get, path = "/api/events/stats", responses((status = 200, body = EventStats)))]
pub(crate) async fn event_stats(State(state): State<Arc<RegistryState>>) -> Json<EventStats> {
    Json(state.events.stats())
}

/// Applies the configured links (at start and on reload) and announces what changed.
pub async fn sync_config_links(state: &RegistryState, defs: &[LinkDef]) -> Result<(), RegistryError> {
    let outcome = state.links.sync_config(defs, &now_rfc3339()).await?;
    tracing::info!(
        configured = defs.len(),
        created = outcome.created.len(),
        updated = outcome.updated.len(),
        deleted = outcome.deleted.len(),
        "configured links synced"
    );
    for link in outcome.created {
        state.events.publish(EventBody::LinkCreated { link });
    }
    for link in outcome.updated {
        state.events.publish(EventBody::LinkUpdated { link });
    }
    for link in &outcome.deleted {
        publish_deleted(state, link);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_protocol::graph::{LinkDirection, LinkRelationship};

    fn link(from: &str, to: &str, relationship: LinkRelationship, enabled: bool) -> Link {
        Link {
            id: format!("{from}-{to}"),
            from_agent_id: from.into(),
            to_agent_id: to.into(),
            direction: LinkDirection::TwoWay,
            relationship,
            enabled,
            source: LinkSource::Api,
            created_at: String::new(),
            updated_at: String::new(),
        }
    }

    #[test]
    fn the_org_chart_reads_subordinate_links_the_other_way_round() {
        let links = [
            link("ceo", "cto", LinkRelationship::Superior, true),
            link("cto", "dev", LinkRelationship::Superior, true),
            link("ops", "cto", LinkRelationship::Subordinate, true),
            link("cto", "cfo", LinkRelationship::Peer, true),
            link("cto", "intern", LinkRelationship::Superior, false),
        ];
        let chart = org_of("cto", &links);
        assert_eq!(chart.superiors, ["ceo"]);
        assert_eq!(chart.subordinates, ["dev", "ops"]);
        assert_eq!(chart.peers, ["cfo"]);
    }

    #[test]
    fn the_etag_digest_is_stable_and_tells_bodies_apart() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(fnv1a(b"{\"mode\":\"open\"}"), fnv1a(b"{\"mode\":\"enforced\"}"));
    }
}
