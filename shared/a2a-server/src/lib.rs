//! The A2A protocol surface of every agent: JSON-RPC 2.0 at `POST /` and the HTTP+JSON binding,
//! each in A2A 1.0 and 0.3, with Server-Sent Events for streams, all over one [`TaskEngine`].
//!
//! Versions follow the spec: the `A2A-Version` header names the client's version and a request
//! without it is a 0.3 request. JSON-RPC serves 1.0 methods (`SendMessage`, ...) to 1.0 clients
//! and 0.3 methods (`message/send`, ...) to 0.3 clients; HTTP+JSON serves 1.0 at the root and
//! 0.3 under `/v1/`. A request in the other version's form is answered `VersionNotSupported`
//! (-32009), as the official SDK does.

pub mod card;
pub mod engine;
mod grpc;
mod jsonrpc;
mod methods;
pub mod push;
mod push_configs;
mod rest;
mod surface;

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::request::Parts;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use mesh_auth::Caller;
use mesh_client::CallScope;
use mesh_protocol::a2a::v1::{AgentCard, AgentInterface, SendMessageRequest, SendMessageResponse, StreamResponse};
use mesh_protocol::a2a::{PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0, VERSION_HEADER, binding, v03};
use mesh_protocol::call::CallContext;
use mesh_protocol::jsonrpc::{A2aErrorCode, version_not_supported_message};
use mesh_tasks::TaskError;
use serde::Serialize;

pub use card::{CardDocument, extended_card, sign_card};
pub use engine::{
    Answer, EngineSettings, Follow, LIVE_TASK_TTL_MS_DEFAULT, LIVE_TASKS_MAX_DEFAULT, TASK_ARTIFACT_BYTES_MAX_DEFAULT,
    TASK_SUBSCRIBERS_MAX_DEFAULT, TaskClosed, TaskEngine, TaskEvents, TaskHandler, TaskLimits, TaskUpdate, Turn,
    TurnEvents, answer,
};
pub use push::{PushDelivery, PushSettings};
pub use surface::Surface;

/// Seconds between SSE keep-alive comments, so proxies do not close a quiet stream.
const SSE_KEEP_ALIVE_S: u64 = 15;

/// The protocol version a request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V03,
}

impl Version {
    fn as_str(self) -> &'static str {
        match self {
            Self::V1 => PROTOCOL_VERSION_1_0,
            Self::V03 => PROTOCOL_VERSION_0_3,
        }
    }

    /// The version named by the request's `A2A-Version` header (absent: 0.3); `Err` carries an
    /// unsupported value. `1`, `1.0` and `1.0.x` all mean 1.0.
    fn of(headers: &HeaderMap) -> Result<Self, String> {
        let Some(value) = headers.get(VERSION_HEADER) else {
            return Ok(Self::V03);
        };
        let value = value.to_str().map_err(|_| "(not text)".to_owned())?.trim();
        if value.is_empty() {
            return Ok(Self::V03);
        }
        let mut numbers = value.split('.');
        match (numbers.next(), numbers.next().unwrap_or("0")) {
            (Some("1"), "0") => Ok(Self::V1),
            (Some("0"), "3") => Ok(Self::V03),
            _ => Err(value.to_owned()),
        }
    }

    /// Checks that a request in the form of `expected` came from a client speaking it.
    fn require(headers: &HeaderMap, expected: Self) -> Result<(), Failure> {
        let requested = match Self::of(headers) {
            Ok(version) if version == expected => return Ok(()),
            Ok(version) => version.as_str().to_owned(),
            Err(unsupported) => unsupported,
        };
        Err(Failure::new(
            A2aErrorCode::VersionNotSupported,
            version_not_supported_message(&requested, expected.as_str()),
        ))
    }
}

/// An A2A error answer before it is put in one binding's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Failure {
    code: A2aErrorCode,
    message: String,
}

impl Failure {
    fn new(code: A2aErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into() }
    }

    fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(A2aErrorCode::InvalidParams, message)
    }

    /// The error with the SDK's own words for it: for what this agent does not offer.
    fn standard(code: A2aErrorCode) -> Self {
        Self::new(code, code.default_message())
    }
}

impl From<TaskError> for Failure {
    fn from(error: TaskError) -> Self {
        if let TaskError::Storage(detail) = &error {
            // Storage details are for the operator's log, not for clients. A change the store
            // refused is neither kept nor shown (see the engine): the request may be sent again.
            tracing::error!(%detail, "task storage failed");
            return Self::new(error.code(), "the agent could not store the task; try again");
        }
        let message = match &error {
            // The SDK's exact words, which clients match on.
            TaskError::NotFound(_) | TaskError::NotCancelable { .. } | TaskError::PushNotSupported => {
                error.code().default_message().to_owned()
            }
            _ => error.to_string(),
        };
        Self::new(error.code(), message)
    }
}

/// Checks that the request body is declared JSON (`application/json` or any `+json` type).
fn require_json(headers: &HeaderMap) -> Result<(), Failure> {
    let content_type = headers.get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if mesh_protocol::jsonrpc::is_json_content_type(content_type) {
        return Ok(());
    }
    Err(Failure::new(
        A2aErrorCode::ContentTypeNotSupported,
        format!("content type {content_type:?} is not JSON: send application/json"),
    ))
}

/// A blocking send: the agent's answer as `SendMessage` returns it, its history trimmed as asked.
async fn send_blocking<H: TaskHandler>(
    engine: &TaskEngine<H>,
    tenant: &str,
    request: SendMessageRequest,
    scope: CallScope,
) -> Result<SendMessageResponse, Failure> {
    let configuration = request.configuration.clone().unwrap_or_default();
    let history_length = mesh_tasks::history_length(configuration.history_length)?;
    // Only the answer is shown, unless it is the task as soon as it exists.
    let follow = if configuration.return_immediately { Follow::Events } else { Follow::Answer };
    let events = engine.start(tenant, request, scope, follow).await?;
    Ok(match answer(events, configuration.return_immediately).await? {
        Answer::Message(message) => SendMessageResponse::Message(message),
        Answer::Task(mut task) => {
            mesh_tasks::model::trim_history(&mut task, history_length);
            SendMessageResponse::Task(task)
        }
    })
}

/// A tenant id as the mesh accepts it (letters, digits, `_`, `-`), or `""` for none.
fn tenant(requested: Option<&str>) -> Result<String, Failure> {
    let tenant = requested.unwrap_or_default();
    if tenant.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        Ok(tenant.to_owned())
    } else {
        Err(Failure::invalid_params(format!("tenant {tenant:?} may hold only letters, digits, '_' and '-'")))
    }
}

/// A call that arrived without the kit's admission layer: no chain, no deadline.
pub fn unscoped_call() -> CallScope {
    CallScope::received("", CallContext::default())
}

/// What the layers learned of a request: the call it belongs to, and who sent it.
#[derive(Debug, Clone)]
pub struct Inbound {
    scope: CallScope,
    caller: Caller,
}

impl<S: Send + Sync> FromRequestParts<S> for Inbound {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Infallible> {
        let scope = parts.extensions.get::<CallScope>().cloned().unwrap_or_else(unscoped_call);
        // Without the trust layer in front there is no caller, and tasks are refused below.
        let caller = parts.extensions.get::<Caller>().cloned().unwrap_or(Caller::Anonymous);
        Ok(Self { scope, caller })
    }
}

impl Inbound {
    /// The tenant the request's tasks live in: the one it names (`requested`, checked), as its
    /// credentials allow (a user's own; the forwarded one from an agent; see [`Caller::tenant`]).
    /// A user naming another tenant is refused as `invalid params`, saying nothing of its tasks.
    fn tenant(&self, requested: Option<&str>) -> Result<String, Failure> {
        let requested = tenant(requested)?;
        self.caller_tenant(&requested).map_err(|error| Failure::invalid_params(error.to_string()))
    }

    /// The tenant of a request naming `requested` (checked already), by the caller's credentials.
    pub fn caller_tenant(&self, requested: &str) -> Result<String, mesh_auth::AuthError> {
        self.caller.tenant(requested, self.scope.context().tenant.as_deref())
    }

    pub fn scope(&self) -> CallScope {
        self.scope.clone()
    }
}

/// Where a stream ends: a message stream (`SendStreamingMessage`) when the task is finished or
/// waits for the user; a subscription only when the task is finished, so it follows a task
/// across the user's answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StreamEnd {
    TurnEnd,
    TaskEnd,
}

/// A stream of a turn's (or a subscription's) events that ends after the final one, or with the
/// error that ends it (the store refused a change).
fn until_final(events: TurnEvents, end: StreamEnd) -> impl Stream<Item = Result<StreamResponse, Failure>> + Send {
    futures::stream::unfold((events, false), move |(mut events, done)| async move {
        if done {
            return None;
        }
        let update = events.recv().await?;
        let done = match (&update, end) {
            (Err(_), _) => true,
            (Ok(event), StreamEnd::TurnEnd) => engine::ends_stream(event),
            (Ok(event), StreamEnd::TaskEnd) => engine::ends_task(event),
        };
        Some((update.map_err(Failure::from), (events, done)))
    })
}

/// Server-Sent Events, one JSON document per event.
fn sse<T: Serialize, S: Stream<Item = T> + Send + 'static>(documents: S) -> Response {
    use futures::StreamExt;
    let events = documents.map(|document| {
        let json = serde_json::to_string(&document).unwrap_or_else(|e| {
            tracing::error!(error = %e, "could not serialize a stream event");
            String::new()
        });
        Ok::<_, Infallible>(Event::default().data(json))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(std::time::Duration::from_secs(SSE_KEEP_ALIVE_S)))
        .into_response()
}

/// Fills in how the card reaches the agent: JSON-RPC and HTTP+JSON at `url`, in 1.0 and in 0.3
/// (1.0 first: clients take the first interface of a binding), gRPC (1.0) at `url`'s host and
/// port (gRPC addresses have no path), plus, with `legacy_fields`, the 0.3 top-level fields old
/// clients read. Streaming is on unless the card says it is off (then every binding refuses the
/// streaming methods, see [`Surface`]); push notifications are the agent's configuration's to
/// declare.
pub fn describe_interfaces(card: &mut AgentCard, url: &str, legacy_fields: bool) {
    // Without a trailing slash: clients append paths (`{url}/message:send`) to it.
    let root = url.trim_end_matches('/').to_owned();
    let interface = |binding: &str, version: &str| AgentInterface {
        url: root.clone(),
        protocol_binding: binding.to_owned(),
        tenant: None,
        protocol_version: version.to_owned(),
    };
    let mut interfaces =
        vec![interface(binding::JSONRPC, PROTOCOL_VERSION_1_0), interface(binding::HTTP_JSON, PROTOCOL_VERSION_1_0)];
    if let Some(address) = grpc_address(&root) {
        interfaces.push(AgentInterface { url: address, ..interface(binding::GRPC, PROTOCOL_VERSION_1_0) });
    }
    interfaces.extend([
        interface(binding::JSONRPC, PROTOCOL_VERSION_0_3),
        interface(binding::HTTP_JSON, PROTOCOL_VERSION_0_3),
    ]);
    card.supported_interfaces = interfaces;
    card.capabilities.streaming.get_or_insert(true);
    if !legacy_fields {
        return;
    }
    card.url = Some(root.clone());
    card.preferred_transport = Some(binding::JSONRPC.to_owned());
    card.protocol_version = Some(PROTOCOL_VERSION_0_3.to_owned());
    card.additional_interfaces =
        Some(vec![v03::AgentInterface { transport: binding::HTTP_JSON.to_owned(), url: root }]);
}

/// The gRPC address (`host:port`) of an agent served at `url`, as gRPC clients dial it; none
/// for a URL with a path, which gRPC cannot reach (its paths are the service's).
fn grpc_address(url: &str) -> Option<String> {
    let url = url::Url::parse(url).ok()?;
    if !matches!(url.path(), "" | "/") {
        return None;
    }
    let host = url.host()?;
    Some(format!("{host}:{}", url.port_or_known_default()?))
}

/// Declares on the card how callers authenticate, so that A2A clients (the official SDKs'
/// auth interceptors included) send their credential: a bearer token or an API key in
/// `Authorization: Bearer`, or an API key in `X-API-Key`. The 1.0 shapes always; with the 0.3
/// fields, the 0.3 shapes merged into the same scheme objects, as the SDK serves them.
pub fn describe_security(card: &mut AgentCard, legacy_fields: bool) {
    use serde_json::json;
    let bearer = json!({"httpAuthSecurityScheme": {
        "scheme": "Bearer", "bearerFormat": "JWT",
        "description": "A JWT or an API key of the mesh, as `Authorization: Bearer <credential>`"
    }});
    let api_key = json!({"apiKeySecurityScheme": {
        "location": "header", "name": mesh_auth::API_KEY_HEADER, "description": "An API key of the mesh"
    }});
    let legacy_bearer = json!({"type": "http", "scheme": "bearer", "bearerFormat": "JWT"});
    let legacy_api_key = json!({"type": "apiKey", "in": "header", "name": mesh_auth::API_KEY_HEADER});
    declare_security(
        card,
        legacy_fields,
        [(SECURITY_SCHEME_BEARER, bearer, legacy_bearer), (SECURITY_SCHEME_API_KEY, api_key, legacy_api_key)],
    );
}

/// Declares on the card of an agent without access control the one credential it asks for: the
/// extended card's token, as `Authorization: Bearer` (A2A 1.0 §3.1.11: a client authenticates the
/// extended card's request with a scheme the public card declares). Its tasks stay open.
pub fn describe_extended_card_token(card: &mut AgentCard, legacy_fields: bool) {
    use serde_json::json;
    let bearer = json!({"httpAuthSecurityScheme": {
        "scheme": "Bearer",
        "description": "The token of the authenticated extended agent card, as `Authorization: Bearer <token>`"
    }});
    let legacy_bearer = json!({"type": "http", "scheme": "bearer"});
    declare_security(card, legacy_fields, [(SECURITY_SCHEME_BEARER, bearer, legacy_bearer)]);
}

/// Sets the card's security schemes, `(name, 1.0 shape, 0.3 shape)`, each one alone enough: the
/// 0.3 members merged beside the 1.0 ones in one object with `legacy_fields`.
fn declare_security<const N: usize>(
    card: &mut AgentCard,
    legacy_fields: bool,
    schemes: [(&str, serde_json::Value, serde_json::Value); N],
) {
    use serde_json::{Value, json};
    let names: Vec<&str> = schemes.iter().map(|(name, _, _)| *name).collect();
    let mut declared = serde_json::Map::new();
    for (name, mut v1, legacy) in schemes {
        if let (true, Some(v1), Value::Object(legacy)) = (legacy_fields, v1.as_object_mut(), legacy) {
            v1.extend(legacy);
        }
        declared.insert(name.to_owned(), v1);
    }
    card.security_schemes = Some(declared);
    card.security_requirements = Some(names.iter().map(|name| json!({"schemes": {*name: {"list": []}}})).collect());
    card.security = legacy_fields.then(|| names.iter().map(|name| json!({*name: []})).collect());
}

/// Names of the card's security schemes.
const SECURITY_SCHEME_BEARER: &str = "bearer";
const SECURITY_SCHEME_API_KEY: &str = "apiKey";

/// The A2A routes of an agent over `engine`, serving and refusing as `surface` says.
pub fn a2a_router<H: TaskHandler>(engine: TaskEngine<H>, surface: Arc<Surface>) -> Router {
    jsonrpc::router(engine.clone(), surface.clone())
        .merge(grpc::router(engine.clone(), surface.clone()))
        .merge(rest::router(engine, surface))
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(version: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(version) = version {
            headers.insert(VERSION_HEADER, HeaderValue::from_str(version).unwrap());
        }
        headers
    }

    #[test]
    fn a_missing_version_header_means_0_3() {
        assert_eq!(Version::of(&headers(None)), Ok(Version::V03));
        assert_eq!(Version::of(&headers(Some("1.0"))), Ok(Version::V1));
        assert_eq!(Version::of(&headers(Some("1"))), Ok(Version::V1));
        assert_eq!(Version::of(&headers(Some("1.0.1"))), Ok(Version::V1));
        assert_eq!(Version::of(&headers(Some("0.3"))), Ok(Version::V03));
        assert_eq!(Version::of(&headers(Some("2.0"))), Err("2.0".to_owned()));
    }

    #[test]
    fn the_wrong_version_is_refused_with_the_sdk_message() {
        let failure = Version::require(&headers(None), Version::V1).unwrap_err();
        assert_eq!(failure.code, A2aErrorCode::VersionNotSupported);
        assert_eq!(failure.message, "A2A version '0.3' is not supported by this handler. Expected version '1.0'.");
        assert!(Version::require(&headers(Some("1.0")), Version::V1).is_ok());
    }

    #[test]
    fn tenants_are_checked() {
        assert_eq!(tenant(None), Ok(String::new()));
        assert_eq!(tenant(Some("team_a-1")), Ok("team_a-1".to_owned()));
        assert!(tenant(Some("../etc")).is_err());
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        fn header_bytes(value: &[u8]) -> HeaderMap {
            let mut headers = HeaderMap::new();
            if let Ok(value) = HeaderValue::from_bytes(value) {
                headers.insert(VERSION_HEADER, value);
            }
            headers
        }

        proptest! {
            /// A version renders to a header that reads back as it, with any patch number and
            /// any spaces around it.
            #[test]
            fn a_rendered_version_reads_back(v1 in any::<bool>(), patch in proptest::option::of(any::<u32>()), pad in " {0,2}") {
                let version = if v1 { Version::V1 } else { Version::V03 };
                let value = match patch {
                    Some(patch) => format!("{pad}{}.{patch}{pad}", version.as_str()),
                    None => format!("{pad}{}{pad}", version.as_str()),
                };
                prop_assert_eq!(Version::of(&header_bytes(value.as_bytes())), Ok(version));
            }

            /// Any header value is a supported version or refused quoting the value, never a
            /// panic; a refused version is refused by `require` as `VersionNotSupported`.
            #[test]
            fn any_version_header_is_supported_or_refused_by_value(value in proptest::collection::vec(any::<u8>(), 0..24)) {
                let headers = header_bytes(&value);
                match Version::of(&headers) {
                    Ok(_) => {}
                    Err(refused) => {
                        let text = headers.get(VERSION_HEADER).and_then(|v| v.to_str().ok());
                        prop_assert_eq!(refused.as_str(), text.map_or("(not text)", str::trim));
                        let failure = Version::require(&headers, Version::V1).unwrap_err();
                        prop_assert_eq!(failure.code, A2aErrorCode::VersionNotSupported);
                    }
                }
            }
        }
    }
}
