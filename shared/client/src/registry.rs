use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::{HeaderValue, Method, StatusCode, header};
use mesh_graph::LinkReceipt;
use mesh_protocol::graph::{CallReports, CallReportsAccepted, GraphPolicy, LinkMessage, NewLinkMessage};
use mesh_protocol::registry::{
    AgentList, AgentPick, AgentRecord, AgentsFound, CapabilityAgents, Registration, RegistryStats, RouteRequest,
    Routed, StatusMessage,
};
use serde::de::DeserializeOwned;
use url::Url;

use crate::http_client::{ClientError, HttpClient, decode_json, json_request};

/// Time allowed for one call to the registry; lookups are in-memory there, so this is generous.
pub const REGISTRY_CALL_TIMEOUT_MS: u64 = 5_000;

/// Typed calls to the registry's HTTP API, on one registry or on several replicas of it.
///
/// With several base URLs (`http://a:8000,http://b:8000`), a call goes to the replica that last
/// answered and moves on to the next one when a replica cannot be reached or answers 502, 503 or
/// 504 (it is stopping, or lost its database); any other answer is the registry's. Replicas
/// sharing a database answer alike, so which one answers does not matter.
#[derive(Debug, Clone)]
pub struct RegistryClient {
    bases: Arc<[Url]>,
    /// The replica to try first: the one that answered last.
    first: Arc<AtomicUsize>,
    /// The base URLs as configured, for logs.
    configured: String,
    http: HttpClient,
    timeout: Duration,
}

impl RegistryClient {
    /// `base_urls`: one base URL, or several separated by commas.
    pub fn new(base_urls: &str, http: HttpClient) -> Result<Self, ClientError> {
        let bases = base_urls
            .split(',')
            .map(str::trim)
            .filter(|base| !base.is_empty())
            .map(parse_base)
            .collect::<Result<Vec<_>, _>>()?;
        if bases.is_empty() {
            return Err(ClientError::InvalidUrl { url: base_urls.to_owned(), reason: "no registry URL".into() });
        }
        Ok(Self {
            bases: bases.into(),
            first: Arc::default(),
            configured: base_urls.to_owned(),
            http,
            timeout: Duration::from_millis(REGISTRY_CALL_TIMEOUT_MS),
        })
    }

    /// The registry's base URL (or URLs) as configured.
    pub fn base_url(&self) -> &str {
        &self.configured
    }

    pub async fn register(&self, registration: &Registration) -> Result<StatusMessage, ClientError> {
        self.on_any_replica(|base| {
            let url = endpoint(base, &["register"]);
            async move { self.http.call_json(Method::POST, &url, Some(registration), self.timeout).await }
        })
        .await
    }

    /// Removes `name`; with `instance_url`, only while the name is still registered at that URL,
    /// so a stopping instance never removes the replacement that took over its name.
    pub async fn deregister(&self, name: &str, instance_url: Option<&str>) -> Result<StatusMessage, ClientError> {
        self.on_any_replica(|base| {
            let url = with_instance(endpoint(base, &["agents", name]), instance_url);
            async move { self.http.call_json::<(), _>(Method::DELETE, &url?, None, self.timeout).await }
        })
        .await
    }

    /// Tells the registry that calls to `name` at `instance_url` are failing, so it checks that
    /// instance's health now instead of at its next poll (and stops routing to it if it is dead).
    pub async fn report_failure(&self, name: &str, instance_url: &str) -> Result<StatusMessage, ClientError> {
        self.on_any_replica(|base| {
            let url = with_instance(endpoint(base, &["agents", name, "failures"]), Some(instance_url));
            async move { self.http.call_json::<(), _>(Method::POST, &url?, None, self.timeout).await }
        })
        .await
    }

    pub async fn agents(&self) -> Result<AgentList, ClientError> {
        self.get(&["agents"]).await
    }

    /// The agents whose cards best match `query` (`GET /agents?q=`), at most `limit`, as
    /// `tenant` sees them (the caller's own view when `None`).
    pub async fn search(&self, query: &str, limit: usize, tenant: Option<&str>) -> Result<AgentsFound, ClientError> {
        self.on_any_replica(|base| {
            let mut url = base.clone();
            if let Ok(mut path) = url.path_segments_mut() {
                path.pop_if_empty().push("agents");
            }
            url.query_pairs_mut().append_pair("q", query).append_pair("limit", &limit.to_string());
            if let Some(tenant) = tenant {
                url.query_pairs_mut().append_pair("tenant", tenant);
            }
            async move { self.http.get_json(url.as_str(), self.timeout).await }
        })
        .await
    }

    /// The healthy agent and skill that best fit a message (`POST /route`).
    pub async fn route(&self, request: &RouteRequest) -> Result<Routed, ClientError> {
        self.on_any_replica(|base| {
            let url = endpoint(base, &["route"]);
            async move { self.http.call_json(Method::POST, &url, Some(request), self.timeout).await }
        })
        .await
    }

    pub async fn agent(&self, name: &str) -> Result<AgentRecord, ClientError> {
        self.get(&["agents", name]).await
    }

    /// Every agent registered with `capability`, with its health.
    pub async fn discover(&self, capability: &str) -> Result<CapabilityAgents, ClientError> {
        self.get(&["capabilities", capability]).await
    }

    /// One agent for `capability`, round-robin among the healthy ones.
    pub async fn pick(&self, capability: &str) -> Result<AgentPick, ClientError> {
        self.get(&["capabilities", capability, "next"]).await
    }

    pub async fn stats(&self) -> Result<RegistryStats, ClientError> {
        self.get(&["stats"]).await
    }

    /// The link policy (`GET /api/policy`) and its `ETag`; `None` when it still matches `etag`
    /// (sent as `If-None-Match`, answered `304`).
    pub async fn policy(&self, etag: Option<&str>) -> Result<Option<(GraphPolicy, Option<String>)>, ClientError> {
        self.on_any_replica(|base| {
            let url = endpoint(base, &["api", "policy"]);
            async move {
                let mut request = json_request::<()>(Method::GET, &url, None)?;
                if let Some(value) = etag.and_then(|etag| HeaderValue::from_str(etag).ok()) {
                    request.headers_mut().insert(header::IF_NONE_MATCH, value);
                }
                let response = self.http.send(request, self.timeout).await?;
                if response.status() == StatusCode::NOT_MODIFIED {
                    return Ok(None);
                }
                let etag = response.headers().get(header::ETAG).and_then(|v| v.to_str().ok()).map(str::to_owned);
                Ok(Some((decode_json(&url, &response)?, etag)))
            }
        })
        .await
    }

    /// Reports calls this agent made (`POST /api/events/calls`).
    pub async fn report_calls(&self, reports: &CallReports) -> Result<CallReportsAccepted, ClientError> {
        self.on_any_replica(|base| {
            let url = endpoint(base, &["api", "events", "calls"]);
            async move { self.http.call_json(Method::POST, &url, Some(reports), self.timeout).await }
        })
        .await
    }

    /// Records a message this agent sent over link `link_id` (`POST /api/links/{id}/messages`).
    pub async fn record_link_message(
        &self,
        link_id: &str,
        message: &NewLinkMessage,
    ) -> Result<LinkMessage, ClientError> {
        self.on_any_replica(|base| {
            let url = endpoint(base, &["api", "links", link_id, "messages"]);
            async move { self.http.call_json(Method::POST, &url, Some(message), self.timeout).await }
        })
        .await
    }

    /// Reports that this agent processed a message it received over link `link_id`
    /// (`POST /api/links/{id}/receipts`): the registry publishes `agent_message_received`.
    pub async fn record_link_receipt(
        &self,
        link_id: &str,
        receipt: &LinkReceipt,
    ) -> Result<StatusMessage, ClientError> {
        self.on_any_replica(|base| {
            let url = endpoint(base, &["api", "links", link_id, "receipts"]);
            async move { self.http.call_json(Method::POST, &url, Some(receipt), self.timeout).await }
        })
        .await
    }

    async fn get<T: DeserializeOwned>(&self, segments: &[&str]) -> Result<T, ClientError> {
        self.on_any_replica(|base| {
            let url = endpoint(base, segments);
            async move { self.http.get_json(&url, self.timeout).await }
        })
        .await
    }

    /// Runs `call` on the replica that answered last, then on each other one in turn while the
    /// replica tried could not answer (see [`RegistryClient`]); returns the last answer.
    async fn on_any_replica<'a, T, F, Fut>(&'a self, call: F) -> Result<T, ClientError>
    where
        F: Fn(&'a Url) -> Fut,
        Fut: Future<Output = Result<T, ClientError>> + 'a,
    {
        let first = self.first.load(Ordering::Relaxed);
        let mut answer =
            Err(ClientError::InvalidUrl { url: self.configured.clone(), reason: "no registry URL".into() });
        for turn in 0..self.bases.len() {
            let index = (first + turn) % self.bases.len();
            answer = call(&self.bases[index]).await;
            match &answer {
                Err(error) if replica_unavailable(error) => {
                    tracing::debug!(registry = %self.bases[index], %error, "registry replica unavailable; trying the next");
                }
                _ => {
                    self.first.store(index, Ordering::Relaxed);
                    break;
                }
            }
        }
        answer
    }
}

/// Whether another replica may answer where this one could not: it was not reached, or it is
/// stopping or without its database.
fn replica_unavailable(error: &ClientError) -> bool {
    match error {
        ClientError::Transport { .. } => !error.is_refused_address(),
        ClientError::Status { status, .. } => matches!(status, 502..=504),
        ClientError::InvalidUrl { .. } | ClientError::Decode { .. } | ClientError::InvalidCredential => false,
    }
}

fn parse_base(base_url: &str) -> Result<Url, ClientError> {
    let base = Url::parse(base_url)
        .map_err(|e| ClientError::InvalidUrl { url: base_url.to_owned(), reason: e.to_string() })?;
    if base.cannot_be_a_base() || !matches!(base.scheme(), "http" | "https") {
        return Err(ClientError::InvalidUrl { url: base_url.to_owned(), reason: "not an http(s) base URL".into() });
    }
    Ok(base)
}

/// Appends percent-encoded path segments, so names with `/` or spaces cannot change the route.
fn endpoint(base: &Url, segments: &[&str]) -> String {
    let mut url = base.clone();
    if let Ok(mut path) = url.path_segments_mut() {
        path.pop_if_empty().extend(segments);
    }
    url.into()
}

/// `url` with `?url=instance_url` when one is given.
fn with_instance(url: String, instance_url: Option<&str>) -> Result<String, ClientError> {
    let mut url = Url::parse(&url).map_err(|e| ClientError::InvalidUrl { url: url.clone(), reason: e.to_string() })?;
    if let Some(instance_url) = instance_url {
        url.query_pairs_mut().append_pair("url", instance_url);
    }
    Ok(url.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::TransportError;

    #[test]
    fn segments_are_encoded_and_base_paths_kept() {
        let http = HttpClient::with_reqwest().unwrap();
        let client = RegistryClient::new("http://127.0.0.1:8000/mesh/", http.clone()).unwrap();
        assert_eq!(endpoint(&client.bases[0], &["agents", "a b/c"]), "http://127.0.0.1:8000/mesh/agents/a%20b%2Fc");
        assert!(RegistryClient::new("not a url", http.clone()).is_err());
        assert!(RegistryClient::new("ftp://x", http.clone()).is_err());
        assert!(RegistryClient::new(" , ", http.clone()).is_err(), "no URL at all");
        assert!(RegistryClient::new("http://a:1,ftp://b", http).is_err(), "every URL is checked");
    }

    #[test]
    fn a_list_names_every_replica_in_order() {
        let http = HttpClient::with_reqwest().unwrap();
        let client = RegistryClient::new("http://a:8000, http://b:8000/,", http).unwrap();
        let bases: Vec<&str> = client.bases.iter().map(Url::as_str).collect();
        assert_eq!(bases, ["http://a:8000/", "http://b:8000/"]);
        assert_eq!(client.base_url(), "http://a:8000, http://b:8000/,");
    }

    #[test]
    fn only_an_unreachable_stopping_or_storage_less_replica_is_passed_over() {
        let status = |status| ClientError::Status { url: "u".into(), status, body: None };
        assert!(
            replica_unavailable(&status(503)) && replica_unavailable(&status(502)) && replica_unavailable(&status(504))
        );
        for answer in [400, 401, 403, 404, 409, 422, 429, 500] {
            assert!(!replica_unavailable(&status(answer)), "{answer} is the registry's answer");
        }
        assert!(!replica_unavailable(&ClientError::Decode { url: "u".into(), reason: "r".into() }));
        let transport = |source| ClientError::Transport { url: "u".into(), source };
        assert!(replica_unavailable(&transport(TransportError::Connect("refused".into()))));
        assert!(replica_unavailable(&transport(TransportError::Timeout { timeout_ms: 5 })));
        assert!(!replica_unavailable(&transport(TransportError::Refused("policy".into()))), "the same everywhere");
    }
}
