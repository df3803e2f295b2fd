use std::path::PathBuf;

use mesh_agent_kit::AgentConfig;
use serde::Deserialize;

use crate::fusion::RRF_K_DEFAULT;

pub const SEARCH_PORT_DEFAULT: u16 = 8002;
/// Prefix of the environment variables the search agent reads.
pub const ENV_PREFIX: &str = "MESH_SEARCH";
pub const TOP_K_DEFAULT: usize = 10;
pub const TOP_K_MAX: usize = 100;
/// Candidates each profile contributes to the fusion; deeper than `top_k` so that a document
/// ranked modestly by several profiles can still rise.
pub const CANDIDATES_PER_PROFILE: usize = 100;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct SearchConfig {
    #[serde(flatten)]
    pub agent: AgentConfig,
    /// JSON Lines corpus (BEIR `corpus.jsonl` layout); the bundled sample catalogue when absent.
    pub corpus_path: Option<PathBuf>,
    /// RRF constant with 0-indexed ranks (60 = the seed's; equals canonical 1-based k = 59).
    pub rrf_k: f64,
    pub top_k_default: usize,
    pub top_k_max: usize,
    pub candidates_per_profile: usize,
}

impl Default for SearchConfig {
    fn default() -> Self {
        Self {
            agent: AgentConfig { port: SEARCH_PORT_DEFAULT, ..AgentConfig::default() },
            corpus_path: None,
            rrf_k: RRF_K_DEFAULT,
            top_k_default: TOP_K_DEFAULT,
            top_k_max: TOP_K_MAX,
            candidates_per_profile: CANDIDATES_PER_PROFILE,
        }
    }
}
