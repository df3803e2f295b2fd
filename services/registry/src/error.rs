use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use mesh_server::ErrorResponse;
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
    /// The reason stays in the logs: echoing transport errors would tell a caller which
    /// internal hosts and ports answer.
    #[error("cannot fetch the agent card at {url}")]
    CardUnreachable { url: String, reason: String },
    #[error("{url} is not an address the registry may reach (outbound address policy)")]
    AddressRefused { url: String, reason: String },
    #[error("the registry keeps at most {0} registrations")]
    RegistrationsFull(usize),
    #[error("one identity may hold at most {0} registrations")]
    IdentityRegistrationsFull(usize),
    /// The reason (which kid, which check) stays in the logs with the URL.
    #[error("the agent card at {url} is not signed by a trusted key")]
    CardSignature { url: String, reason: String },
    /// The problem is in the registry's own words; the reason (which may quote the fetched
    /// document, which must not leak back to the caller when the URL points somewhere it should
    /// not) stays in the logs.
    #[error("the document at {url} is not an agent card the registry takes: {problem}")]
    CardInvalid { url: String, problem: String, reason: String },
    #[error("the path {path:?} is taken by the agent {holder:?}: register with another \"path\"")]
    PathTaken { path: String, holder: String },
    #[error("the agent card at {url} does not name {expected:?}")]
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
    #[error("at most {0} event streams of one tenant may be open at once; close one first")]
    TenantSubscribersFull(usize),
    #[error("link {0} is disabled: nothing is sent or recorded over it")]
    LinkDisabled(String),
    /// An agent writing in another agent's name, or over a link it is not an end of.
    #[error("{0}")]
    SenderForbidden(String),
    #[error("the credentials do not grant tenant {0:?}")]
    TenantForbidden(String),
    #[error("invalid tenant: {0}")]
    InvalidTenant(String),
    #[error("the name {0:?} is registered by another identity")]
    NameTaken(String),
    #[error("{subject:?} may not register or remove the agent {name:?}: an agent registers only under its own name")]
    NameForbidden { subject: String, name: String },
    #[error("invalid search: {0}")]
    InvalidQuery(String),
    #[error("no healthy agent the caller may see has a skill matching the request")]
    NoRoute,
    #[error("storage unavailable: {0}")]
    Storage(#[from] StorageError),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
    #[error("cannot start: {0}")]
    Startup(String),
    #[error("cannot encode the answer: {0}")]
    Encode(String),
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
            RegistryError::AddressRefused { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "AGENT_ADDRESS_REFUSED"),
            RegistryError::RegistrationsFull(_) => (StatusCode::CONFLICT, "REGISTRATIONS_FULL"),
            RegistryError::IdentityRegistrationsFull(_) => (StatusCode::CONFLICT, "IDENTITY_REGISTRATIONS_FULL"),
            RegistryError::CardSignature { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "AGENT_CARD_SIGNATURE_INVALID"),
            RegistryError::CardInvalid { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "AGENT_CARD_INVALID"),
            RegistryError::PathTaken { .. } => (StatusCode::CONFLICT, "AGENT_PATH_TAKEN"),
            RegistryError::CardMismatch { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "AGENT_CARD_MISMATCH"),
            RegistryError::LinkNotFound(_) => (StatusCode::NOT_FOUND, "LINK_NOT_FOUND"),
            RegistryError::LinkExists { .. } => (StatusCode::CONFLICT, "LINK_EXISTS"),
            RegistryError::LinkSelf(_) => (StatusCode::BAD_REQUEST, "LINK_SELF"),
            RegistryError::InvalidLink(_) => (StatusCode::BAD_REQUEST, "LINK_INVALID"),
            RegistryError::LinksFull(_) => (StatusCode::CONFLICT, "LINKS_FULL"),
            RegistryError::SubscribersFull(_) => (StatusCode::SERVICE_UNAVAILABLE, "EVENT_SUBSCRIBERS_FULL"),
            RegistryError::TenantSubscribersFull(_) => (StatusCode::TOO_MANY_REQUESTS, "EVENT_SUBSCRIBERS_TENANT_FULL"),
            RegistryError::LinkDisabled(_) => (StatusCode::CONFLICT, "LINK_DISABLED"),
            RegistryError::SenderForbidden(_) => (StatusCode::FORBIDDEN, "LINK_SENDER_FORBIDDEN"),
            RegistryError::TenantForbidden(_) => (StatusCode::FORBIDDEN, "TENANT_FORBIDDEN"),
            RegistryError::InvalidTenant(_) => (StatusCode::BAD_REQUEST, "TENANT_INVALID"),
            RegistryError::NameTaken(_) => (StatusCode::CONFLICT, "NAME_TAKEN"),
            RegistryError::NameForbidden { .. } => (StatusCode::FORBIDDEN, "NAME_FORBIDDEN"),
            RegistryError::InvalidQuery(_) => (StatusCode::BAD_REQUEST, "QUERY_INVALID"),
            RegistryError::NoRoute => (StatusCode::NOT_FOUND, "NO_AGENT_FOR_REQUEST"),
            RegistryError::Storage(_) => (StatusCode::SERVICE_UNAVAILABLE, "STORAGE_UNAVAILABLE"),
            RegistryError::Bind { .. } | RegistryError::Startup(_) | RegistryError::Encode(_) => {
                (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR")
            }
        };
        match &error {
            _ if status.is_server_error() => tracing::error!(%error, "registry request failed"),
            RegistryError::CardUnreachable { url, reason }
            | RegistryError::AddressRefused { url, reason }
            | RegistryError::CardInvalid { url, reason, .. }
            | RegistryError::CardSignature { url, reason } => {
                tracing::warn!(%url, %reason, "registration refused");
            }
            RegistryError::CardMismatch { url, expected, found } => {
                tracing::warn!(%url, %expected, %found, "registration refused: the card names another agent");
            }
            _ => {}
        }
        ErrorResponse::new(status, code, error.to_string())
    }
}

impl IntoResponse for RegistryError {
    fn into_response(self) -> Response {
        ErrorResponse::from(self).into_response()
    }
}
