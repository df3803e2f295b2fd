//! Real servers on port 0 for the registry's integration test modules: the registry itself and fake
//! agents whose health answer each test controls.

use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use mesh_client::{HttpClient, RegistryClient};
use mesh_protocol::registry::Registration;
use registry::{Application, RegistryConfig, RegistryService};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Health status code a fake agent answers; this value makes it never answer instead.
const HANG: u16 = 0;
/// Upper bound for any condition a test waits for.
pub const WAIT_DEADLINE_MS: u64 = 10_000;
/// Health poll interval used by the tests' registries.
pub const TEST_HEALTH_INTERVAL_MS: u64 = 100;
pub const TEST_HEALTH_TIMEOUT_MS: u64 = 300;
/// Lifetime of the tests' tokens: far beyond any run.
pub const TOKEN_TTL_S: u64 = 3_600;

/// Counts health requests in flight across the agents sharing it, and the most seen at once.
#[derive(Debug, Default)]
pub struct HealthProbe {
    in_flight: AtomicUsize,
    pub max_in_flight: AtomicUsize,
    /// Health requests received in all.
    pub requests: AtomicUsize,
}

/// Leaves the probe when the request ends, answered or dropped by the registry's timeout.
struct InFlight(Arc<HealthProbe>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A stand-in agent: serves a card naming `card_name` and a `/health` answering `health`.
pub struct FakeAgent {
    pub name: String,
    pub url: String,
    health: Arc<AtomicU16>,
    /// Milliseconds `/health` takes to answer.
    health_delay_ms: Arc<AtomicU64>,
    stop: Option<oneshot::Sender<()>>,
    server: JoinHandle<()>,
}

impl FakeAgent {
    pub async fn start(name: &str) -> Self {
        Self::start_with_card_name(name, name).await
    }

    pub async fn start_with_card_name(name: &str, card_name: &str) -> Self {
        Self::start_full(name, card_name, Arc::new(HealthProbe::default())).await
    }

    /// An agent whose health requests are counted in `probe`.
    pub async fn start_observed(name: &str, probe: Arc<HealthProbe>) -> Self {
        Self::start_full(name, name, probe).await
    }

    async fn start_full(name: &str, card_name: &str, probe: Arc<HealthProbe>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let health = Arc::new(AtomicU16::new(200));
        let card = json!({
            "name": card_name, "description": "test agent", "version": "1.0.0",
            "supportedInterfaces": [], "capabilities": {},
            "defaultInputModes": ["text/plain"], "defaultOutputModes": ["application/json"],
            "skills": [{"id": "search", "name": "Search", "description": "search", "tags": []}]
        });
        let health_state = health.clone();
        let health_delay_ms = Arc::new(AtomicU64::new(0));
        let delay_state = health_delay_ms.clone();
        let router =
            Router::new().route("/.well-known/agent-card.json", get(move || async move { axum::Json(card) })).route(
                "/health",
                get(move || {
                    let health = health_state.clone();
                    let delay_ms = delay_state.load(Ordering::SeqCst);
                    let probe = probe.clone();
                    async move {
                        probe.requests.fetch_add(1, Ordering::SeqCst);
                        let now = probe.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        probe.max_in_flight.fetch_max(now, Ordering::SeqCst);
                        let _in_flight = InFlight(probe);
                        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                        let code = health.load(Ordering::SeqCst);
                        if code == HANG {
                            std::future::pending::<()>().await;
                        }
                        StatusCode::from_u16(code).unwrap()
                    }
                }),
            );
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        Self { name: name.to_owned(), url, health, health_delay_ms, stop: Some(stop), server }
    }

    /// Makes `/health` take `delay_ms` before it answers.
    pub fn answer_health_after(&self, delay_ms: u64) {
        self.health_delay_ms.store(delay_ms, Ordering::SeqCst);
    }

    pub fn answer_health(&self, status: u16) {
        self.health.store(status, Ordering::SeqCst);
    }

    pub fn stop_answering_health(&self) {
        self.health.store(HANG, Ordering::SeqCst);
    }

    /// Closes the listener: connections are refused from now on.
    pub async fn kill(mut self) {
        self.answer_health(200); // let a hanging health call finish so shutdown completes
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.server.abort();
        let _ = (&mut self.server).await;
    }

    pub fn registration(&self, capabilities: &[&str]) -> Registration {
        Registration {
            name: self.name.clone(),
            url: self.url.clone(),
            capabilities: capabilities.iter().map(|c| c.to_string()).collect(),
            health_endpoint: "/health".into(),
            process_endpoint: "/tasks/send".into(),
            agent_card_url: None,
        }
    }
}

/// A registry on port 0 over a fresh SQLite file, polling health every 100 ms.
pub struct TestRegistry {
    pub url: String,
    pub client: RegistryClient,
    pub http: reqwest::Client,
    pub service: RegistryService,
    stop: Option<oneshot::Sender<()>>,
    server: JoinHandle<()>,
    _data: Option<tempfile::TempDir>,
}

impl TestRegistry {
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(adjust: impl FnOnce(&mut RegistryConfig)) -> Self {
        let data = tempfile::tempdir().unwrap();
        let database_url = format!("sqlite://{}", data.path().join("registry.db").display());
        Self::start_on(database_url, Some(data), adjust).await
    }

    /// A registry over `database_url`, which outlives it (for restarts over the same data).
    pub async fn start_on(
        database_url: String,
        data: Option<tempfile::TempDir>,
        adjust: impl FnOnce(&mut RegistryConfig),
    ) -> Self {
        let mut config = RegistryConfig {
            port: 0,
            database_url,
            health_check_interval_ms: TEST_HEALTH_INTERVAL_MS,
            health_check_timeout_ms: TEST_HEALTH_TIMEOUT_MS,
            ..RegistryConfig::default()
        };
        adjust(&mut config);
        let app = Application::build(&config).await.unwrap();
        let url = app.url();
        let service = app.service();
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            app.run_until_stopped(async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
        });
        let client = RegistryClient::new(&url, HttpClient::with_reqwest().unwrap()).unwrap();
        // The registry closes a keep-alive connection idle for its header-read timeout; a request
        // sent on a pooled connection just as it does fails (`IncompleteMessage`). So the test's
        // client lets idle connections go first, as the mesh's own client does.
        let idle = Duration::from_millis(config.serve.header_read_timeout_ms / 2);
        let http = reqwest::Client::builder().pool_idle_timeout(idle).build().unwrap();
        Self { url, client, http, service, stop: Some(stop), server, _data: data }
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.server).await.unwrap();
    }
}

/// Waits until `condition` holds, checking every 20 ms; fails the test after the deadline.
pub async fn eventually(what: &str, condition: impl AsyncFnMut() -> bool) {
    eventually_within(what, Duration::from_millis(WAIT_DEADLINE_MS), condition).await;
}

/// [`eventually`] with its own deadline, for work that takes long on a loaded machine.
pub async fn eventually_within(what: &str, within: Duration, condition: impl AsyncFnMut() -> bool) {
    mesh_test_support::eventually(what, within, condition).await;
}

/// The real `registry` binary as a child process on a free port, polling health every 200 ms;
/// killed when dropped.
pub struct RegistryProcess {
    child: std::process::Child,
    pub url: String,
    pub client: RegistryClient,
}

impl RegistryProcess {
    pub async fn spawn(database_url: &str) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_registry"))
            .args(["--port", &port.to_string(), "--database-url", database_url, "--health-check-interval-ms", "200"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("the registry binary starts");
        let url = format!("http://127.0.0.1:{port}");
        let client = RegistryClient::new(&url, HttpClient::with_reqwest().unwrap()).unwrap();
        let process = Self { child, url, client };
        eventually("the registry answers", || async { process.client.stats().await.is_ok() }).await;
        process
    }

    pub fn kill_9(mut self) {
        // `Child::kill` sends SIGKILL on Unix: no shutdown hook, no flush.
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for RegistryProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
