//! How much a server takes on: header values that are refused before anything reads them, a
//! per-tenant rate limit (`429`), and a bound on the requests handled at once, beyond which
//! requests are shed at once (`503`) rather than queued until they time out. Every refusal is a
//! mesh JSON error with a `Retry-After` where waiting helps.
//!
//! The health and card routes are neither rate limited nor shed: an orchestrator's probes and
//! the registry's health polls must see a loaded server as loaded, not as gone.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use mesh_auth::Caller;
use mesh_protocol::call::TENANT_HEADER;
use mesh_protocol::call::validate_tenant_id;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ErrorResponse;
use crate::http::REQUEST_ID_HEADER;
use crate::middleware::{Middleware, Refusal, refuse_now};

/// Requests handled at once by default; more are shed.
pub const CONCURRENCY_MAX_DEFAULT: usize = 512;
/// Requests per second each tenant may make by default, sustained, and the burst above it.
pub const RATE_LIMIT_PER_S_DEFAULT: u32 = 1_000;
pub const RATE_LIMIT_BURST_DEFAULT: u32 = 2_000;
/// What a shed request is told to wait before trying again.
pub const RETRY_AFTER_S: u64 = 1;
/// Tenants with a rate-limit bucket of their own at once. Beyond that (many tenants at once, or
/// someone inventing tenant names), every tenant shares one overflow bucket until idle buckets
/// are dropped, so the table stays bounded.
const RATE_LIMIT_TENANTS_MAX: usize = 10_000;
/// Requests between two sweeps of idle rate-limit buckets.
const RATE_LIMIT_SWEEP_EVERY_REQUESTS: u64 = 4_096;

/// Why a request was refused before its handler ran: put on the refusal's response, where the
/// observe layer, which knows the service, counts it (`mesh_requests_rejected_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rejection {
    /// The per-tenant rate limit (`429`).
    RateLimited,
    /// The concurrency limit: shed at once (`503`).
    Overloaded,
}

impl Rejection {
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Self::RateLimited => "rate_limited",
            Self::Overloaded => "overloaded",
        }
    }
}

/// Paths that stay reachable whatever the load: liveness and discovery.
const UNLIMITED_PATHS: &[&str] = &["/health", "/.well-known/agent-card.json", "/agent.json"];

/// Headers of the mesh's own call context (and request ids): their values end up in logs and
/// in other requests' headers, so they must be printable ASCII.
fn is_mesh_header(name: &str) -> bool {
    name.starts_with("x-mesh-") || matches!(name, "x-request-id" | "x-correlation-id" | "a2a-version")
}

/// Refuses a request with a control character in any header value (or anything but printable
/// ASCII in the mesh's own headers) with `400`, before any layer reads or logs the value: a
/// newline or escape sequence in a request id would otherwise forge log lines.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PrintableHeaders;

impl Middleware for PrintableHeaders {
    type Pass = ();

    fn before(&self, request: &mut Request) -> Result<(), Refusal> {
        let bad = request.headers().iter().find(|(name, value)| {
            let printable_ascii_only = is_mesh_header(name.as_str());
            value.as_bytes().iter().any(|&b| b < 0x20 || b == 0x7f || (printable_ascii_only && b >= 0x80))
        });
        match bad {
            // The name is safe to show: header names are tokens, which hold no control character.
            Some((name, _)) => Err(refuse_now(ErrorResponse::new(
                StatusCode::BAD_REQUEST,
                "REQUEST_HEADER_INVALID",
                format!("header {name} holds a control character or (in a mesh header) a non-ASCII byte"),
            ))),
            None => Ok(()),
        }
    }
}

/// The key a request is rate limited by: the tenant it acts in. For an authenticated caller
/// that is the tenant its credential allows (a `user`'s own, whatever it names; the tenant an
/// `agent` or `admin` names in `x-mesh-tenant`); on an open service, the tenant the header
/// names; otherwise (no valid tenant named, anonymous callers) one shared default tenant.
pub fn rate_limit_key(request: &Request) -> String {
    let named = request
        .headers()
        .get(TENANT_HEADER)
        .and_then(|value| value.to_str().ok())
        .filter(|tenant| validate_tenant_id(tenant).is_ok())
        .unwrap_or_default();
    match request.extensions().get::<Caller>() {
        Some(caller @ Caller::Authenticated(principal)) => {
            caller.tenant(named, None).unwrap_or_else(|_| principal.tenant.clone())
        }
        Some(Caller::Anonymous) => String::new(),
        Some(Caller::Open) | None => named.to_owned(),
    }
}

/// The per-tenant token buckets of one server.
#[derive(Debug)]
pub struct TenantRateLimit {
    tenants: DefaultKeyedRateLimiter<String>,
    /// Shared by every tenant while the table is full.
    overflow: DefaultDirectRateLimiter,
    requests: AtomicU64,
}

impl TenantRateLimit {
    /// `None` when `per_s` is 0 (no limit).
    pub fn new(per_s: u32, burst: u32) -> Option<Arc<Self>> {
        let per_s = NonZeroU32::new(per_s)?;
        let quota = Quota::per_second(per_s).allow_burst(NonZeroU32::new(burst).unwrap_or(per_s));
        Some(Arc::new(Self {
            tenants: RateLimiter::keyed(quota),
            overflow: RateLimiter::direct(quota),
            requests: AtomicU64::new(0),
        }))
    }

    /// `Err` with the seconds to wait when `key` is over its rate.
    fn check(&self, key: &str) -> Result<(), u64> {
        if self.requests.fetch_add(1, Ordering::Relaxed) % RATE_LIMIT_SWEEP_EVERY_REQUESTS == 0 {
            // Buckets that refilled completely hold nothing worth keeping.
            self.tenants.retain_recent();
        }
        let clock = DefaultClock::default();
        let checked = if self.tenants.len() >= RATE_LIMIT_TENANTS_MAX {
            self.overflow.check()
        } else {
            self.tenants.check_key(&key.to_owned())
        };
        checked.map_err(|not_until| not_until.wait_time_from(clock.now()).as_secs_f64().ceil().max(1.0) as u64)
    }
}

/// Answers `429` with `Retry-After` when the request's tenant is over its rate.
#[derive(Debug, Clone)]
pub(crate) struct LimitRate(pub(crate) Arc<TenantRateLimit>);

impl Middleware for LimitRate {
    type Pass = ();

    fn before(&self, request: &mut Request) -> Result<(), Refusal> {
        if UNLIMITED_PATHS.contains(&request.uri().path()) {
            return Ok(());
        }
        let key = rate_limit_key(request);
        let Err(wait_s) = self.0.check(&key) else { return Ok(()) };
        tracing::debug!(tenant = %key, wait_s, "rate limited");
        let message = match key.as_str() {
            "" => "too many requests; slow down".to_owned(),
            tenant => format!("too many requests for tenant {tenant}; slow down"),
        };
        let mut response =
            with_retry_after(ErrorResponse::new(StatusCode::TOO_MANY_REQUESTS, "RATE_LIMITED", message), wait_s);
        response.extensions_mut().insert(Rejection::RateLimited);
        Err(refuse_now(response))
    }
}

/// Answers `503` with `Retry-After` at once when the server is handling as many requests as it
/// may. The permit is held while the handler runs; a streaming answer's body (SSE) is bounded by
/// the task engine's own caps instead (the pass is the permit).
#[derive(Debug, Clone)]
pub(crate) struct ShedLoad(pub(crate) Arc<Semaphore>);

impl Middleware for ShedLoad {
    type Pass = Option<OwnedSemaphorePermit>;

    fn before(&self, request: &mut Request) -> Result<Self::Pass, Refusal> {
        if UNLIMITED_PATHS.contains(&request.uri().path()) {
            return Ok(None);
        }
        if let Ok(permit) = self.0.clone().try_acquire_owned() {
            return Ok(Some(permit));
        }
        // Ahead of the layers that stamp and echo the request id, so it is put here.
        let request_id = request.headers().get(REQUEST_ID_HEADER).cloned();
        let body_id = request_id.as_ref().and_then(|id| id.to_str().ok()).map(str::to_owned);
        let mut response = with_retry_after(
            ErrorResponse::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "SERVER_OVERLOADED",
                "the server is handling as many requests as it can; try again shortly",
            )
            .with_request_id(body_id),
            RETRY_AFTER_S,
        );
        if let Some(id) = request_id {
            response.headers_mut().insert(REQUEST_ID_HEADER, id);
        }
        response.extensions_mut().insert(Rejection::Overloaded);
        Err(refuse_now(response))
    }
}

fn with_retry_after(error: ErrorResponse, seconds: u64) -> Response {
    let mut response = error.into_response();
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request_with_tenant(tenant: Option<&str>) -> Request {
        let mut builder = Request::builder().uri("/");
        if let Some(tenant) = tenant {
            builder = builder.header(TENANT_HEADER, tenant);
        }
        builder.body(axum::body::Body::empty()).unwrap()
    }

    #[test]
    fn the_key_is_the_valid_tenant_or_the_default_one() {
        assert_eq!(rate_limit_key(&request_with_tenant(Some("acme"))), "acme");
        assert_eq!(rate_limit_key(&request_with_tenant(None)), "");
        assert_eq!(rate_limit_key(&request_with_tenant(Some("no spaces"))), "");
    }

    #[test]
    fn an_authenticated_user_is_limited_in_its_own_tenant_whatever_it_names() {
        let principal = |role| mesh_auth::Principal { subject: "s".into(), tenant: "own".into(), roles: vec![role] };
        for (caller, named, expected) in [
            (Caller::Authenticated(principal(mesh_auth::Role::User)), Some("other"), "own"),
            (Caller::Authenticated(principal(mesh_auth::Role::User)), None, "own"),
            (Caller::Authenticated(principal(mesh_auth::Role::Agent)), Some("users"), "users"),
            (Caller::Anonymous, Some("acme"), ""),
            (Caller::Open, Some("acme"), "acme"),
        ] {
            let mut request = request_with_tenant(named);
            request.extensions_mut().insert(caller.clone());
            assert_eq!(rate_limit_key(&request), expected, "{caller:?}");
        }
    }

    #[test]
    fn each_tenant_has_its_own_bucket() {
        let limit = TenantRateLimit::new(1, 2).unwrap();
        assert_eq!(limit.check("a"), Ok(()));
        assert_eq!(limit.check("a"), Ok(()));
        assert_eq!(limit.check("a"), Err(1));
        assert_eq!(limit.check("b"), Ok(()));
        assert!(TenantRateLimit::new(0, 10).is_none());
    }

    #[test]
    fn mesh_headers_must_be_printable_ascii() {
        assert!(is_mesh_header("x-mesh-tenant") && is_mesh_header("x-request-id"));
        assert!(!is_mesh_header("user-agent"));
    }
}
