//! Serving connections: hyper-util's server builder with a timer, so a client cannot hold a
//! connection open without sending a request (slowloris), and a cap on open connections.
//!
//! `axum::serve` sets no timer, which leaves hyper's header-read timeout off and reads the first
//! bytes of a connection (to tell HTTP/1 from HTTP/2) with no deadline at all. Here:
//! - HTTP/1: hyper closes a connection whose request head has not fully arrived within
//!   `header_read_timeout_ms`. hyper starts that timer whenever it waits for a head, so it is
//!   also how long an HTTP/1 keep-alive connection may sit idle between requests.
//! - Any connection that has not started a request within `header_read_timeout_ms` of being
//!   accepted (one that sends nothing, or stalls inside the HTTP/2 preface), or that has started
//!   none for `idle_timeout_ms` since its last (an idle HTTP/2 connection), is shut down
//!   gracefully: what is in flight finishes, nothing new starts.
//! - HTTP/2: keep-alive pings find peers that vanished.
//! - At most `connections_max` connections are open; one more is answered `503` with a mesh
//!   JSON error and closed, without reading it.
//!
//! Every request carries its peer address as [`ConnectInfo`] (the rate limit keys anonymous
//! callers by it).

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use serde::Deserialize;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

/// Default time a client has to send a whole request head, and the longest an HTTP/1
/// keep-alive connection stays open between two requests. Longer than the mesh client's pool
/// idle time (15 s), so the mesh's own clients close an idle connection before a server does
/// and never reuse one the server is closing.
pub const HEADER_READ_TIMEOUT_MS_DEFAULT: u64 = 20_000;
/// Default longest time a connection (an HTTP/2 one, above all) stays open with no new request.
pub const IDLE_TIMEOUT_MS_DEFAULT: u64 = 120_000;
/// Default connections open at once, at most.
pub const CONNECTIONS_MAX_DEFAULT: usize = 10_000;
/// Interval of the HTTP/2 keep-alive pings, and how long an answer to one may take.
const HTTP2_KEEP_ALIVE_INTERVAL_MS: u64 = 20_000;
const HTTP2_KEEP_ALIVE_TIMEOUT_MS: u64 = 20_000;
/// Refusals of connections past the cap being written at once; past it, a refused connection is
/// closed without an answer (the refusals themselves must not become the overload).
const REFUSALS_IN_FLIGHT_MAX: usize = 64;
/// Time a refused client has to take its `503` before the connection is closed.
const REFUSAL_WRITE_TIMEOUT_MS: u64 = 1_000;
/// Pause after an accept error that is not one connection's (out of file descriptors), so the
/// loop does not spin while the condition lasts.
const ACCEPT_ERROR_PAUSE_MS: u64 = 100;

/// How a server treats its connections (`serve` in every service's configuration, e.g.
/// `MESH_SEARCH_SERVE__CONNECTIONS_MAX`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServeConfig {
    /// Milliseconds a client has to send a whole request head; also the longest an HTTP/1
    /// connection stays idle between requests, and the longest any connection may stay open
    /// before its first request.
    pub header_read_timeout_ms: u64,
    /// Milliseconds a connection may go without starting a request before it is closed
    /// gracefully (in-flight requests and streams finish).
    pub idle_timeout_ms: u64,
    /// Connections open at once, at most; one more is answered `503` and closed.
    pub connections_max: usize,
    /// Host names (without port) a service running open (no authentication) answers to besides
    /// loopback names (`*`: any); requests naming another `Host` are refused with `421`, so a
    /// web page cannot reach the open suite through DNS rebinding. Not checked when callers are
    /// authenticated.
    pub allowed_hosts: Vec<String>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            header_read_timeout_ms: HEADER_READ_TIMEOUT_MS_DEFAULT,
            idle_timeout_ms: IDLE_TIMEOUT_MS_DEFAULT,
            connections_max: CONNECTIONS_MAX_DEFAULT,
            allowed_hosts: Vec::new(),
        }
    }
}

/// When a connection last started a request, in milliseconds since it was accepted (0: none yet).
#[derive(Debug)]
struct Activity {
    accepted: Instant,
    last_request_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Self { accepted: Instant::now(), last_request_ms: AtomicU64::new(0) }
    }

    fn request_started(&self) {
        // At least 1: 0 means no request yet.
        let now_ms = (self.accepted.elapsed().as_millis() as u64).max(1);
        self.last_request_ms.store(now_ms, Ordering::Relaxed);
    }

    /// When the connection is to be closed unless a request starts before.
    fn deadline(&self, header_read_timeout: Duration, idle_timeout: Duration) -> Instant {
        match self.last_request_ms.load(Ordering::Relaxed) {
            0 => self.accepted + header_read_timeout,
            last_ms => self.accepted + Duration::from_millis(last_ms) + idle_timeout,
        }
    }
}

/// Serves `router` on `listener` as `config` says until `shutdown` resolves, then lets in-flight
/// requests finish for at most `drain`: an open stream (SSE) or a slow client cannot hold a
/// stopping server. Connections still open at the deadline are closed.
pub async fn serve_connections(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    drain: Duration,
    config: &ServeConfig,
) -> std::io::Result<()> {
    let header_read_timeout = Duration::from_millis(config.header_read_timeout_ms);
    let idle_timeout = Duration::from_millis(config.idle_timeout_ms);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Duration::from_millis(HTTP2_KEEP_ALIVE_INTERVAL_MS))
        .keep_alive_timeout(Duration::from_millis(HTTP2_KEEP_ALIVE_TIMEOUT_MS));
    let builder = Arc::new(builder);
    let connections = Arc::new(Semaphore::new(config.connections_max.max(1)));
    let refusals = Arc::new(Semaphore::new(REFUSALS_IN_FLIGHT_MAX));
    let stopping = CancellationToken::new();
    let closing = CancellationToken::new();
    let tracker = TaskTracker::new();
    let mut shutdown = pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    if !is_connection_error(&error) {
                        tracing::error!(%error, "accepting a connection failed; pausing");
                        tokio::time::sleep(Duration::from_millis(ACCEPT_ERROR_PAUSE_MS)).await;
                    }
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // An answer can leave in several writes (HTTP/2's headers, data and trailers frames, SSE
        // events): with Nagle's algorithm on, each write after the first waits for the client's
        // delayed ACK, 40 ms (a gRPC call at concurrency 1 took 46 ms at p50, against 1.3 for JSON-RPC).
        if let Err(error) = stream.set_nodelay(true) {
            tracing::warn!(%error, "could not turn off Nagle's algorithm on a connection");
        }
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            metrics::counter!("mesh_connections_refused_total").increment(1);
            if let Ok(refusing) = refusals.clone().try_acquire_owned() {
                tokio::spawn(async move {
                    refuse(stream).await;
                    drop(refusing);
                });
            }
            continue;
        };
        let activity = Arc::new(Activity::new());
        let seen = activity.clone();
        let service = router.clone().map_request(move |mut request: axum::http::Request<Incoming>| {
            seen.request_started();
            request.extensions_mut().insert(ConnectInfo(peer));
            request
        });
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(service))
            .into_owned();
        let (stopping, closing) = (stopping.clone(), closing.clone());
        tracker.spawn(async move {
            let _permit = permit;
            let mut connection = pin!(connection);
            let mut ending = false;
            loop {
                let deadline = activity.deadline(header_read_timeout, idle_timeout);
                tokio::select! {
                    served = connection.as_mut() => {
                        if let Err(error) = served {
                            tracing::debug!(%peer, error = %error, "connection ended with an error");
                        }
                        break;
                    }
                    () = closing.cancelled() => break,
                    () = stopping.cancelled(), if !ending => {
                        connection.as_mut().graceful_shutdown();
                        ending = true;
                    }
                    () = tokio::time::sleep_until(deadline), if !ending => {
                        // A request may have started while this slept: then the deadline moved.
                        if Instant::now() >= activity.deadline(header_read_timeout, idle_timeout) {
                            tracing::debug!(%peer, "closing a connection that started no request in time");
                            connection.as_mut().graceful_shutdown();
                            ending = true;
                        }
                    }
                }
            }
        });
    }
    drop(listener);
    stopping.cancel();
    tracker.close();
    if tokio::time::timeout(drain, tracker.wait()).await.is_err() {
        tracing::warn!(drain_ms = drain.as_millis(), "connections still open at the drain deadline; closing them");
        closing.cancel();
        tracker.wait().await;
    }
    Ok(())
}

/// Errors of one connection that the accept loop shrugs off (the next accept works).
fn is_connection_error(error: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset, Interrupted};
    matches!(error.kind(), ConnectionRefused | ConnectionAborted | ConnectionReset | Interrupted)
}

/// Answers a connection past the cap with `503` and a mesh JSON error, without reading its
/// request, then closes it.
async fn refuse(mut stream: TcpStream) {
    let body = serde_json::to_vec(&mesh_protocol::error::ErrorBody::new(
        mesh_protocol::error::FailureStatus::Error,
        "SERVER_CONNECTIONS_FULL",
        "the server has as many connections open as it accepts; try again shortly",
    ))
    .unwrap_or_default();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: {}\r\nconnection: close\r\n\r\n",
        body.len(),
        crate::limits::RETRY_AFTER_S
    );
    let answer = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(&body).await?;
        stream.shutdown().await
    };
    if let Err(error) = tokio::time::timeout(Duration::from_millis(REFUSAL_WRITE_TIMEOUT_MS), answer).await {
        tracing::debug!(%error, "a refused connection did not take its answer in time");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_is_the_header_timeout_until_a_request_then_the_idle_timeout() {
        let activity = Activity::new();
        let (header, idle) = (Duration::from_secs(2), Duration::from_secs(10));
        assert_eq!(activity.deadline(header, idle), activity.accepted + header);
        activity.request_started();
        let after_request = activity.deadline(header, idle);
        assert!(after_request >= activity.accepted + idle, "the idle timeout runs from the request");
        // Milliseconds, and at least 1 (0 says no request yet).
        assert!(after_request <= Instant::now() + idle + Duration::from_millis(1));
    }
}
