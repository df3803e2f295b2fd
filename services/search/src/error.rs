use mesh_agent_kit::AgentError;

#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("corpus line {line}: {reason}")]
    Corpus { line: usize, reason: String },
    #[error("cannot read the corpus {path}: {source}")]
    CorpusFile { path: String, source: std::io::Error },
    #[error("the index at {path} cannot be used: {reason}")]
    IndexDirectory { path: String, reason: String },
    #[error("the embedding model failed: {0}")]
    Embedding(#[from] mesh_embedding::EmbeddingError),
    #[error("index error: {0}")]
    Index(#[from] tantivy::TantivyError),
    #[error("the query has no text to search for")]
    EmptyQuery,
    #[error("unknown profile {unknown:?}; available: {available}")]
    UnknownProfile { unknown: String, available: String },
    #[error("the {profile} profile is unavailable: {reason}")]
    ProfileUnavailable { profile: String, reason: String },
    #[error("invalid search parameters: {0}")]
    InvalidParameters(String),
    #[error("a ranking task failed: {0}")]
    Worker(String),
    #[error("the document log is unavailable: {0}")]
    Log(String),
    #[error("no profile finished before the caller's deadline (still ranking: {0})")]
    OutOfTime(String),
}

impl From<SearchError> for AgentError {
    fn from(error: SearchError) -> Self {
        match error {
            SearchError::EmptyQuery | SearchError::UnknownProfile { .. } | SearchError::InvalidParameters(_) => {
                AgentError::InvalidInput(error.to_string())
            }
            SearchError::ProfileUnavailable { .. } | SearchError::Log(_) => AgentError::Unavailable(error.to_string()),
            SearchError::Corpus { .. }
            | SearchError::CorpusFile { .. }
            | SearchError::Index(_)
            | SearchError::IndexDirectory { .. }
            | SearchError::Embedding(_)
            | SearchError::Worker(_) => AgentError::Internal(error.to_string()),
            SearchError::OutOfTime(_) => AgentError::Timeout(error.to_string()),
        }
    }
}

impl From<mesh_storage::StorageError> for SearchError {
    fn from(error: mesh_storage::StorageError) -> Self {
        Self::Log(error.to_string())
    }
}

impl From<sqlx::Error> for SearchError {
    fn from(error: sqlx::Error) -> Self {
        Self::Log(error.to_string())
    }
}
