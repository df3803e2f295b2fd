#[derive(Debug, thiserror::Error)]
pub enum EmbeddingError {
    #[error("the model folder {dir} has no {file}")]
    MissingFile { dir: String, file: &'static str },
    #[error("cannot read {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("the model cannot be used: {0}")]
    Model(String),
    #[error("the model failed: {0}")]
    Candle(#[from] candle_core::Error),
    #[error("ONNX Runtime failed: {0}")]
    Onnx(#[from] ort::Error),
    #[error("ONNX Runtime cannot be used: {0}")]
    Runtime(String),
    #[error("the model could not be downloaded: {0}")]
    Download(String),
    #[error(
        "{path} has SHA-256 {actual}, not the pinned {expected}: refusing to load it (delete the model folder to download it again)"
    )]
    Digest { path: String, expected: String, actual: String },
}
