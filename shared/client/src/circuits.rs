//! One circuit breaker per agent instance (seed 003's cascade failure prevention), built on
//! `tower-resilience`: after [`CircuitSettings::consecutive_failures`] failed calls in a row the
//! instance's circuit opens and calls to it fail at once; after the cool-down one probe call is let
//! through, and a success closes the circuit again.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::transport::BoxFuture;
use bytes::Bytes;
use http::{Request, Response};
use serde::{Deserialize, Serialize};
use tower::util::BoxCloneService;
use tower::{Layer, ServiceExt};
use tower_resilience::circuitbreaker::{
    CircuitBreakerError, CircuitBreakerHandle, CircuitBreakerLayer, CircuitState, FnClassifier,
};

use crate::http_client::{ClientError, HttpClient};

/// Failed calls in a row that open an instance's circuit.
pub const CIRCUIT_CONSECUTIVE_FAILURES_DEFAULT: usize = 3;
/// How long an open circuit refuses calls before it lets a probe through.
pub const CIRCUIT_OPEN_MS_DEFAULT: u64 = 5_000;
/// A circuit not used for this long is dropped (its instance is gone or no longer called); a
/// new one starts closed if the instance is called again.
const CIRCUIT_IDLE_MS: u64 = 600_000;
/// Circuits kept at most; the least recently used goes first.
const CIRCUITS_MAX: usize = 1_024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitSettings {
    pub consecutive_failures: usize,
    pub open: Duration,
}

impl Default for CircuitSettings {
    fn default() -> Self {
        Self {
            consecutive_failures: CIRCUIT_CONSECUTIVE_FAILURES_DEFAULT,
            open: Duration::from_millis(CIRCUIT_OPEN_MS_DEFAULT),
        }
    }
}

/// A circuit's state as `/health` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CircuitWord {
    Closed,
    Open,
    HalfOpen,
}

/// One instance's circuit, for `/health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CircuitReport {
    pub agent: String,
    /// The instance's task endpoint, which identifies it.
    pub endpoint: String,
    pub state: CircuitWord,
}

type Outcome<B> = Result<Response<B>, ClientError>;
/// One call through a circuit: the future that makes it, so the breaker decides before it runs
/// and classifies what it gives, whatever the answer's body (buffered, or a stream relayed on).
type Exchange<B> = BoxFuture<'static, Outcome<B>>;
/// [`Exchange`] in a type of its own: a `dyn` future as a service's request type defeats the
/// compiler's proof that the futures calling the service are `Send`.
struct Call<B>(Exchange<B>);
type Classifier<B> = FnClassifier<fn(&Outcome<B>) -> bool>;
type Guarded<B> = BoxCloneService<Call<B>, Response<B>, CircuitBreakerError<ClientError>>;

/// What a call through a circuit gives.
#[derive(Debug)]
pub enum Passage<B = Bytes> {
    /// The circuit let the call through; this is what the instance answered (any status).
    Answered(Response<B>),
    /// The call went out and failed without an answer.
    Failed(ClientError),
    /// The circuit is open: nothing was sent.
    Refused,
}

struct Circuit<B> {
    agent: String,
    service: Guarded<B>,
    handle: CircuitBreakerHandle<Classifier<B>>,
    /// On tokio's clock, so the deterministic simulation controls it.
    last_used: tokio::time::Instant,
}

/// The circuits of every instance this process calls, keyed by task endpoint; each call sends a
/// buffered request with the process's [`HttpClient`].
pub struct Circuits {
    http: HttpClient,
    breakers: CircuitBreakers<Bytes>,
}

impl std::fmt::Debug for Circuits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Circuits").field("breakers", &self.breakers).finish()
    }
}

/// The circuits of every instance this process calls, keyed by endpoint, for calls the caller
/// makes itself (a proxy relaying streams): answers carry a body of type `B`. The breaker
/// classifies the answer by its status alone, when it arrives.
pub struct CircuitBreakers<B> {
    settings: CircuitSettings,
    circuits: Mutex<BTreeMap<String, Circuit<B>>>,
}

impl<B> std::fmt::Debug for CircuitBreakers<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let circuits: Vec<CircuitReport> = lock(&self.circuits).iter().map(report_of).collect();
        f.debug_struct("CircuitBreakers").field("settings", &self.settings).field("circuits", &circuits).finish()
    }
}

/// A failed exchange, for the breaker: no answer at all, or an answer saying the instance is
/// failing, overloaded or too slow. Refusals of the request itself (4xx) are the caller's doing.
fn counts_as_failure<B>(outcome: &Outcome<B>) -> bool {
    match outcome {
        Ok(response) => matches!(response.status().as_u16(), 500 | 502 | 503 | 504),
        Err(error) => matches!(error, ClientError::Transport { .. }),
    }
}

impl Circuits {
    pub fn new(http: HttpClient, settings: CircuitSettings) -> Self {
        Self { http, breakers: CircuitBreakers::new(settings) }
    }

    /// Sends `request` to the instance at `endpoint` (registered as `agent`) through its circuit.
    pub async fn send(&self, agent: &str, endpoint: &str, request: Request<Bytes>, timeout: Duration) -> Passage {
        let http = self.http.clone();
        self.breakers.pass(agent, endpoint, Box::pin(async move { http.send(request, timeout).await })).await
    }

    /// Whether the instance's circuit is open (it stays so until a call after the cool-down).
    pub fn is_open(&self, endpoint: &str) -> bool {
        self.breakers.is_open(endpoint)
    }

    /// Every known instance's circuit, in endpoint order.
    pub fn report(&self) -> Vec<CircuitReport> {
        self.breakers.report()
    }
}

impl<B: Send + 'static> CircuitBreakers<B> {
    pub fn new(settings: CircuitSettings) -> Self {
        Self { settings, circuits: Mutex::new(BTreeMap::new()) }
    }

    /// Makes the call `exchange` to the instance at `endpoint` (registered as `agent`) through
    /// its circuit: not at all when the circuit is open.
    pub async fn pass(&self, agent: &str, endpoint: &str, exchange: Exchange<B>) -> Passage<B> {
        let service = match self.service(agent, endpoint) {
            Ok(service) => service,
            Err(error) => return Passage::Failed(error),
        };
        match service.oneshot(Call(exchange)).await {
            Ok(response) => Passage::Answered(response),
            Err(CircuitBreakerError::OpenCircuit) => Passage::Refused,
            Err(CircuitBreakerError::Inner(error)) => Passage::Failed(error),
        }
    }

    /// Whether the instance's circuit is open (it stays so until a call after the cool-down).
    pub fn is_open(&self, endpoint: &str) -> bool {
        lock(&self.circuits).get(endpoint).is_some_and(|c| c.handle.state() == CircuitState::Open)
    }

    /// Every known instance's circuit, in endpoint order.
    pub fn report(&self) -> Vec<CircuitReport> {
        lock(&self.circuits).iter().map(report_of).collect()
    }

    fn service(&self, agent: &str, endpoint: &str) -> Result<Guarded<B>, ClientError> {
        let mut circuits = lock(&self.circuits);
        let now = tokio::time::Instant::now();
        if let Some(circuit) = circuits.get_mut(endpoint) {
            circuit.last_used = now;
            return Ok(circuit.service.clone());
        }
        evict_stale(&mut circuits, now);
        let (layer, handle) = CircuitBreakerLayer::builder()
            .name(endpoint)
            .consecutive_failures(self.settings.consecutive_failures.max(1))
            .wait_duration_in_open(self.settings.open)
            .permitted_calls_in_half_open(1)
            .failure_classifier(counts_as_failure::<B> as fn(&Outcome<B>) -> bool)
            .build_with_handle()
            .map_err(|e| ClientError::InvalidUrl { url: endpoint.to_owned(), reason: e.to_string() })?;
        let run = tower::service_fn(|call: Call<B>| call.0);
        let service = BoxCloneService::new(layer.layer(run));
        circuits.insert(
            endpoint.to_owned(),
            Circuit { agent: agent.to_owned(), service: service.clone(), handle, last_used: now },
        );
        Ok(service)
    }
}

fn report_of<B>((endpoint, circuit): (&String, &Circuit<B>)) -> CircuitReport {
    CircuitReport {
        agent: circuit.agent.clone(),
        endpoint: endpoint.clone(),
        state: match circuit.handle.state() {
            CircuitState::Closed => CircuitWord::Closed,
            CircuitState::Open => CircuitWord::Open,
            CircuitState::HalfOpen => CircuitWord::HalfOpen,
        },
    }
}

fn lock<T>(circuits: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    circuits.lock().unwrap_or_else(|e| e.into_inner())
}

/// Drops the circuits idle for [`CIRCUIT_IDLE_MS`], then the least recently used one while the
/// map is full, making room for one more.
fn evict_stale<B>(circuits: &mut BTreeMap<String, Circuit<B>>, now: tokio::time::Instant) {
    let idle = std::time::Duration::from_millis(CIRCUIT_IDLE_MS);
    circuits.retain(|_, circuit| now.duration_since(circuit.last_used) < idle);
    while circuits.len() >= CIRCUITS_MAX {
        let Some(oldest) = circuits.iter().min_by_key(|(_, c)| c.last_used).map(|(endpoint, _)| endpoint.clone())
        else {
            break;
        };
        circuits.remove(&oldest);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::transport::{Transport, TransportError};

    #[derive(Debug)]
    struct Refusing;

    impl Transport for Refusing {
        fn send(&self, _: Request<Bytes>, _: Duration) -> BoxFuture<'static, Result<Response<Bytes>, TransportError>> {
            Box::pin(async { Err(TransportError::Connect("refused".into())) })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn idle_circuits_are_dropped_and_the_map_stays_bounded() {
        let circuits = Circuits::new(HttpClient::new(Arc::new(Refusing)), CircuitSettings::default());
        let circuits = &circuits.breakers;
        circuits.service("a", "http://a/").unwrap();
        tokio::time::advance(Duration::from_millis(CIRCUIT_IDLE_MS)).await;
        circuits.service("b", "http://b/").unwrap();
        let endpoints: Vec<String> = circuits.report().into_iter().map(|r| r.endpoint).collect();
        assert_eq!(endpoints, ["http://b/"]);
        for i in 0..CIRCUITS_MAX + 5 {
            tokio::time::advance(Duration::from_millis(1)).await;
            circuits.service("x", &format!("http://x{i}/")).unwrap();
        }
        let report = circuits.report();
        assert_eq!(report.len(), CIRCUITS_MAX);
        assert!(report.iter().all(|r| r.endpoint != "http://b/"), "the least recently used goes first");
    }
}
