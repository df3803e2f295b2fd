use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use mesh_client::CircuitReport;
use serde::{Deserialize, Serialize};

/// Counters an operator reads from `/health`.
pub struct ServiceMetrics {
    name: String,
    started: Instant,
    in_flight: AtomicU64,
    served: AtomicU64,
    errors: AtomicU64,
    registration: Mutex<Option<RegistrationState>>,
    components: Mutex<BTreeMap<String, ComponentProbe>>,
}

/// Reads the current state of one part of an agent for `/health`.
type ComponentProbe = Arc<dyn Fn() -> serde_json::Value + Send + Sync>;

/// Body of `GET /health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthReport {
    pub status: String,
    pub service: String,
    pub metrics: HealthMetrics,
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
            registration: Mutex::new(None),
            components: Mutex::new(BTreeMap::new()),
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

    pub fn report(&self) -> HealthReport {
        HealthReport {
            status: "healthy".into(),
            service: self.name.clone(),
            metrics: HealthMetrics {
                uptime_s: self.started.elapsed().as_secs(),
                in_flight: self.in_flight.load(Ordering::Relaxed),
                served: self.served.load(Ordering::Relaxed),
                errors: self.errors.load(Ordering::Relaxed),
            },
            registration: *self.registration.lock().unwrap_or_else(|e| e.into_inner()),
            components: self
                .components
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .map(|(name, probe)| (name.clone(), probe()))
                .collect(),
            circuits: Vec::new(),
        }
    }

    pub fn set_registration(&self, state: RegistrationState) {
        *self.registration.lock().unwrap_or_else(|e| e.into_inner()) = Some(state);
    }
}

/// Counts one request from start to end. The counting happens on drop, so a request cut off by
/// the timeout layer or unwound by a panic (both outside this middleware) is still counted, as an
/// error, since no response came back through here.
struct Tracked<'a> {
    metrics: &'a ServiceMetrics,
    succeeded: bool,
}

impl Drop for Tracked<'_> {
    fn drop(&mut self) {
        self.metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.metrics.served.fetch_add(1, Ordering::Relaxed);
        if !self.succeeded {
            self.metrics.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Middleware counting the requests of the routes it wraps.
pub async fn track(State(metrics): State<Arc<ServiceMetrics>>, request: Request, next: Next) -> Response {
    metrics.in_flight.fetch_add(1, Ordering::Relaxed);
    let mut tracked = Tracked { metrics: &metrics, succeeded: false };
    let response = next.run(request).await;
    tracked.succeeded = !(response.status().is_client_error() || response.status().is_server_error());
    response
}
