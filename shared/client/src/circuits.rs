//! One circuit breaker per agent instance (seed 003's cascade failure prevention), built on
//! `tower-resilience`: after [`CircuitSettings::consecutive_failures`] failed calls in a row the
//! instance's circuit opens and calls to it fail at once; after the cool-down one probe call is let
//! through, and a success closes the circuit again.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

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

type Exchange = (Request<Bytes>, Duration);
type Outcome = Result<Response<Bytes>, ClientError>;
type Classifier = FnClassifier<fn(&Outcome) -> bool>;
type Guarded = BoxCloneService<Exchange, Response<Bytes>, CircuitBreakerError<ClientError>>;

/// What a call through a circuit gives.
#[derive(Debug)]
pub enum Passage {
    /// The circuit let the call through; this is what the instance answered (any status).
    Answered(Response<Bytes>),
    /// The call went out and failed without an answer.
    Failed(ClientError),
    /// The circuit is open: nothing was sent.
    Refused,
}

struct Circuit {
    agent: String,
    service: Guarded,
    handle: CircuitBreakerHandle<Classifier>,
    /// On tokio's clock, so the deterministic simulation controls it.
    last_used: tokio::time::Instant,
}

/// The circuits of every instance this process calls, keyed by task endpoint.
pub struct Circuits {
    http: HttpClient,
    settings: CircuitSettings,
    circuits: Mutex<BTreeMap<String, Circuit>>,
}

impl std::fmt::Debug for Circuits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Circuits").field("settings", &self.settings).field("circuits", &self.report()).finish()
    }
}

/// A failed exchange, for the breaker: no answer at all, or an answer saying the instance is
/// failing, overloaded or too slow. Refusals of the request itself (4xx) are the caller's doing.
fn counts_as_failure(outcome: &Outcome) -> bool {
    match outcome {
        Ok(response) => matches!(response.status().as_u16(), 500 | 502 | 503 | 504),
        Err(error) => matches!(error, ClientError::Transport { .. }),
    }
}

impl Circuits {
    pub fn new(http: HttpClient, settings: CircuitSettings) -> Self {
        Self { http, settings, circuits: Mutex::new(BTreeMap::new()) }
    }

    /// Sends `request` to the instance at `endpoint` (registered as `agent`) through its circuit.
    pub async fn send(&self, agent: &str, endpoint: &str, request: Request<Bytes>, timeout: Duration) -> Passage {
        let service = match self.service(agent, endpoint) {
            Ok(service) => service,
            Err(error) => return Passage::Failed(error),
        };
        match service.oneshot((request, timeout)).await {
            Ok(response) => Passage::Answered(response),
            Err(CircuitBreakerError::OpenCircuit) => Passage::Refused,
            Err(CircuitBreakerError::Inner(error)) => Passage::Failed(error),
        }
    }

    /// Whether the instance's circuit is open (it stays so until a call after the cool-down).
    pub fn is_open(&self, endpoint: &str) -> bool {
        self.lock().get(endpoint).is_some_and(|c| c.handle.state() == CircuitState::Open)
    }

    /// Every known instance's circuit, in endpoint order.
    pub fn report(&self) -> Vec<CircuitReport> {
        self.lock()
            .iter()
            .map(|(endpoint, circuit)| CircuitReport {
                agent: circuit.agent.clone(),
                endpoint: endpoint.clone(),
                state: match circuit.handle.state() {
                    CircuitState::Closed => CircuitWord::Closed,
                    CircuitState::Open => CircuitWord::Open,
                    CircuitState::HalfOpen => CircuitWord::HalfOpen,
                },
            })
            .collect()
    }

    fn service(&self, agent: &str, endpoint: &str) -> Result<Guarded, ClientError> {
        let mut circuits = self.lock();
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
            .failure_classifier(counts_as_failure as fn(&Outcome) -> bool)
            .build_with_handle()
            .map_err(|e| ClientError::InvalidUrl { url: endpoint.to_owned(), reason: e.to_string() })?;
        let http = self.http.clone();
        let send = tower::service_fn(move |(request, timeout): Exchange| {
            let http = http.clone();
            async move { http.send(request, timeout).await }
        });
        let service = BoxCloneService::new(layer.layer(send));
        circuits.insert(
            endpoint.to_owned(),
            Circuit { agent: agent.to_owned(), service: service.clone(), handle, last_used: now },
        );
        Ok(service)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Circuit>> {
        self.circuits.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Drops the circuits idle for [`CIRCUIT_IDLE_MS`], then the least recently used one while the
/// map is full, making room for one more.
fn evict_stale(circuits: &mut BTreeMap<String, Circuit>, now: tokio::time::Instant) {
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
    use crate::transport::{BoxFuture, Transport, TransportError};

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
