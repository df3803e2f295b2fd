//! What the gateway costs (issue #36): a blocking JSON-RPC `SendMessage`, called directly and
//! through the gateway (authentication, rules, tenant records, chain, circuit, call report:
//! everything a call gets), to two upstreams:
//!
//! - K: an echo agent on the agent kit (`task_durability = "memory"`, a bearer JWT checked), the
//!   agent the issue's ratio is about;
//! - E: a bare axum echo answering a fixed completed task of about 1 KB, as fast as a server can:
//!   the gateway's own rate, to set beside agentgateway's published figure (about 13.6k QPS on
//!   2 CPUs for 1 KB bodies, another machine).
//!
//! Every server runs in a process of its own (this binary re-executed): K, E, the registry the
//! gateway reads its agents from, and the gateway. The load generator ([`load`], raw hyper
//! connections) is this process. Measured, in `--rounds` interleaved rounds:
//!
//! 1. closed loop at `--concurrency` (16): requests per second of K direct and through the
//!    gateway, and their ratio (goal ≥ 0.7); E direct and through the gateway;
//! 2. open loop at `--rate` (1,000) requests per second: p50 and p99 of K direct and through the
//!    gateway, and the p99 the gateway adds (goal ≤ 1 ms).
//!
//! ```sh
//! cargo bench -p gateway --bench gateway_relay -- [--concurrency 16] [--seconds 10] [--rate 1000] [--rounds 3] [--gateway-cpu N]
//! ```
//!
//! On a small machine the gateway and the agent it relays to share the cores: through the
//! gateway, one request costs both processes' work, so the ratio is bounded by what the agent's
//! share of that work is. With `--gateway-cpu N` the gateway runs alone on CPU N and everything
//! else (this load generator, K, E and the registry) on the other CPUs, direct and through the
//! gateway alike: the gateway on hosts of its own, as it is deployed, taking nothing from the
//! agent's cores.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use axum::Json;
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::routing::{get, post};
use bytes::Bytes;
use gateway::{Gateway, GatewayConfig};
use mesh_agent_kit::{AgentApp, AgentConfig, AgentError, AgentHandler, AgentReply, TaskDurability, TaskInput};
use mesh_auth::{AuthConfig, Claims, Role};
use mesh_protocol::seed::Part;
use serde::Deserialize;
use serde_json::json;

#[path = "../../../benches/support/load.rs"]
mod load;
#[path = "../../../benches/support/mod.rs"]
mod support;

use load::{Outcome, Target};
use support::{arg, text_arg};

/// The gateway binary's allocator, for every server here: K and E are measured under the same.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SECRET: &str = "gateway-bench-secret-of-32-bytes-at-least";
/// Text of E's artifact, so its answer is about 1 KB.
const PAYLOAD_CHARS: usize = 700;
const ECHO_TEXT: &str = "hello a2a";
const WARM_UP_SECS: u64 = 1;
/// The child process's role, and what it needs.
const SERVE_ENV: &str = "GATEWAY_BENCH_SERVE";
const UPSTREAMS_ENV: &str = "GATEWAY_BENCH_UPSTREAMS";
const REGISTRY_ENV: &str = "GATEWAY_BENCH_REGISTRY";
const GOAL_RATIO: f64 = 0.7;
const GOAL_ADDED_P99_US: f64 = 1_000.0;

fn main() -> anyhow::Result<()> {
    // Pinned before the runtime starts, so its workers (one per CPU it may use) and K's and E's,
    // which inherit the pinning, count only the CPUs left to them.
    let role = std::env::var(SERVE_ENV).ok();
    let pinning = match (&role, text_arg("--gateway-cpu")) {
        (None, Some(gateway_cpu)) => {
            let others = other_cpus(&gateway_cpu)?;
            pin_self_to(&others)?;
            Some(Pinning { gateway_cpu, others })
        }
        _ => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match role {
        Some(role) => runtime.block_on(serve(&role)),
        None => runtime.block_on(run(pinning)),
    }
}

/// `--gateway-cpu`: the gateway's CPU, and the others', where everything else runs.
struct Pinning {
    gateway_cpu: String,
    others: String,
}

async fn run(pinning: Option<Pinning>) -> anyhow::Result<()> {
    let concurrency = usize::try_from(arg("--concurrency", 16))?;
    let measure = Duration::from_secs(arg("--seconds", 10));
    let rate = arg("--rate", 1_000);
    let rounds = arg("--rounds", 3);
    let kit = Server::start("kit", &[], None)?;
    let echo = Server::start("echo", &[], None)?;
    let upstreams = format!("kit=http://{},echo=http://{}", kit.addr, echo.addr);
    let registry = Server::start("registry", &[], None)?;
    let registry_addr = registry.addr.to_string();
    let pinned_to = pinning.as_ref().map(|pinning| pinning.gateway_cpu.as_str());
    let gateway = Server::start("gateway", &[(UPSTREAMS_ENV, &upstreams), (REGISTRY_ENV, &registry_addr)], pinned_to)?;
    match &pinning {
        Some(Pinning { gateway_cpu, others }) => {
            println!(
                "the gateway alone on CPU {gateway_cpu}; the load generator, K, E and the registry on CPUs {others}"
            )
        }
        None => println!("every process on every CPU"),
    }
    let user = mesh_auth::mint_hs256(SECRET.as_bytes(), &Claims::new("bench", "acme", &[Role::User], 24 * 3_600))?;
    let at = |server: &Server, path: &str| Target { addr: server.addr, path: path.into(), bearer: Some(user.clone()) };
    let targets = [
        ("K direct", at(&kit, "/")),
        ("K gateway", at(&gateway, "/agents/kit/")),
        ("E direct", at(&echo, "/")),
        ("E gateway", at(&gateway, "/agents/echo/")),
    ];
    for (name, target) in &targets {
        load::probe(target, request_body, check)
            .await
            .map_err(|e| anyhow::anyhow!("{name} answered SendMessage wrongly: {e}"))?;
    }

    println!("closed loop, concurrency {concurrency}, {} s each, {rounds} rounds:", measure.as_secs());
    let mut rates = vec![Vec::new(); targets.len()];
    // CPU time per request of the gateway and of K, whatever else the machine runs.
    let (mut gateway_cpu, mut kit_cpu) = ((0.0, 0), (0.0, 0));
    for _ in 0..rounds {
        for (index, ((name, target), rates)) in targets.iter().zip(&mut rates).enumerate() {
            let warm_up = Duration::from_secs(WARM_UP_SECS);
            // Read as the measured window opens: the warm-up's requests are not counted.
            let window_opens = async {
                tokio::time::sleep(warm_up).await;
                (gateway.cpu_s(), kit.cpu_s())
            };
            let (outcome, (gateway_before, kit_before)) = tokio::join!(
                load::closed_loop(target, concurrency, warm_up, measure, request_body, check),
                window_opens
            );
            let (gateway_before, kit_before) = (gateway_before?, kit_before?);
            failures(name, &outcome)?;
            let requests = outcome.latencies.len() + outcome.errors;
            match index {
                0 => kit_cpu = (kit_cpu.0 + kit.cpu_s()? - kit_before, kit_cpu.1 + requests),
                1 => gateway_cpu = (gateway_cpu.0 + gateway.cpu_s()? - gateway_before, gateway_cpu.1 + requests),
                _ => {}
            }
            rates.push(outcome.rate);
        }
    }
    let medians: Vec<f64> = rates.iter().map(|r| median(r)).collect();
    for ((name, _), (rates, median)) in targets.iter().zip(rates.iter().zip(&medians)) {
        let each: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
        println!("  {name:<10} {median:>8.0} req/s (median; rounds {})", each.join(" / "));
    }
    println!("  K gateway / K direct = {:.2} (goal >= {GOAL_RATIO})", medians[1] / medians[0]);
    println!(
        "  E gateway / E direct = {:.2}; the gateway before a bare echo: {:.0} req/s",
        medians[3] / medians[2],
        medians[3]
    );
    let per_request_us = |(cpu_s, requests): (f64, usize)| cpu_s * 1e6 / requests.max(1) as f64;
    let (gateway_us, kit_us) = (per_request_us(gateway_cpu), per_request_us(kit_cpu));
    println!("  CPU per request: the gateway {gateway_us:.0} us, K {kit_us:.0} us");
    match &pinning {
        Some(_) => println!("  on its one CPU the gateway relays at most {:.0} req/s", 1e6 / gateway_us),
        None => println!(
            "  sharing its cores with K, the gateway leaves K at most {:.2} of its direct rate",
            kit_us / (kit_us + gateway_us)
        ),
    }

    println!("open loop, {rate} req/s, {} s each:", measure.as_secs());
    let mut p99s = Vec::new();
    for (name, target) in &targets[..2] {
        let outcome = load::open_loop(target, rate, measure, request_body, check).await;
        failures(name, &outcome)?;
        println!(
            "  {name:<10} p50 {:>7.0} us   p99 {:>7.0} us   ({} answers)",
            outcome.latencies.p50(),
            outcome.latencies.p99(),
            outcome.latencies.len()
        );
        p99s.push(outcome.latencies.p99());
    }
    println!("  the gateway adds {:.0} us at p99 (goal <= {GOAL_ADDED_P99_US} us)", p99s[1] - p99s[0]);
    Ok(())
}

fn failures(name: &str, outcome: &Outcome) -> anyhow::Result<()> {
    match &outcome.first_error {
        Some(error) => anyhow::bail!("{name}: {} failures, the first: {error}", outcome.errors),
        None => Ok(()),
    }
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}

/// A `SendMessage` with fresh ids: K keeps its tasks, and a repeated message id could be
/// answered differently.
fn request_body() -> Bytes {
    let (message_id, request_id) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    Bytes::from(format!(
        r#"{{"method":"SendMessage","params":{{"message":{{"messageId":"{message_id}","role":"ROLE_USER","parts":[{{"text":"{ECHO_TEXT}"}}]}},"configuration":{{}}}},"id":"{request_id}","jsonrpc":"2.0"}}"#
    ))
}

/// The part of an answer checked: a completed task.
#[derive(Deserialize)]
struct Reply<'a> {
    #[serde(borrow)]
    result: ReplyResult<'a>,
}

#[derive(Deserialize)]
struct ReplyResult<'a> {
    #[serde(borrow)]
    task: ReplyTask<'a>,
}

#[derive(Deserialize)]
struct ReplyTask<'a> {
    #[serde(borrow)]
    status: ReplyStatus<'a>,
}

#[derive(Deserialize)]
struct ReplyStatus<'a> {
    state: &'a str,
}

fn check(status: StatusCode, body: &[u8]) -> Result<(), String> {
    let excerpt = || String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
    if status != StatusCode::OK {
        return Err(format!("HTTP {status}: {}", excerpt()));
    }
    let reply: Reply = serde_json::from_slice(body).map_err(|e| format!("no completed task ({e}): {}", excerpt()))?;
    match reply.result.task.status.state {
        "TASK_STATE_COMPLETED" => Ok(()),
        state => Err(format!("task {state}: {}", excerpt())),
    }
}

// ---------------------------------------------------------------------------------------------
// The servers

/// A server process, killed when dropped (also when the benchmark fails half-way).
struct Server {
    addr: SocketAddr,
    process: Child,
}

impl Server {
    /// This binary re-executed as `role` (on `cpu` only, when given; else where this process
    /// runs); it prints its address on its first line.
    fn start(role: &str, env: &[(&str, &str)], cpu: Option<&str>) -> anyhow::Result<Self> {
        let exe = std::env::current_exe()?;
        let mut command = match cpu {
            // taskset execs the server in its own process: the child's id stays the server's.
            Some(cpu) => {
                let mut taskset = Command::new("taskset");
                taskset.args(["-c", cpu]).arg(exe);
                taskset
            }
            None => Command::new(exe),
        };
        let mut process = command
            .env(SERVE_ENV, role)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            // The request log lines: written, as in production, and discarded.
            .stderr(Stdio::null())
            .spawn()?;
        let stdout = process.stdout.take().ok_or_else(|| anyhow::anyhow!("no stdout from {role}"))?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let addr = line.trim().parse().map_err(|e| anyhow::anyhow!("{role}: no address first ({e}): {line:?}"))?;
        Ok(Self { addr, process })
    }
}

impl Server {
    /// CPU time the process has used (user and system), in seconds.
    fn cpu_s(&self) -> anyhow::Result<f64> {
        Ok(support::process_cpu_s(self.process.id())?)
    }
}

/// Every CPU this process may use but `cpu`, as a `taskset` list.
fn other_cpus(cpu: &str) -> anyhow::Result<String> {
    let cpu: usize = cpu.parse().map_err(|e| anyhow::anyhow!("--gateway-cpu {cpu}: {e}"))?;
    let count = std::thread::available_parallelism()?.get();
    anyhow::ensure!(cpu < count && count > 1, "--gateway-cpu {cpu}: this machine has CPUs 0 to {}", count - 1);
    Ok((0..count).filter(|other| *other != cpu).map(|other| other.to_string()).collect::<Vec<_>>().join(","))
}

/// Pins this process (every thread it has: only the main one, before the runtime starts) to `cpus`.
fn pin_self_to(cpus: &str) -> anyhow::Result<()> {
    let pid = std::process::id().to_string();
    let status = Command::new("taskset").args(["-a", "-p", "-c", cpus, &pid]).stdout(Stdio::null()).status()?;
    anyhow::ensure!(status.success(), "taskset could not pin the load generator to CPUs {cpus}: {status}");
    Ok(())
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

fn announce(url: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", url.trim_start_matches("http://"))?;
    stdout.flush()
}

async fn serve(role: &str) -> anyhow::Result<()> {
    mesh_telemetry::init(mesh_telemetry::LogFormat::Text);
    match role {
        "kit" => serve_kit().await,
        "echo" => serve_echo().await,
        "registry" => serve_registry().await,
        "gateway" => serve_gateway().await,
        _ => anyhow::bail!("unknown {SERVE_ENV}={role}"),
    }
}

/// K's handler.
#[derive(Debug)]
struct Echo;

impl AgentHandler for Echo {
    async fn handle(&self, task: TaskInput) -> Result<AgentReply, AgentError> {
        Ok(AgentReply { parts: vec![Part::Text { text: format!("echo: {}", task.text) }], ..AgentReply::default() })
    }
}

async fn serve_kit() -> anyhow::Result<()> {
    let card = serde_json::from_value(json!({
        "name": "kit", "description": "echo on the agent kit", "version": "1",
        "supportedInterfaces": [],
        "capabilities": {"streaming": true},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "echo", "name": "Echo", "description": "echo", "tags": ["echo"]}],
    }))?;
    let mut config = AgentConfig {
        port: 0,
        registry_url: None,
        task_durability: TaskDurability::Memory,
        // Throughput is measured, not the per-tenant limit (one tenant sends everything).
        rate_limit_per_s: 0,
        ..AgentConfig::default()
    };
    config.auth.jwt_hs256_secret = Some(SECRET.into());
    let app = AgentApp::build(&config, card, Echo, mesh_client::HttpClient::with_reqwest()?).await?;
    announce(app.url())?;
    app.run_until_stopped(std::future::pending()).await?;
    Ok(())
}

async fn serve_echo() -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let card = json!({
        "name": "echo", "description": "bare echo", "version": "1",
        "supportedInterfaces": [{"url": format!("{url}/"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "echo", "name": "Echo", "description": "echo", "tags": ["echo"]}],
    });
    let id = uuid::Uuid::new_v4();
    let answer = Bytes::from(serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": 1, "result": {"task": {
        "id": id, "contextId": id, "status": {"state": "TASK_STATE_COMPLETED"},
        "artifacts": [{"artifactId": "a", "parts": [{"text": "e".repeat(PAYLOAD_CHARS)}]}]}}}))?);
    let app = axum::Router::new()
        .route("/.well-known/agent-card.json", get(move || std::future::ready(Json(card.clone()))))
        // Takes the body as bytes so the request is read in full, and parses nothing.
        .route(
            "/",
            post(move |_request: Bytes| std::future::ready(([(CONTENT_TYPE, "application/json")], answer.clone()))),
        );
    announce(&url)?;
    axum::serve(listener, app).await?;
    Ok(())
}

fn auth() -> AuthConfig {
    AuthConfig { jwt_hs256_secret: Some(SECRET.into()), ..AuthConfig::default() }
}

/// The registry the gateway reads its agents from, in a process of its own as it is deployed
/// (in the gateway's process it would take the gateway's CPU and delay its requests).
async fn serve_registry() -> anyhow::Result<()> {
    let data = tempfile::tempdir()?;
    let config = registry::RegistryConfig {
        port: 0,
        database_url: format!("sqlite://{}", data.path().join("registry.db").display()),
        auth: auth(),
        ..registry::RegistryConfig::default()
    };
    let app = registry::Application::build(&config).await?;
    announce(&app.url())?;
    app.run_until_stopped(std::future::pending()).await?;
    Ok(())
}

/// The upstreams registered in the registry, and the gateway in front of them.
async fn serve_gateway() -> anyhow::Result<()> {
    let registry = format!("http://{}", std::env::var(REGISTRY_ENV)?);
    let admin = mesh_auth::mint_hs256(SECRET.as_bytes(), &Claims::new("operator", "", &[Role::Admin], 3_600))?;
    let client = reqwest::Client::new();
    for upstream in std::env::var(UPSTREAMS_ENV)?.split(',') {
        let (name, url) = upstream.split_once('=').ok_or_else(|| anyhow::anyhow!("{UPSTREAMS_ENV}: name=url"))?;
        let registration = json!({
            "name": name, "url": format!("{url}/"), "capabilities": ["echo"],
            "health_endpoint": "/.well-known/agent-card.json", "process_endpoint": "/",
            "agent_card_url": format!("{url}/.well-known/agent-card.json"),
        });
        let response =
            client.post(format!("{registry}/register")).bearer_auth(&admin).json(&registration).send().await?;
        anyhow::ensure!(response.status().is_success(), "registration refused: {}", response.text().await?);
    }
    let config = GatewayConfig {
        port: 0,
        registry_url: Some(registry),
        auth: AuthConfig { credential_self_issued_ttl_s: Some(3_600), ..auth() },
        upstream_allowed_networks: vec!["127.0.0.0/8".into()],
        // The bench measures the relay, not the per-tenant limit.
        rate_limit_per_s: 0,
        ..GatewayConfig::default()
    };
    let gateway = Gateway::build(&config).await?;
    announce(gateway.url())?;
    gateway.run_until_stopped(std::future::pending()).await?;
    Ok(())
}
