use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;

/// Time allowed to open a TCP connection, shorter than any call timeout so a dead host fails fast.
const CONNECT_TIMEOUT_MS: u64 = 2_000;
/// Idle pooled connections are closed after this long.
const POOL_IDLE_TIMEOUT_MS: u64 = 30_000;
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
}

impl TransportError {
    /// The `error.type` of a span (OpenTelemetry semantic conventions): a low-cardinality name.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Timeout { .. } => "timeout",
            Self::Connect(_) => "connection_failed",
            Self::Other(_) => "request_failed",
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
}

/// The production transport: one pooled `reqwest` client shared by every caller in the process.
#[derive(Debug, Clone)]
pub struct ReqwestTransport {
    client: reqwest::Client,
}

impl ReqwestTransport {
    pub fn new() -> Result<Self, TransportError> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS))
            .pool_idle_timeout(Duration::from_millis(POOL_IDLE_TIMEOUT_MS))
            .user_agent(concat!("a2a-mesh/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| TransportError::Other(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self { client })
    }
}

impl Transport for ReqwestTransport {
    fn send(
        &self,
        request: http::Request<Bytes>,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<http::Response<Bytes>, TransportError>> {
        let client = self.client.clone();
        Box::pin(async move {
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
}

fn too_large() -> TransportError {
    TransportError::Other(format!("the response is larger than {RESPONSE_BODY_BYTES_MAX} bytes"))
}

fn classify(error: reqwest::Error) -> TransportError {
    if error.is_connect() {
        TransportError::Connect(error.to_string())
    } else {
        TransportError::Other(error.to_string())
    }
}
