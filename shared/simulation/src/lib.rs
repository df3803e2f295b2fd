//! The mesh's real services on turmoil's simulated network, for deterministic simulation tests:
//! a fixed seed replays the same run, while the network delays, partitions and crashes.
//!
//! reqwest cannot run there, so [`SimTransport`] is the client kit's [`Transport`] on a hyper
//! HTTP/1 connection over a simulated TCP stream, and [`SimListener`] lets `axum::serve` accept
//! simulated connections. Everything above them (the agent kit's layers, the registry, the mesh
//! caller with its retries and circuit breakers) is the production code.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::header::HOST;
use http::{HeaderValue, Request, Response, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use mesh_client::{BoxFuture, Transport, TransportError};

/// Largest response body read, as in the production transport.
const RESPONSE_BODY_BYTES_MAX: usize = 8 * 1024 * 1024;
/// Pause after a failed accept, so a broken listener does not spin.
const ACCEPT_RETRY_MS: u64 = 10;
/// Time allowed to open a connection, as in the production transport: a host that is gone
/// (crashed, partitioned) fails the attempt quickly instead of eating the whole call's time.
const CONNECT_TIMEOUT_MS: u64 = 2_000;

/// The client kit's transport on the simulated network: one HTTP/1 connection per request.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimTransport;

impl Transport for SimTransport {
    fn send(
        &self,
        request: Request<Bytes>,
        timeout: Duration,
    ) -> BoxFuture<'static, Result<Response<Bytes>, TransportError>> {
        Box::pin(async move {
            let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
            tokio::time::timeout(timeout, exchange(request))
                .await
                .map_err(|_| TransportError::Timeout { timeout_ms })?
        })
    }
}

async fn exchange(request: Request<Bytes>) -> Result<Response<Bytes>, TransportError> {
    let (mut parts, body) = request.into_parts();
    let host = parts.uri.host().ok_or_else(|| TransportError::Other(format!("no host in {}", parts.uri)))?.to_owned();
    let port = parts.uri.port_u16().unwrap_or(80);
    let connect = turmoil::net::TcpStream::connect((host.as_str(), port));
    let stream = tokio::time::timeout(Duration::from_millis(CONNECT_TIMEOUT_MS), connect)
        .await
        .map_err(|_| TransportError::Connect(format!("{host}:{port}: no connection within {CONNECT_TIMEOUT_MS} ms")))?
        .map_err(|e| TransportError::Connect(format!("{host}:{port}: {e}")))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| TransportError::Connect(e.to_string()))?;
    tokio::spawn(connection);
    // HTTP/1 sends the path and a Host header, not the absolute URI.
    let authority = format!("{host}:{port}");
    parts.headers.insert(HOST, HeaderValue::from_str(&authority).map_err(|e| TransportError::Other(e.to_string()))?);
    parts.uri = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/")
        .parse::<Uri>()
        .map_err(|e| TransportError::Other(e.to_string()))?;
    let response = sender
        .send_request(Request::from_parts(parts, Full::new(body)))
        .await
        .map_err(|e| TransportError::Other(e.to_string()))?;
    let (parts, body) = response.into_parts();
    let body = Limited::new(body, RESPONSE_BODY_BYTES_MAX)
        .collect()
        .await
        .map_err(|e| TransportError::Other(format!("reading the response: {e}")))?
        .to_bytes();
    Ok(Response::from_parts(parts, body))
}

/// A simulated TCP listener `axum::serve` can serve on.
pub struct SimListener(turmoil::net::TcpListener);

impl std::fmt::Debug for SimListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SimListener").field(&self.0.local_addr().ok()).finish()
    }
}

impl SimListener {
    /// Listens on `port` of the current simulated host.
    pub async fn bind(port: u16) -> std::io::Result<Self> {
        turmoil::net::TcpListener::bind(("0.0.0.0", port)).await.map(Self)
    }
}

impl axum::serve::Listener for SimListener {
    type Io = turmoil::net::TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.0.accept().await {
                Ok(accepted) => return accepted,
                Err(_) => tokio::time::sleep(Duration::from_millis(ACCEPT_RETRY_MS)).await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// Serves `router` on `port` of the current simulated host until the host stops.
pub async fn serve(port: u16, router: axum::Router) -> std::io::Result<()> {
    axum::serve(SimListener::bind(port).await?, router).await
}
