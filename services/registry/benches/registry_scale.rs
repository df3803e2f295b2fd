//! The registry at scale (issue #16): simulated agents, all served by this process, register with
//! real `registry` processes (one over SQLite, or replicas sharing a PostgreSQL database), answer
//! their health checks (some accept the connection and never answer) and re-register as the
//! agent kit does. Measured: each registry process's CPU and resident memory (from `/proc`), every
//! health round as the agents saw it, how often each agent is polled per interval, the registry's
//! own health-check metrics as a cross-check, PostgreSQL's write rate, and capability lookups.
//!
//! ```sh
//! cargo bench -p registry --bench registry_scale -- [--replicas 3 --postgres] [--agents 1000]
//!     [--capabilities 100] [--hanging 50] [--interval-ms 60000] [--timeout-ms 5000]
//!     [--health-concurrency 32] [--rounds 2] [--reregister-ms 30000] [--lookup-concurrency 64]
//!     [--lookup-seconds 10]
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use axum::Router;
use axum::routing::get;
use clap::Parser;
use futures::StreamExt;
use mesh_client::{HttpClient, RegistryClient};
use mesh_protocol::registry::Registration;
use registry::config::{
    HEALTH_CHECK_CONCURRENCY_MAX_DEFAULT, HEALTH_CHECK_INTERVAL_MS_DEFAULT, HEALTH_CHECK_TIMEOUT_MS_DEFAULT,
};
use sqlx::Connection;
use tokio::net::TcpListener;

#[path = "../../../benches/support/mod.rs"]
mod support;

use support::Samples;

/// Registrations in flight at once while the mesh first registers.
const REGISTER_CONCURRENCY: usize = 16;
/// A health check that reaches an agent this soon after the agent's registration was answered
/// is the check the registration triggered, not a round's.
const REGISTRATION_CHECK_GRACE_MS: u64 = 1_000;
/// Extra quiet time, beyond the health timeout, that separates two health rounds: inside a round
/// requests can pause for a whole timeout while every slot waits on a hanging agent.
const ROUND_GAP_EXTRA_MS: u64 = 1_000;
/// A hanging agent holds its request this long (far beyond any health timeout) before giving up,
/// so abandoned requests do not pile up for ever.
const HANG_MS: u64 = 600_000;
/// Health requests and registrations recorded, at most (far above a default run's ~10,000).
const RECORDS_MAX: usize = 2_000_000;
/// Time each registry process has to answer after it starts (PostgreSQL migrations included).
const REGISTRY_START_DEADLINE_MS: u64 = 30_000;
/// How often the bench looks for finished health rounds.
const WATCH_PERIOD_MS: u64 = 1_000;
/// Settling time after start before the idle sample (each registry's first, empty, round).
const IDLE_SETTLE_MS: u64 = 2_000;
/// Timeout of the bench's own lookup requests.
const LOOKUP_TIMEOUT_MS: u64 = 10_000;
/// The issue's goals.
const LOOKUP_P99_GOAL_MS: f64 = 5.0;
const RSS_GOAL_MIB: f64 = 200.0;
const KIB_PER_MIB: f64 = 1024.0;

#[derive(Debug, Parser)]
#[command(about = "The registry with 1,000 simulated agents: health rounds, lookups, CPU and memory")]
struct Args {
    /// Registry processes, sharing one database.
    #[arg(long, default_value_t = 1)]
    replicas: usize,
    /// Run over PostgreSQL (a fresh database `mesh_scale_<pid>`, dropped after) instead of SQLite.
    #[arg(long)]
    postgres: bool,
    /// The PostgreSQL server, as a URL to any database on it the bench may create databases from.
    #[arg(long, env = "MESH_TEST_POSTGRES_URL", default_value = "postgres://postgres@127.0.0.1:5432/test")]
    postgres_url: String,
    #[arg(long, default_value_t = 1_000)]
    agents: usize,
    #[arg(long, default_value_t = 100)]
    capabilities: usize,
    /// Agents that accept the health request and never answer it.
    #[arg(long, default_value_t = 50)]
    hanging: usize,
    /// The registries' health_check_interval_ms.
    #[arg(long, default_value_t = HEALTH_CHECK_INTERVAL_MS_DEFAULT)]
    interval_ms: u64,
    /// The registries' health_check_timeout_ms.
    #[arg(long, default_value_t = HEALTH_CHECK_TIMEOUT_MS_DEFAULT)]
    timeout_ms: u64,
    /// The registries' health_check_concurrency_max.
    #[arg(long, default_value_t = HEALTH_CHECK_CONCURRENCY_MAX_DEFAULT)]
    health_concurrency: usize,
    /// Health intervals to observe once every agent is registered.
    #[arg(long, default_value_t = 2)]
    rounds: u32,
    /// Milliseconds between an agent's re-registrations (the agent kit's default); 0: none.
    #[arg(long, default_value_t = mesh_agent_kit::AgentConfig::default().registration_refresh_ms)]
    reregister_ms: u64,
    #[arg(long, default_value_t = 64)]
    lookup_concurrency: usize,
    /// Seconds of lookups per endpoint.
    #[arg(long, default_value_t = 10)]
    lookup_seconds: u64,
    /// Passed by `cargo bench`.
    #[arg(long, hide = true)]
    bench: bool,
}

/// An agent's health request: (agent, when it arrived).
type Hit = (usize, Duration);
/// An agent's registration: (agent, when it was sent, when it was answered).
type Registered = (usize, Duration, Duration);

/// What the simulated agents saw, in time since the bench started.
#[derive(Debug)]
struct Recorder {
    origin: Instant,
    hits: Mutex<Vec<Hit>>,
    registrations: Mutex<Vec<Registered>>,
    /// Records not kept because the bounds were reached.
    dropped: AtomicU64,
}

impl Recorder {
    fn new() -> Self {
        Self {
            origin: Instant::now(),
            hits: Mutex::default(),
            registrations: Mutex::default(),
            dropped: AtomicU64::new(0),
        }
    }

    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    fn keep<T>(&self, records: &Mutex<Vec<T>>, record: T) {
        let mut records = records.lock().unwrap_or_else(|e| e.into_inner());
        if records.len() < RECORDS_MAX {
            records.push(record);
        } else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn hit(&self, agent: usize) {
        self.keep(&self.hits, (agent, self.now()));
    }

    fn registered(&self, agent: usize, sent: Duration) {
        self.keep(&self.registrations, (agent, sent, self.now()));
    }

    fn snapshot(&self) -> (Vec<Hit>, Vec<Registered>) {
        let hits = self.hits.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let registrations = self.registrations.lock().unwrap_or_else(|e| e.into_inner()).clone();
        (hits, registrations)
    }
}

/// A simulated agent: its own listener, so the registry keeps one connection per agent as it
/// would with real ones.
#[derive(Debug, Clone)]
struct SimAgent {
    index: usize,
    registration: Registration,
}

async fn start_agents(args: &Args, recorder: &Arc<Recorder>) -> anyhow::Result<Vec<SimAgent>> {
    let mut agents = Vec::with_capacity(args.agents);
    for index in 0..args.agents {
        let hanging = is_hanging(args, index);
        let recorder = recorder.clone();
        let router = Router::new().route(
            "/health",
            get(move || {
                recorder.hit(index);
                async move {
                    if hanging {
                        tokio::time::sleep(Duration::from_millis(HANG_MS)).await;
                    }
                    axum::Json(serde_json::json!({"status": "healthy"}))
                }
            }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.context("binding a simulated agent")?;
        let url = format!("http://{}", listener.local_addr()?);
        tokio::spawn(async move { axum::serve(listener, router).await });
        let registration = Registration {
            name: format!("agent-{index:05}"),
            url,
            capabilities: vec![capability(index % args.capabilities)],
            health_endpoint: "/health".into(),
            process_endpoint: "/tasks/send".into(),
            agent_card_url: None,
        };
        agents.push(SimAgent { index, registration });
    }
    Ok(agents)
}

fn capability(index: usize) -> String {
    format!("capability-{index:03}")
}

/// Hanging agents are spread evenly, as failures would be, rather than bunched at one end of the
/// polling order.
fn is_hanging(args: &Args, index: usize) -> bool {
    let hanging_every = args.agents.checked_div(args.hanging).unwrap_or(usize::MAX);
    index.is_multiple_of(hanging_every) && index / hanging_every < args.hanging
}

/// A registry child process, killed when dropped.
#[derive(Debug)]
struct RegistryProcess {
    pid: u32,
    url: String,
    client: RegistryClient,
    child: Child,
}

impl Drop for RegistryProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl RegistryProcess {
    async fn start(args: &Args, database_url: &str, work: &Path, number: usize) -> anyhow::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let config = work.join(format!("registry-{number}.toml"));
        // Registrations are not verified (the simulated agents serve no card); loopback is allowed
        // explicitly; the per-tenant limiter is off because one client address sends everything.
        std::fs::write(
            &config,
            format!(
                "port = {port}\ndatabase_url = {}\nhealth_check_interval_ms = {}\nhealth_check_timeout_ms = {}\n\
                 health_check_concurrency_max = {}\nverify_registrations = false\n\
                 allowed_networks = [\"127.0.0.0/8\"]\nrate_limit_per_s = 0\n",
                serde_json::to_string(database_url)?,
                args.interval_ms,
                args.timeout_ms,
                args.health_concurrency,
            ),
        )?;
        let log = std::fs::File::create(work.join(format!("registry-{number}.log")))?;
        let child = Command::new(env!("CARGO_BIN_EXE_registry"))
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting the registry binary")?;
        let url = format!("http://127.0.0.1:{port}");
        let client = RegistryClient::new(&url, HttpClient::with_reqwest()?)?;
        let mut process = Self { pid: child.id(), url, client, child };
        let deadline = Instant::now() + Duration::from_millis(REGISTRY_START_DEADLINE_MS);
        while process.client.stats().await.is_err() {
            if let Some(status) = process.child.try_wait()? {
                bail!(
                    "registry {number} exited ({status}); see {}",
                    work.join(format!("registry-{number}.log")).display()
                );
            }
            ensure!(
                Instant::now() < deadline,
                "registry {number} did not answer within {REGISTRY_START_DEADLINE_MS} ms"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(process)
    }
}

/// CPU time and memory of one process at one moment.
#[derive(Debug, Clone, Copy)]
struct ProcSample {
    at: Instant,
    cpu_ticks: u64,
    rss_kib: u64,
    peak_rss_kib: u64,
}

fn sample(pid: u32) -> anyhow::Result<ProcSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces, hence the last ')'): state is field 3,
    // utime and stime fields 14 and 15 (proc(5)).
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let ticks = |n: usize| -> anyhow::Result<u64> { Ok(fields.get(n - 3).context("short /proc/<pid>/stat")?.parse()?) };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = |key: &str| -> anyhow::Result<u64> {
        let line = status.lines().find(|l| l.starts_with(key)).with_context(|| format!("no {key} in status"))?;
        Ok(line.split_whitespace().nth(1).context("empty status line")?.parse()?)
    };
    Ok(ProcSample {
        at: Instant::now(),
        cpu_ticks: ticks(14)? + ticks(15)?,
        rss_kib: kib("VmRSS:")?,
        peak_rss_kib: kib("VmHWM:")?,
    })
}

fn samples(replicas: &[RegistryProcess]) -> anyhow::Result<Vec<ProcSample>> {
    replicas.iter().map(|r| sample(r.pid)).collect()
}

/// Clock ticks per second, the unit of `/proc/<pid>/stat`'s CPU times.
fn clock_ticks_per_s() -> anyhow::Result<f64> {
    let output = Command::new("getconf").arg("CLK_TCK").output().context("running getconf CLK_TCK")?;
    Ok(String::from_utf8(output.stdout)?.trim().parse()?)
}

fn cpu_percent(from: &ProcSample, to: &ProcSample, ticks_per_s: f64) -> f64 {
    let seconds = to.at.duration_since(from.at).as_secs_f64();
    100.0 * to.cpu_ticks.saturating_sub(from.cpu_ticks) as f64 / ticks_per_s / seconds
}

/// The database of one PostgreSQL run, dropped at the end.
struct ScratchDatabase {
    admin: sqlx::PgConnection,
    name: String,
    url: String,
}

impl ScratchDatabase {
    async fn create(server_url: &str) -> anyhow::Result<Self> {
        let name = format!("mesh_scale_{}", std::process::id());
        let mut admin = sqlx::PgConnection::connect(server_url).await.context("connecting to PostgreSQL")?;
        // The name is made from this process's id above, never from input.
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")))
            .execute(&mut admin)
            .await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut admin).await?;
        let mut url = url::Url::parse(server_url)?;
        url.set_path(&name);
        Ok(Self { admin, name, url: url.into() })
    }

    /// Transactions committed and rows inserted, updated and returned in this database so far.
    async fn activity(&mut self) -> anyhow::Result<[i64; 4]> {
        use sqlx::Row;
        // Statistics reach pg_stat_database when a backend reports them (at least once a second).
        let row = sqlx::query(
            "SELECT xact_commit, tup_inserted, tup_updated, tup_returned FROM pg_stat_database WHERE datname = $1",
        )
        .bind(&self.name)
        .fetch_one(&mut self.admin)
        .await?;
        Ok([row.try_get(0)?, row.try_get(1)?, row.try_get(2)?, row.try_get(3)?])
    }

    async fn drop_now(mut self) -> anyhow::Result<()> {
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {} WITH (FORCE)", self.name)))
            .execute(&mut self.admin)
            .await?;
        Ok(())
    }
}

/// Registers `agent` through `registry`, recording when it was sent and answered.
async fn register(recorder: &Recorder, registry: &RegistryClient, agent: &SimAgent) -> anyhow::Result<f64> {
    let sent = recorder.now();
    registry.register(&agent.registration).await.with_context(|| format!("registering {}", agent.registration.name))?;
    recorder.registered(agent.index, sent);
    Ok((recorder.now() - sent).as_secs_f64() * 1e6)
}

/// Every agent re-registers every `every`, staggered over the period, through the replicas in
/// turn (as behind a load balancer). Failures are counted, not fatal.
fn keep_registering(
    agents: &[SimAgent],
    replicas: &[RegistryClient],
    recorder: &Arc<Recorder>,
    every: Duration,
    failures: &Arc<AtomicU64>,
) {
    let count = agents.len() as u32;
    for agent in agents {
        let (agent, replicas, recorder, failures) =
            (agent.clone(), replicas.to_vec(), recorder.clone(), failures.clone());
        tokio::spawn(async move {
            tokio::time::sleep(every / count * agent.index as u32).await;
            let mut ticks = tokio::time::interval(every);
            for turn in 1.. {
                ticks.tick().await;
                if register(&recorder, &replicas[(agent.index + turn) % replicas.len()], &agent).await.is_err() {
                    failures.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
}

/// Lookups of one endpoint for `seconds` at `concurrency`, spread over the replicas and the
/// capabilities: latencies in microseconds and failed requests.
async fn measure_lookups(
    urls: &[String],
    capabilities: usize,
    suffix: &str,
    concurrency: usize,
    seconds: u64,
) -> anyhow::Result<(Samples, u64, f64)> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .timeout(Duration::from_millis(LOOKUP_TIMEOUT_MS))
        .build()?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let workers: Vec<_> = (0..concurrency)
        .map(|worker| {
            let (client, base, suffix) = (client.clone(), urls[worker % urls.len()].clone(), suffix.to_owned());
            tokio::spawn(async move {
                let (mut latencies, mut failures) = (Samples::default(), 0u64);
                let mut turn = worker;
                while Instant::now() < deadline {
                    let url = format!("{base}/capabilities/{}{suffix}", capability(turn % capabilities));
                    let sent = Instant::now();
                    let answered = match client.get(&url).send().await {
                        Ok(response) if response.status().is_success() => response.bytes().await.is_ok(),
                        _ => false,
                    };
                    if answered {
                        latencies.push(sent.elapsed().as_secs_f64() * 1e6);
                    } else {
                        failures += 1;
                    }
                    turn += 7;
                }
                (latencies, failures)
            })
        })
        .collect();
    let (mut all, mut failures) = (Samples::default(), 0);
    for worker in workers {
        let (latencies, failed) = worker.await?;
        all.extend(latencies);
        failures += failed;
    }
    let rate = all.len() as f64 / started.elapsed().as_secs_f64();
    Ok((all, failures, rate))
}

/// One health round as the agents saw it.
#[derive(Debug, Clone)]
struct Round {
    start: Duration,
    end: Duration,
    requests: usize,
    agents: usize,
}

/// The health requests of `hits` split into those each registration triggered (the first request
/// an agent got after sending a registration, within a grace period of its answer) and the
/// rest, the rounds' (returned, sorted by time).
fn round_hits(hits: &[Hit], registrations: &[Registered]) -> (Vec<Hit>, usize) {
    // Per agent: its health requests, and its registrations (sent, answered).
    type Timeline = (Vec<Duration>, Vec<(Duration, Duration)>);
    let mut per_agent: BTreeMap<usize, Timeline> = BTreeMap::new();
    for &(agent, at) in hits {
        per_agent.entry(agent).or_default().0.push(at);
    }
    for &(agent, sent, answered) in registrations {
        per_agent.entry(agent).or_default().1.push((sent, answered));
    }
    let grace = Duration::from_millis(REGISTRATION_CHECK_GRACE_MS);
    let (mut rounds, mut triggered) = (Vec::new(), 0);
    for (agent, (mut times, regs)) in per_agent {
        times.sort();
        let mut taken = vec![false; times.len()];
        for (sent, answered) in regs {
            let first = times.iter().enumerate().position(|(i, &t)| !taken[i] && t >= sent && t <= answered + grace);
            if let Some(i) = first {
                taken[i] = true;
                triggered += 1;
            }
        }
        rounds.extend(times.iter().zip(&taken).filter(|(_, taken)| !**taken).map(|(&t, _)| (agent, t)));
    }
    rounds.sort_by_key(|&(_, t)| t);
    (rounds, triggered)
}

/// Consecutive requests closer than `gap` to one another form one round.
fn split_rounds(hits: &[Hit], gap: Duration) -> Vec<Round> {
    let mut rounds: Vec<(Round, std::collections::BTreeSet<usize>)> = Vec::new();
    for &(agent, at) in hits {
        match rounds.last_mut() {
            Some((round, agents)) if at - round.end <= gap => {
                round.end = at;
                round.requests += 1;
                agents.insert(agent);
            }
            _ => rounds.push((Round { start: at, end: at, requests: 1, agents: 0 }, [agent].into())),
        }
    }
    rounds.into_iter().map(|(round, agents)| Round { agents: agents.len(), ..round }).collect()
}

/// Health checks each replica counted in `mesh_registry_health_check_duration_seconds`, by
/// result: (checks, seconds spent).
async fn health_check_metrics(url: &str) -> anyhow::Result<BTreeMap<String, (f64, f64)>> {
    let text = reqwest::get(format!("{url}/metrics")).await?.error_for_status()?.text().await?;
    let mut by_health: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("mesh_registry_health_check_duration_seconds_") else { continue };
        let (kind, rest) = rest.split_once('{').unwrap_or((rest, ""));
        let Some(health) = rest.split("health=\"").nth(1).and_then(|h| h.split('"').next()) else { continue };
        let value: f64 = line.rsplit(' ').next().unwrap_or_default().parse().unwrap_or(0.0);
        let entry = by_health.entry(health.to_owned()).or_default();
        match kind {
            "count" => entry.0 += value,
            "sum" => entry.1 += value,
            _ => {}
        }
    }
    Ok(by_health)
}

fn delta(before: &BTreeMap<String, (f64, f64)>, after: &BTreeMap<String, (f64, f64)>) -> BTreeMap<String, (f64, f64)> {
    after
        .iter()
        .map(|(health, (count, sum))| {
            let (c0, s0) = before.get(health).copied().unwrap_or_default();
            (health.clone(), (count - c0, sum - s0))
        })
        .collect()
}

fn mib(kib: u64) -> f64 {
    kib as f64 / KIB_PER_MIB
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    ensure!(
        args.replicas >= 1 && args.agents >= 1 && args.capabilities >= 1,
        "replicas, agents and capabilities must be >= 1"
    );
    ensure!(args.hanging <= args.agents, "--hanging cannot exceed --agents");
    ensure!(args.postgres || args.replicas == 1, "replicas share a database: give --postgres");
    let ticks_per_s = clock_ticks_per_s()?;
    let work = tempfile::tempdir()?;
    let mut database = if args.postgres { Some(ScratchDatabase::create(&args.postgres_url).await?) } else { None };
    let database_url = match &database {
        Some(database) => database.url.clone(),
        None => format!("sqlite://{}", work.path().join("registry.db").display()),
    };
    let result = run(&args, &database_url, work.path(), database.as_mut(), ticks_per_s).await;
    if let Some(database) = database {
        database.drop_now().await?;
    }
    result
}

async fn run(
    args: &Args,
    database_url: &str,
    work: &Path,
    mut database: Option<&mut ScratchDatabase>,
    ticks_per_s: f64,
) -> anyhow::Result<()> {
    let recorder = Arc::new(Recorder::new());
    let agents = start_agents(args, &recorder).await?;
    let mut replicas = Vec::with_capacity(args.replicas);
    for number in 1..=args.replicas {
        replicas.push(RegistryProcess::start(args, database_url, work, number).await?);
    }
    let clients: Vec<RegistryClient> = replicas.iter().map(|r| r.client.clone()).collect();
    let urls: Vec<String> = replicas.iter().map(|r| r.url.clone()).collect();
    println!(
        "registry scale: {} replica(s) over {}, {} agents ({} hanging) across {} capabilities; health interval {} ms, \
         timeout {} ms, concurrency {}; re-registration every {} ms",
        args.replicas,
        if args.postgres { "PostgreSQL" } else { "SQLite" },
        args.agents,
        args.hanging,
        args.capabilities,
        args.interval_ms,
        args.timeout_ms,
        args.health_concurrency,
        args.reregister_ms,
    );

    let started = samples(&replicas)?;
    tokio::time::sleep(Duration::from_millis(IDLE_SETTLE_MS)).await;
    let idle = samples(&replicas)?;

    // Every agent registers once, through the replicas in turn.
    let registering = Instant::now();
    let registration_latencies: Vec<anyhow::Result<f64>> = futures::stream::iter(&agents)
        .map(|agent| register(&recorder, &clients[agent.index % clients.len()], agent))
        .buffer_unordered(REGISTER_CONCURRENCY)
        .collect()
        .await;
    let mut registration_us = Samples::default();
    for latency in registration_latencies {
        registration_us.push(latency?);
    }
    let registered_in = registering.elapsed();
    let registered_at = recorder.now();
    let after_registration = samples(&replicas)?;
    let metrics_before: Vec<_> =
        futures::future::try_join_all(urls.iter().map(|url| health_check_metrics(url))).await?;
    let pg_before = match database.as_deref_mut() {
        Some(database) => Some(database.activity().await?),
        None => None,
    };
    let reregister_failures = Arc::new(AtomicU64::new(0));
    if args.reregister_ms > 0 {
        keep_registering(&agents, &clients, &recorder, Duration::from_millis(args.reregister_ms), &reregister_failures);
    }
    println!(
        "registration: {} agents in {:.1} s at concurrency {REGISTER_CONCURRENCY} (p50 {:.1} ms, p99 {:.1} ms)",
        args.agents,
        registered_in.as_secs_f64(),
        registration_us.p50() / 1e3,
        registration_us.p99() / 1e3
    );

    // Lookups while the agents re-register.
    println!(
        "\ncapability lookups, concurrency {}, {} s each, across the replicas and {} capabilities ({} agents each)",
        args.lookup_concurrency,
        args.lookup_seconds,
        args.capabilities,
        args.agents / args.capabilities
    );
    println!("{:<36} {:>9} {:>9} {:>9} {:>8}", "endpoint", "req/s", "p50 µs", "p99 µs", "failed");
    let mut lookup_p99_us: f64 = 0.0;
    // The load generator shares the machine's cores with the registries: its own CPU shows how much.
    let generator_before = sample(std::process::id())?;
    for (label, suffix) in [("GET /capabilities/{cap}", ""), ("GET /capabilities/{cap}/next", "/next")] {
        let (latencies, failed, rate) =
            measure_lookups(&urls, args.capabilities, suffix, args.lookup_concurrency, args.lookup_seconds).await?;
        println!("{label:<36} {rate:>9.0} {:>9.0} {:>9.0} {failed:>8}", latencies.p50(), latencies.p99());
        lookup_p99_us = lookup_p99_us.max(latencies.p99());
    }
    let after_lookups = samples(&replicas)?;
    println!(
        "(this bench process, the load generator and the agents, used {:.0}% of one core meanwhile, of {} cores)",
        cpu_percent(&generator_before, &sample(std::process::id())?, ticks_per_s),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );

    // Health rounds: wait for `rounds` intervals of them, counted from the first after registration.
    let interval = Duration::from_millis(args.interval_ms);
    let gap = Duration::from_millis(args.timeout_ms + ROUND_GAP_EXTRA_MS);
    let give_up = registered_at + interval * (args.rounds + 2) + gap;
    let window = loop {
        let (hits, registrations) = recorder.snapshot();
        let hits: Vec<_> = hits.into_iter().filter(|&(_, at)| at >= registered_at).collect();
        let (rounds, _) = round_hits(&hits, &registrations);
        let now = recorder.now();
        if let Some(&(_, first)) = rounds.first() {
            // Half an interval before the first round's start, so exactly `rounds` rounds of each
            // poller fall inside the window even when pollers are out of phase.
            let start = first.saturating_sub(interval / 2);
            let end = start + interval * args.rounds;
            let quiet = rounds.last().is_some_and(|&(_, last)| now - last > gap);
            if now >= end && quiet {
                break Some((start, end));
            }
        }
        if now > give_up {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(WATCH_PERIOD_MS)).await;
    };
    let end_sample = samples(&replicas)?;
    let metrics_after: Vec<_> = futures::future::try_join_all(urls.iter().map(|url| health_check_metrics(url))).await?;
    let pg_after = match database {
        Some(database) => Some(database.activity().await?),
        None => None,
    };
    let steady_seconds = recorder.now().saturating_sub(registered_at).as_secs_f64();
    let (hits, registrations) = recorder.snapshot();
    let after: Vec<_> = hits.iter().copied().filter(|&(_, at)| at >= registered_at).collect();
    let (round_requests, triggered) = round_hits(&after, &registrations);

    println!("\nhealth rounds as the agents saw them (requests less than {} ms apart form one round)", gap.as_millis());
    let Some((start, end)) = window else {
        bail!("no complete health round within {} s of registration", (give_up - registered_at).as_secs());
    };
    let rounds: Vec<Round> = split_rounds(&round_requests, gap);
    println!("{:<6} {:>9} {:>14} {:>9} {:>7}", "round", "start s", "first→last s", "requests", "agents");
    let mut longest = Duration::ZERO;
    for (number, round) in rounds.iter().enumerate() {
        println!(
            "{:<6} {:>9.1} {:>14.2} {:>9} {:>7}",
            number + 1,
            (round.start - registered_at).as_secs_f64(),
            (round.end - round.start).as_secs_f64(),
            round.requests,
            round.agents
        );
        longest = longest.max(round.end - round.start);
    }
    let mut per_agent = vec![0usize; args.agents];
    for &(agent, at) in &round_requests {
        if at >= start && at < end {
            per_agent[agent] += 1;
        }
    }
    let rounds_f = f64::from(args.rounds);
    let (min, max) = (per_agent.iter().min().copied().unwrap_or(0), per_agent.iter().max().copied().unwrap_or(0));
    let mean = per_agent.iter().sum::<usize>() as f64 / args.agents as f64;
    println!(
        "health requests per agent per interval, over {} interval(s): rounds min {:.2} / mean {:.2} / max {:.2} \
         (goal with every replica up: 1); besides, {:.2} per agent per interval triggered by re-registrations",
        args.rounds,
        min as f64 / rounds_f,
        mean / rounds_f,
        max as f64 / rounds_f,
        triggered as f64 / args.agents as f64 / (steady_seconds / interval.as_secs_f64()),
    );

    println!("\nthe registries' own count (mesh_registry_health_check_duration_seconds) since registration");
    println!("{:<8} {:>8} {:>8} {:>12} {:>20}", "replica", "checks", "healthy", "unreachable", "unreachable mean s");
    let mut registry_checks = 0.0;
    for (number, (before, after)) in metrics_before.iter().zip(&metrics_after).enumerate() {
        let d = delta(before, after);
        let checks: f64 = d.values().map(|(count, _)| count).sum();
        registry_checks += checks;
        let (healthy, _) = d.get("healthy").copied().unwrap_or_default();
        let (unreachable, unreachable_s) = d.get("unreachable").copied().unwrap_or_default();
        let mean_s = if unreachable > 0.0 { unreachable_s / unreachable } else { 0.0 };
        println!("{:<8} {checks:>8.0} {healthy:>8.0} {unreachable:>12.0} {mean_s:>20.2}", number + 1);
    }
    println!(
        "agents saw {} health requests since registration ({} in rounds, {triggered} after registrations); \
         registries counted {registry_checks:.0} finished checks",
        after.len(),
        round_requests.len()
    );

    println!("\nregistry processes (RSS from VmRSS, peak from VmHWM; CPU % of one core)");
    println!(
        "{:<8} {:>8} {:>12} {:>12} {:>10} {:>9} {:>8} {:>12} {:>9} {:>8}",
        "replica",
        "pid",
        "RSS 0 MiB",
        "RSS reg MiB",
        "RSS MiB",
        "peak MiB",
        "CPU idle",
        "CPU register",
        "CPU look",
        "CPU run"
    );
    let mut worst_rss_mib: f64 = 0.0;
    let mut per_agent_bytes = Vec::new();
    for (i, replica) in replicas.iter().enumerate() {
        let (a, b, c, d) = (&idle[i], &after_registration[i], &after_lookups[i], &end_sample[i]);
        println!(
            "{:<8} {:>8} {:>12.1} {:>12.1} {:>10.1} {:>9.1} {:>8.1} {:>12.1} {:>9.1} {:>8.1}",
            i + 1,
            replica.pid,
            mib(a.rss_kib),
            mib(b.rss_kib),
            mib(d.rss_kib),
            mib(d.peak_rss_kib),
            cpu_percent(&started[i], a, ticks_per_s),
            cpu_percent(a, b, ticks_per_s),
            cpu_percent(b, c, ticks_per_s),
            cpu_percent(c, d, ticks_per_s),
        );
        worst_rss_mib = worst_rss_mib.max(mib(d.peak_rss_kib));
        per_agent_bytes.push((d.rss_kib as f64 - a.rss_kib as f64) * 1024.0 / args.agents as f64);
    }
    let bytes_per_agent = per_agent_bytes.iter().sum::<f64>() / per_agent_bytes.len() as f64;
    println!(
        "resident memory per registered agent: {:.0} bytes ((RSS now - RSS with 0 agents) / agents, mean of replicas)",
        bytes_per_agent
    );
    if let (Some(before), Some(after)) = (pg_before, pg_after) {
        let rate = |i: usize| (after[i] - before[i]) as f64 / steady_seconds;
        println!(
            "PostgreSQL since registration ({steady_seconds:.0} s): {:.1} commits/s, {:.1} rows inserted/s, \
             {:.1} updated/s, {:.0} returned/s",
            rate(0),
            rate(1),
            rate(2),
            rate(3)
        );
    }
    let failures = reregister_failures.load(Ordering::Relaxed);
    let dropped = recorder.dropped.load(Ordering::Relaxed);
    println!("re-registrations failed: {failures}; records dropped (over {RECORDS_MAX}): {dropped}");

    let hanging_seen = agents.iter().filter(|a| is_hanging(args, a.index)).count();
    println!("\ngoals");
    println!(
        "health round within its {} s interval with {hanging_seen} hanging agents: longest first→last {:.1} s \
         (the round ends up to {} s later, when its last hanging checks time out): {}",
        interval.as_secs(),
        longest.as_secs_f64(),
        args.timeout_ms / 1000,
        verdict(longest + Duration::from_millis(args.timeout_ms) <= interval)
    );
    println!(
        "lookup p99 <= {LOOKUP_P99_GOAL_MS} ms: {:.2} ms: {}",
        lookup_p99_us / 1e3,
        verdict(lookup_p99_us / 1e3 <= LOOKUP_P99_GOAL_MS)
    );
    println!(
        "resident memory <= {RSS_GOAL_MIB} MiB per replica: peak {worst_rss_mib:.1} MiB: {}",
        verdict(worst_rss_mib <= RSS_GOAL_MIB)
    );
    Ok(())
}
