//! The open sockets: capped per tenant and in all, and on each topic they talk on one bus
//! participant, which streams the topic's answers to them and ends with the last of them (an
//! idle topic costs nothing). A socket's place is taken before its upgrade and given back when
//! its [`SocketSlot`] drops: the socket ended, or its upgrade never completed.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use backon::{ConstantBuilder, Retryable};
use mesh_bus::{ACTION_APPEND, ACTION_CREATE, BusError, DoneOffsets, TOOL_AGENT_ID, consumer_group};
use mesh_docmem::Node;
use mesh_telemetry::SERVICE_LABEL;
use tokio::sync::{mpsc, oneshot};

use crate::{SERVICE_NAME, UiError, UiState};

/// Wait before a participant whose bus or docmem failed starts over.
const PARTICIPANT_RESTART_DELAY_MS: u64 = 1_000;
/// Time an answer may wait for a slow socket before it is dropped for that socket (it stays in
/// docmem and the API).
const SOCKET_SEND_TIMEOUT_MS: u64 = 5_000;

#[derive(Debug, Clone, Copy)]
pub(crate) struct SocketCaps {
    pub(crate) total: usize,
    pub(crate) per_tenant: usize,
}

/// What is open now.
#[derive(Debug, Default)]
pub(crate) struct OpenSockets {
    total: usize,
    by_tenant: HashMap<String, usize>,
    by_topic: HashMap<String, TopicParticipant>,
}

impl OpenSockets {
    /// Open sockets, and running participants.
    pub(crate) fn counts(&self) -> (usize, usize) {
        (self.total, self.by_topic.len())
    }

    fn publish(&self) {
        metrics::gauge!("mesh_ui_sockets_open", SERVICE_LABEL => SERVICE_NAME).set(self.total as f64);
        metrics::gauge!("mesh_ui_bus_participants", SERVICE_LABEL => SERVICE_NAME).set(self.by_topic.len() as f64);
    }
}

/// A topic's participant: how many sockets use it, and what ends it (dropped with the last).
#[derive(Debug)]
struct TopicParticipant {
    sockets: usize,
    _end: oneshot::Sender<()>,
}

/// One socket's place.
#[derive(Debug)]
pub(crate) struct SocketSlot {
    state: Arc<UiState>,
    tenant: String,
    topic: String,
}

impl SocketSlot {
    /// A place for a socket of `tenant` on `topic`, starting the topic's participant if it has
    /// none; refused when the tenant, or the agent, has every place taken.
    pub(crate) fn take(state: &Arc<UiState>, tenant: &str, topic: &str) -> Result<Self, UiError> {
        let caps = state.socket_caps;
        let mut open = state.open_sockets();
        if open.by_tenant.get(tenant).is_some_and(|held| *held >= caps.per_tenant) {
            return Err(UiError::TenantSocketsFull { tenant: tenant.to_owned(), max: caps.per_tenant });
        }
        if open.total >= caps.total {
            return Err(UiError::SocketsFull(caps.total));
        }
        open.total += 1;
        *open.by_tenant.entry(tenant.to_owned()).or_default() += 1;
        match open.by_topic.entry(topic.to_owned()) {
            Entry::Occupied(mut participant) => participant.get_mut().sockets += 1,
            Entry::Vacant(vacant) => {
                let (end, ended) = oneshot::channel();
                tokio::spawn(participate(state.clone(), topic.to_owned(), ended));
                vacant.insert(TopicParticipant { sockets: 1, _end: end });
            }
        }
        open.publish();
        Ok(Self { state: state.clone(), tenant: tenant.to_owned(), topic: topic.to_owned() })
    }
}

impl Drop for SocketSlot {
    fn drop(&mut self) {
        let mut open = self.state.open_sockets();
        open.total -= 1;
        if let Entry::Occupied(mut held) = open.by_tenant.entry(self.tenant.clone()) {
            *held.get_mut() -= 1;
            if *held.get() == 0 {
                held.remove();
            }
        }
        if let Entry::Occupied(mut participant) = open.by_topic.entry(self.topic.clone()) {
            participant.get_mut().sockets -= 1;
            if participant.get().sockets == 0 {
                // Dropping its end sender ends the participant.
                participant.remove();
            }
        }
        open.publish();
    }
}

/// Runs `topic`'s participant until its last socket closes (`ended`) or the agent stops,
/// starting over after a failure.
async fn participate(state: Arc<UiState>, topic: String, ended: oneshot::Receiver<()>) {
    let mut stopping = state.stop.clone();
    let restart =
        ConstantBuilder::new().with_delay(Duration::from_millis(PARTICIPANT_RESTART_DELAY_MS)).without_max_times();
    let forwarding = (|| forward(&state, &topic)).retry(restart).notify(|error: &BusError, _| {
        tracing::warn!(%topic, %error, "the UI agent's bus participant failed; starting over");
    });
    tracing::debug!(%topic, "bus participant started");
    tokio::select! {
        _ = ended => {}
        _ = stopping.wait_for(|stopped| *stopped) => {}
        _ = forwarding => {}
    }
    tracing::debug!(%topic, "bus participant ended");
}

/// Consumes `topic` from the UI agent's committed offset on, and sends each other agent's
/// message to the socket of its conversation when one is open here. The UI agent answers
/// nothing, so it keeps no conversation caches and replays nothing. Returns only on failure.
async fn forward(state: &UiState, topic: &str) -> Result<Infallible, BusError> {
    let mut consumer = state.bus.consumer(topic, &consumer_group(&state.agent_id)).await?;
    loop {
        let batch = consumer.next_batch().await?;
        // Only the messages a socket here waits for are read from docmem.
        let waiting: Vec<(String, mpsc::Sender<String>)> = {
            let sessions = state.sessions();
            batch
                .iter()
                .map(|delivered| &delivered.record)
                // Tool outputs are an agent's working material, not its answer to the person.
                .filter(|r| r.agent_id != state.agent_id && r.agent_id != TOOL_AGENT_ID)
                .filter(|r| r.action == ACTION_CREATE || r.action == ACTION_APPEND)
                .filter_map(|r| sessions.get(&r.conversation_id).map(|socket| (r.node_id.clone(), socket.clone())))
                .collect()
        };
        if !waiting.is_empty() {
            let ids: Vec<String> = waiting.iter().map(|(id, _)| id.clone()).collect();
            let nodes: HashMap<String, Node> =
                state.docmem.get_many(&ids).await?.into_iter().map(|n| (n.id.clone(), n)).collect();
            for (id, socket) in waiting {
                let Some(node) = nodes.get(&id) else { continue };
                let sent = tokio::time::timeout(
                    Duration::from_millis(SOCKET_SEND_TIMEOUT_MS),
                    socket.send(node.content.clone()),
                );
                if !matches!(sent.await, Ok(Ok(()))) {
                    tracing::warn!(%topic, message = %id, "a socket did not take an answer in time");
                }
            }
        }
        consumer.commit(&DoneOffsets::of_batch(&batch)).await?;
    }
}
