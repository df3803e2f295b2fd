use std::path::PathBuf;

use mesh_agent_kit::AgentConfig;
pub use mesh_embedding::DenseConfig;
use serde::Deserialize;

use mesh_rank::fusion::RRF_K_DEFAULT;

pub const SEARCH_PORT_DEFAULT: u16 = 8002;
/// Prefix of the environment variables the search agent reads.
pub const ENV_PREFIX: &str = "MESH_SEARCH";
pub const TOP_K_DEFAULT: usize = 10;
pub const TOP_K_MAX: usize = 100;
/// Candidates each profile contributes to the fusion; deeper than `top_k` so that a document
/// ranked modestly by several profiles can still rise.
pub const CANDIDATES_PER_PROFILE: usize = 100;
/// Where the index persists unless configured otherwise (relative to the working directory,
/// beside the registry's `data/registry.db`).
pub const DATA_DIR_DEFAULT: &str = "data/search";
/// How often a replica reads the document log for what other replicas wrote.
pub const DOCUMENTS_SYNC_INTERVAL_MS_DEFAULT: u64 = 1_000;
/// How long a deletion stays in the document log (7 days): a replica down for longer compares
/// its whole index with the log when it comes back, instead of applying the deletions.
pub const DOCUMENTS_TOMBSTONE_RETENTION_MS_DEFAULT: u64 = 7 * 24 * 3_600_000;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct SearchConfig {
    #[serde(flatten)]
    pub agent: AgentConfig,
    /// Folder the index (documents, vectors) persists in; in memory only when absent.
    pub data_dir: Option<PathBuf>,
    /// JSON Lines corpus (BEIR `corpus.jsonl` layout) ingested when the index is empty; the
    /// bundled sample catalogue when absent.
    pub corpus_path: Option<PathBuf>,
    /// RRF constant with 0-indexed ranks (60 = the seed's; equals canonical 1-based k = 59).
    pub rrf_k: f64,
    /// Results a search returns when the caller names no `top_k`.
    pub top_k_default: usize,
    /// Largest `top_k` a caller may ask for.
    pub top_k_max: usize,
    /// Candidates each profile contributes to the fusion; deeper than `top_k` so that a document ranked
    /// modestly by several profiles can still rise.
    pub candidates_per_profile: usize,
    /// The embedding model behind the `dense` profile.
    pub dense: DenseConfig,
    /// The document log replicas share (`sqlite://PATH` or `postgres://...`): every replica builds
    /// its own index from it. Without it the agent keeps its documents in its index alone.
    pub documents_database_url: Option<String>,
    /// Milliseconds between two reads of the document log: the bound on how soon a replica sees
    /// what another one ingested (plus the time applying it takes).
    pub documents_sync_interval_ms: u64,
    /// Milliseconds a deletion (tombstone) is kept in the document log.
    pub documents_tombstone_retention_ms: u64,
}

impl Default for SearchConfig {
    fn default() -> Self {
        Self {
            agent: AgentConfig { port: SEARCH_PORT_DEFAULT, ..AgentConfig::default() },
            data_dir: Some(PathBuf::from(DATA_DIR_DEFAULT)),
            corpus_path: None,
            rrf_k: RRF_K_DEFAULT,
            top_k_default: TOP_K_DEFAULT,
            top_k_max: TOP_K_MAX,
            candidates_per_profile: CANDIDATES_PER_PROFILE,
            dense: DenseConfig::default(),
            documents_database_url: None,
            documents_sync_interval_ms: DOCUMENTS_SYNC_INTERVAL_MS_DEFAULT,
            documents_tombstone_retention_ms: DOCUMENTS_TOMBSTONE_RETENTION_MS_DEFAULT,
        }
    }
}
