//! The registry's JSON API. A2A defines no registry standard, so this one is ours and small.

use serde::{Deserialize, Serialize};

/// Default path of an agent's health endpoint, relative to its base URL.
pub const DEFAULT_HEALTH_PATH: &str = "/health";
/// Default path of the seed task endpoint, relative to the agent's base URL.
pub const DEFAULT_PROCESS_PATH: &str = "/tasks/send";
/// Well-known path of the agent card (A2A), relative to the agent's base URL.
pub const AGENT_CARD_PATH: &str = "/.well-known/agent-card.json";

/// Marker serialized as `"success"`, so success bodies are typed rather than free strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Success {
    #[default]
    Success,
}

/// Body of `POST /register` (seed 002 §1). Endpoints may be paths relative to `url` or absolute URLs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Registration {
    /// Unique name of this agent instance; replicas register under distinct names.
    pub name: String,
    /// Base URL the agent serves on, e.g. `http://127.0.0.1:8002`.
    pub url: String,
    pub capabilities: Vec<String>,
    #[serde(default = "default_health_endpoint")]
    pub health_endpoint: String,
    #[serde(default = "default_process_endpoint")]
    pub process_endpoint: String,
    /// Where the registry fetches the card to verify the registration; defaults to the well-known path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_card_url: Option<String>,
}

fn default_health_endpoint() -> String {
    DEFAULT_HEALTH_PATH.to_owned()
}

fn default_process_endpoint() -> String {
    DEFAULT_PROCESS_PATH.to_owned()
}

/// What the registry last learnt from polling an agent's health endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    /// Not polled yet since registration or since the registry started.
    Unknown,
    /// Answered 200.
    Healthy,
    /// Answered with another status.
    Unhealthy,
    /// Timed out or refused the connection.
    Unreachable,
}

impl HealthStatus {
    /// The wire word, also the `health` label of the registry's metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Healthy => "healthy",
            Self::Unhealthy => "unhealthy",
            Self::Unreachable => "unreachable",
        }
    }
}

/// A registered agent as the registry reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentRecord {
    pub name: String,
    pub url: String,
    pub capabilities: Vec<String>,
    pub health_endpoint: String,
    pub process_endpoint: String,
    pub agent_card_url: String,
    pub health_status: HealthStatus,
    /// RFC 3339 time of the last completed health poll, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_health_check: Option<String>,
    /// RFC 3339 time of the first registration under this name.
    pub registered_at: String,
    /// RFC 3339 time of the latest (re-)registration.
    pub updated_at: String,
}

/// `GET /agents`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentList {
    pub status: Success,
    pub total: usize,
    pub agents: Vec<AgentRecord>,
}

/// An agent as discovery lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentSummary {
    pub name: String,
    pub url: String,
    pub health_status: HealthStatus,
    /// Where to send tasks (absolute), as registered.
    pub process_endpoint: String,
    /// Where the agent's card is (absolute), as registered.
    pub agent_card_url: String,
}

/// `GET /capabilities/{capability}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CapabilityAgents {
    pub status: Success,
    pub capability: String,
    pub agents: Vec<AgentSummary>,
}

/// `GET /capabilities/{capability}/next`: one agent picked round-robin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AgentPick {
    pub status: Success,
    pub capability: String,
    pub agent: AgentSummary,
    /// True when no agent with this capability is healthy and the pick is any registered one.
    pub fallback: bool,
    /// Says why a fallback was made; absent on a normal pick.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// `GET /stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RegistryStats {
    pub total_agents: usize,
    pub healthy_agents: usize,
    pub unhealthy_agents: usize,
    pub unreachable_agents: usize,
    pub unknown_agents: usize,
}

/// `{"status":"success","message":"registered"}` and the like.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StatusMessage {
    pub status: Success,
    pub message: String,
}

impl StatusMessage {
    pub fn new(message: impl Into<String>) -> Self {
        Self { status: Success::Success, message: message.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn registration_fills_seed_defaults() {
        let registration: Registration = serde_json::from_value(json!({
            "name": "search_agent", "url": "http://localhost:8002", "capabilities": ["search"]
        }))
        .unwrap();
        assert_eq!(registration.health_endpoint, "/health");
        assert_eq!(registration.process_endpoint, "/tasks/send");
        assert_eq!(registration.agent_card_url, None);
    }

    #[test]
    fn success_body_matches_the_seed() {
        assert_eq!(
            serde_json::to_value(StatusMessage::new("registered")).unwrap(),
            json!({"status": "success", "message": "registered"})
        );
        assert_eq!(serde_json::to_value(HealthStatus::Unreachable).unwrap(), json!("unreachable"));
    }

    #[test]
    fn the_metric_label_of_a_health_is_its_wire_word() {
        for health in [HealthStatus::Unknown, HealthStatus::Healthy, HealthStatus::Unhealthy, HealthStatus::Unreachable]
        {
            assert_eq!(json!(health.as_str()), serde_json::to_value(health).unwrap());
        }
    }
}

/// One skill of an agent's card, as the registry keeps it and searches it (issue #37).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SkillProfile {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub examples: Vec<String>,
}

/// A skill that matched a search, with its score (Reciprocal Rank Fusion of the rankings).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MatchedSkill {
    #[serde(flatten)]
    pub skill: SkillProfile,
    pub score: f64,
}

/// An agent `GET /agents?q=` found, as a client reads it: its record, its score (its best
/// skill's) and the skills that matched, best first. (The registry answers more of the agent.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentFound {
    #[serde(flatten)]
    pub record: AgentRecord,
    #[serde(default)]
    pub description: String,
    pub score: f64,
    pub matched_skills: Vec<MatchedSkill>,
}

/// `GET /agents?q=...` as a client reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentsFound {
    pub status: Success,
    pub query: String,
    /// Rankings fused: `bm25`, and `dense` when the embedding model is loaded.
    pub rankings: Vec<String>,
    pub total: usize,
    pub agents: Vec<AgentFound>,
}

/// `POST /route`: the request to route, and for whom.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RouteRequest {
    /// An A2A 1.0 message: its text parts are what is routed.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub message: crate::a2a::v1::Message,
    /// Route among the agents this tenant sees (a caller names only a tenant it acts for; a
    /// gateway names its caller's); the caller's own view when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// One (agent, skill) a route may send a message to, as a client reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoutedChoice {
    pub agent: AgentRecord,
    pub skill: SkillProfile,
    pub score: f64,
}

/// `POST /route`'s answer as a client reads it: the best healthy agent and skill, and the next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Routed {
    pub status: Success,
    pub agent: AgentRecord,
    pub skill: SkillProfile,
    pub score: f64,
    pub alternatives: Vec<RoutedChoice>,
}
