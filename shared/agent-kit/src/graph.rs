//! The communication graph in an agent (issue #14): the link cache fed by the registry's policy,
//! the call reports sent to it, and the link check where task calls are admitted.
//!
//! Every task route (seed `/tasks/send`, JSON-RPC, HTTP+JSON) is checked by the kit's admission
//! layer ([`crate::call_safety::AdmitCalls`]) after the call-safety checks: the caller is the
//! agent the trust layer authenticated ([`AuthenticatedAgent`]) when there is one, else the last
//! hop of the call chain; a call with no chain comes from a user, not an agent, and links do not
//! govern it. The conversation is the call context's `contextId` (`x-mesh-context-id`), which
//! the A2A bindings hold equal to the message's `contextId`. A denied call answers `403`
//! `LINK_DENIED` naming the missing link; on JSON-RPC, a JSON-RPC error carrying that body.
//!
//! In `open` mode (the default) the check is one atomic load and a compare.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::Request;
use axum::http::StatusCode;
use mesh_client::{
    CallReportFlusher, CallReportSettings, CallReporter, CallScope, HttpClient, MeshCaller, RegistryClient,
    follow_policy,
};
use mesh_graph::{Decision, Denial, LinkCache, LinkContext};
use mesh_protocol::a2a::v1::Message;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::app::{AgentConfig, KitError};
use crate::error::ErrorResponse;
use crate::middleware::Refusal;

/// JSON-RPC code of a call no link allows: in JSON-RPC's server-error range, outside the A2A
/// catalogue (-32001..-32009); `data` carries the mesh error body (`error_code` `LINK_DENIED`).
pub const LINK_DENIED_JSONRPC_CODE: i64 = -32040;

/// The agent a request comes from, as the trust layer authenticated it. When present (as a
/// request extension) the link check trusts it over the call chain, which the caller writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthenticatedAgent(pub String);

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
}

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

    /// The `graph` component of `/health`: the cache and the call reports' counters.
    pub fn report(&self) -> Value {
        json!({"links": self.links.report(), "call_reports": self.reporter.counts()})
    }
}

/// The link check of a call admitted with `scope`, sent by `authenticated` when the trust layer
/// knows who sent it.
pub(crate) fn admit(
    links: &LinkCache,
    scope: &CallScope,
    authenticated: Option<&AuthenticatedAgent>,
) -> Result<(), Denial> {
    let context = scope.context();
    let caller = authenticated.map(|agent| agent.0.as_str()).or(context.chain.last().map(String::as_str));
    match links.admit(caller, scope.agent(), context.context_id.as_deref()) {
        Decision::Allowed(_) => Ok(()),
        Decision::Denied(denial) => Err(denial),
    }
}

/// The answer to a denied call: a JSON-RPC error on the JSON-RPC route (its request id echoed),
/// the mesh error body elsewhere; `403` either way.
pub(crate) fn denied(request: Request, denial: &Denial) -> Refusal {
    let error = ErrorResponse::new(StatusCode::FORBIDDEN, Denial::ERROR_CODE, denial.to_string());
    Box::pin(crate::auth::refusal(request, error, LINK_DENIED_JSONRPC_CODE))
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
    use axum::http::Method;
    use axum::response::Response;
    use mesh_graph::DenialReason;
    use mesh_protocol::a2a::v1::Role;
    use mesh_protocol::call::CallContext;

    use super::*;

    fn request(method: Method, path: &str, body: &str) -> Request {
        Request::builder().method(method).uri(path).body(axum::body::Body::from(body.to_owned())).unwrap()
    }

    fn denial() -> Denial {
        Denial { caller: "a".into(), target: "b".into(), reason: DenialReason::NoLink }
    }

    async fn body(response: Response) -> Value {
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn a_denial_is_a_403_mesh_body_or_a_json_rpc_error_with_the_request_id() {
        let response = denied(request(Method::POST, "/tasks/send", "{}"), &denial()).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        let error = body(response).await;
        assert_eq!(error["error_code"], "LINK_DENIED");
        assert!(error["error_message"].as_str().unwrap().starts_with("no enabled link lets a call b"));

        let rpc = r#"{"jsonrpc":"2.0","id":"req-7","method":"SendMessage","params":{}}"#;
        let response = denied(request(Method::POST, "/", rpc), &denial()).await;
        assert_eq!(response.status(), StatusCode::FORBIDDEN);
        let answer = body(response).await;
        assert_eq!(answer["id"], "req-7");
        assert_eq!(answer["error"]["code"], LINK_DENIED_JSONRPC_CODE);
        assert_eq!(answer["error"]["data"]["error_code"], "LINK_DENIED");
        let answer = body(denied(request(Method::POST, "/", "not json"), &denial()).await).await;
        assert_eq!(answer["id"], Value::Null);
    }

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
