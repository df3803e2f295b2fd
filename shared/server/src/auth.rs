//! The trust layer of every mesh server (the registry's too): who sent a request, and whether
//! the route lets them in.
//!
//! [`Authenticate`] runs on every request, outside the routes: with authentication configured it
//! turns the request's credential into a [`Caller`] (a request extension), and refuses a request
//! without one `401` unless its route is public (health, card, metrics). Every route is thus
//! closed unless declared public, so a route added without a policy is not open by mistake.
//! [`require`] then limits a group of routes to roles (`403` otherwise). With no credentials
//! configured the service is open: every caller is [`Caller::Open`], as on a developer's loopback.
//!
//! Refusals carry the mesh error body and, on `401`, `WWW-Authenticate`; on the JSON-RPC route
//! they are JSON-RPC errors (with the request's id) under the same HTTP status.

use std::sync::Arc;

use axum::Json;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mesh_auth::{AUTH_REALM, AuthConfig, AuthError, Authenticator, Caller, Role};
use mesh_protocol::jsonrpc::{ErrorObject, Id, Response as RpcResponse};
use serde_json::Value;

use crate::error::ErrorResponse;
use crate::links::AuthenticatedAgent;
use crate::middleware::{Middleware, Refusal, layer};

/// JSON-RPC code of a request without valid credentials (HTTP 401); in JSON-RPC's server-error
/// range, outside the A2A catalogue (-32001..-32009), beside `LINK_DENIED` (-32040).
pub const AUTH_REQUIRED_JSONRPC_CODE: i64 = -32041;
/// JSON-RPC code of a request whose credentials lack the role (HTTP 403).
pub const AUTH_FORBIDDEN_JSONRPC_CODE: i64 = -32042;
/// Roles that may send and follow tasks.
pub const TASK_ROLES: &[Role] = &[Role::User, Role::Agent, Role::Admin];
/// Roles that may administer (links, documents, other agents' registrations).
pub const ADMIN_ROLES: &[Role] = &[Role::Admin];
/// Roles of agents acting as themselves (registration, call reports, link messages).
pub const AGENT_ROLES: &[Role] = &[Role::Agent, Role::Admin];
/// Any authenticated caller (reads of the directory and the graph).
pub const ANY_ROLE: &[Role] = &[Role::User, Role::Agent, Role::Admin];

/// Largest JSON-RPC body read to echo its request id in a refusal; larger ones are answered `id: null`.
const REFUSED_RPC_BODY_BYTES_MAX: usize = 64 * 1024;
/// Paths every service serves to anyone: probes, the card, metrics.
const PUBLIC_PATHS: &[&str] =
    &["/health", "/health/live", "/health/ready", "/.well-known/agent-card.json", "/agent.json", "/metrics"];

/// How a server authenticates: its verifier (none: open) and the paths it serves to anyone.
#[derive(Debug, Clone)]
pub struct AccessControl {
    authenticator: Option<Arc<Authenticator>>,
    public_paths: Arc<Vec<String>>,
    public_prefixes: Arc<Vec<String>>,
}

impl Default for AccessControl {
    fn default() -> Self {
        Self::open()
    }
}

impl AccessControl {
    /// No authentication: every caller is trusted.
    pub fn open() -> Self {
        Self {
            authenticator: None,
            public_paths: Arc::new(PUBLIC_PATHS.iter().map(|p| (*p).to_owned()).collect()),
            public_prefixes: Arc::default(),
        }
    }

    /// The access control `config` describes (open when it configures no credentials).
    pub fn from_config(config: &AuthConfig) -> Result<Self, AuthError> {
        Ok(Self { authenticator: Authenticator::from_config(config)?.map(Arc::new), ..Self::open() })
    }

    /// Also serves `paths` (exact) and everything under `prefixes` to anyone.
    pub fn with_public(mut self, paths: &[&str], prefixes: &[&str]) -> Self {
        let mut all = (*self.public_paths).clone();
        all.extend(paths.iter().map(|p| (*p).to_owned()));
        self.public_paths = Arc::new(all);
        let mut all = (*self.public_prefixes).clone();
        all.extend(prefixes.iter().map(|p| (*p).to_owned()));
        self.public_prefixes = Arc::new(all);
        self
    }

    /// Whether callers must authenticate.
    pub fn enabled(&self) -> bool {
        self.authenticator.is_some()
    }

    fn is_public(&self, path: &str) -> bool {
        self.public_paths.iter().any(|p| p == path) || self.public_prefixes.iter().any(|p| path.starts_with(p))
    }
}

/// Authenticates every request (see the module docs).
#[derive(Debug, Clone)]
pub struct Authenticate(pub AccessControl);

impl Middleware for Authenticate {
    type Pass = ();

    fn before(&self, request: &mut Request) -> Result<(), Refusal> {
        let access = &self.0;
        let caller = match &access.authenticator {
            None => Caller::Open,
            Some(authenticator) => match authenticator.authenticate(request.headers()) {
                Ok(Some(principal)) => Caller::Authenticated(principal),
                // Probes and cards are read by anyone; bad credentials on them do not matter.
                Ok(None) | Err(_) if access.is_public(request.uri().path()) => Caller::Anonymous,
                Ok(None) => return Err(refuse(request, AuthError::Missing)),
                Err(error) => {
                    tracing::info!(path = %request.uri().path(), %error, "credentials refused");
                    return Err(refuse(request, error));
                }
            },
        };
        if let Caller::Authenticated(principal) = &caller
            && principal.has(Role::Agent)
        {
            // The link check trusts the authenticated agent over the call chain it writes.
            request.extensions_mut().insert(AuthenticatedAgent(principal.subject.clone()));
        }
        request.extensions_mut().insert(caller);
        Ok(())
    }
}

/// Limits `routes` to callers holding one of `roles`.
pub fn require<S: Clone + Send + Sync + 'static>(routes: axum::Router<S>, roles: &'static [Role]) -> axum::Router<S> {
    routes.route_layer(layer(RequireRoles(roles)))
}

/// Lets in callers holding one of its roles.
#[derive(Debug, Clone, Copy)]
struct RequireRoles(&'static [Role]);

impl Middleware for RequireRoles {
    type Pass = ();

    fn before(&self, request: &mut Request) -> Result<(), Refusal> {
        let roles = self.0;
        match caller_of(request) {
            caller if caller.holds_any(roles) => Ok(()),
            Caller::Anonymous => Err(refuse(request, AuthError::Missing)),
            _ => {
                let names: Vec<&str> = roles.iter().map(|r| r.as_str()).collect();
                Err(refuse(request, AuthError::Forbidden(names.join(", "))))
            }
        }
    }
}

/// The caller the trust layer put on the request; a request that did not pass it (a router
/// served without [`crate::http::with_common_layers`]) is anonymous, so it is refused.
pub fn caller_of(request: &Request) -> Caller {
    caller_in(request.extensions())
}

fn caller_in(extensions: &axum::http::Extensions) -> Caller {
    extensions.get::<Caller>().cloned().unwrap_or(Caller::Anonymous)
}

/// A handler's argument for [`caller_of`] its request.
#[derive(Debug, Clone)]
pub struct RequestCaller(pub Caller);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for RequestCaller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut axum::http::request::Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(caller_in(&parts.extensions)))
    }
}

/// The mesh error answer for an authentication failure: status, code and message.
pub fn auth_error_response(error: &AuthError) -> ErrorResponse {
    let (status, code) = match error {
        AuthError::Missing => (StatusCode::UNAUTHORIZED, "AUTH_REQUIRED"),
        AuthError::Invalid(_) => (StatusCode::UNAUTHORIZED, "AUTH_INVALID"),
        AuthError::Forbidden(_) => (StatusCode::FORBIDDEN, "AUTH_FORBIDDEN"),
        AuthError::TenantForbidden(_) => (StatusCode::FORBIDDEN, "TENANT_FORBIDDEN"),
        AuthError::CardUnsigned => (StatusCode::UNPROCESSABLE_ENTITY, "CARD_UNSIGNED"),
        AuthError::CardSignatureInvalid(_) => (StatusCode::UNPROCESSABLE_ENTITY, "CARD_SIGNATURE_INVALID"),
        AuthError::Config(_) | AuthError::Exposed(_) => (StatusCode::INTERNAL_SERVER_ERROR, "AUTH_MISCONFIGURED"),
    };
    ErrorResponse::new(status, code, error.to_string())
}

/// The refusal of `request` for `error` (the request is taken: it goes no further); on the
/// JSON-RPC route it reads the request's id first.
fn refuse(request: &mut Request, error: AuthError) -> Refusal {
    let request = std::mem::take(request);
    Box::pin(async move {
        let jsonrpc_id = match is_jsonrpc_route(&request) {
            true => Some(jsonrpc_id_of(request).await),
            false => None,
        };
        credential_refusal(&error, jsonrpc_id)
    })
}

/// The answer to a request whose credentials do not let it in, as the trust layer gives it: on
/// the JSON-RPC route (`jsonrpc_id`, the request's id) a JSON-RPC error, elsewhere the mesh error
/// body; `401` with its `WWW-Authenticate` challenge, or `403`. The A2A bindings answer a caller
/// refused the extended agent card with it too, so a client sees one refusal whichever refuses.
pub fn credential_refusal(error: &AuthError, jsonrpc_id: Option<Id>) -> Response {
    let answer = auth_error_response(error);
    let jsonrpc_code = if answer.status == StatusCode::UNAUTHORIZED {
        AUTH_REQUIRED_JSONRPC_CODE
    } else {
        AUTH_FORBIDDEN_JSONRPC_CODE
    };
    let mut response = match jsonrpc_id {
        Some(id) => jsonrpc_refusal(id, answer, jsonrpc_code),
        None => answer.into_response(),
    };
    if response.status() == StatusCode::UNAUTHORIZED {
        let challenge = match error {
            AuthError::Invalid(_) => format!("Bearer realm=\"{AUTH_REALM}\", error=\"invalid_token\""),
            _ => format!("Bearer realm=\"{AUTH_REALM}\""),
        };
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
        }
    }
    response
}

/// A refusal in the request's binding: a JSON-RPC error on the JSON-RPC route (`POST /`, its
/// request id echoed), the mesh error body elsewhere; the HTTP status is `error`'s either way.
pub async fn refusal(request: Request, error: ErrorResponse, jsonrpc_code: i64) -> Response {
    if !is_jsonrpc_route(&request) {
        return error.into_response();
    }
    jsonrpc_refusal(jsonrpc_id_of(request).await, error, jsonrpc_code)
}

fn is_jsonrpc_route(request: &Request) -> bool {
    request.method() == Method::POST && request.uri().path() == "/"
}

/// The id of the JSON-RPC request in `request`'s body, or null when it cannot be read.
async fn jsonrpc_id_of(request: Request) -> Id {
    match axum::body::to_bytes(request.into_body(), REFUSED_RPC_BODY_BYTES_MAX).await {
        Ok(bytes) => serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|body| serde_json::from_value::<Id>(body.get("id")?.clone()).ok())
            .unwrap_or(Id::Null),
        Err(_) => Id::Null,
    }
}

/// `error` as the JSON-RPC error `jsonrpc_code` answering request `id`, under `error`'s status.
fn jsonrpc_refusal(id: Id, error: ErrorResponse, jsonrpc_code: i64) -> Response {
    let object = ErrorObject {
        code: jsonrpc_code,
        message: error.body.error_message.clone(),
        data: serde_json::to_value(&error.body).ok(),
    };
    (error.status, Json(RpcResponse::<Value>::error(id, object))).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::{get, post};
    use mesh_auth::{ApiKeyEntry, ApiKeyFile, hash_api_key};
    use tower::ServiceExt;

    const USER_KEY: &str = "mesh_user_key";
    const ADMIN_KEY: &str = "mesh_admin_key";

    fn access() -> AccessControl {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.toml");
        let entry = |key: &str, roles: Vec<Role>| ApiKeyEntry {
            sha256: hash_api_key(key),
            subject: "s".into(),
            tenant: "t".into(),
            roles,
        };
        let file = ApiKeyFile { keys: vec![entry(USER_KEY, vec![Role::User]), entry(ADMIN_KEY, vec![Role::Admin])] };
        std::fs::write(&path, toml::to_string(&file).unwrap()).unwrap();
        let config = AuthConfig { api_keys_file: Some(path), ..AuthConfig::default() };
        AccessControl::from_config(&config).unwrap()
    }

    fn app(access: AccessControl) -> axum::Router {
        let admin = require(axum::Router::new().route("/admin", post(|| async { "done" })), ADMIN_ROLES);
        let tasks = require(axum::Router::new().route("/", post(|| async { "sent" })), TASK_ROLES);
        axum::Router::new()
            .route("/health", get(|| async { "ok" }))
            .route("/open-by-mistake", get(|| async { "data" }))
            .merge(admin)
            .merge(tasks)
            .layer(layer(Authenticate(access)))
    }

    async fn call(app: &axum::Router, method: Method, path: &str, key: Option<&str>) -> (StatusCode, Response) {
        let mut request = Request::builder().method(method).uri(path).header("content-type", "application/json");
        if let Some(key) = key {
            request = request.header("authorization", format!("Bearer {key}"));
        }
        let body = Body::from(r#"{"jsonrpc":"2.0","id":"r1","method":"SendMessage"}"#);
        let response = app.clone().oneshot(request.body(body).unwrap()).await.unwrap();
        (response.status(), response)
    }

    async fn json(response: Response) -> Value {
        serde_json::from_slice(&axum::body::to_bytes(response.into_body(), 1 << 16).await.unwrap()).unwrap()
    }

    #[tokio::test]
    async fn routes_are_closed_unless_public_and_roles_are_checked() {
        let app = app(access());
        assert_eq!(call(&app, Method::GET, "/health", None).await.0, StatusCode::OK);
        assert_eq!(call(&app, Method::GET, "/health", Some("wrong")).await.0, StatusCode::OK);
        let (status, response) = call(&app, Method::GET, "/open-by-mistake", None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "a route without a policy is closed");
        assert_eq!(response.headers()[header::WWW_AUTHENTICATE], "Bearer realm=\"a2a-mesh\"");
        assert_eq!(json(response).await["error_code"], "AUTH_REQUIRED");
        let (status, response) = call(&app, Method::POST, "/admin", Some("mesh_forged")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert!(response.headers()[header::WWW_AUTHENTICATE].to_str().unwrap().contains("invalid_token"));
        let (status, response) = call(&app, Method::POST, "/admin", Some(USER_KEY)).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert_eq!(json(response).await["error_code"], "AUTH_FORBIDDEN");
        assert_eq!(call(&app, Method::POST, "/admin", Some(ADMIN_KEY)).await.0, StatusCode::OK);
        assert_eq!(call(&app, Method::GET, "/open-by-mistake", Some(USER_KEY)).await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn the_json_rpc_route_refuses_with_a_json_rpc_error() {
        let app = app(access());
        let (status, response) = call(&app, Method::POST, "/", None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        let body = json(response).await;
        assert_eq!(body["id"], "r1");
        // The codes are the wire contract (clients and the gateway match on them), not just names.
        assert_eq!(body["error"]["code"], -32041);
        assert_eq!(body["error"]["data"]["error_code"], "AUTH_REQUIRED");
        assert_eq!(call(&app, Method::POST, "/", Some(USER_KEY)).await.0, StatusCode::OK);
        let id: Id = serde_json::from_value(serde_json::json!(3)).unwrap();
        let forbidden = credential_refusal(&AuthError::Forbidden("admin".into()), Some(id));
        assert_eq!(forbidden.status(), StatusCode::FORBIDDEN);
        let body = json(forbidden).await;
        assert_eq!(
            (body["id"].clone(), body["error"]["code"].clone()),
            (serde_json::json!(3), serde_json::json!(-32042))
        );
    }

    /// A JSON-RPC request refused before its route, with `params` padded to `pad_bytes`.
    async fn refused_padded(pad_bytes: usize) -> Value {
        let body = serde_json::json!({"jsonrpc": "2.0", "id": "big", "method": "SendMessage",
                                      "params": {"pad": "x".repeat(pad_bytes)}});
        let request = Request::builder()
            .method(Method::POST)
            .uri("/")
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        let response = app(access()).oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        json(response).await
    }

    #[tokio::test]
    async fn a_refused_json_rpc_request_gets_its_id_back_up_to_the_bytes_read_for_it() {
        assert_eq!(refused_padded(32 * 1024).await["id"], "big");
        // Past the bytes read to find it, the id is unknown: still answered, with a null id.
        assert_eq!(refused_padded(REFUSED_RPC_BODY_BYTES_MAX).await["id"], Value::Null);
    }

    #[tokio::test]
    async fn paths_made_public_are_served_to_anyone_exactly_or_under_their_prefix() {
        let access = access().with_public(&["/exact"], &["/docs/"]);
        let app = axum::Router::new()
            .route("/health", get(|| async { "ok" }))
            .route("/exact", get(|| async { "ok" }))
            .route("/exact/more", get(|| async { "ok" }))
            .route("/docs/page", get(|| async { "ok" }))
            .layer(layer(Authenticate(access)));
        for (path, status) in [
            ("/health", StatusCode::OK),
            ("/exact", StatusCode::OK),
            ("/exact/more", StatusCode::UNAUTHORIZED),
            ("/docs/page", StatusCode::OK),
        ] {
            assert_eq!(call(&app, Method::GET, path, None).await.0, status, "{path}");
        }
    }

    #[tokio::test]
    async fn an_open_service_lets_everyone_in() {
        let app = app(AccessControl::open());
        assert_eq!(call(&app, Method::POST, "/admin", None).await.0, StatusCode::OK);
        assert!(!AccessControl::open().enabled() && access().enabled());
    }
}
