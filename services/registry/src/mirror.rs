//! Read-only federation (issue #37): a registry mirrors other registries by following their AI
//! Catalogs (`/.well-known/ai-catalog.json`) with `If-None-Match`, and lists the agents they
//! publish beside its own, each marked with the registry it came from (`origin`).
//!
//! What a mirror never does:
//! - write back: it only reads the other registry's catalog;
//! - shadow a local agent: a mirrored agent whose name or path a local agent holds is left out,
//!   and the first configured mirror wins between two mirrors;
//! - re-publish: the registry's own catalogs list its own agents only, so two registries that
//!   mirror each other do not pass agents back and forth.
//!
//! Mirrored agents are kept in memory, replaced as a whole at each changed catalog, and read
//! again at start: the other registry is their store. While it cannot be read, the last copy is
//! served. They are listed by `GET /agents` and `GET /agents/{name}`, to every tenant (the
//! operator chose the mirror and its credential); search, routing and capability lookups cover
//! the local agents only, since a catalog carries no skills.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::http::header::{ETAG, IF_NONE_MATCH};
use axum::http::{HeaderValue, Method, StatusCode};
use mesh_client::HttpClient;
use mesh_protocol::registry::AgentRecord;
use serde::Deserialize;
use serde_json::Value;

use crate::catalog::{A2A_AGENT_CARD_TYPE, AI_CATALOG_PATH, AiCatalogEntry};
use crate::directory::{Directory, RegisteredAgent};

/// Milliseconds between two reads of a mirrored catalog, by default: a registry's catalog tells
/// readers to reuse it for 10 s, and an unchanged one costs a 304.
pub const MIRROR_INTERVAL_MS_DEFAULT: u64 = 10_000;
/// Shortest interval between two reads, whatever is configured: a mirror must not flood the
/// registry it follows.
const MIRROR_INTERVAL_MS_MIN: u64 = 100;
/// Milliseconds one read of a catalog may take (the body is capped by the HTTP client at 8 MiB).
const MIRROR_FETCH_TIMEOUT_MS: u64 = 10_000;
/// The catalog major version read, as `a2a-mesh catalog import` reads it.
const SPEC_MAJOR_VERSION: &str = "1";

/// One registry to mirror (a `[[mirrors]]` table).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MirrorConfig {
    /// The other registry's base URL (`http://registry-eu:8000`); its catalog is read at
    /// `/.well-known/ai-catalog.json` under it, through the outbound address policy.
    pub url: String,
    /// Milliseconds between two reads of its catalog.
    #[serde(default = "interval_default")]
    pub interval_ms: u64,
    /// A file holding the credential presented to it (a JWT or an API key), read at every poll
    /// so it can be rotated; none when that registry is open.
    #[serde(default)]
    pub credential_file: Option<PathBuf>,
}

fn interval_default() -> u64 {
    MIRROR_INTERVAL_MS_DEFAULT
}

impl MirrorConfig {
    /// The other registry's base URL without a trailing `/`: how its agents' `origin` reads.
    pub fn origin(&self) -> &str {
        self.url.trim_end_matches('/')
    }
}

/// Why a read of a mirrored catalog failed; the last copy is kept.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    #[error("could not read the credential file {path}: {source}")]
    Credential { path: PathBuf, source: std::io::Error },
    #[error("{0}")]
    Client(#[from] mesh_client::ClientError),
    #[error("the catalog answered {0}")]
    Status(StatusCode),
    #[error("the catalog is not an AI Catalog: {0}")]
    Invalid(String),
}

/// The agents of every mirrored registry, each origin's copy in the configured order.
#[derive(Debug, Default)]
pub struct Mirrors {
    copies: RwLock<Vec<Copy>>,
    /// Most agents kept from one origin: the registry's own `registrations_max`.
    agents_max: usize,
}

/// One origin's agents as its catalog last listed them, in name order.
#[derive(Debug)]
struct Copy {
    origin: String,
    agents: Vec<RegisteredAgent>,
}

impl Mirrors {
    /// No agents yet from any of `configs`, keeping at most `agents_max` of each.
    pub fn new(configs: &[MirrorConfig], agents_max: usize) -> Self {
        let copies = configs.iter().map(|c| Copy { origin: c.origin().to_owned(), agents: Vec::new() }).collect();
        Self { copies: RwLock::new(copies), agents_max }
    }

    /// Every mirrored agent that no local agent of `directory` shadows (by name or path), nor
    /// an earlier mirror's, in name order.
    pub fn listed(&self, directory: &Directory) -> Vec<RegisteredAgent> {
        // The local names and paths once, not a scan of the directory per mirrored agent.
        let (mut taken, local_paths) = directory.names_and_paths();
        let copies = self.copies.read().unwrap_or_else(|e| e.into_inner());
        let mut agents: Vec<RegisteredAgent> = Vec::new();
        for copy in copies.iter() {
            for agent in &copy.agents {
                if !local_paths.contains(&agent.path) && taken.insert(agent.record.name.clone()) {
                    agents.push(agent.clone());
                }
            }
        }
        agents.sort_by(|a, b| a.record.name.cmp(&b.record.name));
        agents
    }

    /// The mirrored agent `name`, unless a local agent shadows it.
    pub fn get(&self, name: &str, directory: &Directory) -> Option<RegisteredAgent> {
        if directory.owner(name).is_some() {
            return None;
        }
        let copies = self.copies.read().unwrap_or_else(|e| e.into_inner());
        copies
            .iter()
            .find_map(|copy| copy.agents.iter().find(|a| a.record.name == name))
            .filter(|agent| directory.path_holder(&agent.path, name).is_none())
            .cloned()
    }

    /// Replaces what `origin` lists.
    fn replace(&self, origin: &str, mut agents: Vec<RegisteredAgent>) {
        if agents.len() > self.agents_max {
            tracing::warn!(origin, listed = agents.len(), kept = self.agents_max, "mirrored catalog cut to the bound");
            agents.truncate(self.agents_max);
        }
        agents.sort_by(|a, b| a.record.name.cmp(&b.record.name));
        let mut copies = self.copies.write().unwrap_or_else(|e| e.into_inner());
        if let Some(copy) = copies.iter_mut().find(|copy| copy.origin == origin) {
            copy.agents = agents;
        }
    }
}

/// Reads `config`'s catalog every `interval_ms`, forever, replacing its copy in `mirrors`
/// whenever the catalog changed (a 304 to `If-None-Match` leaves it). Counts each read in
/// `mesh_registry_mirror_reads_total{origin, outcome}` (`changed`, `unchanged`, `failed`): a
/// mirror whose reads fail serves an ageing copy.
pub async fn follow(mirrors: Arc<Mirrors>, config: MirrorConfig, http: HttpClient) {
    let interval = Duration::from_millis(config.interval_ms.max(MIRROR_INTERVAL_MS_MIN));
    let mut etag: Option<HeaderValue> = None;
    loop {
        let outcome = match read(&config, &http, etag.as_ref()).await {
            Ok(None) => "unchanged",
            Ok(Some((agents, new_etag))) => {
                tracing::info!(origin = config.origin(), agents = agents.len(), "mirrored catalog changed");
                mirrors.replace(config.origin(), agents);
                etag = new_etag;
                "changed"
            }
            Err(error) => {
                tracing::warn!(origin = config.origin(), %error, "could not read a mirrored catalog; keeping the last copy");
                "failed"
            }
        };
        metrics::counter!(
            "mesh_registry_mirror_reads_total",
            mesh_telemetry::SERVICE_LABEL => crate::app::REGISTRY_SERVICE,
            "origin" => config.origin().to_owned(),
            "outcome" => outcome,
        )
        .increment(1);
        tokio::time::sleep(interval).await;
    }
}

/// The agents `config`'s catalog lists and its `ETag`; `None` when it answered 304 to `etag`.
async fn read(
    config: &MirrorConfig,
    http: &HttpClient,
    etag: Option<&HeaderValue>,
) -> Result<Option<(Vec<RegisteredAgent>, Option<HeaderValue>)>, MirrorError> {
    let url = format!("{}{AI_CATALOG_PATH}", config.origin());
    let mut request = mesh_client::json_request::<()>(Method::GET, &url, None)?;
    if let Some(etag) = etag {
        request.headers_mut().insert(IF_NONE_MATCH, etag.clone());
    }
    if let Some(path) = &config.credential_file {
        let credential =
            std::fs::read_to_string(path).map_err(|source| MirrorError::Credential { path: path.clone(), source })?;
        let value = HeaderValue::try_from(format!("Bearer {}", credential.trim()))
            .map_err(|e| MirrorError::Invalid(format!("the credential cannot be sent: {e}")))?;
        request.headers_mut().insert(axum::http::header::AUTHORIZATION, value);
    }
    let response = http.send(request, Duration::from_millis(MIRROR_FETCH_TIMEOUT_MS)).await?;
    match response.status() {
        StatusCode::NOT_MODIFIED => Ok(None),
        StatusCode::OK => {
            let etag = response.headers().get(ETAG).cloned();
            Ok(Some((agents_of(response.body(), config.origin())?, etag)))
        }
        status => Err(MirrorError::Status(status)),
    }
}

/// The A2A agents of a mesh registry's AI Catalog, marked with `origin`. Entries of another
/// type, or without the registry's metadata, are skipped: the mirror lists only what it can
/// route to.
fn agents_of(body: &[u8], origin: &str) -> Result<Vec<RegisteredAgent>, MirrorError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Catalog {
        spec_version: String,
        entries: Vec<Value>,
    }
    let catalog: Catalog = serde_json::from_slice(body).map_err(|e| MirrorError::Invalid(e.to_string()))?;
    if catalog.spec_version.split('.').next() != Some(SPEC_MAJOR_VERSION) {
        return Err(MirrorError::Invalid(format!("specVersion {} is not 1.x", catalog.spec_version)));
    }
    let mut agents = Vec::with_capacity(catalog.entries.len());
    for entry in catalog.entries {
        match serde_json::from_value::<AiCatalogEntry>(entry) {
            Ok(entry) if entry.media_type == A2A_AGENT_CARD_TYPE => agents.push(mirrored(entry, origin)),
            Ok(entry) => tracing::debug!(origin, entry = entry.identifier, "not an A2A agent card; skipped"),
            Err(error) => tracing::warn!(origin, %error, "a catalog entry without the registry's metadata; skipped"),
        }
    }
    Ok(agents)
}

/// A catalog entry as this registry lists it. A catalog leaves out the times that move at every
/// poll: a mirrored agent has no `last_health_check`, and its `updated_at` is its registration's.
fn mirrored(entry: AiCatalogEntry, origin: &str) -> RegisteredAgent {
    let metadata = entry.extensions.metadata;
    RegisteredAgent {
        record: AgentRecord {
            name: metadata.name,
            url: metadata.url,
            capabilities: metadata.capabilities,
            health_endpoint: metadata.health_endpoint,
            process_endpoint: metadata.process_endpoint,
            agent_card_url: entry.url,
            health_status: metadata.health_status,
            last_health_check: None,
            updated_at: metadata.registered_at.clone(),
            registered_at: metadata.registered_at,
        },
        path: metadata.path,
        health_probe: metadata.health_probe,
        interfaces: metadata.interfaces,
        description: entry.description,
        skills: Vec::new(),
        tenant: String::new(),
        origin: Some(origin.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use mesh_protocol::registry::HealthStatus;

    use super::*;
    use crate::catalog::ai_catalog;
    use crate::health::HealthProbe;

    fn agent(name: &str, path: &str) -> RegisteredAgent {
        RegisteredAgent {
            record: AgentRecord {
                name: name.to_owned(),
                url: format!("http://{path}.example.com"),
                capabilities: vec!["echo".to_owned()],
                health_endpoint: format!("http://{path}.example.com/health"),
                process_endpoint: format!("http://{path}.example.com/"),
                agent_card_url: format!("http://{path}.example.com/.well-known/agent-card.json"),
                health_status: HealthStatus::Healthy,
                last_health_check: Some("2026-11-29T00:01:00Z".to_owned()),
                registered_at: "2026-11-29T00:00:00Z".to_owned(),
                updated_at: "2026-11-29T00:00:30Z".to_owned(),
            },
            path: path.to_owned(),
            health_probe: HealthProbe::Health,
            interfaces: Vec::new(),
            description: format!("{name} echoes"),
            skills: Vec::new(),
            tenant: String::new(),
            origin: None,
        }
    }

    fn config(url: &str) -> MirrorConfig {
        MirrorConfig { url: url.to_owned(), interval_ms: MIRROR_INTERVAL_MS_DEFAULT, credential_file: None }
    }

    #[test]
    fn a_catalog_reads_back_as_the_agents_it_lists_marked_with_their_origin() {
        let listed = vec![agent("echo", "echo"), agent("Echo Agent", "echo-agent")];
        let body = serde_json::to_vec(&ai_catalog(&listed)).unwrap();
        let read = agents_of(&body, "http://eu:8000").unwrap();
        let expected: Vec<RegisteredAgent> = listed
            .into_iter()
            .map(|a| RegisteredAgent { skills: Vec::new(), origin: Some("http://eu:8000".to_owned()), ..a })
            .map(|mut a| {
                a.record.last_health_check = None;
                a.record.updated_at = a.record.registered_at.clone();
                a
            })
            .collect();
        assert_eq!(read, expected);
    }

    #[test]
    fn entries_of_another_type_or_without_metadata_are_skipped_and_other_versions_refused() {
        let mut catalog = serde_json::to_value(ai_catalog(&[agent("echo", "echo"), agent("tool", "tool")])).unwrap();
        catalog["entries"][1]["type"] = "application/mcp-server+json".into();
        catalog["entries"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"identifier": "urn:x", "type": A2A_AGENT_CARD_TYPE, "url": "http://x/card"}));
        let read = agents_of(catalog.to_string().as_bytes(), "http://eu").unwrap();
        assert_eq!(read.iter().map(|a| a.record.name.as_str()).collect::<Vec<_>>(), ["echo"]);
        catalog["specVersion"] = "2.0".into();
        let refused = agents_of(catalog.to_string().as_bytes(), "http://eu").unwrap_err();
        assert_eq!(refused.to_string(), "the catalog is not an AI Catalog: specVersion 2.0 is not 1.x");
        assert!(matches!(agents_of(b"[]", "http://eu"), Err(MirrorError::Invalid(_))));
    }

    #[test]
    fn local_agents_and_earlier_mirrors_win_and_each_origin_is_bounded() {
        let configs = [config("http://first:8000/"), config("http://second:8000")];
        let mirrors = Mirrors::new(&configs, 2);
        let from = |origin: &str, name: &str, path: &str| RegisteredAgent {
            origin: Some(origin.to_owned()),
            ..agent(name, path)
        };
        let first = ["shared", "a", "dropped"].map(|name| from("http://first:8000", name, name));
        mirrors.replace("http://first:8000", first.to_vec());
        let second =
            [("shared", "shared2"), ("b", "b"), ("c", "c")].map(|(name, path)| from("http://second:8000", name, path));
        mirrors.replace("http://second:8000", second.to_vec());
        // "dropped" and "c" are beyond the bound of 2 agents per origin, in the order listed.
        let directory = Directory::new(Vec::new());
        let names = |agents: Vec<RegisteredAgent>| {
            agents.into_iter().map(|a| (a.record.name, a.origin.unwrap())).collect::<Vec<_>>()
        };
        assert_eq!(
            names(mirrors.listed(&directory)),
            [
                ("a".to_owned(), "http://first:8000".to_owned()),
                ("b".to_owned(), "http://second:8000".to_owned()),
                ("shared".to_owned(), "http://first:8000".to_owned()),
            ]
            .to_vec()
        );
        assert_eq!(mirrors.get("shared", &directory).unwrap().origin.as_deref(), Some("http://first:8000"));
        assert!(mirrors.get("dropped", &directory).is_none());
        assert!(mirrors.get("c", &directory).is_none());
    }
}
