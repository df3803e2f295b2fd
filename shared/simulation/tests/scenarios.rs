//! Deterministic simulation of agent-to-agent calls (seed 000's DST list): the real registry,
//! agent kit and mesh caller on turmoil's network, each scenario under many seeds (random
//! message latency), with crashes, restarts, partitions both ways and one way, lost messages, a
//! registry outage and a storage fault. Every run records a trace of what the client saw; the
//! same seed must give the same trace, and the seeds must not all give one.
//!
//! What the simulation cannot put on its clock, and why:
//! - circuit breakers: `tower-resilience` reads `std::time::Instant`, which turmoil does not
//!   drive, so their cool-down is switched off here (see [`build`]) and they are tested on
//!   real time in the client kit's tests;
//! - the stores: SQLite runs on sqlx's own worker threads, outside the simulated runtime, so
//!   every database is opened before the run starts and the scenarios lean on what the services
//!   answer from memory. Duplicated messages cannot be made either: turmoil's TCP delivers a
//!   segment once or drops it, so a repeated call comes from a retry, which the loss scenario
//!   checks is never made for a call that may have reached its agent.

use mesh_storage::SQLITE_MEMORY_URL;
use mesh_tasks::TaskStore;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use mesh_a2a_server::CardDocument;
use mesh_agent_kit::call_agent::{WithCallAgent, call_agent_skill};
use mesh_agent_kit::{AgentError, AgentHandler, AgentReply, TaskInput, agent_router};
use mesh_client::{CallerSettings, CircuitSettings, Discovery, HttpClient, MeshCaller, RegistryClient, json_request};
use mesh_protocol::a2a::v1::AgentCard;
use mesh_protocol::call::{CALL_CHAIN_HEADER, CALL_DEADLINE_MS_HEADER};
use mesh_protocol::error::ErrorBody;
use mesh_protocol::registry::Registration;
use mesh_protocol::seed::{Part, TaskRequest, TaskResponse};
use mesh_server::ServiceMetrics;
use mesh_server::http::{HttpLimits, ServeConfig, with_common_layers};
use mesh_simulation::{SimTransport, serve};
use registry::{RegistryConfig, RegistryService};
use serde_json::{Value, json};

/// Seeds each scenario runs under.
const SEEDS: u64 = 100;
const PORT: u16 = 80;
const REGISTRY_URL: &str = "http://registry:80";
/// Simulated time a run may take before turmoil fails it: far beyond any scenario.
const SIM_DURATION_S: u64 = 120;
const LATENCY_MIN_MS: u64 = 1;
const LATENCY_MAX_MS: u64 = 20;
/// Simulated time one step advances: coarser steps make long scenarios cheap to run.
const TICK_MS: u64 = 5;
/// Extra time a timed assertion allows: two network hops at most latency, plus step rounding.
const TIMING_SLACK_MS: u64 = 2 * LATENCY_MAX_MS + 4 * TICK_MS;
/// How long the agents' discovery caches trust an answer.
const DISCOVERY_TTL_MS: u64 = 1_000;
/// The time a worker agent takes to answer.
const WORK_MS: u64 = 100;
/// The time the slow worker takes: far beyond any timeout the scenarios give.
const SLOW_WORK_MS: u64 = 60_000;
/// Polling period of a client waiting for the registry to be up.
const READY_POLL_MS: u64 = 10;
/// Client-side bound on one request, above every deadline the scenarios set.
const CLIENT_TIMEOUT_MS: u64 = 40_000;

/// The agents every run knows: name, capability, and how long each takes to answer.
const AGENTS: &[(&str, &str, u64)] = &[
    ("a", "front", WORK_MS),
    ("b", "relay", WORK_MS),
    ("c", "relay2", WORK_MS),
    ("d", "relay3", WORK_MS),
    ("e", "relay4", WORK_MS),
    ("f", "relay5", WORK_MS),
    ("w1", "work", WORK_MS),
    ("w2", "work", WORK_MS),
    ("slow", "slow", SLOW_WORK_MS),
];

/// A worker: answers after its delay with who answered and the call context it saw, and logs
/// each call it takes up in the run's [`Shared::work`].
#[derive(Debug)]
struct Worker {
    name: &'static str,
    delay: Duration,
    shared: Arc<Shared>,
}

impl AgentHandler for Worker {
    async fn handle(&self, task: TaskInput) -> Result<AgentReply, AgentError> {
        let work = self.shared.begin_work(self.name, Value::Object(task.data));
        tokio::time::sleep(self.delay).await;
        self.shared.finish_work(work);
        Ok(AgentReply::data(json!({"answered_by": self.name, "chain": task.call.context().chain})))
    }
}

fn card(name: &str, capability: &str) -> AgentCard {
    let mut card: AgentCard = serde_json::from_value(json!({
        "name": name, "description": "simulated agent", "version": "1", "supportedInterfaces": [],
        "capabilities": {}, "defaultInputModes": ["text/plain"], "defaultOutputModes": ["application/json"],
        "skills": [{"id": capability, "name": capability, "description": capability, "tags": []}]
    }))
    .expect("a valid card");
    card.skills.push(call_agent_skill());
    card
}

/// A registry database holding every agent of [`AGENTS`], written once per test binary; each run
/// opens its own copy.
fn prepared_database() -> &'static Path {
    static DATABASE: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, path) = DATABASE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("registry.db");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        runtime.block_on(async {
            let config = RegistryConfig {
                database_url: format!("sqlite://{}", path.display()),
                verify_registrations: false,
                serve: simulated_hosts(),
                ..RegistryConfig::default()
            };
            let service = RegistryService::open(&config, HttpClient::new(Arc::new(SimTransport)))
                .await
                .expect("open the registry");
            let http = HttpClient::new(Arc::new(RouterTransport(service.router())));
            let registry = RegistryClient::new("http://registry", http).expect("a registry URL");
            for (name, capability, _) in AGENTS {
                let registration: Registration = serde_json::from_value(json!({
                    "name": name, "url": format!("http://{name}:{PORT}"), "capabilities": [capability, "call_agent"]
                }))
                .expect("a registration");
                registry.register(&registration).await.expect("register");
            }
            service.close_storage().await;
        });
        (dir, path)
    });
    path
}

/// Sends requests straight into a router, for preparing the database without a network.
#[derive(Debug, Clone)]
struct RouterTransport(axum::Router);

impl mesh_client::Transport for RouterTransport {
    fn send(
        &self,
        request: Request<Bytes>,
        _timeout: Duration,
    ) -> mesh_client::BoxFuture<'static, Result<http::Response<Bytes>, mesh_client::TransportError>> {
        use http_body_util::BodyExt;
        use tower::ServiceExt;
        let router = self.0.clone();
        Box::pin(async move {
            let response = router
                .oneshot(request.map(axum::body::Body::from))
                .await
                .map_err(|e| mesh_client::TransportError::Other(e.to_string()))?;
            let (parts, body) = response.into_parts();
            let body = body.collect().await.map_err(|e| mesh_client::TransportError::Other(e.to_string()))?;
            Ok(http::Response::from_parts(parts, body.to_bytes()))
        })
    }
}

/// When the driver does something to the simulated world.
#[derive(Debug, Clone, Copy)]
enum When {
    /// This long after the client started.
    AfterMs(u64),
    /// As soon as the agent is working on a call: a crash then interrupts a call for sure,
    /// whatever timing the seed's latencies give the run.
    Working(&'static str),
}

/// Something the driver does to the simulated world.
#[derive(Debug, Clone, Copy)]
enum Fault {
    Crash(&'static str),
    Restart(&'static str),
    Partition(&'static str, &'static str),
    Repair(&'static str, &'static str),
    /// Messages from the first host to the second are lost; the other way still works.
    PartitionOneWay(&'static str, &'static str),
    RepairOneWay(&'static str, &'static str),
}

/// A call a worker took up.
#[derive(Debug, Clone, PartialEq)]
struct Work {
    agent: &'static str,
    /// The data part the call carried.
    data: Value,
    /// Whether the worker answered it (a crash leaves it unanswered).
    answered: bool,
}

/// What one run shares between its hosts, its client and the driver.
#[derive(Debug, Default)]
struct Shared {
    registry_ready: AtomicBool,
    /// Simulated time at which the client started, once it has.
    client_started: Mutex<Option<Duration>>,
    trace: Mutex<Vec<String>>,
    /// Every call a worker took up, in the order they were taken up.
    work: Mutex<Vec<Work>>,
    /// Each crash: the host, and the data of the calls it was working on when it went down.
    crashes: Mutex<Vec<(&'static str, Vec<Value>)>>,
}

impl Shared {
    fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn record(&self, line: String) {
        self.trace.lock().expect("the trace").push(line);
    }

    /// Logs that `agent` took up a call carrying `data`; returns its place in the log.
    fn begin_work(&self, agent: &'static str, data: Value) -> usize {
        let mut work = self.work.lock().expect("the work log");
        work.push(Work { agent, data, answered: false });
        work.len() - 1
    }

    fn finish_work(&self, index: usize) {
        self.work.lock().expect("the work log")[index].answered = true;
    }

    /// The calls `agent` took up, answered or not.
    fn work_of(&self, agent: &str) -> Vec<Work> {
        self.work.lock().expect("the work log").iter().filter(|w| w.agent == agent).cloned().collect()
    }

    fn handled(&self, agent: &str) -> usize {
        self.work_of(agent).len()
    }

    /// The data of the calls `agent` has taken up and not answered.
    fn in_flight(&self, agent: &str) -> Vec<Value> {
        self.work_of(agent).into_iter().filter(|w| !w.answered).map(|w| w.data).collect()
    }

    /// What `host` was working on when it crashed, for each of its crashes.
    fn crashes_of(&self, host: &str) -> Vec<Vec<Value>> {
        let crashes = self.crashes.lock().expect("the crashes");
        crashes.iter().filter(|(h, _)| *h == host).map(|(_, in_flight)| in_flight.clone()).collect()
    }

    /// Simulated time since the client started (zero before it has).
    fn since_client_started(&self, now: Duration) -> Duration {
        self.client_started.lock().expect("the start time").map_or(Duration::ZERO, |started| now - started)
    }

    fn is_due(&self, when: When, now: Duration) -> bool {
        match when {
            When::AfterMs(at_ms) => {
                let started = *self.client_started.lock().expect("the start time");
                started.is_some_and(|started| now >= started + Duration::from_millis(at_ms))
            }
            When::Working(agent) => !self.in_flight(agent).is_empty(),
        }
    }
}

/// Options of one run.
#[derive(Debug, Clone, Copy, Default)]
struct World {
    /// The agents of [`AGENTS`] that run (all when `None`): fewer hosts, faster runs.
    agents: Option<&'static [&'static str]>,
    /// Close the registry's storage this long after it is up.
    storage_fault_after_ms: Option<u64>,
    /// Links that lose messages: each message sent on one breaks it with probability
    /// [`LINK_FAIL_RATE`], and each sent on a broken one repairs it with [`LINK_REPAIR_RATE`]
    /// (turmoil's model: a broken link drops what is sent on it).
    lossy_links: &'static [(&'static str, &'static str)],
}

impl World {
    fn with(agents: &'static [&'static str]) -> Self {
        Self { agents: Some(agents), ..Self::default() }
    }
}

/// The client's view of one request's outcome.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Answer(TaskResponse),
    Error {
        status: u16,
        body: ErrorBody,
    },
    /// No answer at all (the run failed to deliver one within the client's bound).
    Nothing(String),
}

impl Seen {
    fn describe(&self) -> String {
        match self {
            Seen::Answer(response) => {
                let data = response.messages.iter().flat_map(|m| &m.parts).find_map(|p| match p {
                    Part::Data { data } => Some(data.clone()),
                    Part::Text { .. } => None,
                });
                format!("{:?} {}", response.status, data.unwrap_or(Value::Null))
            }
            Seen::Error { status, body } => {
                format!("{status} {:?} {}: {}", body.status, body.error_code, body.error_message)
            }
            Seen::Nothing(reason) => format!("no answer: {reason}"),
        }
    }

    fn answered_by(&self) -> Option<String> {
        let Seen::Answer(response) = self else { return None };
        response.messages.iter().flat_map(|m| &m.parts).find_map(|p| match p {
            Part::Data { data } => data["answered_by"].as_str().map(str::to_owned),
            Part::Text { .. } => None,
        })
    }

    fn error_code(&self) -> Option<&str> {
        match self {
            Seen::Error { body, .. } => Some(&body.error_code),
            _ => None,
        }
    }
}

/// The client: waits for the registry, then posts tasks and records what it sees.
#[derive(Debug, Clone)]
struct Client {
    http: HttpClient,
    shared: Arc<Shared>,
    started: tokio::time::Instant,
}

impl Client {
    async fn start(shared: Arc<Shared>) -> Self {
        while !shared.registry_ready.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(READY_POLL_MS)).await;
        }
        *shared.client_started.lock().expect("the start time") = turmoil::sim_elapsed();
        Self { http: HttpClient::new(Arc::new(SimTransport)), shared, started: tokio::time::Instant::now() }
    }

    /// Posts `data` (a `call_agent` request, or any task data) with `text` to `agent`.
    async fn send(&self, label: &str, agent: &str, data: Value, headers: &[(&str, &str)]) -> Seen {
        let task = TaskRequest::from_text(None, "hello", Some(data));
        let url = format!("http://{agent}:{PORT}/tasks/send");
        let mut request = json_request(Method::POST, &url, Some(&task)).expect("a request");
        for (name, value) in headers {
            request.headers_mut().insert(
                http::HeaderName::from_bytes(name.as_bytes()).expect("a header name"),
                http::HeaderValue::from_str(value).expect("a header value"),
            );
        }
        let seen = match self.http.send(request, Duration::from_millis(CLIENT_TIMEOUT_MS)).await {
            Ok(response) if response.status().is_success() => match serde_json::from_slice(response.body()) {
                Ok(answer) => Seen::Answer(answer),
                Err(e) => Seen::Nothing(format!("not a task response: {e}")),
            },
            Ok(response) => match serde_json::from_slice(response.body()) {
                Ok(body) => Seen::Error { status: response.status().as_u16(), body },
                Err(e) => Seen::Nothing(format!("{} without an error body: {e}", response.status())),
            },
            Err(error) => Seen::Nothing(error.to_string()),
        };
        let at_ms = self.started.elapsed().as_millis();
        self.shared.record(format!("{at_ms:>6} ms {label}: {}", seen.describe()));
        seen
    }

    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// `{"skill":"call_agent", ...}` for `target` (`agent_id` or `capability`), nesting `data`.
fn call(key: &str, target: &str, data: Option<Value>, timeout_ms: Option<u64>) -> Value {
    let mut request = json!({"skill": "call_agent", key: target, "message": "hello"});
    if let Some(data) = data {
        request["data"] = data;
    }
    if let Some(timeout_ms) = timeout_ms {
        request["timeout_ms"] = json!(timeout_ms);
    }
    request
}

/// The simulated network names its hosts (`registry`, `search`, ...), and its servers run open:
/// they answer every host name, as a deployment's open servers must be told to (the Host check
/// of an open server allows loopback names only by default).
fn simulated_hosts() -> ServeConfig {
    ServeConfig { allowed_hosts: vec!["*".to_owned()], ..ServeConfig::default() }
}

/// The registry of one run, on a copy of the prepared database. It is opened outside the
/// simulation (on a runtime of its own, kept by the caller), so no database work, which takes
/// wall-clock time, happens while the simulated clock runs: lookups are answered from memory.
fn open_registry(run_dir: &Path) -> RegistryService {
    let database = run_dir.join("registry.db");
    std::fs::copy(prepared_database(), &database).expect("copy the registry database");
    let config = RegistryConfig {
        database_url: format!("sqlite://{}", database.display()),
        serve: simulated_hosts(),
        ..RegistryConfig::default()
    };
    STORAGE_RUNTIME
        .block_on(RegistryService::open(&config, HttpClient::new(Arc::new(SimTransport))))
        .expect("open the registry")
}

/// The runtime the registries' and agents' databases are opened on, alive for the whole test
/// binary.
static STORAGE_RUNTIME: std::sync::LazyLock<tokio::runtime::Runtime> = std::sync::LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("a runtime")
});

/// Builds a run: the registry (on a copy of the prepared database) and the agents of `world`.
fn build(seed: u64, world: World, shared: &Arc<Shared>, run_dir: &Path) -> turmoil::Sim<'static> {
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .simulation_duration(Duration::from_secs(SIM_DURATION_S))
        .tick_duration(Duration::from_millis(TICK_MS))
        .min_message_latency(Duration::from_millis(LATENCY_MIN_MS))
        .max_message_latency(Duration::from_millis(LATENCY_MAX_MS))
        .repair_rate(LINK_REPAIR_RATE)
        .build();
    let registry = open_registry(run_dir);
    let ready = shared.clone();
    sim.host("registry", move || {
        let (service, shared) = (registry.clone(), ready.clone());
        async move {
            if let Some(after_ms) = world.storage_fault_after_ms {
                let faulty = service.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(after_ms)).await;
                    faulty.close_storage().await;
                });
            }
            shared.registry_ready.store(true, Ordering::SeqCst);
            serve(PORT, service.router()).await?;
            Ok(())
        }
    });
    for &(name, capability, delay_ms) in AGENTS {
        if world.agents.is_some_and(|agents| !agents.contains(&name)) {
            continue;
        }
        let shared = shared.clone();
        // Like the registry's database, opened outside the simulation: its writer commits on the
        // storage runtime, and seed calls do not wait for it.
        let tasks = STORAGE_RUNTIME.block_on(TaskStore::open(SQLITE_MEMORY_URL, name)).expect("open a task store");
        sim.host(name, move || {
            let (shared, tasks) = (shared.clone(), tasks.clone());
            async move {
                let http = HttpClient::new(Arc::new(SimTransport));
                let registry = RegistryClient::new(REGISTRY_URL, http.clone())?;
                let discovery = Discovery::new(registry.clone(), http.clone(), Duration::from_millis(DISCOVERY_TTL_MS));
                // A circuit's cool-down runs on the wall clock, which a simulation must not read:
                // with none, an open circuit lets the next call probe at once, whatever the speed
                // of the machine (circuits are exercised on their own in the client kit's tests).
                let circuits = CircuitSettings { open: Duration::ZERO, ..CircuitSettings::default() };
                let settings = CallerSettings { jitter_seed: Some(seed), circuits, ..CallerSettings::default() };
                let caller = Arc::new(MeshCaller::new(http, registry, Arc::new(discovery), settings));
                let worker = Worker { name, delay: Duration::from_millis(delay_ms), shared };
                let handler = WithCallAgent::new(worker, caller);
                let metrics = ServiceMetrics::new(name);
                let router = agent_router(
                    CardDocument::new(card(name, capability))?,
                    handler,
                    metrics,
                    tasks,
                    None,
                    None,
                    mesh_a2a_server::TaskLimits::default(),
                );
                let limits = HttpLimits { allowed_hosts: simulated_hosts().allowed_hosts, ..HttpLimits::default() };
                serve(PORT, with_common_layers(router, limits)).await?;
                Ok(())
            }
        });
    }
    for &(a, b) in world.lossy_links {
        sim.set_link_fail_rate(a, b, LINK_FAIL_RATE);
    }
    sim
}

/// Runs `sim` to the end, applying `faults` in the order given, each when it is due. A crash is
/// traced with the calls the host was working on.
fn drive(mut sim: turmoil::Sim<'_>, shared: &Shared, faults: Vec<(When, Fault)>) {
    let mut faults = faults.into_iter().peekable();
    loop {
        if let Some(&(when, fault)) = faults.peek()
            && shared.is_due(when, sim.elapsed())
        {
            faults.next();
            match fault {
                Fault::Crash(host) => {
                    let in_flight = shared.in_flight(host);
                    let at_ms = shared.since_client_started(sim.elapsed()).as_millis();
                    shared.record(format!("{at_ms:>6} ms crash {host}, working on {in_flight:?}"));
                    shared.crashes.lock().expect("the crashes").push((host, in_flight));
                    sim.crash(host);
                }
                Fault::Restart(host) => sim.bounce(host),
                Fault::Partition(a, b) => sim.partition(a, b),
                Fault::Repair(a, b) => sim.repair(a, b),
                Fault::PartitionOneWay(from, to) => sim.partition_oneway(from, to),
                Fault::RepairOneWay(from, to) => sim.repair_oneway(from, to),
            }
            continue;
        }
        match sim.step() {
            Ok(true) => return,
            Ok(false) => {}
            Err(error) => panic!("the simulation failed: {error}"),
        }
    }
}

/// Runs one scenario under `seed`: `client` drives the calls, `faults` hit the world meanwhile.
/// Returns the trace.
fn run<F, Fut>(seed: u64, world: World, faults: Vec<(When, Fault)>, client: F) -> Vec<String>
where
    F: Fn(Client) -> Fut + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let run_dir = tempfile::tempdir().expect("a temporary directory");
    let shared = Shared::new();
    let mut sim = build(seed, world, &shared, run_dir.path());
    let for_client = shared.clone();
    sim.client("client", async move {
        client(Client::start(for_client).await).await;
        Ok(())
    });
    drive(sim, &shared, faults);
    shared.trace.lock().expect("the trace").clone()
}

/// Runs a scenario under every seed, and checks that the seed decides the run: the first seed
/// run again gives the same trace, and the seeds do not all give one trace (as they would if the
/// seed stopped reaching turmoil, making the hundred runs one). Returns every seed's trace.
fn under_every_seed<F, Fut>(world: World, faults: &[(When, Fault)], client: F) -> Vec<Vec<String>>
where
    F: Fn(Client) -> Fut + Clone + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let traces: Vec<Vec<String>> = (0..SEEDS).map(|seed| run(seed, world, faults.to_vec(), client.clone())).collect();
    assert!(traces.iter().all(|trace| !trace.is_empty()), "every run records what the client saw");
    assert_eq!(run(0, world, faults.to_vec(), client), traces[0], "seed 0 run again");
    let distinct: std::collections::BTreeSet<&Vec<String>> = traces.iter().collect();
    assert!(distinct.len() > 1, "{SEEDS} seeds gave one trace: {:?}", traces[0]);
    traces
}

fn expect_answer(seen: &Seen, what: &str) -> String {
    assert!(matches!(seen, Seen::Answer(_)), "{what}: {}", seen.describe());
    seen.answered_by().unwrap_or_else(|| panic!("{what}: no answered_by in {}", seen.describe()))
}

#[test]
fn an_agent_calls_another_and_gets_its_answer() {
    under_every_seed(World::with(&["a", "w1", "w2"]), &[], |client| async move {
        let seen = client.send("by capability", "a", call("capability", "work", None, None), &[]).await;
        let by = expect_answer(&seen, "call by capability");
        assert!(by == "w1" || by == "w2", "{by}");
        let seen = client.send("by name", "a", call("agent_id", "w2", None, None), &[]).await;
        assert_eq!(expect_answer(&seen, "call by name"), "w2");
        let Seen::Answer(answer) = &seen else { unreachable!() };
        let chain = answer.messages[0].parts.iter().find_map(|p| match p {
            Part::Data { data } => Some(data["chain"].clone()),
            Part::Text { .. } => None,
        });
        assert_eq!(chain, Some(json!(["a"])), "the callee sees the caller in the chain");
        // Round-robin: consecutive calls by capability reach both replicas.
        let mut seen_by = Vec::new();
        for _ in 0..4 {
            let seen = client.send("rotation", "a", call("capability", "work", None, None), &[]).await;
            seen_by.push(expect_answer(&seen, "rotation"));
        }
        assert!(seen_by.contains(&"w1".to_owned()) && seen_by.contains(&"w2".to_owned()), "{seen_by:?}");
    });
}

#[test]
fn a_cycle_is_refused_before_any_work_naming_the_chain() {
    under_every_seed(World::with(&["a", "b", "w1"]), &[], |client| async move {
        // a -> b -> a: b refuses to call back into a, which is waiting on it.
        let back_to_a = call("agent_id", "a", None, None);
        let seen = client.send("a->b->a", "a", call("agent_id", "b", Some(back_to_a), None), &[]).await;
        assert_eq!(seen.error_code(), Some("CALL_CYCLE_DETECTED"), "{}", seen.describe());
        let Seen::Error { status, body } = &seen else { unreachable!() };
        assert_eq!(*status, 508);
        assert!(body.error_message.contains("a -> b -> a"), "{}", body.error_message);
        // A call arriving with the receiver already in its chain is refused by the receiver itself.
        let handled_before = client.shared.handled("w1");
        let seen = client.send("forged chain", "w1", json!({"any": "task"}), &[(CALL_CHAIN_HEADER, "x,w1")]).await;
        assert_eq!(seen.error_code(), Some("CALL_CYCLE_DETECTED"), "{}", seen.describe());
        assert_eq!(client.shared.handled("w1"), handled_before, "no work was done");
    });
}

#[test]
fn a_slow_callee_times_out_within_the_callers_deadline() {
    under_every_seed(World::with(&["a", "slow"]), &[], |client| async move {
        let before = client.elapsed();
        let seen = client.send("timeout_ms 300", "a", call("capability", "slow", None, Some(300)), &[]).await;
        let took = client.elapsed() - before;
        let Seen::Error { status, body } = &seen else { panic!("{}", seen.describe()) };
        assert_eq!((*status, body.error_code.as_str()), (504, "AGENT_TIMEOUT"), "{}", seen.describe());
        assert_eq!(body.status, mesh_protocol::error::FailureStatus::Timeout);
        assert!(took < Duration::from_millis(300 + TIMING_SLACK_MS), "took {took:?}");
        // The caller's own deadline caps what it asks of the callee.
        let before = client.elapsed();
        let seen = client
            .send(
                "deadline 200",
                "a",
                call("capability", "slow", None, Some(5_000)),
                &[(CALL_DEADLINE_MS_HEADER, "200")],
            )
            .await;
        let took = client.elapsed() - before;
        assert!(matches!(seen.error_code(), Some("AGENT_TIMEOUT" | "CALL_DEADLINE_EXCEEDED")), "{}", seen.describe());
        assert!(took < Duration::from_millis(200 + TIMING_SLACK_MS), "took {took:?}");
    });
}

/// `a` asks `b` to ask `c`, ... along `path`, ending with a call to the last one by name.
fn nested(path: &[&str]) -> Value {
    let mut data: Option<Value> = None;
    for agent in path.iter().skip(1).rev() {
        data = Some(call("agent_id", agent, data, None));
    }
    data.expect("a path of two agents at least")
}

#[test]
fn a_call_chain_reaching_depth_five_is_refused() {
    under_every_seed(World::with(&["a", "b", "c", "d", "e", "f"]), &[], |client| async move {
        let seen = client.send("depth 4", "a", nested(&["a", "b", "c", "d", "e"]), &[]).await;
        assert_eq!(expect_answer(&seen, "a chain of five agents"), "e");
        let seen = client.send("depth 5", "a", nested(&["a", "b", "c", "d", "e", "f"]), &[]).await;
        assert_eq!(seen.error_code(), Some("CALL_DEPTH_EXCEEDED"), "{}", seen.describe());
        let Seen::Error { body, .. } = &seen else { unreachable!() };
        assert!(body.error_message.contains("a -> b -> c -> d -> e"), "{}", body.error_message);
        assert_eq!(client.shared.handled("f"), 0, "the sixth agent never worked");
    });
}

#[test]
fn a_partition_fails_the_call_cleanly_and_repair_restores_it() {
    let faults = [(When::AfterMs(1_000), Fault::Partition("a", "b")), (When::AfterMs(3_000), Fault::Repair("a", "b"))];
    under_every_seed(World::with(&["a", "b"]), &faults, |client| async move {
        let seen = client.send("before", "a", call("agent_id", "b", None, Some(500)), &[]).await;
        assert_eq!(expect_answer(&seen, "before the partition"), "b");
        tokio::time::sleep(Duration::from_millis(1_500).saturating_sub(client.elapsed())).await;
        let seen = client.send("partitioned", "a", call("agent_id", "b", None, Some(500)), &[]).await;
        let Seen::Error { status, body } = &seen else { panic!("{}", seen.describe()) };
        assert!(matches!(*status, 503 | 504), "{}", seen.describe());
        assert!(!body.error_message.is_empty());
        tokio::time::sleep(Duration::from_millis(3_500).saturating_sub(client.elapsed())).await;
        let seen = client.send("repaired", "a", call("agent_id", "b", None, Some(500)), &[]).await;
        assert_eq!(expect_answer(&seen, "after the repair"), "b");
    });
}

/// The one-way partitions: first `a`'s requests to `b` are lost (`b` never hears of the call),
/// then, once `b` is working on a call, `b`'s answers to `a` are lost (`b` did the work, `a`
/// never hears of it). Either way `a` answers its caller with a clean error within the call's
/// time, and does not send the call again: one that may have been done is not repeated.
#[test]
fn one_way_partitions_fail_calls_cleanly_and_never_repeat_work() {
    let faults = [
        (When::AfterMs(1_000), Fault::PartitionOneWay("a", "b")),
        (When::AfterMs(3_000), Fault::RepairOneWay("a", "b")),
        (When::Working("b"), Fault::PartitionOneWay("b", "a")),
        (When::AfterMs(6_000), Fault::RepairOneWay("b", "a")),
    ];
    under_every_seed(World::with(&["a", "b"]), &faults, |client| async move {
        let seen = client.send("before", "a", call("agent_id", "b", None, Some(500)), &[]).await;
        assert_eq!(expect_answer(&seen, "before the partitions"), "b");
        for (label, starts_ms, reaches_b) in [("requests lost", 1_500, false), ("answers lost", 3_500, true)] {
            tokio::time::sleep(Duration::from_millis(starts_ms).saturating_sub(client.elapsed())).await;
            let data = json!({"call": label});
            let before = client.elapsed();
            let seen = client.send(label, "a", call("agent_id", "b", Some(data.clone()), Some(500)), &[]).await;
            let took = client.elapsed() - before;
            let Seen::Error { status, body } = &seen else { panic!("{label}: {}", seen.describe()) };
            assert!(matches!(*status, 503 | 504), "{label}: {}", seen.describe());
            assert!(!body.error_message.is_empty(), "{label}");
            assert!(took < Duration::from_millis(500 + TIMING_SLACK_MS), "{label}: took {took:?}");
            let worked = client.shared.work_of("b").iter().filter(|work| work.data == data).count();
            assert_eq!(worked, usize::from(reaches_b), "{label}: times b took the call up");
        }
        tokio::time::sleep(Duration::from_millis(6_500).saturating_sub(client.elapsed())).await;
        let seen = client.send("repaired", "a", call("agent_id", "b", None, Some(500)), &[]).await;
        assert_eq!(expect_answer(&seen, "after both repairs"), "b");
    });
}

/// Calls the loss scenario makes, one after the other.
const LOSS_ROUNDS: usize = 8;
/// Each loss round's time: beyond a lost connection attempt's, so a call can be tried again.
const LOSS_ROUND_TIMEOUT_MS: u64 = 3_000;
/// Chance that a message sent on a lossy link breaks it.
const LINK_FAIL_RATE: f64 = 0.05;
/// Chance that a message sent on a broken link repairs it (a message's own fate is decided
/// after: the one that repairs the link goes through).
const LINK_REPAIR_RATE: f64 = 0.3;

/// Links between the caller and its callees lose messages: requests, answers, connection
/// attempts. Every call still ends with the callee's answer or a clean error within its time,
/// never silence; an answer comes from the replica that did the work; and no call is done twice:
/// only a call that cannot have reached a callee is sent again.
#[test]
fn lost_messages_end_every_call_with_an_answer_or_a_clean_error_and_never_repeat_work() {
    let world = World { lossy_links: &[("a", "w1"), ("a", "w2")], ..World::with(&["a", "w1", "w2"]) };
    let traces = under_every_seed(world, &[], |client| async move {
        for round in 0..LOSS_ROUNDS {
            let data = json!({"round": round});
            let request = call("capability", "work", Some(data.clone()), Some(LOSS_ROUND_TIMEOUT_MS));
            let before = client.elapsed();
            let seen = client.send(&format!("round {round}"), "a", request, &[]).await;
            let took = client.elapsed() - before;
            let took_up: Vec<Work> =
                ["w1", "w2"].iter().flat_map(|w| client.shared.work_of(w)).filter(|work| work.data == data).collect();
            assert!(took_up.len() <= 1, "round {round} was taken up {} times: {took_up:?}", took_up.len());
            match &seen {
                Seen::Answer(_) => {
                    let by = expect_answer(&seen, &format!("round {round}"));
                    assert!(
                        took_up.first().is_some_and(|work| work.agent == by && work.answered),
                        "round {round} answered by {by}, which did not do it: {took_up:?}"
                    );
                }
                Seen::Error { status, body } => {
                    assert!(matches!(*status, 502..=504), "round {round}: {}", seen.describe());
                    assert!(!body.error_message.is_empty(), "round {round}");
                    assert!(
                        took < Duration::from_millis(LOSS_ROUND_TIMEOUT_MS + TIMING_SLACK_MS),
                        "round {round}: took {took:?}"
                    );
                }
                Seen::Nothing(reason) => panic!("round {round}: no answer and no error: {reason}"),
            }
        }
    });
    // The links did lose messages: some calls failed, and most were still answered.
    let lines: Vec<&String> = traces.iter().flatten().collect();
    let failed = lines.iter().filter(|line| !line.contains("Success")).count();
    assert!(failed > 0, "no call of {} failed: the links lost nothing", lines.len());
    assert!(failed * 2 < lines.len(), "{failed} of {} calls failed", lines.len());
}

/// Calls by capability the crash scenario makes before the restart: enough for round-robin to
/// reach `w1` (the crash waits for it) and then to keep going with `w1` down.
const CRASH_ROUNDS: usize = 6;
/// Pause between those rounds.
const CRASH_ROUND_PAUSE_MS: u64 = 400;
/// Each round's deadline: shorter than the time to the restart, so a round `w1` was working on
/// when it crashed can only be answered by a retry on the other replica.
const CRASH_ROUND_TIMEOUT_MS: u64 = 8_000;
/// When `w1` comes back, after the client started: after the last round's deadline.
const RESTART_AFTER_MS: u64 = 10_000;
/// When the calls to the restarted replica start.
const AFTER_RESTART_MS: u64 = 12_000;
/// Calls by name to the restarted replica.
const AFTER_RESTART_CALLS: usize = 4;

/// A replica crashes while it works on a call (the driver crashes `w1` as soon as it takes one
/// up) and restarts later: the interrupted call is retried on the other replica and answered, no
/// call is lost while `w1` is down, and the restarted replica answers again.
async fn crash_and_restart(client: Client) {
    let mut answered = Vec::new();
    for round in 0..CRASH_ROUNDS {
        let request = call("capability", "work", Some(json!({"round": round})), Some(CRASH_ROUND_TIMEOUT_MS));
        let seen = client.send(&format!("round {round}"), "a", request, &[]).await;
        answered.push(expect_answer(&seen, &format!("round {round}")));
        tokio::time::sleep(Duration::from_millis(CRASH_ROUND_PAUSE_MS)).await;
    }
    let crashes = client.shared.crashes_of("w1");
    let [in_flight] = crashes.as_slice() else { panic!("w1 should have crashed once: {crashes:?}") };
    let [interrupted] = in_flight.as_slice() else {
        panic!("w1 should have been working on one call when it crashed: {in_flight:?}")
    };
    let round = interrupted["round"].as_u64().and_then(|r| usize::try_from(r).ok()).expect("a round");
    // The restart comes after the round's deadline: only the other replica can have answered.
    assert_eq!(answered[round], "w2", "round {round}, interrupted by the crash: {answered:?}");
    let retried = client.shared.work_of("w2").into_iter().any(|work| work.data == *interrupted && work.answered);
    assert!(retried, "round {round} was retried on w2");
    assert!(answered[round..].iter().all(|by| by == "w2"), "w1 is down from round {round} on: {answered:?}");

    tokio::time::sleep(Duration::from_millis(AFTER_RESTART_MS).saturating_sub(client.elapsed())).await;
    let answered_by_w1_before = client.shared.work_of("w1").iter().filter(|work| work.answered).count();
    for call_number in 0..AFTER_RESTART_CALLS {
        let seen =
            client.send(&format!("after restart {call_number}"), "a", call("agent_id", "w1", None, None), &[]).await;
        assert_eq!(expect_answer(&seen, "after the restart"), "w1");
    }
    let answered_by_w1 = client.shared.work_of("w1").iter().filter(|work| work.answered).count();
    assert_eq!(answered_by_w1 - answered_by_w1_before, AFTER_RESTART_CALLS, "the restarted w1 did the work");
}

const CRASH_WORLD: World = World { agents: Some(&["a", "w1", "w2"]), storage_fault_after_ms: None, lossy_links: &[] };
const CRASH_FAULTS: [(When, Fault); 2] =
    [(When::Working("w1"), Fault::Crash("w1")), (When::AfterMs(RESTART_AFTER_MS), Fault::Restart("w1"))];

#[test]
fn a_replica_crashing_mid_call_and_restarting_loses_no_call() {
    under_every_seed(CRASH_WORLD, &CRASH_FAULTS, crash_and_restart);
}

#[test]
fn discovery_keeps_working_from_cache_while_the_registry_is_down() {
    let faults = [(When::AfterMs(500), Fault::Crash("registry"))];
    under_every_seed(World::with(&["a", "b", "w1", "w2"]), &faults, |client| async move {
        let seen = client.send("registry up", "a", call("capability", "work", None, None), &[]).await;
        expect_answer(&seen, "with the registry up");
        let seen = client.send("registry up, by name", "a", call("agent_id", "b", None, None), &[]).await;
        expect_answer(&seen, "by name with the registry up");
        // Past the cache's TTL, with the registry gone.
        tokio::time::sleep(Duration::from_millis(500 + 2 * DISCOVERY_TTL_MS)).await;
        let seen = client.send("registry down", "a", call("capability", "work", None, None), &[]).await;
        expect_answer(&seen, "from the stale cache");
        let seen = client.send("registry down, by name", "a", call("agent_id", "b", None, None), &[]).await;
        assert_eq!(expect_answer(&seen, "by name from the stale cache"), "b");
        // An agent never looked up cannot be found without the registry: a clean error.
        let seen = client.send("never looked up", "a", call("agent_id", "c", None, Some(3_000)), &[]).await;
        assert!(matches!(&seen, Seen::Error { .. }), "{}", seen.describe());
    });
}

#[test]
fn a_registry_storage_fault_refuses_writes_and_calls_go_on() {
    let world = World { storage_fault_after_ms: Some(100), ..World::with(&["a", "w1", "w2"]) };
    under_every_seed(world, &[], |client| async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        // Registering a real agent again needs the database: refused with 503 and a body.
        let registration = json!({"name": "w1", "url": "http://w1:80", "capabilities": ["work", "call_agent"]});
        let request =
            json_request(Method::POST, &format!("{REGISTRY_URL}/register"), Some(&registration)).expect("a request");
        let response = client.http.send(request, Duration::from_millis(CLIENT_TIMEOUT_MS)).await.expect("an answer");
        let body: ErrorBody = serde_json::from_slice(response.body()).expect("an error body");
        assert_eq!((response.status().as_u16(), body.error_code.as_str()), (503, "STORAGE_UNAVAILABLE"));
        client.shared.record(format!("re-register: {} {}", response.status(), body.error_code));
        // Discovery is answered from memory: calls go on.
        let seen = client.send("after the fault", "a", call("capability", "work", None, None), &[]).await;
        expect_answer(&seen, "with the registry's storage down");
    });
}

#[test]
fn the_same_seed_gives_the_same_trace() {
    for seed in 0..SEEDS {
        let first = run(seed, CRASH_WORLD, CRASH_FAULTS.to_vec(), crash_and_restart);
        let second = run(seed, CRASH_WORLD, CRASH_FAULTS.to_vec(), crash_and_restart);
        assert!(!first.is_empty());
        assert_eq!(first, second, "seed {seed}");
    }
}
