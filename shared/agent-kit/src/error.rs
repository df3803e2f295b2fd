use axum::http::StatusCode;

use mesh_server::ErrorResponse;
use mesh_server::call_safety::call_failure_status;

/// What an agent's handler may fail with; each kind has its own status and code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentError {
    /// The task itself is unusable (missing query, bad parameter): 400.
    #[error("{0}")]
    InvalidInput(String),
    /// A dependency the agent cannot answer without is down: 503.
    #[error("{0}")]
    Unavailable(String),
    /// The work did not finish in time: 504.
    #[error("{0}")]
    Timeout(String),
    /// A bug or an unexpected state: 500.
    #[error("{0}")]
    Internal(String),
    /// A call to another agent was refused or failed (a cycle, the depth limit, a full bulkhead,
    /// a timeout, ...); `code` says which, and picks the status.
    #[error("{message}")]
    Call { code: String, message: String },
}

impl From<AgentError> for ErrorResponse {
    fn from(error: AgentError) -> Self {
        let (status, code) = match &error {
            AgentError::InvalidInput(_) => (StatusCode::BAD_REQUEST, "TASK_INVALID_INPUT"),
            AgentError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "DEPENDENCY_UNAVAILABLE"),
            AgentError::Timeout(_) => (StatusCode::GATEWAY_TIMEOUT, "TASK_TIMEOUT"),
            AgentError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR"),
            AgentError::Call { code, .. } => (call_failure_status(code), code.as_str()),
        };
        ErrorResponse::new(status, code, error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use mesh_protocol::error::FailureStatus;

    use super::*;

    #[test]
    fn timeouts_are_their_own_status_word() {
        let response = ErrorResponse::from(AgentError::Timeout("slow".into()));
        assert_eq!(response.status, StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(response.body.status, FailureStatus::Timeout);
        let response = ErrorResponse::from(AgentError::Unavailable("down".into()));
        assert_eq!((response.status, response.body.status), (StatusCode::SERVICE_UNAVAILABLE, FailureStatus::Error));
        assert_eq!(response.body.error_code, "DEPENDENCY_UNAVAILABLE");
    }
}
