use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;

use crate::address_policy::{AddressRefused, OutboundGuard};

/// Time allowed to open a TCP connection, shorter than any call timeout so a dead host fails fast.
const CONNECT_TIMEOUT_MS: u64 = 2_000;
/// Idle pooled connections are closed after this long: sooner than a mesh server closes an
/// idle connection itself (`serve.header_read_timeout_ms`, 20 s by default), so a request is
/// never sent on a connection the server is closing at that moment.
const POOL_IDLE_TIMEOUT_MS: u64 = 15_000;
/// Largest response body read; a peer (any URL a registrant names) cannot exhaust our memory.
pub const RESPONSE_BODY_BYTES_MAX: usize = 8 * 1024 * 1024;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a request got no HTTP response at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    #[error("no answer within {timeout_ms} ms")]
    Timeout { timeout_ms: u64 },
    #[error("connection failed: {0}")]
    Connect(String),
    #[error("request failed: {0}")]
    Other(String),
    /// The target address is refused by the outbound address policy; nothing was sent.
    #[error("address refused: {0}")]
    Refused(String),
}

impl From<AddressRefused> for TransportError {
    /// A name that does not resolve now is a failure to connect, which may pass (a DNS outage), not
    /// a refusal by the policy: a caller retries it, and a config naming it is not refused for it.
    fn from(refusal: AddressRefused) -> Self {
        match refusal {
            AddressRefused::Unresolved { .. } => Self::Connect(refusal.to_string()),
            refused => Self::Refused(refused.to_string()),
        }
    }
}

impl TransportError {
    /// The `error.type` of a span (OpenTelemetry semantic conventions): a low-cardinality name.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Timeout { .. } => "timeout",
            Self::Connect(_) => "connection_failed",
            Self::Other(_) => "request_failed",
            Self::Refused(_) => "address_refused",
        }
    }
}

/// Sends one HTTP request and reads the whole response within `timeout`.
pub trait Transport: Send + Sync + std::fmt::Debug + 'static {
    fn send(
        &self,
        request: http::Request<Bytes>,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<http::Response<Bytes>, TransportError>>;

    /// Whether `url` may be requested under this transport's outbound address policy. A
    /// transport with no policy (the default, and the simulation's) has nothing to refuse.
    fn vet(&self, url: &str) -> BoxFuture<'static, Result<(), TransportError>> {
        let _ = url;
        Box::pin(async { Ok(()) })
    }
}

/// The production transport: one pooled `reqwest` client shared by every caller in the process.
#[derive(Debug, Clone)]
pub struct ReqwestTransport {
    client: reqwest::Client,
    /// The outbound address policy, for a client whose targets third parties choose.
    guard: Option<OutboundGuard>,
}

impl ReqwestTransport {
    pub fn new() -> Result<Self, TransportError> {
        let client =
            Self::builder().build().map_err(|e| TransportError::Other(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self { client, guard: None })
    }

    /// A client for targets that third parties choose: every address it connects to is checked
    /// by `guard` after resolution, redirects are returned rather than followed (a redirect
    /// could lead anywhere), and no proxy is used (the proxy, not the target, would be checked).
    pub fn guarded(guard: OutboundGuard) -> Result<Self, TransportError> {
        let client = Self::guarded_builder(&guard)
            .build()
            .map_err(|e| TransportError::Other(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self { client, guard: Some(guard) })
    }

    /// The reqwest client builder of [`Self::guarded`], for a protocol client that needs reqwest
    /// itself (the MCP client): addresses checked after resolution, redirects not followed, no
    /// proxy. A URL with a literal IP host must still be checked with [`OutboundGuard::vet`].
    pub fn guarded_builder(guard: &OutboundGuard) -> reqwest::ClientBuilder {
        Self::builder().redirect(reqwest::redirect::Policy::none()).no_proxy().dns_resolver(guard.resolver())
    }

    fn builder() -> reqwest::ClientBuilder {
        reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS))
            .pool_idle_timeout(Duration::from_millis(POOL_IDLE_TIMEOUT_MS))
            .user_agent(concat!("a2a-mesh/", env!("CARGO_PKG_VERSION")))
    }
}

impl Transport for ReqwestTransport {
    fn send(
        &self,
        request: http::Request<Bytes>,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<http::Response<Bytes>, TransportError>> {
        let client = self.client.clone();
        // A literal IP never reaches the resolver, so it is checked here.
        let literal = self.guard.as_ref().map(|guard| guard.policy().check_url(&request.uri().to_string()));
        Box::pin(async move {
            if let Some(Err(refusal)) = literal {
                return Err(refusal.into());
            }
            let request = reqwest::Request::try_from(request).map_err(|e| TransportError::Other(e.to_string()))?;
            let exchange = async {
                let response = client.execute(request).await.map_err(classify)?;
                let mut builder = http::Response::builder().status(response.status()).version(response.version());
                if let Some(headers) = builder.headers_mut() {
                    headers.extend(response.headers().iter().map(|(k, v)| (k.clone(), v.clone())));
                }
                if response.content_length().is_some_and(|length| length > RESPONSE_BODY_BYTES_MAX as u64) {
                    return Err(too_large());
                }
                let mut response = response;
                let mut body = bytes::BytesMut::new();
                while let Some(chunk) = response.chunk().await.map_err(classify)? {
                    if body.len() + chunk.len() > RESPONSE_BODY_BYTES_MAX {
                        return Err(too_large());
                    }
                    body.extend_from_slice(&chunk);
                }
                builder.body(body.freeze()).map_err(|e| TransportError::Other(e.to_string()))
            };
            let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
            tokio::time::timeout(timeout, exchange).await.map_err(|_| TransportError::Timeout { timeout_ms })?
        })
    }

    fn vet(&self, url: &str) -> BoxFuture<'static, Result<(), TransportError>> {
        let (guard, url) = (self.guard.clone(), url.to_owned());
        Box::pin(async move {
            match guard {
                Some(guard) => guard.vet(&url).await.map_err(TransportError::from),
                None => Ok(()),
            }
        })
    }
}

fn too_large() -> TransportError {
    TransportError::Other(format!("the response is larger than {RESPONSE_BODY_BYTES_MAX} bytes"))
}

fn classify(error: reqwest::Error) -> TransportError {
    // The policy resolver's refusal comes back wrapped as a connection error.
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(cause) = source {
        if let Some(refusal) = cause.downcast_ref::<AddressRefused>() {
            return refusal.clone().into();
        }
        source = cause.source();
    }
    if error.is_connect() {
        TransportError::Connect(error.to_string())
    } else {
        TransportError::Other(error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_policy_refuses_an_address_a_name_that_does_not_resolve_may_resolve_later() {
        let unresolved = AddressRefused::Unresolved { host: "hook.invalid".into(), reason: "no record".into() };
        let error = TransportError::from(unresolved);
        assert_eq!(error, TransportError::Connect("cannot resolve hook.invalid: no record".into()));
        let metadata: std::net::IpAddr = [169, 254, 169, 254].into();
        for refusal in [
            AddressRefused::AlwaysRefused(metadata),
            AddressRefused::NotAllowed(metadata),
            AddressRefused::NotPublic([10, 0, 0, 1].into()),
            AddressRefused::NoAllowedAddress { host: "internal.test".into(), why: "refused".into() },
            AddressRefused::InvalidUrl("file:///etc/passwd".into()),
        ] {
            let reason = refusal.to_string();
            assert_eq!(TransportError::from(refusal), TransportError::Refused(reason));
        }
    }
}
