//! The conversations API. A conversation's id is its docmem root id, and also its bus
//! `conversation_id` and its A2A `contextId`.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use mesh_bus::{ChatMessage, Conversations, message_list};
use mesh_docmem::DocmemError;
use mesh_server::auth::RequestCaller;
use mesh_server::http::{PathParam, QueryParams};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::{UiError, UiState, visible_root, visible_tenant};

/// Conversations per page when the request names no limit.
const LIST_PAGE_SIZE_DEFAULT: usize = 50;

#[derive(Debug, Deserialize)]
pub(crate) struct ListParams {
    /// Only conversations this agent (id, e.g. `orchestrator-1`) took part in or was addressed as.
    agent: Option<String>,
    /// A previous page's `next_before`.
    before: Option<String>,
    limit: Option<usize>,
    /// Only this tenant's (an admin's choice; a user sees only its own anyway).
    tenant: Option<String>,
}

#[derive(Debug, Serialize)]
struct ConversationSummary {
    id: String,
    /// The tenant it belongs to ('' for the default tenant).
    tenant: String,
    /// The topic it lives on, for conversations opened through the UI agent.
    topic: Option<String>,
    created_at: String,
    updated_at: String,
}

/// `GET /conversations?agent=&before=&limit=&tenant=`: newest first, a bounded page, of the
/// tenants the caller sees.
pub(crate) async fn list(
    State(state): State<Arc<UiState>>,
    RequestCaller(caller): RequestCaller,
    QueryParams(params): QueryParams<ListParams>,
) -> Result<Json<Value>, UiError> {
    let tenant = visible_tenant(&caller, params.tenant.as_deref())?;
    let limit = params.limit.unwrap_or(LIST_PAGE_SIZE_DEFAULT);
    let page =
        state.docmem.list_roots(tenant.as_deref(), params.agent.as_deref(), params.before.as_deref(), limit).await?;
    let conversations: Vec<ConversationSummary> = page
        .roots
        .iter()
        .map(|root| ConversationSummary {
            id: root.id.clone(),
            tenant: root.tenant.clone(),
            topic: mesh_bus::conversation_topic(root).map(str::to_owned),
            created_at: root.created_at.clone(),
            updated_at: root.updated_at.clone(),
        })
        .collect();
    Ok(Json(json!({ "conversations": conversations, "next_before": page.next_before })))
}

/// `GET /conversations/{id}`: the docmem tree, root first.
pub(crate) async fn tree(
    State(state): State<Arc<UiState>>,
    RequestCaller(caller): RequestCaller,
    PathParam(id): PathParam<String>,
) -> Result<Json<Value>, UiError> {
    visible_root(&state, &id, visible_tenant(&caller, None)?.as_deref()).await?;
    let nodes = state.docmem.read_tree(&id).await?;
    let nodes: Vec<Value> = nodes
        .into_iter()
        .map(|node| {
            json!({
                "id": node.id, "parent_id": node.parent_id, "position": node.position,
                "context": node.context.to_string(), "content": node.content, "version": node.version,
                "created_at": node.created_at, "updated_at": node.updated_at,
            })
        })
        .collect();
    Ok(Json(json!({ "id": id, "nodes": nodes })))
}

#[derive(Debug, Deserialize)]
pub(crate) struct MessagesParams {
    /// The agent id whose point of view the roles take.
    #[serde(rename = "as")]
    viewer: String,
}

/// `GET /conversations/{id}/messages?as=AGENT_ID`: the role-relative list, chat-completion format.
pub(crate) async fn messages(
    State(state): State<Arc<UiState>>,
    RequestCaller(caller): RequestCaller,
    PathParam(id): PathParam<String>,
    QueryParams(params): QueryParams<MessagesParams>,
) -> Result<Json<Value>, UiError> {
    visible_root(&state, &id, visible_tenant(&caller, None)?.as_deref()).await?;
    let nodes = state.docmem.read_conversation(&id).await?;
    let messages: Vec<ChatMessage> = message_list(&nodes, &params.viewer);
    Ok(Json(json!({ "conversation_id": id, "as": params.viewer, "messages": messages })))
}

#[derive(Debug, Deserialize)]
pub(crate) struct ReplayParams {
    #[serde(rename = "as")]
    viewer: Option<String>,
}

/// `POST /conversations/{id}/replay[?as=AGENT_ID]`: rebuilds the conversation from its topic, as
/// an agent does after a restart, and says whether the log and docmem agree.
pub(crate) async fn replay(
    State(state): State<Arc<UiState>>,
    RequestCaller(caller): RequestCaller,
    PathParam(id): PathParam<String>,
    QueryParams(params): QueryParams<ReplayParams>,
) -> Result<Json<Value>, UiError> {
    let root = visible_root(&state, &id, visible_tenant(&caller, None)?.as_deref()).await?;
    let topic = mesh_bus::conversation_topic(&root).map(str::to_owned).ok_or_else(|| {
        DocmemError::Invalid(format!("{id} was not opened through the UI agent: its topic is unknown"))
    })?;
    let mut rebuilt = Conversations::new(std::num::NonZeroUsize::MIN);
    let replayed =
        rebuilt.rebuild(state.bus.as_ref(), &state.docmem, &topic, &|record| record.conversation_id == id).await?;
    let viewer = params.viewer.unwrap_or_else(|| state.agent_id.clone());
    let messages = rebuilt.peek(&id).map(|cache| cache.message_list(&viewer)).unwrap_or_default();
    let stored = message_list(&state.docmem.read_conversation(&id).await?, &viewer);
    Ok(Json(json!({
        "conversation_id": id, "topic": topic, "records_replayed": replayed, "as": viewer,
        "messages": messages, "matches_docmem": messages == stored,
    })))
}
