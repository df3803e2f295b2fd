use mesh_protocol::jsonrpc::A2aErrorCode;
use mesh_storage::StorageError;

/// What a task operation fails with; [`TaskError::code`] names the A2A error each is answered as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskError {
    #[error("task {0} not found")]
    NotFound(String),
    /// The agent delivers no push notifications.
    #[error("push notifications are not supported by this agent")]
    PushNotSupported,
    #[error("task {task_id} has no push notification config {id}")]
    PushConfigNotFound { task_id: String, id: String },
    #[error("task {id} is {state} and cannot be canceled")]
    NotCancelable { id: String, state: String },
    /// The operation exists but not for this task now (e.g. a message to a finished task).
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    InvalidParams(String),
    #[error("task storage failed: {0}")]
    Storage(String),
    /// A bound of the agent's memory is reached (live tasks, subscribers): try again later.
    #[error("{0}")]
    Busy(String),
    /// The task would store more than the agent keeps (its artifacts).
    #[error("{0}")]
    TooLarge(String),
}

impl TaskError {
    pub fn code(&self) -> A2aErrorCode {
        match self {
            // The spec's error for a config that does not exist.
            Self::NotFound(_) | Self::PushConfigNotFound { .. } => A2aErrorCode::TaskNotFound,
            Self::NotCancelable { .. } => A2aErrorCode::TaskNotCancelable,
            Self::PushNotSupported => A2aErrorCode::PushNotificationNotSupported,
            Self::Unsupported(_) => A2aErrorCode::UnsupportedOperation,
            Self::InvalidParams(_) => A2aErrorCode::InvalidParams,
            // A2A has no code for a full agent or an oversize task; the message says which.
            Self::Storage(_) | Self::Busy(_) | Self::TooLarge(_) => A2aErrorCode::InternalError,
        }
    }
}

impl From<StorageError> for TaskError {
    fn from(error: StorageError) -> Self {
        Self::Storage(error.to_string())
    }
}

impl From<sqlx::Error> for TaskError {
    fn from(error: sqlx::Error) -> Self {
        Self::Storage(error.to_string())
    }
}
