//! The communication graph in an agent (issue #14): the link cache fed by the registry's policy
//! and the call reports sent to it. The link check itself runs where calls are admitted
//! ([`mesh_server::links`], inside [`mesh_server::call_safety::AdmitCalls`]), on every task
//! route (seed `/tasks/send`, JSON-RPC, HTTP+JSON). The conversation is the call context's
//! `contextId` (`x-mesh-context-id`), which the A2A bindings hold equal to the message's
//! `contextId`.
//!
//! In `open` mode (the default) the check is one atomic load and a compare.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tracing::Instrument;

use mesh_client::{
    CallReportFlusher, CallReportSettings, CallReporter, CallScope, HttpClient, MeshCaller, RegistryClient,
    follow_policy,
};
use mesh_graph::{LinkCache, LinkContext, LinkReceipt};
use mesh_protocol::a2a::v1::Message;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::app::{AgentConfig, KitError};

/// An agent's part of the graph: its link cache and call reporter, and the registry feeding one
/// and receiving the other. Built from the agent's configuration when it has a registry.
#[derive(Debug)]
pub struct AgentGraph {
    links: Arc<LinkCache>,
    reporter: CallReporter,
    /// Taken by the first [`AgentGraph::start`].
    flusher: Mutex<Option<CallReportFlusher>>,
    registry: RegistryClient,
    refresh: Duration,
    /// Receipts being posted; beyond [`RECEIPTS_IN_FLIGHT_MAX`] one is dropped.
    receipts: Arc<Semaphore>,
}

/// Receipts of processed link messages posted to the registry at once, at most. One more is
/// dropped and logged: its `agent_message_received` event is lost, the message was processed
/// all the same.
pub const RECEIPTS_IN_FLIGHT_MAX: usize = 64;

impl AgentGraph {
    /// The graph of an agent configured by `config`; `None` without a registry (nothing to feed it).
    pub fn new(config: &AgentConfig, http: HttpClient) -> Result<Option<Arc<Self>>, KitError> {
        let Some(registry_url) = &config.registry_url else { return Ok(None) };
        let registry = RegistryClient::new(registry_url, http)?;
        let (reporter, flusher) = CallReporter::new(CallReportSettings {
            queue_max: config.call_report_queue_max,
            batch_max: config.call_report_batch_max,
            flush_every: Duration::from_millis(config.call_report_flush_ms),
        });
        Ok(Some(Arc::new(Self {
            links: Arc::new(LinkCache::new(config.graph_mode_until_loaded, config.graph_conversations_max)),
            reporter,
            flusher: Mutex::new(Some(flusher)),
            registry,
            refresh: Duration::from_millis(config.graph_refresh_ms.max(1)),
            receipts: Arc::new(Semaphore::new(RECEIPTS_IN_FLIGHT_MAX)),
        })))
    }

    pub fn links(&self) -> &Arc<LinkCache> {
        &self.links
    }

    pub fn registry(&self) -> &RegistryClient {
        &self.registry
    }

    /// `caller` checking its calls against this graph's links and reporting them to the registry.
    pub fn caller(&self, caller: MeshCaller) -> MeshCaller {
        caller.with_links(self.links.clone()).with_call_reports(self.reporter.clone())
    }

    /// Starts polling the policy and posting call reports; abort the tasks to stop them.
    pub fn start(&self) -> Vec<JoinHandle<()>> {
        let (registry, links, refresh) = (self.registry.clone(), self.links.clone(), self.refresh);
        let mut tasks = vec![tokio::spawn(async move { follow_policy(registry, &links, refresh).await })];
        if let Some(flusher) = self.flusher.lock().unwrap_or_else(PoisonError::into_inner).take() {
            let registry = self.registry.clone();
            tasks.push(tokio::spawn(async move {
                let counts = flusher.run(registry).await;
                tracing::debug!(?counts, "call reports done");
            }));
        }
        tasks
    }

    /// Tells the registry, in the background (retrying what time can fix), that this agent
    /// processed a message it received over `link`, so the registry publishes
    /// `agent_message_received` from the receiver's word rather than the sender's.
    pub(crate) fn report_receipt(&self, link: &LinkContext, receipt: LinkReceipt) {
        let Ok(permit) = self.receipts.clone().try_acquire_owned() else {
            tracing::warn!(link = %link.link_id, "too many receipts in flight; this one is dropped");
            return;
        };
        let (registry, link_id) = (self.registry.clone(), link.link_id.clone());
        tokio::spawn(
            async move {
                let failure = "the registry did not take the receipt of a link message";
                crate::agent_message::at_registry(&link_id, failure, || {
                    registry.record_link_receipt(&link_id, &receipt)
                })
                .await;
                drop(permit);
            }
            .instrument(tracing::Span::current()),
        );
    }

    /// The `graph` component of `/health`: the cache and the call reports' counters.
    pub fn report(&self) -> Value {
        json!({"links": self.links.report(), "call_reports": self.reporter.counts()})
    }
}

/// The receipt of a link message `receiver` processed: the message `message_id` in task
/// `task_id`, for `tenant`, ending `status`.
pub(crate) fn receipt_of(
    link: &LinkContext,
    receiver: &str,
    message_id: &str,
    task_id: &str,
    tenant: &str,
    status: mesh_protocol::graph::OutcomeStatus,
) -> LinkReceipt {
    LinkReceipt {
        from_agent_id: link.from_agent_id.clone(),
        to_agent_id: receiver.to_owned(),
        context_id: link.context_id(),
        message_id: message_id.to_owned(),
        task_id: Some(task_id.to_owned()),
        status,
        tenant: Some(tenant.to_owned()).filter(|t| !t.is_empty()),
    }
}

/// The link context of an inbound A2A message: who sent it over which link, as its metadata
/// says, when the message is in that link's conversation and its sender is the agent that made
/// the call (the last hop of the chain), so a user cannot pose as an agent.
pub(crate) fn inbound_link(message: &Message, call: &CallScope) -> Option<LinkContext> {
    let context = LinkContext::from_metadata(message.context_id.as_deref(), message.metadata.as_ref())?;
    (call.context().chain.last() == Some(&context.from_agent_id)).then_some(context)
}

#[cfg(test)]
mod tests {
    use mesh_protocol::a2a::v1::Role;
    use mesh_protocol::call::CallContext;

    use super::*;

    #[test]
    fn a_link_context_counts_only_from_the_agent_that_called() {
        let link = LinkContext {
            link_id: "l1".into(),
            from_agent_id: "boss".into(),
            relationship: mesh_protocol::graph::LinkRelationship::Superior,
        };
        let mut message = Message::text(Role::User, "m1", "do it");
        message.context_id = Some(link.context_id());
        let mut metadata = serde_json::Map::new();
        link.write_metadata(&mut metadata);
        message.metadata = Some(metadata);
        let from = |chain: &[&str]| {
            let context =
                CallContext { chain: chain.iter().map(|s| (*s).to_owned()).collect(), ..CallContext::default() };
            CallScope::received("worker", context)
        };
        assert_eq!(inbound_link(&message, &from(&["user-app", "boss"])), Some(link));
        assert_eq!(inbound_link(&message, &from(&["impostor"])), None);
        assert_eq!(inbound_link(&message, &from(&[])), None, "a user is not an agent");
    }
}
