//! Which sockets may open, checked before anything is made for them: the web page's origin, and
//! the agent they talk to. An unchecked name would make a topic, and a participant polling it,
//! for each handshake; so the agent must be registered with the registry, and on an instance
//! other than this agent's own (which a suite's agents share), its topic must exist already:
//! agents make their own topics when they start. Topics are made here only for registered names
//! on this agent's own instance.

use std::collections::HashSet;
use std::time::Duration;

use axum::http::{HeaderMap, header};
use mesh_bus::ConversationBus;
use mesh_client::{Discovery, DiscoveryError, HttpClient, RegistryClient};
use url::Url;

use crate::{UiAgentConfig, UiError};

/// Longest agent name a socket may name: the registry's own limit on names.
const AGENT_NAME_CHARS_MAX: usize = 128;
/// Longest instance id a socket may name (a Kubernetes pod name, used as one, has at most 63).
const INSTANCE_ID_CHARS_MAX: usize = 64;
/// How long the registry's answer about an agent is reused, so sockets do not each ask it.
const AGENT_LOOKUP_TTL_MS: u64 = 5_000;
/// The names a loopback origin goes by: a page of the same port under another of them is the
/// same local service.
const LOOPBACK_HOSTS: [&str; 3] = ["127.0.0.1", "localhost", "[::1]"];

#[derive(Debug)]
pub(crate) struct Admission {
    /// Allowed origins, serialized as browsers send them.
    origins: HashSet<String>,
    /// Agents the registry knows; `None` when no registry is configured.
    registry: Option<Discovery>,
    /// This agent's own instance id, the one a socket naming none talks to.
    own_instance: String,
}

impl Admission {
    /// `own_url`: where this agent serves, whose origin is allowed.
    pub(crate) fn new(config: &UiAgentConfig, own_url: &str) -> Result<Self, UiError> {
        let mut origins = HashSet::new();
        for origin in std::iter::once(own_url).chain(config.ws_allowed_origins.iter().map(String::as_str)) {
            origins.extend(origin_forms(origin).map_err(UiError::Config)?);
        }
        let registry = match config.registry_url.as_deref().filter(|url| !url.trim().is_empty()) {
            Some(url) => {
                let client = |e: &dyn std::fmt::Display| UiError::Config(format!("registry client: {e}"));
                let http = HttpClient::with_reqwest().map_err(|e| client(&e))?;
                let http = mesh_server::with_own_credential(&http, &config.auth, crate::UI_AGENT_TYPE)
                    .map_err(|e| client(&e))?;
                let registry = RegistryClient::new(url, http.clone()).map_err(|e| client(&e))?;
                Some(Discovery::new(registry, http, Duration::from_millis(AGENT_LOOKUP_TTL_MS)))
            }
            None => None,
        };
        Ok(Self { origins, registry, own_instance: config.bus.instance_id.clone() })
    }

    /// Refuses a web page whose origin is not allowed. A handshake without `Origin` comes from no
    /// browser (browsers always send it on a WebSocket handshake), so no page can be behind it.
    pub(crate) fn check_origin(&self, headers: &HeaderMap) -> Result<(), UiError> {
        let Some(origin) = headers.get(header::ORIGIN) else { return Ok(()) };
        let text = String::from_utf8_lossy(origin.as_bytes());
        match Url::parse(&text).map(|url| url.origin()) {
            Ok(origin) if origin.is_tuple() && self.origins.contains(&origin.ascii_serialization()) => Ok(()),
            _ => Err(UiError::OriginNotAllowed(text.into_owned())),
        }
    }

    /// The topic of `agent` on `instance` (this agent's own when absent), ready to write to: both
    /// well formed, the agent registered, and the topic this agent's own instance's (made if
    /// missing) or one that exists.
    pub(crate) async fn topic(
        &self,
        bus: &dyn ConversationBus,
        agent: &str,
        instance: Option<&str>,
    ) -> Result<String, UiError> {
        let named = agent.chars().count();
        if named == 0 || named > AGENT_NAME_CHARS_MAX || agent.chars().any(char::is_control) {
            return Err(UiError::InvalidParameter(format!(
                "agent must be 1 to {AGENT_NAME_CHARS_MAX} printable characters, the name it is registered under"
            )));
        }
        let instance = instance.unwrap_or(&self.own_instance);
        valid_instance(instance).map_err(UiError::InvalidParameter)?;
        let registry = self.registry.as_ref().ok_or_else(|| {
            UiError::Registry("this UI agent has no registry_url to check agent names against".into())
        })?;
        match registry.named(agent).await {
            Ok(_) => {}
            Err(DiscoveryError::UnknownAgent(_) | DiscoveryError::NoAgent(_)) => {
                return Err(UiError::UnknownAgent(format!("no agent {agent:?} is registered with the registry")));
            }
            Err(DiscoveryError::Registry { reason, .. }) => return Err(UiError::Registry(reason)),
        }
        let topic = mesh_bus::agent_topic(&mesh_bus::agent_id(agent, instance));
        if instance == self.own_instance {
            // The suite's agents share this instance id; the agent may not have started yet, and
            // its messages wait on its topic until it does.
            bus.ensure_topic(&topic).await?;
        } else if !bus.topic_exists(&topic).await? {
            return Err(UiError::UnknownAgent(format!(
                "agent {agent:?} does not run on instance {instance:?}: its topic {topic} does not exist"
            )));
        }
        Ok(topic)
    }
}

/// An instance id: 1 to [`INSTANCE_ID_CHARS_MAX`] letters, digits, `-`, `_` or `.`.
fn valid_instance(instance: &str) -> Result<(), String> {
    let valid = (1..=INSTANCE_ID_CHARS_MAX).contains(&instance.len())
        && instance.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid {
        Ok(())
    } else {
        Err(format!("instance must be 1 to {INSTANCE_ID_CHARS_MAX} letters, digits, '-', '_' or '.', not {instance:?}"))
    }
}

/// `origin` as browsers send it (`scheme://host[:port]`, a default port left out), under each
/// loopback name when it is a loopback one.
fn origin_forms(origin: &str) -> Result<Vec<String>, String> {
    let url = Url::parse(origin.trim()).map_err(|e| format!("origin {origin:?}: {e}"))?;
    if !url.origin().is_tuple() {
        return Err(format!("origin {origin:?} is not scheme://host[:port]"));
    }
    let host = url.host_str().unwrap_or_default();
    if !LOOPBACK_HOSTS.contains(&host) {
        return Ok(vec![url.origin().ascii_serialization()]);
    }
    LOOPBACK_HOSTS
        .iter()
        .map(|name| {
            let mut twin = url.clone();
            twin.set_host(Some(name)).map_err(|e| format!("origin {origin:?}: {e}"))?;
            Ok(twin.origin().ascii_serialization())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use mesh_bus::LogBus;

    use super::*;

    fn admission(allowed: &[&str]) -> Admission {
        let config = UiAgentConfig {
            ws_allowed_origins: allowed.iter().map(|o| (*o).to_owned()).collect(),
            ..UiAgentConfig::default()
        };
        Admission::new(&config, "http://127.0.0.1:8020").unwrap()
    }

    fn from(origin: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ORIGIN, origin.parse().unwrap());
        headers
    }

    #[test]
    fn own_and_configured_origins_pass_under_every_loopback_name_and_others_do_not() {
        let admission = admission(&["https://chat.example.com", "http://localhost:8000/"]);
        for origin in [
            "http://127.0.0.1:8020",
            "http://localhost:8020",
            "http://[::1]:8020",
            "https://chat.example.com",
            "https://chat.example.com:443",
            "http://127.0.0.1:8000",
        ] {
            assert!(admission.check_origin(&from(origin)).is_ok(), "{origin}");
        }
        for origin in [
            "http://evil.example",
            "null",
            "http://127.0.0.1:8021",
            "https://127.0.0.1:8020",
            "http://chat.example.com",
            "http://localhost.evil.example:8020",
            "file:///tmp/page.html",
            "",
        ] {
            assert!(matches!(admission.check_origin(&from(origin)), Err(UiError::OriginNotAllowed(_))), "{origin}");
        }
        assert!(admission.check_origin(&HeaderMap::new()).is_ok(), "no Origin: not a browser");
    }

    #[test]
    fn a_configured_origin_that_is_none_is_refused_at_start() {
        let config = UiAgentConfig { ws_allowed_origins: vec!["chat.example.com".into()], ..UiAgentConfig::default() };
        assert!(matches!(Admission::new(&config, "http://127.0.0.1:8020"), Err(UiError::Config(_))));
    }

    #[tokio::test]
    async fn malformed_names_are_refused_before_the_registry_is_asked_and_no_registry_refuses_all() {
        let dir = tempfile::tempdir().unwrap();
        let bus = LogBus::open(&format!("sqlite://{}", dir.path().join("bus.db").display()), None).await.unwrap();
        let admission = admission(&[]);
        let long = "x".repeat(INSTANCE_ID_CHARS_MAX + 1);
        let cases = [
            ("", None, "REQUEST_INVALID"),
            ("echo", Some(""), "REQUEST_INVALID"),
            ("echo", Some("a/b"), "REQUEST_INVALID"),
            ("echo", Some(long.as_str()), "REQUEST_INVALID"),
            ("echo", Some("x1"), "REGISTRY_UNAVAILABLE"),
            ("echo", None, "REGISTRY_UNAVAILABLE"),
        ];
        for (agent, instance, code) in cases {
            let error = admission.topic(&bus, agent, instance).await.unwrap_err();
            let response = axum::response::IntoResponse::into_response(error);
            let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(body["error_code"], code, "{agent:?} {instance:?}: {body}");
        }
        assert!(!bus.topic_exists("echo-1").await.unwrap(), "a refused name made its topic");
    }
}
