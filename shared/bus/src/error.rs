use mesh_docmem::DocmemError;

/// What a bus operation fails with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BusError {
    #[error("topic {0} does not exist: ensure it before producing")]
    UnknownTopic(String),
    #[error("{operation} timed out after {timeout_ms} ms")]
    Timeout { operation: &'static str, timeout_ms: u64 },
    #[error("invalid bus record: {0}")]
    InvalidRecord(String),
    #[error("the embedded log failed: {0}")]
    Storage(String),
    #[error("kafka: {0}")]
    Kafka(String),
    #[error(transparent)]
    Docmem(#[from] DocmemError),
    #[error("invalid bus configuration: {0}")]
    Config(String),
    #[error("the handler failed: {0}")]
    Handler(String),
}

impl From<sqlx::Error> for BusError {
    fn from(error: sqlx::Error) -> Self {
        Self::Storage(error.to_string())
    }
}

impl From<mesh_storage::StorageError> for BusError {
    fn from(error: mesh_storage::StorageError) -> Self {
        Self::Storage(error.to_string())
    }
}

impl From<rdkafka::error::KafkaError> for BusError {
    fn from(error: rdkafka::error::KafkaError) -> Self {
        Self::Kafka(error.to_string())
    }
}
