//! What every mesh HTTP server shares: JSON errors for every failure (malformed or oversize
//! bodies, wrong content type, unknown routes, panics, timeouts), request ids, limits, and
//! serving with graceful shutdown on a listener the caller bound (so tests bind port 0).

use std::any::Any;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody as _};
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{HeaderName, Method, StatusCode, Version, header};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use mesh_protocol::error::ErrorBody;
use serde::de::DeserializeOwned;
use tokio::net::TcpListener;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

use crate::auth::AccessControl;
use crate::error::ErrorResponse;
use crate::hosts::CheckHost;
pub use crate::limits::{
    CONCURRENCY_MAX_DEFAULT, RATE_LIMIT_BURST_DEFAULT, RATE_LIMIT_PER_S_DEFAULT, RETRY_AFTER_S, RateLimitKey,
    rate_limit_key,
};
use crate::limits::{LimitRate, PrintableHeaders, ShedLoad, TenantRateLimit};
use crate::metrics::ServiceMetrics;
pub use crate::metrics::{TrackRequests, Tracked};
use crate::middleware::{Middleware, MiddlewareLayer, Refusal, layer};
pub use crate::serve::{CONNECTIONS_MAX_DEFAULT, HEADER_READ_TIMEOUT_MS_DEFAULT, IDLE_TIMEOUT_MS_DEFAULT, ServeConfig};

/// Default time a request may take before the server answers 504 itself.
pub const REQUEST_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Default largest accepted request body.
pub const BODY_LIMIT_BYTES_DEFAULT: usize = 1024 * 1024;

/// Default time shutdown waits for open requests and streams before it closes them.
pub const SHUTDOWN_DRAIN_MS_DEFAULT: u64 = 10_000;

/// Default time a stopping server keeps accepting requests while it reports itself not ready.
/// None on a developer's machine, where Ctrl-C should stop at once; a deployment behind a load
/// balancer sets it to the time the balancer takes to notice (see `deploy/`).
pub const SHUTDOWN_UNREADY_MS_DEFAULT: u64 = 0;

/// Header carrying the request id, set when the caller did not send one, echoed on the answer.
pub const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// Limits applied to every request of a server, and who may send them.
#[derive(Debug, Clone)]
pub struct HttpLimits {
    pub request_timeout: Duration,
    pub body_limit_bytes: usize,
    /// Requests handled at once; more are answered `503` at once (load shedding).
    pub concurrency_max: usize,
    /// Requests per second per tenant (0: no rate limit), and the burst above it.
    pub rate_limit_per_s: u32,
    pub rate_limit_burst: u32,
    /// Authentication of every request ([`crate::auth`]); open by default.
    pub access: AccessControl,
    /// Host names an open server answers to besides loopback ones ([`ServeConfig::allowed_hosts`]).
    pub allowed_hosts: Vec<String>,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_millis(REQUEST_TIMEOUT_MS_DEFAULT),
            body_limit_bytes: BODY_LIMIT_BYTES_DEFAULT,
            concurrency_max: CONCURRENCY_MAX_DEFAULT,
            rate_limit_per_s: RATE_LIMIT_PER_S_DEFAULT,
            rate_limit_burst: RATE_LIMIT_BURST_DEFAULT,
            access: AccessControl::open(),
            allowed_hosts: Vec::new(),
        }
    }
}

/// `axum::Json`, but every rejection answers with the mesh error body and the fitting status:
/// 400 malformed JSON, 415 missing JSON content type, 413 oversize body, 422 wrong shape.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ErrorResponse;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(request, state).await {
            Ok(Json(value)) => Ok(Self(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

/// `axum::extract::Path`, answering a bad path parameter (e.g. invalid percent-encoding) with the
/// mesh error body instead of axum's plain-text 400.
#[derive(Debug, Clone, Copy, Default)]
pub struct PathParam<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for PathParam<T> {
    type Rejection = ErrorResponse;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(Self(value)),
            Err(rejection) => {
                Err(ErrorResponse::new(rejection.status(), "REQUEST_INVALID_PATH", rejection.body_text()))
            }
        }
    }
}

/// `axum::extract::Query`, answering a bad query string with the mesh error body.
#[derive(Debug, Clone, Copy, Default)]
pub struct QueryParams<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ErrorResponse;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(Self(value)),
            Err(rejection) => {
                Err(ErrorResponse::new(rejection.status(), "REQUEST_INVALID_QUERY", rejection.body_text()))
            }
        }
    }
}

fn json_rejection(rejection: JsonRejection) -> ErrorResponse {
    let code = match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => "REQUEST_BODY_TOO_LARGE",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "REQUEST_UNSUPPORTED_MEDIA_TYPE",
        StatusCode::UNPROCESSABLE_ENTITY => "REQUEST_INVALID_BODY",
        _ => "REQUEST_MALFORMED_JSON",
    };
    ErrorResponse::new(rejection.status(), code, rejection.body_text())
}

/// Adds the shared behaviour to a server's routes: JSON 404/405 fallbacks, the body limit, a
/// request timeout answering 504 with a body, panics turned into 500 with a body, request ids
/// and request tracing, header values with control characters refused before anything logs
/// them, load shedding beyond the concurrency limit (503), authentication, and a per-tenant
/// rate limit (429) keyed by the authenticated tenant; a gRPC call any of them refuses gets the
/// refusal as a gRPC status.
pub fn with_common_layers(router: Router, limits: HttpLimits) -> Router {
    let rate_limit = TenantRateLimit::new(limits.rate_limit_per_s, limits.rate_limit_burst);
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.concurrency_max.max(1)));
    // Only an open server needs the Host check: see crate::hosts.
    let host_check = (!limits.access.enabled()).then(|| layer(CheckHost::new(&limits.allowed_hosts)));
    router
        .fallback(route_not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(
            ServiceBuilder::new()
                .layer(layer(CloseAfterUnreadBody))
                .layer(layer(PrintableHeaders))
                .option_layer(host_check)
                .layer(SetRequestIdLayer::new(REQUEST_ID_HEADER, MakeRequestUuid))
                // Shed before tracing and authenticating: under overload every refusal must cost
                // next to nothing, and a log line (an error, for a 503) per shed request would
                // turn the overload into a logging one.
                .layer(layer(ShedLoad(permits)))
                .layer(TraceLayer::new_for_http())
                .layer(PropagateRequestIdLayer::new(REQUEST_ID_HEADER))
                .layer(layer(JsonErrors))
                // Rate limited after authentication, by the tenant the credential gives.
                .layer(CatchPanicLayer::custom(panic_response))
                .layer(layer(EnforceTimeout(limits.request_timeout)))
                .layer(layer(crate::auth::Authenticate(limits.access)))
                .option_layer(rate_limit.map(|limit| layer(LimitRate(limit))))
                .layer(DefaultBodyLimit::max(limits.body_limit_bytes)),
        )
        // Outermost: whatever refuses a gRPC call on the way in answers it as gRPC.
        .layer(layer(crate::grpc_refusals::GrpcRefusals))
}

/// Counts the requests of the routes it wraps in `metrics` (served, errors, in flight), for
/// routes outside an agent's task routes (which count theirs already).
pub fn track_requests(metrics: Arc<ServiceMetrics>) -> MiddlewareLayer<TrackRequests> {
    layer(TrackRequests(metrics))
}

/// `GET /health` answering the status and counters of `metrics` (503 when unhealthy), with
/// `GET /health/live` and `GET /health/ready` for Kubernetes probes.
pub fn health_route(metrics: Arc<ServiceMetrics>) -> Router {
    crate::observe::health_routes(metrics)
}

async fn route_not_found(request: Request) -> ErrorResponse {
    no_route(request.method(), request.uri().path())
}

/// The 404 of a path no route serves, also for routes that match only some of the paths their
/// pattern covers (`/tasks/{id}:cancel` but not `/tasks/{anything}` on POST).
pub fn no_route(method: &Method, path: &str) -> ErrorResponse {
    ErrorResponse::new(StatusCode::NOT_FOUND, "ROUTE_NOT_FOUND", format!("no route for {method} {path}"))
}

async fn method_not_allowed(request: Request) -> ErrorResponse {
    ErrorResponse::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "METHOD_NOT_ALLOWED",
        format!("{} is not allowed on {}", request.method(), request.uri().path()),
    )
}

/// Closes an HTTP/1 connection whose request body was not read to its end.
///
/// A refusal (an oversize body, an overload, a bad credential) or a handler that needs no body
/// answers without reading it, and hyper then closes the connection, because the rest of the
/// body would be read as the next request. Whether the answer's head says so depends on whether
/// the body's last bytes had arrived when hyper wrote it, so a client could put the connection
/// back in its pool and send its next request into a socket being closed ("connection closed
/// before message completed", "Server disconnected without sending a response"). Saying
/// `Connection: close` whenever the body was not read to its end removes the race.
#[derive(Debug, Clone, Copy)]
struct CloseAfterUnreadBody;

impl Middleware for CloseAfterUnreadBody {
    /// Set once an HTTP/1 request's body was read to its end; `None` for a request without one.
    type Pass = Option<Arc<AtomicBool>>;

    fn before(&self, request: &mut Request) -> Result<Self::Pass, Refusal> {
        if request.version() >= Version::HTTP_2 || request.body().is_end_stream() {
            return Ok(None);
        }
        let read = Arc::new(AtomicBool::new(false));
        let body = std::mem::take(request.body_mut());
        *request.body_mut() = Body::new(ReadToEnd { body, read: read.clone() });
        Ok(Some(read))
    }

    async fn after<F>(read: Self::Pass, answer: F) -> Response
    where
        F: Future<Output = Response> + Send + 'static,
    {
        let mut response = answer.await;
        if read.is_some_and(|read| !read.load(Ordering::Acquire)) {
            response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
        }
        response
    }
}

/// A request body that says when it was read to its end.
struct ReadToEnd {
    body: Body,
    read: Arc<AtomicBool>,
}

impl http_body::Body for ReadToEnd {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let polled = std::pin::Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, std::task::Poll::Ready(None)) || self.body.is_end_stream() {
            self.read.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Largest error body [`JsonErrors`] rewrites; mesh error bodies are far smaller.
const ERROR_BODY_BYTES_MAX: usize = 64 * 1024;
/// Longest text of a plain-text refusal kept in the mesh error body that replaces it.
const PLAIN_ERROR_TEXT_CHARS_MAX: usize = 512;

/// Makes every error answer a mesh JSON error carrying the request id, whichever layer produced
/// it: the request id goes into mesh error bodies that lack one (rejections, fallbacks,
/// timeouts, panics), so a user can quote it from the body alone; and a refusal that left in
/// plain text or with no body (a framework's rejection: an oversize body, a bad path, a
/// WebSocket request without its upgrade headers) gets the mesh error body, its text kept as
/// the message. Other JSON error bodies (a binding's own error shape) pass unchanged.
#[derive(Debug, Clone, Copy)]
struct JsonErrors;

impl Middleware for JsonErrors {
    type Pass = Option<String>;

    fn before(&self, request: &mut Request) -> Result<Self::Pass, Refusal> {
        Ok(request.headers().get(REQUEST_ID_HEADER).and_then(|v| v.to_str().ok()).map(str::to_owned))
    }

    async fn after<F>(request_id: Self::Pass, answer: F) -> Response
    where
        F: Future<Output = Response> + Send + 'static,
    {
        let response = answer.await;
        if !(response.status().is_client_error() || response.status().is_server_error()) {
            return response;
        }
        let is_json = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/") && v.contains("json"));
        if is_json && request_id.is_none() {
            return response;
        }
        let (mut parts, body) = response.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, ERROR_BODY_BYTES_MAX).await else {
            return ErrorResponse::new(parts.status, "INTERNAL_ERROR", "the error answer could not be read")
                .with_request_id(request_id)
                .into_response();
        };
        let error = match serde_json::from_slice::<ErrorBody>(&bytes) {
            Ok(mut error) if is_json => {
                error.request_id = error.request_id.or(request_id);
                error
            }
            _ if is_json => return Response::from_parts(parts, Body::from(bytes)),
            _ => plain_refusal(parts.status, &bytes).with_request_id(request_id).body,
        };
        parts.headers.remove(header::CONTENT_LENGTH);
        parts.headers.insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/json"));
        let body = serde_json::to_vec(&error).map(Bytes::from).unwrap_or(bytes);
        Response::from_parts(parts, Body::from(body))
    }
}

/// The mesh error of a refusal with status `status` that came as plain text `text` (or none).
fn plain_refusal(status: StatusCode, text: &[u8]) -> ErrorResponse {
    let code = match status {
        StatusCode::BAD_REQUEST => "REQUEST_INVALID",
        StatusCode::NOT_FOUND => "ROUTE_NOT_FOUND",
        StatusCode::METHOD_NOT_ALLOWED => "METHOD_NOT_ALLOWED",
        StatusCode::PAYLOAD_TOO_LARGE => "REQUEST_BODY_TOO_LARGE",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "REQUEST_UNSUPPORTED_MEDIA_TYPE",
        StatusCode::UPGRADE_REQUIRED => "REQUEST_UPGRADE_REQUIRED",
        status if status.is_server_error() => "INTERNAL_ERROR",
        _ => "REQUEST_REFUSED",
    };
    let text: String = String::from_utf8_lossy(text).trim().chars().take(PLAIN_ERROR_TEXT_CHARS_MAX).collect();
    let message = if text.is_empty() { status.canonical_reason().unwrap_or("refused").to_owned() } else { text };
    ErrorResponse::new(status, code, message)
}

/// Answers `504` with a body when a request takes longer than the server allows.
#[derive(Debug, Clone, Copy)]
struct EnforceTimeout(Duration);

impl Middleware for EnforceTimeout {
    type Pass = Duration;

    fn before(&self, _: &mut Request) -> Result<Duration, Refusal> {
        Ok(self.0)
    }

    async fn after<F>(timeout: Duration, answer: F) -> Response
    where
        F: Future<Output = Response> + Send + 'static,
    {
        match tokio::time::timeout(timeout, answer).await {
            Ok(response) => response,
            Err(_) => ErrorResponse::new(
                StatusCode::GATEWAY_TIMEOUT,
                "REQUEST_TIMEOUT",
                format!("the request did not complete within {} ms", timeout.as_millis()),
            )
            .into_response(),
        }
    }
}

fn panic_response(panic: Box<dyn Any + Send + 'static>) -> Response {
    let detail = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("unknown panic");
    tracing::error!(panic = detail, "request handler panicked");
    ErrorResponse::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "INTERNAL_ERROR",
        "the server failed while handling the request",
    )
    .into_response()
}

/// The URL a server bound at `local` is reached at: a wildcard bind address is not a
/// destination, so it is advertised as loopback.
pub fn reachable_url(local: SocketAddr) -> String {
    let ip = local.ip();
    let host = if ip.is_unspecified() {
        if ip.is_ipv4() { "127.0.0.1".to_owned() } else { "[::1]".to_owned() }
    } else if ip.is_ipv6() {
        format!("[{ip}]")
    } else {
        ip.to_string()
    };
    format!("http://{host}:{}", local.port())
}

/// Serves `router` on `listener` until `shutdown` resolves, then lets in-flight requests finish
/// for at most `drain`; connections are timed and capped as `config` says (see [`crate::serve`]).
pub async fn serve_draining(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    drain: Duration,
    config: &ServeConfig,
) -> std::io::Result<()> {
    crate::serve::serve_connections(listener, router, shutdown, drain, config).await
}

/// The first phase of a graceful stop, once `shutdown` resolves: the service turns not ready
/// (`/health` and `/health/ready` answer 503, so readiness probes, load balancers and the
/// registry's poller stop sending it work), `leave` runs (an agent deregisters), and the server
/// goes on accepting requests for `unready`, so callers that have not noticed yet are still
/// answered. Resolves when the server should stop listening: given to [`serve_draining`] as its
/// shutdown, which then lets the requests in flight finish.
pub async fn turn_unready(
    shutdown: impl Future<Output = ()>,
    metrics: &ServiceMetrics,
    unready: Duration,
    leave: impl Future<Output = ()>,
) {
    shutdown.await;
    metrics.start_draining();
    tracing::info!(
        unready_ms = unready.as_millis(),
        "not ready: still accepting requests until the unready time is over"
    );
    tokio::join!(leave, tokio::time::sleep(unready));
}

/// Resolves on Ctrl-C or SIGTERM, the signals an operator or an orchestrator sends.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutdown signal received; finishing in-flight requests");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcard_addresses_are_advertised_as_loopback() {
        assert_eq!(reachable_url("0.0.0.0:8002".parse().unwrap()), "http://127.0.0.1:8002");
        assert_eq!(reachable_url("[::]:8002".parse().unwrap()), "http://[::1]:8002");
        assert_eq!(reachable_url("10.1.2.3:80".parse().unwrap()), "http://10.1.2.3:80");
    }

    /// The answer of the common layers around two routes to `body`, sent in frames of at most
    /// 16 bytes (as a body arrives in pieces over a connection).
    async fn answer_to(version: Version, path: &str, body: &'static str) -> Response {
        use tower::ServiceExt;
        let limits = HttpLimits { body_limit_bytes: 16, ..HttpLimits::default() };
        let router = Router::new()
            .route("/echo", axum::routing::post(|body: Bytes| async move { body }))
            .route("/ignore", axum::routing::post(|| async { "ignored" }));
        let frames: Vec<Result<Bytes, std::io::Error>> =
            body.as_bytes().chunks(16).map(|chunk| Ok(Bytes::from_static(chunk))).collect();
        let request = axum::http::Request::post(path)
            .version(version)
            .header(header::HOST, "127.0.0.1")
            .header(header::CONTENT_LENGTH, body.len())
            .body(if body.is_empty() { Body::empty() } else { Body::from_stream(futures::stream::iter(frames)) })
            .unwrap();
        with_common_layers(router, limits).oneshot(request).await.unwrap()
    }

    fn closes(response: &Response) -> bool {
        response.headers().get(header::CONNECTION).is_some_and(|v| v == "close")
    }

    #[tokio::test]
    async fn an_http1_body_left_unread_closes_the_connection_and_one_read_keeps_it() {
        let refused = answer_to(Version::HTTP_11, "/echo", "a body longer than sixteen bytes").await;
        assert_eq!(refused.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert!(closes(&refused));
        let ignored = answer_to(Version::HTTP_11, "/ignore", "short").await;
        assert_eq!(ignored.status(), StatusCode::OK);
        assert!(closes(&ignored));
        let missing = answer_to(Version::HTTP_11, "/nowhere", "short").await;
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
        assert!(closes(&missing));
        let read = answer_to(Version::HTTP_11, "/echo", "short").await;
        assert_eq!(read.status(), StatusCode::OK);
        assert!(!closes(&read));
        let empty = answer_to(Version::HTTP_11, "/ignore", "").await;
        assert!(!closes(&empty));
        // HTTP/2 has no `Connection` header: a stream left unread leaves the connection alone.
        let refused = answer_to(Version::HTTP_2, "/echo", "a body longer than sixteen bytes").await;
        assert_eq!(refused.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert!(!closes(&refused));
    }
}
