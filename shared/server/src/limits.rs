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

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use mesh_auth::{Caller, Role};
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
/// Keys (tenants, agents, anonymous addresses) with a rate-limit bucket of their own at once.
/// Beyond that (many at once, or someone inventing tenant names), every key shares one overflow
/// bucket until idle buckets are dropped, so the table stays bounded.
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

/// Whose bucket a request draws on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RateLimitKey {
    /// A user's (or an open service's) request, by the tenant it acts in.
    Tenant(String),
    /// An authenticated agent's call, by the agent: the mesh's own service-to-service calls
    /// never wait behind its users' traffic, whichever tenant they act for.
    Agent(String),
    /// A caller with no credentials, by its address: an anonymous flood of a public route only
    /// empties its own bucket.
    Address(IpAddr),
}

impl std::fmt::Display for RateLimitKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tenant(tenant) if tenant.is_empty() => f.write_str("the default tenant"),
            Self::Tenant(tenant) => write!(f, "tenant {tenant}"),
            Self::Agent(agent) => write!(f, "agent {agent}"),
            Self::Address(ip) => write!(f, "address {ip}"),
        }
    }
}

/// The key a request is rate limited by. An authenticated user draws on the tenant its
/// credential allows (its own, whatever it names; the tenant an `admin` names in
/// `x-mesh-tenant`), an authenticated agent on a bucket of its own, an anonymous caller on its
/// address's; on an open service, the tenant the header names (one default tenant when none).
pub fn rate_limit_key(request: &Request) -> RateLimitKey {
    let named = request
        .headers()
        .get(TENANT_HEADER)
        .and_then(|value| value.to_str().ok())
        .filter(|tenant| validate_tenant_id(tenant).is_ok())
        .unwrap_or_default();
    match request.extensions().get::<Caller>() {
        Some(Caller::Authenticated(principal)) if principal.has(Role::Agent) => {
            RateLimitKey::Agent(principal.subject.clone())
        }
        Some(caller @ Caller::Authenticated(principal)) => {
            RateLimitKey::Tenant(caller.tenant(named, None).unwrap_or_else(|_| principal.tenant.clone()))
        }
        Some(Caller::Anonymous) => RateLimitKey::Address(
            request
                .extensions()
                .get::<ConnectInfo<SocketAddr>>()
                .map_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED), |ConnectInfo(peer)| peer.ip()),
        ),
        Some(Caller::Open) | None => RateLimitKey::Tenant(named.to_owned()),
    }
}

/// The per-tenant (per-agent, per-address) token buckets of one server.
#[derive(Debug)]
pub struct TenantRateLimit {
    tenants: DefaultKeyedRateLimiter<RateLimitKey>,
    /// Shared by every key while the table is full.
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
    fn check(&self, key: &RateLimitKey) -> Result<(), u64> {
        if self.requests.fetch_add(1, Ordering::Relaxed).is_multiple_of(RATE_LIMIT_SWEEP_EVERY_REQUESTS) {
            // Buckets that refilled completely hold nothing worth keeping.
            self.tenants.retain_recent();
        }
        let clock = DefaultClock::default();
        let checked = if self.tenants.len() >= RATE_LIMIT_TENANTS_MAX {
            self.overflow.check()
        } else {
            self.tenants.check_key(key)
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
        tracing::debug!(%key, wait_s, "rate limited");
        let message = format!("too many requests for {key}; slow down");
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

    fn tenant(name: &str) -> RateLimitKey {
        RateLimitKey::Tenant(name.to_owned())
    }

    #[test]
    fn the_key_is_the_valid_tenant_or_the_default_one() {
        assert_eq!(rate_limit_key(&request_with_tenant(Some("acme"))), tenant("acme"));
        assert_eq!(rate_limit_key(&request_with_tenant(None)), tenant(""));
        assert_eq!(rate_limit_key(&request_with_tenant(Some("no spaces"))), tenant(""));
    }

    #[test]
    fn users_draw_on_their_tenant_agents_on_their_own_and_anonymous_callers_on_their_address() {
        let principal = |role| mesh_auth::Principal { subject: "s".into(), tenant: "own".into(), roles: vec![role] };
        let peer: SocketAddr = "192.0.2.7:40000".parse().unwrap();
        for (caller, named, expected) in [
            (Caller::Authenticated(principal(Role::User)), Some("other"), tenant("own")),
            (Caller::Authenticated(principal(Role::User)), None, tenant("own")),
            (Caller::Authenticated(principal(Role::Admin)), Some("acme"), tenant("acme")),
            (Caller::Authenticated(principal(Role::Agent)), Some("users"), RateLimitKey::Agent("s".into())),
            (Caller::Anonymous, Some("acme"), RateLimitKey::Address(peer.ip())),
            (Caller::Open, Some("acme"), tenant("acme")),
        ] {
            let mut request = request_with_tenant(named);
            request.extensions_mut().insert(caller.clone());
            request.extensions_mut().insert(ConnectInfo(peer));
            assert_eq!(rate_limit_key(&request), expected, "{caller:?}");
        }
    }

    #[test]
    fn each_key_has_its_own_bucket() {
        let limit = TenantRateLimit::new(1, 2).unwrap();
        assert_eq!(limit.check(&tenant("a")), Ok(()));
        assert_eq!(limit.check(&tenant("a")), Ok(()));
        assert_eq!(limit.check(&tenant("a")), Err(1));
        assert_eq!(limit.check(&tenant("b")), Ok(()));
        assert_eq!(limit.check(&RateLimitKey::Agent("a".into())), Ok(()));
        assert!(TenantRateLimit::new(0, 10).is_none());
    }

    #[test]
    fn mesh_headers_must_be_printable_ascii() {
        assert!(is_mesh_header("x-mesh-tenant") && is_mesh_header("x-request-id"));
        assert!(!is_mesh_header("user-agent"));
    }
}
