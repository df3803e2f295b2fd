use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use mesh_agent_kit::ErrorResponse;
use mesh_storage::StorageError;

/// Everything the registry can fail with; each maps to one status and error code.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("invalid registration: {0}")]
    InvalidRegistration(String),
    #[error("no agent named {0:?} is registered")]
    AgentNotFound(String),
    #[error("{name:?} is registered at {current} now, not at {url}; nothing was removed")]
    InstanceReplaced { name: String, url: String, current: String },
    #[error("{name:?} is registered at {current} now, not at {url}; the failure report is about another instance")]
    ReportStale { name: String, url: String, current: String },
    #[error("no registered agent has the capability {0:?}")]
    CapabilityNotFound(String),
    #[error("cannot fetch the agent card at {url}: {reason}")]
    CardUnreachable { url: String, reason: String },
    #[error("the document at {url} is not an agent card: {reason}")]
    CardInvalid { url: String, reason: String },
    #[error("the agent card at {url} names {found:?}, not {expected:?}")]
    CardMismatch { url: String, expected: String, found: String },
    #[error("no link with id {0:?}")]
    LinkNotFound(String),
    #[error("a link from {from:?} to {to:?} exists already; change it with PUT /api/links/{{id}}")]
    LinkExists { from: String, to: String },
    #[error("an agent cannot link to itself ({0:?})")]
    LinkSelf(String),
    #[error("invalid link: {0}")]
    InvalidLink(String),
    #[error("the registry keeps at most {0} links")]
    LinksFull(usize),
    #[error("at most {0} event streams may be open at once")]
    SubscribersFull(usize),
    #[error("the name {0:?} is registered by another identity")]
    NameTaken(String),
    #[error("{subject:?} may not register or remove the agent {name:?}: an agent registers only under its own name")]
    NameForbidden { subject: String, name: String },
    #[error("storage unavailable: {0}")]
    Storage(#[from] StorageError),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
    #[error("cannot start: {0}")]
    Startup(String),
}

impl From<RegistryError> for ErrorResponse {
    fn from(error: RegistryError) -> Self {
        let (status, code) = match &error {
            RegistryError::InvalidRegistration(_) => (StatusCode::BAD_REQUEST, "REGISTRATION_INVALID"),
            RegistryError::AgentNotFound(_) => (StatusCode::NOT_FOUND, "AGENT_NOT_FOUND"),
            RegistryError::CapabilityNotFound(_) => (StatusCode::NOT_FOUND, "CAPABILITY_NOT_FOUND"),
            RegistryError::InstanceReplaced { .. } | RegistryError::ReportStale { .. } => {
                (StatusCode::CONFLICT, "AGENT_INSTANCE_REPLACED")
            }
            RegistryError::CardUnreachable { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "AGENT_CARD_UNREACHABLE"),
            RegistryError::CardInvalid { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "AGENT_CARD_INVALID"),
            RegistryError::CardMismatch { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "AGENT_CARD_MISMATCH"),
            RegistryError::LinkNotFound(_) => (StatusCode::NOT_FOUND, "LINK_NOT_FOUND"),
            RegistryError::LinkExists { .. } => (StatusCode::CONFLICT, "LINK_EXISTS"),
            RegistryError::LinkSelf(_) => (StatusCode::BAD_REQUEST, "LINK_SELF"),
            RegistryError::InvalidLink(_) => (StatusCode::BAD_REQUEST, "LINK_INVALID"),
            RegistryError::LinksFull(_) => (StatusCode::CONFLICT, "LINKS_FULL"),
            RegistryError::SubscribersFull(_) => (StatusCode::SERVICE_UNAVAILABLE, "EVENT_SUBSCRIBERS_FULL"),
            RegistryError::NameTaken(_) => (StatusCode::CONFLICT, "NAME_TAKEN"),
            RegistryError::NameForbidden { .. } => (StatusCode::FORBIDDEN, "NAME_FORBIDDEN"),
            RegistryError::Storage(_) => (StatusCode::SERVICE_UNAVAILABLE, "STORAGE_UNAVAILABLE"),
            RegistryError::Bind { .. } | RegistryError::Startup(_) => {
                (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR")
            }
        };
        if status.is_server_error() {
            tracing::error!(%error, "registry request failed");
        }
        ErrorResponse::new(status, code, error.to_string())
    }
}

impl IntoResponse for RegistryError {
    fn into_response(self) -> Response {
        ErrorResponse::from(self).into_response()
    }
}
