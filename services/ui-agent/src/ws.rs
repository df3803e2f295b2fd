//! `GET /ws?agent=TYPE[&instance=ID][&conversation=ID]`: a plain-text conversation with the
//! agent `TYPE-ID` (its instance id defaults to this agent's). Every text frame in becomes a
//! docmem node and a record on that agent's topic; every answer comes back as a text frame.
//!
//! A handshake is checked whole before the upgrade (the page's origin, the agent, a place among
//! the open sockets), and makes nothing: a new conversation is named then, and written at its
//! first message.

use std::num::NonZeroU32;
use std::sync::Arc;

use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade, close_code};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use mesh_bus::{ACTION_APPEND, ACTION_CREATE, BusRecord};
use mesh_docmem::Context;
use mesh_protocol::call::validate_tenant_id;
use mesh_server::auth::RequestCaller;
use mesh_server::http::QueryParams;
use serde::Deserialize;

use crate::sockets::SocketSlot;
use crate::{UiAgentConfig, UiError, UiState, session_channel, visible_root, visible_tenant};

/// The upgrade response names the conversation here, so a client can resume it later
/// (`&conversation=`) or read it through the API; the socket itself carries only text. A new
/// conversation exists from its first message on.
pub const WS_CONVERSATION_HEADER: &str = "x-conversation-id";

#[derive(Debug, Deserialize)]
pub(crate) struct WsParams {
    agent: String,
    instance: Option<String>,
    conversation: Option<String>,
    /// The tenant a new conversation belongs to: an admin's or an agent's choice; a user's is
    /// always its credential's.
    tenant: Option<String>,
}

/// What each socket may send.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SocketLimits {
    message_bytes_max: usize,
    /// Messages per second and burst; `None`: unlimited.
    quota: Option<Quota>,
}

impl SocketLimits {
    pub(crate) fn new(config: &UiAgentConfig) -> Result<Self, UiError> {
        let quota = match NonZeroU32::new(config.ws_messages_per_s) {
            None => None,
            Some(rate) => {
                let burst = NonZeroU32::new(config.ws_messages_burst).ok_or_else(|| {
                    UiError::Config("ws_messages_burst must be at least 1 when ws_messages_per_s is set".into())
                })?;
                Some(Quota::per_second(rate).allow_burst(burst))
            }
        };
        Ok(Self { message_bytes_max: config.ws_message_bytes_max, quota })
    }
}

/// A socket's conversation: the one it resumed, or a new one, written at its first message.
#[derive(Debug)]
struct Conversation {
    id: String,
    tenant: String,
    topic: String,
    written: bool,
}

pub(crate) async fn open(
    State(state): State<Arc<UiState>>,
    RequestCaller(caller): RequestCaller,
    QueryParams(params): QueryParams<WsParams>,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Result<Response, UiError> {
    state.admission.check_origin(&headers)?;
    let tenant = caller.tenant(params.tenant.as_deref().unwrap_or_default(), None)?;
    if !tenant.is_empty() {
        validate_tenant_id(&tenant).map_err(UiError::InvalidParameter)?;
    }
    let topic = state.admission.topic(state.bus.as_ref(), &params.agent, params.instance.as_deref()).await?;
    let conversation = match params.conversation {
        Some(id) => {
            let root = visible_root(&state, &id, visible_tenant(&caller, None)?.as_deref()).await?;
            Conversation { id: root.id, tenant: root.tenant, topic, written: true }
        }
        None => Conversation { id: uuid::Uuid::new_v4().to_string(), tenant, topic, written: false },
    };
    let header = HeaderValue::from_str(&conversation.id).map_err(|e| UiError::InvalidParameter(e.to_string()))?;
    let slot = SocketSlot::take(&state, &conversation.tenant, &conversation.topic)?;
    let limits = state.socket_limits;
    let mut response = upgrade
        .max_message_size(limits.message_bytes_max)
        .max_frame_size(limits.message_bytes_max)
        .on_upgrade(move |socket| session(state, socket, conversation, slot));
    response.headers_mut().insert(WS_CONVERSATION_HEADER, header);
    Ok(response)
}

async fn session(state: Arc<UiState>, mut socket: WebSocket, mut conversation: Conversation, slot: SocketSlot) {
    let (answers, mut received) = session_channel();
    state.sessions().insert(conversation.id.clone(), answers.clone());
    let limits = state.socket_limits;
    let rate: Option<DefaultDirectRateLimiter> = limits.quota.map(RateLimiter::direct);
    // The next message is read only once the rate allows it: a faster sender waits on its own
    // connection (its TCP window fills) and loses nothing, while answers still go out.
    let mut may_read = rate.is_none();
    let mut stop = state.stop.clone();
    loop {
        tokio::select! {
            _ = async { if let Some(rate) = &rate { rate.until_ready().await; } }, if !may_read => may_read = true,
            incoming = socket.recv(), if may_read => {
                may_read = rate.is_none();
                match incoming {
                    Some(Ok(Message::Text(text))) => {
                        if let Err(error) = send(&state, &mut conversation, text.as_str()).await {
                            tracing::warn!(conversation = %conversation.id, %error, "cannot send a message");
                            if socket.send(Message::Text(format!("error: {error}").into())).await.is_err() {
                                break;
                            }
                        }
                    }
                    Some(Err(error)) => {
                        if too_big(error) {
                            let reason = format!("a message may be at most {} bytes", limits.message_bytes_max);
                            let close = CloseFrame { code: close_code::SIZE, reason: reason.into() };
                            let _ = socket.send(Message::Close(Some(close))).await;
                        }
                        break;
                    }
                    Some(Ok(Message::Close(_))) | None => break,
                    Some(Ok(_)) => {}
                }
            },
            Some(answer) = received.recv() => {
                if socket.send(Message::Text(answer.into())).await.is_err() {
                    break;
                }
            }
            _ = stop.changed() => break,
        }
    }
    {
        let mut sessions = state.sessions();
        // A newer socket of the same conversation keeps its place.
        if sessions.get(&conversation.id).is_some_and(|current| current.same_channel(&answers)) {
            sessions.remove(&conversation.id);
        }
    }
    // The place goes back last, once answers no longer come here (its topic's participant may end).
    drop(slot);
}

/// Whether a read failed on a message or frame over the size cap.
fn too_big(error: axum::Error) -> bool {
    use tokio_tungstenite::tungstenite::Error;
    error.into_inner().downcast_ref::<Error>().is_some_and(|error| matches!(error, Error::Capacity(_)))
}

/// Writes the text as a node of the conversation (the conversation first, at its first message)
/// and puts its record on the target's topic.
async fn send(state: &UiState, conversation: &mut Conversation, text: &str) -> Result<(), UiError> {
    if !conversation.written {
        let context = mesh_bus::conversation_root_context(&conversation.topic);
        state.docmem.create_root_with_id(&conversation.id, &conversation.tenant, &context, "").await?;
        conversation.written = true;
    }
    let node = state.docmem.append_child(&conversation.id, &Context::agent_text(&state.agent_id), text).await?;
    let action = if node.position == 0 { ACTION_CREATE } else { ACTION_APPEND };
    let record = BusRecord::message(&state.agent_id, &conversation.id, &node.id, action);
    state.bus.produce(&conversation.topic, &record).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_needs_a_burst_and_no_rate_is_no_limit() {
        let config = UiAgentConfig { ws_messages_per_s: 5, ws_messages_burst: 0, ..UiAgentConfig::default() };
        assert!(matches!(SocketLimits::new(&config), Err(UiError::Config(_))));
        let config = UiAgentConfig { ws_messages_per_s: 0, ws_messages_burst: 0, ..UiAgentConfig::default() };
        assert!(SocketLimits::new(&config).unwrap().quota.is_none());
        let limits = SocketLimits::new(&UiAgentConfig::default()).unwrap();
        assert_eq!(limits.quota.map(|q| q.burst_size().get()), Some(crate::WS_MESSAGES_BURST_DEFAULT));
    }
}
