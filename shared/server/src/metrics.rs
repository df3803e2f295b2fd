use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::response::Response;
use mesh_client::{CircuitReport, CircuitWord};
use serde::{Deserialize, Serialize};

use crate::middleware::{Middleware, Refusal};

/// Counters an operator reads from `/health`.
pub struct ServiceMetrics {
    name: String,
    started: Instant,
    in_flight: AtomicU64,
    served: AtomicU64,
    errors: AtomicU64,
    /// Set when shutdown begins: from then on the service reports itself unhealthy, so readiness
    /// probes, load balancers and the registry's poller stop sending it work while it finishes
    /// what it has.
    draining: AtomicBool,
    registration: Mutex<Option<RegistrationState>>,
    components: Mutex<BTreeMap<String, ComponentProbe>>,
    circuits: Mutex<Option<CircuitsProbe>>,
}

/// Reads the circuit breakers of the agents a service calls.
type CircuitsProbe = Arc<dyn Fn() -> Vec<CircuitReport> + Send + Sync>;

/// `status` of a health report whose service serves fully.
pub const HEALTH_HEALTHY: &str = "healthy";
/// `status` of a service that serves with a part missing (a model, every replica of a
/// dependency, a database it can do without); it still takes traffic.
pub const HEALTH_DEGRADED: &str = "degraded";
/// `status` of a service that cannot serve; `/health` and `/health/ready` answer 503.
pub const HEALTH_UNHEALTHY: &str = "unhealthy";

/// Component `status` words (a component's probe answers `{"status": ...}`) that make a
/// service degraded, and those that make it unhealthy.
const COMPONENT_DEGRADED_WORDS: [&str; 3] = ["unavailable", "degraded", "unreachable"];
const COMPONENT_UNHEALTHY_WORDS: [&str; 1] = ["unhealthy"];
/// The reason a stopping service gives for being unhealthy.
pub const DRAINING_REASON: &str = "draining: the service is stopping and finishes the requests it has";

/// Between checks that a service's database answers, for `/health`.
const DATABASE_PROBE_INTERVAL_MS: u64 = 2_000;
/// Longest wait for the database's answer to a check before it counts as unreachable.
const DATABASE_PROBE_TIMEOUT_MS: u64 = 1_500;

/// The database a service cannot serve without (an agent's task store, the registry's store),
/// shown as the component `database` of its health: `unhealthy`, hence not ready, while the
/// database does not answer.
#[derive(Debug, Clone, Default)]
pub struct DatabaseProbe {
    /// Why the database did not answer the last check; `None` while it answers.
    down: Arc<Mutex<Option<String>>>,
}

impl DatabaseProbe {
    /// A probe shown in `metrics`' health reports from now on.
    pub fn register(metrics: &ServiceMetrics) -> Self {
        let probe = Self::default();
        let down = probe.down.clone();
        metrics.add_component("database", move || match &*down.lock().unwrap_or_else(|e| e.into_inner()) {
            None => serde_json::json!({ "status": "ok" }),
            Some(reason) => serde_json::json!({ "status": "unhealthy", "reason": reason }),
        });
        probe
    }

    /// Checks that the database answers `ping`, forever, starting at once.
    pub async fn run<F, E>(&self, service: &str, ping: impl Fn() -> F)
    where
        F: Future<Output = Result<(), E>>,
        E: std::fmt::Display,
    {
        let mut ticks = tokio::time::interval(Duration::from_millis(DATABASE_PROBE_INTERVAL_MS));
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let timeout = Duration::from_millis(DATABASE_PROBE_TIMEOUT_MS);
            let down = match tokio::time::timeout(timeout, ping()).await {
                Ok(Ok(())) => None,
                Ok(Err(error)) => Some(format!("the database does not answer: {error}")),
                Err(_) => Some(format!("the database did not answer within {DATABASE_PROBE_TIMEOUT_MS} ms")),
            };
            let mut state = self.down.lock().unwrap_or_else(|e| e.into_inner());
            if state.is_none() && down.is_some() {
                tracing::error!(%service, reason = down.as_deref().unwrap_or_default(), "the database is unreachable");
            } else if state.is_some() && down.is_none() {
                tracing::info!(%service, "the database answers again");
            }
            *state = down;
        }
    }
}

/// Reads the current state of one part of an agent for `/health`.
type ComponentProbe = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

/// Body of `GET /health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthReport {
    /// `healthy`, `degraded` or `unhealthy` (older agents only ever said `healthy`).
    pub status: String,
    pub service: String,
    /// Why the service is not `healthy`, one line per missing part.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    pub metrics: HealthMetrics,
    /// True once shutdown has begun (then `status` is `unhealthy`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub draining: bool,
    /// Where this agent stands with the registry; absent when no registry is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registration: Option<RegistrationState>,
    /// Agent-specific parts and their state (an index, a model), by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub components: BTreeMap<String, serde_json::Value>,
    /// The circuit breaker of every agent instance this one has called.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub circuits: Vec<CircuitReport>,
}

impl std::fmt::Debug for ServiceMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceMetrics").field("name", &self.name).finish_non_exhaustive()
    }
}

/// Where an agent stands with its registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RegistrationState {
    /// Not accepted yet; retrying.
    Pending,
    Registered,
    /// The registry refused the registration for good (see the log for why).
    Refused,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthMetrics {
    pub uptime_s: u64,
    /// Requests being processed right now.
    pub in_flight: u64,
    /// Requests finished since start, including those cut off by a timeout or a panic.
    pub served: u64,
    /// Of those, the ones that did not succeed (a 4xx or 5xx answer, a timeout, a panic).
    pub errors: u64,
}

impl ServiceMetrics {
    pub fn new(name: impl Into<String>) -> Arc<Self> {
        Arc::new(Self {
            name: name.into(),
            started: Instant::now(),
            in_flight: AtomicU64::new(0),
            served: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            draining: AtomicBool::new(false),
            registration: Mutex::new(None),
            components: Mutex::new(BTreeMap::new()),
            circuits: Mutex::new(None),
        })
    }

    /// Shows `probe()` under `components.<name>` in every health report from now on.
    pub fn add_component(
        &self,
        name: impl Into<String>,
        probe: impl Fn() -> serde_json::Value + Send + Sync + 'static,
    ) {
        self.components.lock().unwrap_or_else(|e| e.into_inner()).insert(name.into(), Arc::new(probe));
    }

    /// Shows the circuits `probe` reads in every health report from now on; a dependency whose
    /// every instance has an open circuit makes the service degraded.
    pub fn set_circuits(&self, probe: impl Fn() -> Vec<CircuitReport> + Send + Sync + 'static) {
        *self.circuits.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(probe));
    }

    /// The service's name (its card's name, or `registry`).
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn report(&self) -> HealthReport {
        let components: BTreeMap<String, serde_json::Value> = self
            .components
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(name, probe)| (name.clone(), probe()))
            .collect();
        let circuits =
            self.circuits.lock().unwrap_or_else(|e| e.into_inner()).clone().map(|probe| probe()).unwrap_or_default();
        let (mut status, mut reasons) = judge(&components, &circuits);
        let draining = self.draining.load(Ordering::Relaxed);
        if draining {
            status = HEALTH_UNHEALTHY;
            reasons.insert(0, DRAINING_REASON.to_owned());
        }
        HealthReport {
            status: status.into(),
            service: self.name.clone(),
            reasons,
            metrics: HealthMetrics {
                uptime_s: self.started.elapsed().as_secs(),
                in_flight: self.in_flight.load(Ordering::Relaxed),
                served: self.served.load(Ordering::Relaxed),
                errors: self.errors.load(Ordering::Relaxed),
            },
            draining,
            registration: *self.registration.lock().unwrap_or_else(|e| e.into_inner()),
            components,
            circuits,
        }
    }

    /// Marks the service as stopping: every health report from now on is `unhealthy` (503 on
    /// `/health` and `/health/ready`) while `/health/live` still answers 200.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    pub fn set_registration(&self, state: RegistrationState) {
        *self.registration.lock().unwrap_or_else(|e| e.into_inner()) = Some(state);
    }
}

/// The service's status from its parts: unhealthy when a component says so, degraded when a
/// component is unavailable or every instance of a called agent has its circuit open.
fn judge(components: &BTreeMap<String, serde_json::Value>, circuits: &[CircuitReport]) -> (&'static str, Vec<String>) {
    let mut unhealthy = Vec::new();
    let mut degraded = Vec::new();
    for (name, value) in components {
        let Some(word) = value.get("status").and_then(serde_json::Value::as_str) else { continue };
        let reason = value.get("reason").and_then(serde_json::Value::as_str).unwrap_or(word);
        if COMPONENT_UNHEALTHY_WORDS.contains(&word) {
            unhealthy.push(format!("{name}: {reason}"));
        } else if COMPONENT_DEGRADED_WORDS.contains(&word) {
            degraded.push(format!("{name}: {reason}"));
        }
    }
    let mut by_agent: BTreeMap<&str, bool> = BTreeMap::new();
    for circuit in circuits {
        let all_open = by_agent.entry(circuit.agent.as_str()).or_insert(true);
        *all_open &= circuit.state == CircuitWord::Open;
    }
    degraded.extend(
        by_agent.into_iter().filter(|(_, all_open)| *all_open).map(|(agent, _)| format!("{agent}: every circuit open")),
    );
    match (unhealthy.is_empty(), degraded.is_empty()) {
        (false, _) => (HEALTH_UNHEALTHY, unhealthy.into_iter().chain(degraded).collect()),
        (true, false) => (HEALTH_DEGRADED, degraded),
        (true, true) => (HEALTH_HEALTHY, Vec::new()),
    }
}

/// Counts one request from start to end. The counting happens on drop, so a request cut off by
/// the timeout layer or unwound by a panic (both outside this middleware) is still counted, as an
/// error, since no response came back through here.
#[derive(Debug)]
pub struct Tracked {
    metrics: Arc<ServiceMetrics>,
    succeeded: bool,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.metrics.served.fetch_add(1, Ordering::Relaxed);
        if !self.succeeded {
            self.metrics.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Middleware counting the requests of the routes it wraps.
#[derive(Debug, Clone)]
pub struct TrackRequests(pub(crate) Arc<ServiceMetrics>);

impl Middleware for TrackRequests {
    type Pass = Tracked;

    fn before(&self, _: &mut Request) -> Result<Tracked, Refusal> {
        self.0.in_flight.fetch_add(1, Ordering::Relaxed);
        Ok(Tracked { metrics: self.0.clone(), succeeded: false })
    }

    async fn after<F>(mut tracked: Tracked, answer: F) -> Response
    where
        F: Future<Output = Response> + Send + 'static,
    {
        let response = answer.await;
        tracked.succeeded = !(response.status().is_client_error() || response.status().is_server_error());
        response
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn circuit(agent: &str, endpoint: &str, state: CircuitWord) -> CircuitReport {
        CircuitReport { agent: agent.into(), endpoint: endpoint.into(), state }
    }

    #[test]
    fn a_missing_model_degrades_and_a_disabled_one_does_not() {
        let metrics = ServiceMetrics::new("search");
        metrics.add_component("dense", || json!({"status": "disabled"}));
        assert_eq!(metrics.report().status, HEALTH_HEALTHY);
        metrics.add_component("dense", || json!({"status": "unavailable", "reason": "no model files"}));
        let report = metrics.report();
        assert_eq!(report.status, HEALTH_DEGRADED);
        assert_eq!(report.reasons, ["dense: no model files"]);
    }

    #[test]
    fn an_unhealthy_component_outranks_a_degraded_one() {
        let metrics = ServiceMetrics::new("registry");
        metrics.add_component("a", || json!({"status": "unavailable"}));
        metrics.add_component("database", || json!({"status": "unhealthy", "reason": "connection refused"}));
        let report = metrics.report();
        assert_eq!(report.status, HEALTH_UNHEALTHY);
        assert_eq!(report.reasons, ["database: connection refused", "a: unavailable"]);
    }

    #[test]
    fn a_dependency_degrades_only_when_every_instance_is_open() {
        let metrics = ServiceMetrics::new("orchestrator");
        metrics.set_circuits(|| {
            vec![
                circuit("search", "http://a/tasks/send", CircuitWord::Open),
                circuit("search", "http://b/tasks/send", CircuitWord::HalfOpen),
                circuit("profile_selection", "http://c/tasks/send", CircuitWord::Closed),
            ]
        });
        assert_eq!(metrics.report().status, HEALTH_HEALTHY);
        metrics.set_circuits(|| {
            vec![
                circuit("search", "http://a/tasks/send", CircuitWord::Open),
                circuit("search", "http://b/tasks/send", CircuitWord::Open),
            ]
        });
        let report = metrics.report();
        assert_eq!(
            (report.status.as_str(), report.reasons.as_slice()),
            (HEALTH_DEGRADED, &["search: every circuit open".to_owned()][..])
        );
        assert_eq!(report.circuits.len(), 2);
    }
}
