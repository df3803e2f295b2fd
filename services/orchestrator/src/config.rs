use mesh_agent_kit::AgentConfig;
use serde::Deserialize;

pub const ORCHESTRATOR_PORT_DEFAULT: u16 = 8001;
/// Prefix of the environment variables the orchestrator reads.
pub const ENV_PREFIX: &str = "MESH_ORCHESTRATOR";
/// Time each planning agent gets; planning is optional, so this is short.
pub const PLANNING_TIMEOUT_MS_DEFAULT: u64 = 5_000;
/// Time the search agent gets; the kit's request timeout (30 s) stays above it so the
/// orchestrator always answers with its own error first.
pub const SEARCH_TIMEOUT_MS_DEFAULT: u64 = 10_000;
/// How long discovered agents and fetched cards are reused before asking again.
pub const DISCOVERY_CACHE_TTL_MS_DEFAULT: u64 = 5_000;
pub const TOP_K_DEFAULT: usize = 10;
/// Below this profile-selection confidence the search runs an ensemble of the selected profile and
/// its best alternatives; at or above it, the selected profile alone.
pub const ENSEMBLE_BELOW_CONFIDENCE_DEFAULT: f64 = 0.7;
pub const ENSEMBLE_PROFILES_MAX_DEFAULT: usize = 3;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct OrchestratorConfig {
    #[serde(flatten)]
    pub agent: AgentConfig,
    /// Milliseconds each planning agent gets; planning is optional, so this is short.
    pub planning_timeout_ms: u64,
    /// Milliseconds the search agent gets; the kit's request timeout stays above it so the orchestrator
    /// answers with its own error first.
    pub search_timeout_ms: u64,
    /// Milliseconds discovered agents and fetched cards are reused before asking the registry again.
    pub discovery_cache_ttl_ms: u64,
    /// Results an answer holds when the query names no `top_k`.
    pub top_k_default: usize,
    /// Below this profile-selection confidence the search runs an ensemble of the selected profile and its
    /// best alternatives; at or above it, the selected profile alone.
    pub ensemble_below_confidence: f64,
    /// Profiles in such an ensemble, at most.
    pub ensemble_profiles_max: usize,
}

impl Default for OrchestratorConfig {
    fn default() -> Self {
        Self {
            agent: AgentConfig { port: ORCHESTRATOR_PORT_DEFAULT, ..AgentConfig::default() },
            planning_timeout_ms: PLANNING_TIMEOUT_MS_DEFAULT,
            search_timeout_ms: SEARCH_TIMEOUT_MS_DEFAULT,
            discovery_cache_ttl_ms: DISCOVERY_CACHE_TTL_MS_DEFAULT,
            top_k_default: TOP_K_DEFAULT,
            ensemble_below_confidence: ENSEMBLE_BELOW_CONFIDENCE_DEFAULT,
            ensemble_profiles_max: ENSEMBLE_PROFILES_MAX_DEFAULT,
        }
    }
}
