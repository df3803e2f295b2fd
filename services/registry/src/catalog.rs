//! The registered agents as catalogs other tools read (issue #37): an AI Catalog at
//! `/.well-known/ai-catalog.json` (the Agent Card working group's AI Catalog, `specVersion` 1.0)
//! and an Agentic Resource Discovery manifest at `/.well-known/ard.json` (ARD v0.9, whose
//! manifests also carry `specVersion` 1.0). Both list every agent `GET /agents` lists, each by
//! its card's URL, so a reader (`a2a-mesh catalog import`, another registry) registers it from
//! its own card.
//!
//! Each format has one mapping function from a [`RegisteredAgent`] ([`ai_catalog_entry`],
//! [`ard_entry`]): fields the registry learns later go there. The answers carry an `ETag` (a
//! digest of the body) and honour `If-None-Match` with 304, so a follower polls cheaply.

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, ETAG, IF_NONE_MATCH};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use mesh_protocol::registry::HealthStatus;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use url::{Host, Url};
use utoipa::ToSchema;

use crate::card::AgentInterfaceRecord;
use crate::directory::{RegisteredAgent, health_word};
use crate::error::RegistryError;
use crate::health::HealthProbe;

/// Where the AI Catalog is served: the well-known URI both specifications name.
pub const AI_CATALOG_PATH: &str = "/.well-known/ai-catalog.json";
/// Where the ARD manifest is served. ARD names only `/.well-known/ai-catalog.json` (which the AI
/// Catalog above answers, in a form ARD's schema accepts too); this path gives ARD readers the
/// manifest with ARD's own fields (`capabilities`, scalar `metadata`).
pub const ARD_CATALOG_PATH: &str = "/.well-known/ard.json";
/// The catalog format version both documents conform to.
pub const SPEC_VERSION: &str = "1.0";
/// The media type of an entry's artifact: an A2A agent card.
pub const A2A_AGENT_CARD_TYPE: &str = "application/a2a-agent-card+json";
/// The AI Catalog's own media type.
pub const AI_CATALOG_MEDIA_TYPE: &str = "application/ai-catalog+json";
/// ARD has its manifests served as plain JSON.
pub const ARD_MEDIA_TYPE: &str = "application/json";
/// Who runs the catalog (`host.displayName`).
const HOST_DISPLAY_NAME: &str = "A2A mesh registry";
/// The namespace segment of the agents' URNs.
const URN_NAMESPACE: &str = "a2a-mesh";
/// The publisher segment when a card URL has no host (never: registration checks card URLs);
/// `.invalid` is reserved for names that cannot exist (RFC 2606).
const UNKNOWN_PUBLISHER: &str = "unknown.invalid";
/// How long a client may reuse a catalog before asking again (with `If-None-Match`): health
/// changes show within this.
const CATALOG_MAX_AGE_S: u32 = 10;
/// Examples listed per agent in the ARD manifest's `representativeQueries`.
const REPRESENTATIVE_QUERIES_MAX: usize = 10;
/// Hex digits of the body's SHA-256 in the `ETag` (128 bits).
const ETAG_HEX_DIGITS: usize = 32;

/// Who runs a catalog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CatalogHost {
    pub display_name: String,
}

/// `GET /.well-known/ai-catalog.json`: an AI Catalog (`application/ai-catalog+json`,
/// `specVersion` 1.0) of the registered agents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AiCatalog {
    /// `1.0`.
    pub spec_version: String,
    pub host: CatalogHost,
    pub entries: Vec<AiCatalogEntry>,
}

/// One agent in the AI Catalog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AiCatalogEntry {
    /// `urn:air:<host of its card URL>:a2a-mesh:<path>`.
    pub identifier: String,
    /// The agent's registered name, the one the mesh routes by.
    pub display_name: String,
    /// The agent card's description (left out when its card was not read).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// `application/a2a-agent-card+json`.
    #[serde(rename = "type")]
    pub media_type: String,
    /// The agent's card.
    pub url: String,
    /// Its capabilities (skill ids), as keywords.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    pub extensions: AiCatalogExtensions,
}

/// An AI Catalog entry's `extensions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AiCatalogExtensions {
    /// Under the AI Catalog's official extension for schemaless key-value metadata, rather than
    /// under a key of a domain the project does not own.
    #[serde(rename = "https://ai-catalog.org/extensions/metadata")]
    pub metadata: MeshAgentMetadata,
}

/// What the registry knows of an agent beyond its card's URL, in `GET /agents`' field names:
/// what a registry mirroring this one lists ([`crate::mirror`]). What moves at every health poll
/// or refresh (`last_health_check`, `updated_at`) is left out, so a catalog whose agents did not
/// change keeps its `ETag`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct MeshAgentMetadata {
    pub name: String,
    /// Its name in URL paths (a gateway's `/agents/{path}/`).
    pub path: String,
    pub health_status: HealthStatus,
    pub capabilities: Vec<String>,
    pub interfaces: Vec<AgentInterfaceRecord>,
    pub url: String,
    pub health_endpoint: String,
    pub health_probe: HealthProbe,
    pub process_endpoint: String,
    pub registered_at: String,
}

/// `GET /.well-known/ard.json`: an Agentic Resource Discovery (v0.9) manifest of the registered
/// agents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArdCatalog {
    /// `1.0`.
    pub spec_version: String,
    pub host: CatalogHost,
    pub entries: Vec<ArdEntry>,
}

/// One agent in the ARD manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArdEntry {
    /// `urn:air:<host of its card URL>:a2a-mesh:<path>`, as in the AI Catalog.
    pub identifier: String,
    pub display_name: String,
    /// The agent card's description (left out when its card was not read).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// `application/a2a-agent-card+json`.
    #[serde(rename = "type")]
    pub media_type: String,
    /// The agent's card.
    pub url: String,
    /// Its capabilities (skill ids), for ARD's filters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    /// Requests it answers: its skills' examples, at most [`REPRESENTATIVE_QUERIES_MAX`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub representative_queries: Vec<String>,
    /// `path` and `health` (ARD's metadata holds scalars only).
    pub metadata: ArdMetadata,
}

/// An ARD entry's `metadata`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ArdMetadata {
    pub path: String,
    /// `healthy`, `unhealthy`, `unreachable` or `unknown`.
    pub health: String,
}

/// The AI Catalog of `agents`.
pub fn ai_catalog(agents: &[RegisteredAgent]) -> AiCatalog {
    AiCatalog {
        spec_version: SPEC_VERSION.to_owned(),
        host: host(),
        entries: agents.iter().map(ai_catalog_entry).collect(),
    }
}

/// One agent as an AI Catalog entry.
pub fn ai_catalog_entry(agent: &RegisteredAgent) -> AiCatalogEntry {
    let record = &agent.record;
    AiCatalogEntry {
        identifier: identifier(agent),
        display_name: record.name.clone(),
        description: agent.description.clone(),
        media_type: A2A_AGENT_CARD_TYPE.to_owned(),
        url: record.agent_card_url.clone(),
        tags: record.capabilities.clone(),
        extensions: AiCatalogExtensions {
            metadata: MeshAgentMetadata {
                name: record.name.clone(),
                path: agent.path.clone(),
                health_status: record.health_status,
                capabilities: record.capabilities.clone(),
                interfaces: agent.interfaces.clone(),
                url: record.url.clone(),
                health_endpoint: record.health_endpoint.clone(),
                health_probe: agent.health_probe,
                process_endpoint: record.process_endpoint.clone(),
                registered_at: record.registered_at.clone(),
            },
        },
    }
}

/// The ARD manifest of `agents`.
pub fn ard_catalog(agents: &[RegisteredAgent]) -> ArdCatalog {
    ArdCatalog { spec_version: SPEC_VERSION.to_owned(), host: host(), entries: agents.iter().map(ard_entry).collect() }
}

/// One agent as an ARD entry.
pub fn ard_entry(agent: &RegisteredAgent) -> ArdEntry {
    let record = &agent.record;
    ArdEntry {
        identifier: identifier(agent),
        display_name: record.name.clone(),
        description: agent.description.clone(),
        media_type: A2A_AGENT_CARD_TYPE.to_owned(),
        url: record.agent_card_url.clone(),
        capabilities: record.capabilities.clone(),
        representative_queries: agent
            .skills
            .iter()
            .flat_map(|skill| skill.examples.iter().cloned())
            .take(REPRESENTATIVE_QUERIES_MAX)
            .collect(),
        metadata: ArdMetadata { path: agent.path.clone(), health: health_word(record.health_status).to_owned() },
    }
}

fn host() -> CatalogHost {
    CatalogHost { display_name: HOST_DISPLAY_NAME.to_owned() }
}

/// An agent's URN, `urn:air:<publisher>:a2a-mesh:<path>`, stable while its card stays on one
/// host and its path does not change. The publisher is the host serving its card: the agent
/// registered itself there (the registry read the card at that URL), so the registry lists it
/// as its delegate, which is when the AI Catalog lets an operator use `urn:air` with the
/// publisher's domain. The path is unique among the agents, so the URN is too.
fn identifier(agent: &RegisteredAgent) -> String {
    let publisher = publisher(&agent.record.agent_card_url);
    // ARD's URN segments allow letters, digits, '.', '_' and '-'; a path may also hold '~'. Such
    // a path goes in hex under a segment of its own, where no plain path can land.
    if agent.path.contains('~') {
        format!("urn:air:{publisher}:{URN_NAMESPACE}:hex:{}", hex::encode(&agent.path))
    } else {
        format!("urn:air:{publisher}:{URN_NAMESPACE}:{}", agent.path)
    }
}

/// The host of `card_url` as a URN segment: a domain or IPv4 address as it is, an IPv6 address
/// as its `ipv6-literal.net` name (colons as dashes), since ARD's segments hold no ':'.
fn publisher(card_url: &str) -> String {
    match Url::parse(card_url).ok().as_ref().and_then(Url::host) {
        Some(Host::Domain(domain)) => domain.to_ascii_lowercase(),
        Some(Host::Ipv4(address)) => address.to_string(),
        Some(Host::Ipv6(address)) => format!("{}.ipv6-literal.net", address.to_string().replace(':', "-")),
        None => UNKNOWN_PUBLISHER.to_owned(),
    }
}

/// `document` as JSON of `content_type` with its `ETag` and `Cache-Control`; 304 without a body
/// when the request's `If-None-Match` names that `ETag`.
pub fn respond<T: Serialize>(
    document: &T,
    content_type: &'static str,
    request: &HeaderMap,
) -> Result<Response, RegistryError> {
    let encode = |e: &dyn std::fmt::Display| RegistryError::Encode(e.to_string());
    let body = serde_json::to_vec(document).map_err(|e| encode(&e))?;
    let digest = hex::encode(Sha256::digest(&body));
    let etag = format!("\"{}\"", digest.get(..ETAG_HEX_DIGITS).unwrap_or(&digest));
    // Private: the answer is for the caller's credentials (authentication may be on).
    let cache_control = format!("private, max-age={CATALOG_MAX_AGE_S}");
    let headers = [
        (ETAG, HeaderValue::from_str(&etag).map_err(|e| encode(&e))?),
        (CACHE_CONTROL, HeaderValue::from_str(&cache_control).map_err(|e| encode(&e))?),
    ];
    if request.get_all(IF_NONE_MATCH).iter().any(|value| names_etag(value, &etag)) {
        return Ok((StatusCode::NOT_MODIFIED, headers).into_response());
    }
    Ok((headers, [(CONTENT_TYPE, HeaderValue::from_static(content_type))], body).into_response())
}

/// Whether an `If-None-Match` value names `etag`: `*`, or a list of entity tags compared weakly
/// (a `W/` prefix ignored), as RFC 9110 §13.1.2 has it.
fn names_etag(value: &HeaderValue, etag: &str) -> bool {
    let Ok(value) = value.to_str() else { return false };
    value.split(',').map(str::trim).any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag)
}

#[cfg(test)]
mod tests {
    use mesh_protocol::registry::AgentRecord;

    use super::*;

    fn agent(name: &str, path: &str, card_url: &str) -> RegisteredAgent {
        RegisteredAgent {
            record: AgentRecord {
                name: name.to_owned(),
                url: "http://agents.example.com".to_owned(),
                capabilities: vec!["echo".to_owned()],
                health_endpoint: card_url.to_owned(),
                process_endpoint: "http://agents.example.com/".to_owned(),
                agent_card_url: card_url.to_owned(),
                health_status: HealthStatus::Healthy,
                last_health_check: None,
                registered_at: "2026-11-28T00:00:00Z".to_owned(),
                updated_at: "2026-11-28T00:00:00Z".to_owned(),
            },
            path: path.to_owned(),
            health_probe: crate::health::HealthProbe::Card,
            interfaces: Vec::new(),
            description: String::new(),
            skills: Vec::new(),
            tenant: String::new(),
            origin: None,
        }
    }

    #[test]
    fn an_agent_is_named_by_the_host_of_its_card_and_its_path() {
        let card = "https://Agents.Example.com:8443/.well-known/agent-card.json";
        assert_eq!(
            identifier(&agent("Echo Agent", "echo-agent", card)),
            "urn:air:agents.example.com:a2a-mesh:echo-agent"
        );
        assert_eq!(
            identifier(&agent("echo", "echo", "http://127.0.0.1:9000/card.json")),
            "urn:air:127.0.0.1:a2a-mesh:echo"
        );
        assert_eq!(
            identifier(&agent("echo", "echo", "http://[::1]:9000/card.json")),
            "urn:air:--1.ipv6-literal.net:a2a-mesh:echo"
        );
        // '~' is no URN segment character of ARD's: that path is written in hex, apart from plain ones.
        assert_eq!(
            identifier(&agent("a~b", "a~b", card)),
            format!("urn:air:agents.example.com:a2a-mesh:hex:{}", hex::encode("a~b"))
        );
    }

    #[test]
    fn if_none_match_names_the_etag_strongly_weakly_in_a_list_or_by_star() {
        let etag = "\"abc\"";
        for value in ["\"abc\"", "W/\"abc\"", "\"x\", \"abc\"", "*"] {
            assert!(names_etag(&HeaderValue::from_static(value), etag), "{value}");
        }
        for value in ["\"abcd\"", "abc", "\"x\""] {
            assert!(!names_etag(&HeaderValue::from_static(value), etag), "{value}");
        }
    }
}
