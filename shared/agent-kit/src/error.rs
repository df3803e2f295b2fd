use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use mesh_protocol::error::{ErrorBody, FailureStatus};

use crate::call_safety::call_failure_status;

/// An HTTP error answer: a status and the mesh's JSON error body. Every crate's error enum maps
/// into this, so no failure ever leaves a server as a bare status code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorResponse {
    pub status: StatusCode,
    pub body: ErrorBody,
}

impl ErrorResponse {
    pub fn new(status: StatusCode, error_code: &str, error_message: impl Into<String>) -> Self {
        let failure = if status == StatusCode::GATEWAY_TIMEOUT { FailureStatus::Timeout } else { FailureStatus::Error };
        Self { status, body: ErrorBody::new(failure, error_code, error_message) }
    }

    pub fn with_request_id(mut self, request_id: Option<String>) -> Self {
        self.body.request_id = request_id;
        self
    }
}

impl IntoResponse for ErrorResponse {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

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

impl IntoResponse for AgentError {
    fn into_response(self) -> Response {
        ErrorResponse::from(self).into_response()
    }
}

#[cfg(test)]
mod tests {
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
