use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, header};
use mesh_protocol::error::ErrorBody;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::Instrument;
use tracing::field::Empty;

use crate::address_policy::OutboundGuard;
use crate::transport::{ReqwestTransport, Transport, TransportError};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("{url}: {source}")]
    Transport { url: String, source: TransportError },
    #[error("{url} answered {status}{}", .body.as_ref().map(|b| format!(": {} {}", b.error_code, b.error_message)).unwrap_or_default())]
    Status { url: String, status: u16, body: Option<ErrorBody> },
    #[error("{url}: unexpected response body: {reason}")]
    Decode { url: String, reason: String },
    #[error("the configured credential cannot be sent: it is not a valid header value")]
    InvalidCredential,
}

impl ClientError {
    /// True when the request ran out of time (as opposed to failing).
    pub fn is_timeout(&self) -> bool {
        matches!(self, Self::Transport { source: TransportError::Timeout { .. }, .. })
    }

    /// True when the outbound address policy refused the target (nothing was sent).
    pub fn is_refused_address(&self) -> bool {
        matches!(self, Self::Transport { source: TransportError::Refused(_), .. })
    }
}

/// A bearer credential that can be replaced while clients send it: a token renewed before it
/// expires, or one re-read from a file a deployment rotates.
#[derive(Debug, Clone)]
pub struct RenewableBearer(Arc<ArcSwap<HeaderValue>>);

impl RenewableBearer {
    pub fn new(credential: &str) -> Result<Self, ClientError> {
        Ok(Self(Arc::new(ArcSwap::from_pointee(bearer_header(credential)?))))
    }

    /// Sends `credential` from now on, on every client holding this one.
    pub fn renew(&self, credential: &str) -> Result<(), ClientError> {
        self.0.store(Arc::new(bearer_header(credential)?));
        Ok(())
    }

    /// The `Authorization` header value presented now, for a client that sends its own requests
    /// (a proxy streaming bodies through).
    pub fn header(&self) -> HeaderValue {
        HeaderValue::clone(&self.0.load())
    }

    /// A handle that does not keep the credential alive: a renewal task holds this, and stops
    /// once no client sends the credential any more.
    pub fn downgrade(&self) -> WeakBearer {
        WeakBearer(Arc::downgrade(&self.0))
    }
}

/// See [`RenewableBearer::downgrade`].
#[derive(Debug, Clone)]
pub struct WeakBearer(Weak<ArcSwap<HeaderValue>>);

impl WeakBearer {
    pub fn upgrade(&self) -> Option<RenewableBearer> {
        self.0.upgrade().map(RenewableBearer)
    }
}

fn bearer_header(credential: &str) -> Result<HeaderValue, ClientError> {
    let mut value =
        HeaderValue::from_str(&format!("Bearer {credential}")).map_err(|_| ClientError::InvalidCredential)?;
    value.set_sensitive(true);
    Ok(value)
}

/// The process-wide HTTP client: cheap to clone, one connection pool behind it.
#[derive(Debug, Clone)]
pub struct HttpClient {
    transport: Arc<dyn Transport>,
    /// `Authorization` sent on every request that carries none: the service's own credential,
    /// on the clone that calls the mesh (never on the one that calls outside services).
    authorization: Option<RenewableBearer>,
}

impl HttpClient {
    pub fn new(transport: Arc<dyn Transport>) -> Self {
        Self { transport, authorization: None }
    }

    /// The same client (same pool) presenting `credential` (a token or an API key) as a bearer
    /// credential; unchanged when `None`.
    pub fn with_bearer(&self, credential: Option<&str>) -> Result<Self, ClientError> {
        let Some(credential) = credential else { return Ok(self.clone()) };
        Ok(self.with_renewable_bearer(&RenewableBearer::new(credential)?))
    }

    /// The same client (same pool) presenting `bearer`, whatever it is renewed to.
    pub fn with_renewable_bearer(&self, bearer: &RenewableBearer) -> Self {
        Self { authorization: Some(bearer.clone()), ..self.clone() }
    }

    /// A client on the production `reqwest` transport.
    pub fn with_reqwest() -> Result<Self, TransportError> {
        Ok(Self::new(Arc::new(ReqwestTransport::new()?)))
    }

    /// A client on the `reqwest` transport under an outbound address policy, for targets that
    /// third parties choose (see [`ReqwestTransport::guarded`]).
    pub fn guarded(guard: OutboundGuard) -> Result<Self, TransportError> {
        Ok(Self::new(Arc::new(ReqwestTransport::guarded(guard)?)))
    }

    /// Sends a request and returns the response whatever its status. With tracing on, the call
    /// is a client span and carries its W3C trace context (`traceparent`, `tracestate`, `baggage`).
    pub async fn send(&self, mut request: Request<Bytes>, timeout: Duration) -> Result<Response<Bytes>, ClientError> {
        if let Some(authorization) = &self.authorization
            && !request.headers().contains_key(header::AUTHORIZATION)
        {
            request.headers_mut().insert(header::AUTHORIZATION, HeaderValue::clone(&authorization.0.load()));
        }
        let url = request.uri().to_string();
        if !mesh_telemetry::tracing_enabled() || mesh_telemetry::sampled_out() {
            // An unsampled trace still travels on, its sampled flag off, so the callee drops it too.
            mesh_telemetry::inject_current(request.headers_mut());
            return self
                .transport
                .send(request, timeout)
                .await
                .map_err(|source| ClientError::Transport { url, source });
        }
        let uri = request.uri();
        let span = tracing::info_span!(
            "client",
            otel.name = request.method().as_str(),
            otel.kind = "client",
            otel.status_code = Empty,
            http.request.method = request.method().as_str(),
            server.address = uri.host(),
            server.port = i64::from(uri.port_u16().unwrap_or(if uri.scheme_str() == Some("https") { 443 } else { 80 })),
            url.full = %uri,
            http.response.status_code = Empty,
            error.type = Empty,
        );
        mesh_telemetry::inject(&span, request.headers_mut());
        let outcome = self.transport.send(request, timeout).instrument(span.clone()).await;
        match &outcome {
            Ok(response) => {
                span.record("http.response.status_code", i64::from(response.status().as_u16()));
                if response.status().is_client_error() || response.status().is_server_error() {
                    span.record("error.type", response.status().as_str());
                    span.record("otel.status_code", "ERROR");
                }
            }
            Err(error) => {
                span.record("error.type", error.kind());
                span.record("otel.status_code", "ERROR");
            }
        }
        outcome.map_err(|source| ClientError::Transport { url, source })
    }

    /// Whether `url` may be requested under the transport's outbound address policy (its host
    /// resolved and checked now); requests are checked again when sent.
    pub async fn vet(&self, url: &str) -> Result<(), ClientError> {
        self.transport.vet(url).await.map_err(|source| ClientError::Transport { url: url.to_owned(), source })
    }

    /// `GET url`, expecting a 2xx JSON body.
    pub async fn get_json<T: DeserializeOwned>(&self, url: &str, timeout: Duration) -> Result<T, ClientError> {
        self.call_json::<(), T>(Method::GET, url, None, timeout).await
    }

    /// Sends `body` (if any) as JSON and decodes a 2xx JSON answer; a non-2xx answer becomes
    /// [`ClientError::Status`] carrying the mesh error body when the server sent one.
    pub async fn call_json<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        url: &str,
        body: Option<&B>,
        timeout: Duration,
    ) -> Result<T, ClientError> {
        let request = json_request(method, url, body)?;
        let response = self.send(request, timeout).await?;
        decode_json(url, &response)
    }
}

/// A request carrying `body` (if any) as JSON, accepting JSON.
pub fn json_request<B: Serialize>(method: Method, url: &str, body: Option<&B>) -> Result<Request<Bytes>, ClientError> {
    let mut builder = Request::builder().method(method).uri(url).header(header::ACCEPT, "application/json");
    let payload = match body {
        Some(body) => {
            builder = builder.header(header::CONTENT_TYPE, "application/json");
            Bytes::from(serde_json::to_vec(body).map_err(|e| ClientError::Decode {
                url: url.to_owned(),
                reason: format!("cannot encode the request: {e}"),
            })?)
        }
        None => Bytes::new(),
    };
    builder.body(payload).map_err(|e| ClientError::InvalidUrl { url: url.to_owned(), reason: e.to_string() })
}

/// Decodes a 2xx JSON answer; a non-2xx answer becomes [`ClientError::Status`] carrying the mesh
/// error body when the server sent one.
pub fn decode_json<T: DeserializeOwned>(url: &str, response: &Response<Bytes>) -> Result<T, ClientError> {
    let status = response.status();
    if !status.is_success() {
        return Err(ClientError::Status {
            url: url.to_owned(),
            status: status.as_u16(),
            body: serde_json::from_slice(response.body()).ok(),
        });
    }
    serde_json::from_slice(response.body())
        .map_err(|e| ClientError::Decode { url: url.to_owned(), reason: e.to_string() })
}
