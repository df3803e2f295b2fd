//! `GET /ws?agent=TYPE[&instance=ID][&conversation=ID]`: a plain-text conversation with the
//! agent `TYPE-ID` (its instance id defaults to this agent's). Every text frame in becomes a
//! docmem node and a record on that agent's topic; every answer comes back as a text frame.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::http::HeaderValue;
use axum::response::Response;
use mesh_agent_kit::auth::RequestCaller;
use mesh_agent_kit::http::QueryParams;
use mesh_bus::{
    ACTION_APPEND, ACTION_CREATE, Answerer, BusError, BusRecord, ChatMessage, Participant, ParticipantSettings,
};
use mesh_docmem::{Context, DocmemError, Node};
use mesh_protocol::call::validate_tenant_id;
use serde::Deserialize;

use crate::{UiError, UiState, session_channel, visible_root, visible_tenant};

/// The upgrade response names the conversation here, so a client can resume it later
/// (`&conversation=`) or read it through the API; the socket itself carries only text.
pub const WS_CONVERSATION_HEADER: &str = "x-conversation-id";
/// Time an answer may wait for a slow socket before it is dropped for that socket (it stays in
/// docmem and the API).
const SOCKET_SEND_TIMEOUT_MS: u64 = 5_000;

#[derive(Debug, Deserialize)]
pub(crate) struct WsParams {
    agent: String,
    instance: Option<String>,
    conversation: Option<String>,
    /// The tenant a new conversation belongs to: an admin's or an agent's choice; a user's is
    /// always its credential's.
    tenant: Option<String>,
}

pub(crate) async fn open(
    State(state): State<Arc<UiState>>,
    RequestCaller(caller): RequestCaller,
    QueryParams(params): QueryParams<WsParams>,
    upgrade: WebSocketUpgrade,
) -> Result<Response, UiError> {
    let tenant = caller.tenant(params.tenant.as_deref().unwrap_or_default(), None)?;
    if !tenant.is_empty() {
        validate_tenant_id(&tenant).map_err(DocmemError::Invalid)?;
    }
    let instance = params.instance.as_deref().unwrap_or(&state.config.instance_id);
    let topic = mesh_bus::agent_topic(&mesh_bus::agent_id(&params.agent, instance));
    state.bus.ensure_topic(&topic).await?;
    ensure_forwarding(&state, &topic);
    let root = match params.conversation {
        Some(id) => visible_root(&state, &id, visible_tenant(&caller, None)?.as_deref()).await?.id,
        None => state.docmem.create_root(&tenant, &mesh_bus::conversation_root_context(&topic), "").await?.id,
    };
    let header = HeaderValue::from_str(&root).map_err(|e| DocmemError::Invalid(e.to_string()))?;
    let session_root = root.clone();
    let mut response = upgrade.on_upgrade(move |socket| session(state, socket, session_root, topic));
    response.headers_mut().insert(WS_CONVERSATION_HEADER, header);
    Ok(response)
}

async fn session(state: Arc<UiState>, mut socket: WebSocket, root: String, topic: String) {
    let (answers, mut received) = session_channel();
    state.sessions().insert(root.clone(), answers.clone());
    let mut stop = state.stop.clone();
    loop {
        tokio::select! {
            incoming = socket.recv() => match incoming {
                Some(Ok(Message::Text(text))) => {
                    if let Err(error) = send(&state, &root, &topic, text.as_str()).await {
                        tracing::warn!(conversation = %root, %error, "cannot send a message");
                        if socket.send(Message::Text(format!("error: {error}").into())).await.is_err() {
                            break;
                        }
                    }
                }
                Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                Some(Ok(_)) => {}
            },
            Some(answer) = received.recv() => {
                if socket.send(Message::Text(answer.into())).await.is_err() {
                    break;
                }
            }
            _ = stop.changed() => break,
        }
    }
    let mut sessions = state.sessions();
    // A newer socket of the same conversation keeps its place.
    if sessions.get(&root).is_some_and(|current| current.same_channel(&answers)) {
        sessions.remove(&root);
    }
}

/// Writes the text as a node of the conversation and puts its record on the target's topic.
async fn send(state: &UiState, root: &str, topic: &str, text: &str) -> Result<(), UiError> {
    let node = state.docmem.append_child(root, &Context::agent_text(&state.agent_id), text).await?;
    let action = if node.position == 0 { ACTION_CREATE } else { ACTION_APPEND };
    state.bus.produce(topic, &BusRecord::message(&state.agent_id, root, &node.id, action)).await?;
    Ok(())
}

/// Starts consuming `topic` (once per topic) to stream its answers to open sockets.
fn ensure_forwarding(state: &Arc<UiState>, topic: &str) {
    let mut topics = state.topics.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if topics.insert(topic.to_owned(), ()).is_some() {
        return;
    }
    let cache_conversations_max = match state.config.cache_conversations_max() {
        Ok(max) => max,
        Err(error) => {
            tracing::error!(%error, "cannot consume {topic}");
            return;
        }
    };
    let settings = ParticipantSettings {
        agent_id: state.agent_id.clone(),
        topic: topic.to_owned(),
        service: crate::SERVICE_NAME.to_owned(),
        cache_conversations_max,
    };
    let participant = Participant::new(
        settings,
        state.bus.clone(),
        state.docmem.clone(),
        Arc::new(Forwarder { state: state.clone() }),
    );
    let mut stop = state.stop.clone();
    tokio::spawn(participant.run_until(async move {
        let _ = stop.wait_for(|stopped| *stopped).await;
    }));
}

/// The UI agent answers nothing: it forwards other participants' messages to the socket of
/// their conversation, if one is open.
#[derive(Debug)]
struct Forwarder {
    state: Arc<UiState>,
}

impl Answerer for Forwarder {
    async fn answer(&self, record: &BusRecord, node: &Node, _: Vec<ChatMessage>) -> Result<Option<String>, BusError> {
        let socket = self.state.sessions().get(&record.conversation_id).cloned();
        if let Some(socket) = socket {
            let sent =
                tokio::time::timeout(Duration::from_millis(SOCKET_SEND_TIMEOUT_MS), socket.send(node.content.clone()));
            if !matches!(sent.await, Ok(Ok(()))) {
                tracing::warn!(conversation = %record.conversation_id, "a socket did not take an answer in time");
            }
        }
        Ok(None)
    }
}
