//! A light JSON-RPC load generator for benchmarks whose servers run in processes of their own:
//! raw hyper HTTP/1.1 keep-alive connections (no client pool, no redirects, no decompression), so
//! the load costs the shared cores as little as it can.
//!
//! - [`closed_loop`]: `concurrency` workers, each sending its next request on the answer;
//! - [`open_loop`]: requests sent at a fixed rate whether or not the previous ones answered, so
//!   a slow answer delays no later request (no coordinated omission).
//!
//! Every answer is checked by the caller's `check`; failures are counted, never throughput.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use axum::http::{Request, StatusCode};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{SendRequest, handshake};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

// The including bench declares `mod support;` (benches/support/mod.rs) beside `mod load;`.
use crate::support::Samples;

/// Longest wait for one answer before it counts as a failure.
const REQUEST_TIMEOUT_MS: u64 = 10_000;
/// Pause before a worker whose connection failed opens another.
const RECONNECT_PAUSE_MS: u64 = 10;

/// Where requests go: a server's address, the path they are posted to, and their credential.
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: SocketAddr,
    pub path: String,
    pub bearer: Option<String>,
}

/// What a load measured: latencies of the good answers, in microseconds, and the failures.
#[derive(Debug, Default)]
pub struct Outcome {
    pub latencies: Samples,
    pub errors: usize,
    pub first_error: Option<String>,
    /// Good answers per second over the measured window.
    pub rate: f64,
}

impl Outcome {
    fn fail(&mut self, error: String) {
        self.errors += 1;
        self.first_error.get_or_insert(error);
    }

    fn absorb(&mut self, other: Self) {
        self.latencies.extend(other.latencies);
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
}

/// A fresh request body each call (unique message ids), and the check of an answer.
pub type MakeBody = fn() -> Bytes;
pub type Check = fn(StatusCode, &[u8]) -> Result<(), String>;

/// One keep-alive HTTP/1.1 connection.
struct Connection {
    sender: SendRequest<Full<Bytes>>,
    host: String,
}

impl Connection {
    async fn open(addr: SocketAddr) -> Result<Self, String> {
        let stream = TcpStream::connect(addr).await.map_err(|e| format!("connect: {e}"))?;
        // Small requests answered one at a time: Nagle's algorithm would only add delay.
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let (sender, connection) = handshake(TokioIo::new(stream)).await.map_err(|e| format!("handshake: {e}"))?;
        // Drives the connection; it ends when the sender is dropped.
        tokio::spawn(connection);
        Ok(Self { sender, host: addr.to_string() })
    }

    async fn send(&mut self, target: &Target, body: Bytes, check: Check) -> Result<(), String> {
        let mut request = Request::post(&target.path)
            .header(HOST, &self.host)
            .header(CONTENT_TYPE, "application/json")
            .header("a2a-version", "1.0");
        if let Some(bearer) = &target.bearer {
            request = request.header(AUTHORIZATION, format!("Bearer {bearer}"));
        }
        let request = request.body(Full::new(body)).map_err(|e| e.to_string())?;
        let exchange = async {
            self.sender.ready().await.map_err(|e| e.to_string())?;
            let response = self.sender.send_request(request).await.map_err(|e| e.to_string())?;
            let status = response.status();
            let body = response.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
            Ok::<_, String>((status, body))
        };
        let (status, body) = tokio::time::timeout(Duration::from_millis(REQUEST_TIMEOUT_MS), exchange)
            .await
            .map_err(|_| format!("no answer within {REQUEST_TIMEOUT_MS} ms"))??;
        check(status, &body)
    }
}

/// Sends one request on a new connection: `Ok` once the server answers as `check` wants.
pub async fn probe(target: &Target, body: MakeBody, check: Check) -> Result<(), String> {
    Connection::open(target.addr).await?.send(target, body(), check).await
}

/// `concurrency` workers sending back to back for `warm_up` (not recorded), then `measure`.
pub async fn closed_loop(
    target: &Target,
    concurrency: usize,
    warm_up: Duration,
    measure: Duration,
    body: MakeBody,
    check: Check,
) -> Outcome {
    let window_start = Instant::now() + warm_up;
    let window_end = window_start + measure;
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let target = target.clone();
            tokio::spawn(async move {
                let mut outcome = Outcome::default();
                let mut connection: Option<Connection> = None;
                while Instant::now() < window_end {
                    let open = match connection.as_mut() {
                        Some(open) => open,
                        None => match Connection::open(target.addr).await {
                            Ok(opened) => connection.insert(opened),
                            Err(error) => {
                                outcome.fail(error);
                                tokio::time::sleep(Duration::from_millis(RECONNECT_PAUSE_MS)).await;
                                continue;
                            }
                        },
                    };
                    let sent = Instant::now();
                    let answer = open.send(&target, body(), check).await;
                    let answered = Instant::now();
                    match answer {
                        Ok(()) if sent >= window_start && answered <= window_end => {
                            outcome.latencies.push(answered.duration_since(sent).as_secs_f64() * 1e6);
                        }
                        Ok(()) => {}
                        Err(error) => {
                            connection = None;
                            outcome.fail(error);
                        }
                    }
                }
                outcome
            })
        })
        .collect();
    let mut total = Outcome::default();
    for worker in workers {
        match worker.await {
            Ok(outcome) => total.absorb(outcome),
            Err(panic) => total.fail(format!("worker failed: {panic}")),
        }
    }
    total.rate = total.latencies.len() as f64 / measure.as_secs_f64();
    total
}

/// Requests at `rate` per second for `measure`, each on a pooled idle connection (a new one when
/// none is idle), timed from when it was due.
pub async fn open_loop(target: &Target, rate: u64, measure: Duration, body: MakeBody, check: Check) -> Outcome {
    let idle: Arc<Mutex<Vec<Connection>>> = Arc::default();
    let interval = Duration::from_nanos(1_000_000_000 / rate.max(1));
    let started = tokio::time::Instant::now();
    let count = (rate as f64 * measure.as_secs_f64()) as u64;
    let mut calls = tokio::task::JoinSet::new();
    for n in 0..count {
        let due = started + interval * u32::try_from(n).unwrap_or(u32::MAX);
        tokio::time::sleep_until(due).await;
        let (target, idle) = (target.clone(), idle.clone());
        calls.spawn(async move {
            let pooled = idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
            let mut connection = match pooled {
                Some(connection) => connection,
                None => Connection::open(target.addr).await?,
            };
            connection.send(&target, body(), check).await?;
            let latency = due.elapsed();
            idle.lock().unwrap_or_else(PoisonError::into_inner).push(connection);
            Ok::<_, String>(latency)
        });
    }
    let mut outcome = Outcome::default();
    while let Some(joined) = calls.join_next().await {
        match joined.map_err(|e| e.to_string()).and_then(|answer| answer) {
            Ok(latency) => outcome.latencies.push(latency.as_secs_f64() * 1e6),
            Err(error) => outcome.fail(error),
        }
    }
    outcome.rate = outcome.latencies.len() as f64 / started.elapsed().as_secs_f64();
    outcome
}
