use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use mesh_protocol::error::{ErrorBody, FailureStatus};

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

/// What setting up a server's shared parts can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{0}")]
    Auth(#[from] mesh_auth::AuthError),
    #[error("the credential cannot be sent: {0}")]
    Credential(#[from] mesh_client::ClientError),
}
