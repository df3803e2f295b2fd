use std::time::Duration;

use http::{HeaderValue, Method, StatusCode, header};
use mesh_protocol::graph::{CallReports, CallReportsAccepted, GraphPolicy, LinkMessage, NewLinkMessage};
use mesh_protocol::registry::{
    AgentList, AgentPick, AgentRecord, CapabilityAgents, Registration, RegistryStats, StatusMessage,
};
use serde::de::DeserializeOwned;
use url::Url;

use crate::http_client::{ClientError, HttpClient, decode_json, json_request};

/// Time allowed for one call to the registry; lookups are in-memory there, so this is generous.
pub const REGISTRY_CALL_TIMEOUT_MS: u64 = 5_000;

/// Typed calls to the registry's HTTP API.
#[derive(Debug, Clone)]
pub struct RegistryClient {
    base: Url,
    http: HttpClient,
    timeout: Duration,
}

impl RegistryClient {
    pub fn new(base_url: &str, http: HttpClient) -> Result<Self, ClientError> {
        let base = Url::parse(base_url)
            .map_err(|e| ClientError::InvalidUrl { url: base_url.to_owned(), reason: e.to_string() })?;
        if base.cannot_be_a_base() || !matches!(base.scheme(), "http" | "https") {
            return Err(ClientError::InvalidUrl { url: base_url.to_owned(), reason: "not an http(s) base URL".into() });
        }
        Ok(Self { base, http, timeout: Duration::from_millis(REGISTRY_CALL_TIMEOUT_MS) })
    }

    pub fn base_url(&self) -> &str {
        self.base.as_str()
    }

    pub async fn register(&self, registration: &Registration) -> Result<StatusMessage, ClientError> {
        let url = self.url(&["register"]);
        self.http.call_json(Method::POST, &url, Some(registration), self.timeout).await
    }

    /// Removes `name`; with `instance_url`, only while the name is still registered at that URL,
    /// so a stopping instance never removes the replacement that took over its name.
    pub async fn deregister(&self, name: &str, instance_url: Option<&str>) -> Result<StatusMessage, ClientError> {
        let mut url = Url::parse(&self.url(&["agents", name]))
            .map_err(|e| ClientError::InvalidUrl { url: name.to_owned(), reason: e.to_string() })?;
        if let Some(instance_url) = instance_url {
            url.query_pairs_mut().append_pair("url", instance_url);
        }
        self.http.call_json::<(), _>(Method::DELETE, url.as_str(), None, self.timeout).await
    }

    /// Tells the registry that calls to `name` at `instance_url` are failing, so it checks that
    /// instance's health now instead of at its next poll (and stops routing to it if it is dead).
    pub async fn report_failure(&self, name: &str, instance_url: &str) -> Result<StatusMessage, ClientError> {
        let mut url = Url::parse(&self.url(&["agents", name, "failures"]))
            .map_err(|e| ClientError::InvalidUrl { url: name.to_owned(), reason: e.to_string() })?;
        url.query_pairs_mut().append_pair("url", instance_url);
        self.http.call_json::<(), _>(Method::POST, url.as_str(), None, self.timeout).await
    }

    pub async fn agents(&self) -> Result<AgentList, ClientError> {
        self.get(&["agents"]).await
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
        let url = self.url(&["api", "policy"]);
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

    /// Reports calls this agent made (`POST /api/events/calls`).
    pub async fn report_calls(&self, reports: &CallReports) -> Result<CallReportsAccepted, ClientError> {
        let url = self.url(&["api", "events", "calls"]);
        self.http.call_json(Method::POST, &url, Some(reports), self.timeout).await
    }

    /// Records a message this agent sent over link `link_id` (`POST /api/links/{id}/messages`).
    pub async fn record_link_message(
        &self,
        link_id: &str,
        message: &NewLinkMessage,
    ) -> Result<LinkMessage, ClientError> {
        let url = self.url(&["api", "links", link_id, "messages"]);
        self.http.call_json(Method::POST, &url, Some(message), self.timeout).await
    }

    async fn get<T: DeserializeOwned>(&self, segments: &[&str]) -> Result<T, ClientError> {
        self.http.get_json(&self.url(segments), self.timeout).await
    }

    /// Appends percent-encoded path segments, so names with `/` or spaces cannot change the route.
    fn url(&self, segments: &[&str]) -> String {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_encoded_and_base_paths_kept() {
        let http = HttpClient::with_reqwest().unwrap();
        let client = RegistryClient::new("http://127.0.0.1:8000/mesh/", http.clone()).unwrap();
        assert_eq!(client.url(&["agents", "a b/c"]), "http://127.0.0.1:8000/mesh/agents/a%20b%2Fc");
        assert!(RegistryClient::new("not a url", http.clone()).is_err());
        assert!(RegistryClient::new("ftp://x", http).is_err());
    }
}
