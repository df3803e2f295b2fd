//! The suite as replicas over one PostgreSQL database (issue #16), end to end on real processes
//! and ports: three registry replicas and two replicas of every agent (orchestrator, search,
//! entity extraction, profile selection), each agent given all three registries, their tasks,
//! registrations and search documents in the one database. Steady orchestrated load goes through
//! a balancer that, as a Kubernetes Service does, sends only to orchestrators answering ready.
//!
//! - One registry replica and one search replica are SIGKILLed mid-load and restarted: at least
//!   99.9% of the queries are answered (`SUCCESS` or `PARTIAL`), no registration is lost, and
//!   while all three registries run they check each agent once per interval between them, not
//!   once each.
//! - Then every process is restarted in turn with SIGTERM, the next one once the restarted one is
//!   back in service (a rolling restart): no query fails.
//!
//! Needs PostgreSQL (`MESH_TEST_POSTGRES_URL`; without it the test says so and skips, under CI it
//! fails). It runs the service binaries beside its own, which `cargo test --workspace` builds
//! with the tests; when one is missing it builds them.

#[path = "common/binaries.rs"]
mod binaries;
#[path = "common/load.rs"]
mod load;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use load::{Outcome, QUERIES, query};
use mesh_client::{HttpClient, RegistryClient};
use mesh_protocol::registry::HealthStatus;
use mesh_test_support::ScratchDatabase;

/// The registries' health interval, and how often they read each other's changes.
const HEALTH_INTERVAL_MS: u64 = 1_000;
const SYNC_INTERVAL_MS: u64 = 200;
/// How long a stopping process answers not ready while still serving: longer than the balancer's
/// and the orchestrators' view of it takes to move on (one balancer poll; one discovery-cache TTL).
const SHUTDOWN_UNREADY_MS: u64 = 1_500;
const DISCOVERY_CACHE_TTL_MS: u64 = 1_000;
/// How often the balancer asks each orchestrator whether it is ready, and how long it waits.
const BALANCER_POLL_MS: u64 = 100;
const PROBE_TIMEOUT_MS: u64 = 1_000;
/// Concurrent queries, and the deadline each carries.
const LOAD_CONCURRENCY: usize = 4;
const QUERY_DEADLINE_MS: u64 = 15_000;
/// Upper bound on a process starting, stopping, or showing up healthy in every registry: a bound
/// on a hang on a loaded 2-core machine, not a speed check.
const PROCESS_DEADLINE_MS: u64 = 60_000;
/// The window over which the registries' checks are counted while all of them run.
const POLL_WINDOW_MS: u64 = 5_000;
/// Load before the kills, between the kills and the restarts, and once the restarted search
/// replica searches again.
const BEFORE_KILL_MS: u64 = 3_000;
const KILLED_FOR_MS: u64 = 3_000;
const AFTER_RESTART_MS: u64 = 2_000;

/// Agents: two replicas each of these binaries, with their environment prefix.
const AGENTS: [(&str, &str); 4] = [
    ("orchestrator", "MESH_ORCHESTRATOR"),
    ("search", "MESH_SEARCH"),
    ("entity-extraction", "MESH_ENTITY_EXTRACTION"),
    ("profile-selection", "MESH_PROFILE_SELECTION"),
];
const AGENT_REPLICAS: usize = 2;
const REGISTRY_REPLICAS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_survive_kills_and_a_rolling_restart_under_load() {
    let Some(database) = ScratchDatabase::create("mesh_suite_replicas").await else { return };
    let names: Vec<&str> = std::iter::once("registry").chain(AGENTS.map(|(binary, _)| binary)).collect();
    let binaries = binaries::service_binaries(&names);
    let dir = tempfile::tempdir().unwrap();
    let mut mesh = Mesh::start(&binaries, &database.url, dir.path());
    let agent_names: Vec<String> = mesh.agents.iter().map(|agent| agent.name.clone()).collect();
    mesh.all_registered_healthy(&agent_names).await;

    // While all registries run, the three of them together check each agent once per interval.
    let checks_per_agent_interval = mesh.checks_per_agent_interval(agent_names.len()).await;
    eprintln!("checks per agent per interval, all registries together: {checks_per_agent_interval:.2}");
    assert!(
        (0.6..=1.5).contains(&checks_per_agent_interval),
        "checks per agent per interval across the registries: {checks_per_agent_interval:.2} (1 expected, 3 if each polled all)"
    );

    // The search replicas, under names of their own, serve one corpus: a document one takes, the
    // other serves (their replica group is their card's name).
    mesh.ingested_on_one_served_by_the_other().await;

    let orchestrators: Vec<String> = mesh.agents_of("orchestrator").map(|agent| agent.url()).collect();
    let balancer = Balancer::start(orchestrators);
    let load = Load::start(balancer.clone());

    // Chaos: a registry replica and a search replica die without warning, and come back.
    tokio::time::sleep(Duration::from_millis(BEFORE_KILL_MS)).await;
    let registry = mesh.registries.len() - 1;
    let search = mesh.agents.iter().position(|agent| agent.name == "search-2").unwrap();
    mesh.registries[registry].kill();
    mesh.agents[search].kill();
    tokio::time::sleep(Duration::from_millis(KILLED_FOR_MS)).await;
    mesh.registries[registry].start();
    mesh.agents[search].start();
    let restarted = Instant::now();
    mesh.registries[registry].ready().await;
    mesh.all_registered_healthy(&agent_names).await;
    // The restarted search replica is back in rotation: queries are searched by it again.
    load.wait_for("search-2 searches again", |outcome| {
        outcome.finished > restarted && outcome.searched_by.as_deref() == Some("search-2")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(AFTER_RESTART_MS)).await;
    let chaos = load.take();
    let answered = chaos.iter().filter(|outcome| outcome.answered()).count();
    let share = answered as f64 / chaos.len().max(1) as f64;
    eprintln!("after the kills: {}", summary(&chaos));
    assert!(chaos.len() >= 20, "too little load to judge: {}", summary(&chaos));
    assert!(share >= 0.999, "at least 99.9% answered across the kills: {}", summary(&chaos));

    // A rolling restart: every process in turn drains on SIGTERM, restarts, and is back in
    // service before the next one goes.
    for index in 0..mesh.registries.len() {
        let stopped = mesh.registries[index].terminate().await;
        assert!(stopped.success(), "{} drained and exited cleanly: {stopped}", mesh.registries[index].name);
        mesh.registries[index].start();
        mesh.registries[index].ready().await;
    }
    for index in 0..mesh.agents.len() {
        let stopped = mesh.agents[index].terminate().await;
        assert!(stopped.success(), "{} drained and exited cleanly: {stopped}", mesh.agents[index].name);
        mesh.agents[index].start();
        mesh.agents[index].ready().await;
        mesh.all_registered_healthy(&agent_names).await;
    }
    let rolling = load.stop().await;
    eprintln!("during the rolling restart: {}", summary(&rolling));
    assert!(rolling.len() >= 20, "too little load to judge: {}", summary(&rolling));
    let failed: Vec<&Outcome> = rolling.iter().filter(|outcome| !outcome.answered()).collect();
    assert!(failed.is_empty(), "no query fails in a rolling restart: {}; failed: {failed:?}", summary(&rolling));

    // Nothing was lost along the way: every registry lists every agent, healthy.
    mesh.all_registered_healthy(&agent_names).await;
    balancer.stop();
    drop(mesh);
    database.drop_database().await;
}

/// One process of the mesh, restartable on its port; SIGKILLed when dropped, so a failing test
/// leaves none behind.
struct Process {
    name: String,
    port: u16,
    command: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
    child: Option<Child>,
}

impl Process {
    fn new(name: &str, binary: &Path, args: &[&str], env: Vec<(String, String)>, dir: &Path) -> Self {
        let port = mesh_test_support::free_port();
        let mut command = vec![binary.display().to_string(), "--port".to_owned(), port.to_string()];
        command.extend(args.iter().map(|arg| (*arg).to_owned()));
        let log = dir.join(format!("{name}.log"));
        let mut process = Self { name: name.to_owned(), port, command, env, log, child: None };
        process.start();
        process
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn start(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let child = Command::new(&self.command[0])
            .args(&self.command[1..])
            .envs(self.env.iter().map(|(key, value)| (key, value)))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|error| panic!("{} starts: {error}", self.name));
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then waits for the exit: a drain bounded by the process's own shutdown settings.
    async fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("a running process");
        let signalled = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
        assert!(signalled.success(), "SIGTERM reaches {}", self.name);
        let deadline = Instant::now() + Duration::from_millis(PROCESS_DEADLINE_MS);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "{} never exited after SIGTERM; log: {}", self.name, self.log_tail());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the process answers ready.
    async fn ready(&self) {
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_millis(PROCESS_DEADLINE_MS);
        let url = format!("{}/health/ready", self.url());
        while !http.get(&url).send().await.is_ok_and(|response| response.status().is_success()) {
            assert!(Instant::now() < deadline, "{} never answered ready; log: {}", self.name, self.log_tail());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Three registries and two replicas of every agent, over one database.
struct Mesh {
    registries: Vec<Process>,
    agents: Vec<Process>,
    http: HttpClient,
}

impl Mesh {
    fn start(binaries: &Path, database_url: &str, dir: &Path) -> Self {
        let registries: Vec<Process> = (1..=REGISTRY_REPLICAS)
            .map(|n| {
                let env = vec![
                    ("MESH_REGISTRY_DATABASE_URL".to_owned(), database_url.to_owned()),
                    ("MESH_REGISTRY_HEALTH_CHECK_INTERVAL_MS".to_owned(), HEALTH_INTERVAL_MS.to_string()),
                    ("MESH_REGISTRY_SYNC_INTERVAL_MS".to_owned(), SYNC_INTERVAL_MS.to_string()),
                    ("MESH_REGISTRY_SHUTDOWN_UNREADY_MS".to_owned(), SHUTDOWN_UNREADY_MS.to_string()),
                ];
                Process::new(&format!("registry-{n}"), &binaries.join("registry"), &[], env, dir)
            })
            .collect();
        let registry_urls = registries.iter().map(Process::url).collect::<Vec<_>>().join(",");
        let mut agents = Vec::new();
        for (binary, prefix) in AGENTS {
            for n in 1..=AGENT_REPLICAS {
                let name = format!("{binary}-{n}");
                let mut env = vec![
                    (format!("{prefix}_NAME"), name.clone()),
                    (format!("{prefix}_TASK_STORE_URL"), database_url.to_owned()),
                    (format!("{prefix}_SHUTDOWN_UNREADY_MS"), SHUTDOWN_UNREADY_MS.to_string()),
                ];
                let mut args = vec!["--registry-url", registry_urls.as_str()];
                let data = dir.join(&name);
                let data = data.display().to_string();
                match binary {
                    "orchestrator" => {
                        env.push((format!("{prefix}_DISCOVERY_CACHE_TTL_MS"), DISCOVERY_CACHE_TTL_MS.to_string()))
                    }
                    // One corpus for both replicas, from the document log in the database; BM25
                    // only, so no model is needed.
                    "search" => {
                        env.push((format!("{prefix}_DOCUMENTS_DATABASE_URL"), database_url.to_owned()));
                        env.push((format!("{prefix}_DENSE__ENABLED"), "false".to_owned()));
                        args.extend(["--data-dir", data.as_str()]);
                    }
                    _ => {}
                }
                agents.push(Process::new(&name, &binaries.join(binary), &args, env, dir));
            }
        }
        Self { registries, agents, http: HttpClient::with_reqwest().unwrap() }
    }

    fn agents_of<'a>(&'a self, binary: &'a str) -> impl Iterator<Item = &'a Process> {
        self.agents.iter().filter(move |agent| agent.name.rsplit_once('-').is_some_and(|(kind, _)| kind == binary))
    }

    /// Waits until every registry lists exactly `names`, all healthy.
    async fn all_registered_healthy(&self, names: &[String]) {
        let deadline = Instant::now() + Duration::from_millis(PROCESS_DEADLINE_MS);
        for registry in &self.registries {
            let client = RegistryClient::new(&registry.url(), self.http.clone()).unwrap();
            loop {
                let listed = client.agents().await.map(|list| {
                    let mut healthy: Vec<String> = list
                        .agents
                        .into_iter()
                        .filter(|agent| agent.health_status == HealthStatus::Healthy)
                        .map(|agent| agent.name)
                        .collect();
                    healthy.sort();
                    healthy
                });
                let mut expected = names.to_vec();
                expected.sort();
                if listed.as_ref().is_ok_and(|healthy| *healthy == expected) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{} never listed every agent healthy: {listed:?}; log: {}",
                    registry.name,
                    registry.log_tail()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    async fn ingested_on_one_served_by_the_other(&self) {
        let [one, other] = [0, 1].map(|n| self.agents_of("search").nth(n).unwrap());
        let http = reqwest::Client::new();
        let id = format!("replicated-{}", uuid::Uuid::new_v4().simple());
        let document = serde_json::json!({"_id": id, "title": "Replicated", "text": "taken by one replica"});
        let ingested = http
            .post(format!("{}/documents", one.url()))
            .header("content-type", "application/x-ndjson")
            .body(document.to_string())
            .send()
            .await
            .unwrap();
        assert!(ingested.status().is_success(), "{} takes the document: {}", one.name, ingested.status());
        let deadline = Instant::now() + Duration::from_millis(PROCESS_DEADLINE_MS);
        let url = format!("{}/documents/{id}", other.url());
        while !http.get(&url).send().await.is_ok_and(|response| response.status().is_success()) {
            assert!(Instant::now() < deadline, "{} never served the document {}'s log took", other.name, one.name);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The health checks all registries made over [`POLL_WINDOW_MS`], per agent per interval.
    async fn checks_per_agent_interval(&self, agents: usize) -> f64 {
        let before = self.checks_made().await;
        tokio::time::sleep(Duration::from_millis(POLL_WINDOW_MS)).await;
        let made = self.checks_made().await - before;
        let intervals = POLL_WINDOW_MS as f64 / HEALTH_INTERVAL_MS as f64;
        made / (agents as f64 * intervals)
    }

    /// Health checks made so far by all registries together, from their metrics.
    async fn checks_made(&self) -> f64 {
        let mut total = 0.0;
        for registry in &self.registries {
            let metrics = reqwest::get(format!("{}/metrics", registry.url())).await.unwrap().text().await.unwrap();
            total += metrics
                .lines()
                .filter(|line| line.starts_with("mesh_registry_health_check_duration_seconds_count"))
                .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
                .sum::<f64>();
        }
        total
    }
}

/// Sends to the orchestrators that last answered ready, in turn, as a Service's endpoints would.
#[derive(Clone)]
struct Balancer {
    urls: Arc<Vec<String>>,
    ready: Arc<Mutex<Vec<bool>>>,
    next: Arc<AtomicUsize>,
    stopped: Arc<AtomicBool>,
}

impl Balancer {
    fn start(urls: Vec<String>) -> Self {
        let balancer = Self {
            ready: Arc::new(Mutex::new(vec![false; urls.len()])),
            urls: Arc::new(urls),
            next: Arc::new(AtomicUsize::new(0)),
            stopped: Arc::new(AtomicBool::new(false)),
        };
        let watcher = balancer.clone();
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            while !watcher.stopped.load(Ordering::Relaxed) {
                for (index, url) in watcher.urls.iter().enumerate() {
                    let ready = http
                        .get(format!("{url}/health/ready"))
                        .timeout(Duration::from_millis(PROBE_TIMEOUT_MS))
                        .send()
                        .await
                        .is_ok_and(|response| response.status().is_success());
                    watcher.ready.lock().unwrap()[index] = ready;
                }
                tokio::time::sleep(Duration::from_millis(BALANCER_POLL_MS)).await;
            }
        });
        balancer
    }

    /// The next ready orchestrator; waits while none is (a bound on a hang: the test fails).
    async fn pick(&self) -> String {
        let deadline = Instant::now() + Duration::from_millis(PROCESS_DEADLINE_MS);
        loop {
            let ready: Vec<usize> = {
                let ready = self.ready.lock().unwrap();
                (0..ready.len()).filter(|&index| ready[index]).collect()
            };
            if !ready.is_empty() {
                return self.urls[ready[self.next.fetch_add(1, Ordering::Relaxed) % ready.len()]].clone();
            }
            assert!(Instant::now() < deadline, "no orchestrator ready");
            tokio::time::sleep(Duration::from_millis(BALANCER_POLL_MS)).await;
        }
    }

    fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }
}

/// Concurrent queries through the balancer until stopped, their outcomes collected.
struct Load {
    outcomes: Arc<Mutex<Vec<Outcome>>>,
    stopped: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(balancer: Balancer) -> Self {
        let outcomes = Arc::new(Mutex::new(Vec::new()));
        let stopped = Arc::new(AtomicBool::new(false));
        let http = HttpClient::with_reqwest().unwrap();
        let workers = (0..LOAD_CONCURRENCY)
            .map(|worker| {
                let (balancer, outcomes, stopped, http) =
                    (balancer.clone(), outcomes.clone(), stopped.clone(), http.clone());
                tokio::spawn(async move {
                    let mut turn = worker;
                    while !stopped.load(Ordering::Relaxed) {
                        let url = balancer.pick().await;
                        let outcome = query(&http, &url, QUERIES[turn % QUERIES.len()], QUERY_DEADLINE_MS).await;
                        outcomes.lock().unwrap().push(outcome);
                        turn += 1;
                    }
                })
            })
            .collect();
        Self { outcomes, stopped, workers }
    }

    /// Waits until an outcome so far matches `what` (a bound on a hang: the test fails).
    async fn wait_for(&self, what: &str, matches: impl Fn(&Outcome) -> bool) {
        let deadline = Instant::now() + Duration::from_millis(PROCESS_DEADLINE_MS);
        while !self.outcomes.lock().unwrap().iter().any(&matches) {
            assert!(Instant::now() < deadline, "never saw {what}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The outcomes so far, leaving the load running.
    fn take(&self) -> Vec<Outcome> {
        std::mem::take(&mut *self.outcomes.lock().unwrap())
    }

    /// Stops the workers (each finishes its query) and returns the outcomes since the last take.
    async fn stop(mut self) -> Vec<Outcome> {
        self.stopped.store(true, Ordering::Relaxed);
        for worker in std::mem::take(&mut self.workers) {
            worker.await.unwrap();
        }
        self.take()
    }
}

/// Counts by kind, and the latency quantiles.
fn summary(outcomes: &[Outcome]) -> String {
    let mut kinds = std::collections::BTreeMap::<&str, usize>::new();
    for outcome in outcomes {
        *kinds.entry(outcome.kind.as_str()).or_default() += 1;
    }
    let mut latencies: Vec<f64> = outcomes.iter().map(|outcome| outcome.latency_ms).collect();
    let p50 = search::eval::quantile(&mut latencies, 0.5);
    let p99 = search::eval::quantile(&mut latencies, 0.99);
    format!("{} queries {kinds:?}, p50 {p50:.0} ms, p99 {p99:.0} ms", outcomes.len())
}
